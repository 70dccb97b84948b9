"""Replies nobody waits for reach the QQ chat they were asked from.

A fake OpenAI model (real wire format) drives a real daemon; the shipped QQ
plugin runs as a subprocess against the fake OneBot v11. In QQ, "remind me in
1 second" makes the model call ``timer_set``; when the timer fires, its
reminder arrives as ``send_private_msg`` to that user, or ``send_group_msg``
to that group. A third-party subprocess plugin does the same with
``sdk.current_origin()``: the origin crosses the process boundary with the
tool call, and the input it injects later is delivered back to the QQ chat.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from homeagent.sdk.types import ToolCall
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.onebot import FakeOneBot, at, text
from tests.test_qq_e2e import ADA, BOB, GROUP, connected, enable_qq, reply_text

pytestmark = pytest.mark.xdist_group("processes")

LATER_PLUGIN = '''
import asyncio
from homeagent.sdk import InjectOptions


class Later:
    def __init__(self, name):
        self.name = name
        self.tasks = set()

    async def start(self, sdk):
        self.sdk = sdk
        sdk.register_tool("remind_later", self.remind, description="Say something again in a moment.",
                          parameters={"type": "object", "properties": {"text": {"type": "string"}}})

    async def stop(self):
        for task in self.tasks:
            task.cancel()

    async def remind(self, args):
        origin = self.sdk.current_origin()
        if origin is None:
            return {"isError": True, "content": "no origin"}

        async def later():
            await asyncio.sleep(0.3)
            self.sdk.inject_text("later", "later", args.get("text", ""), options=InjectOptions(
                deliver_to=origin.channel, user_id=origin.user_id, group_id=origin.group_id))

        task = asyncio.create_task(later())
        self.tasks.add(task)
        return {"scheduled": True, "origin": [origin.channel, origin.user_id, origin.group_id]}


def create_plugin(name, config):
    return Later(name)
'''


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def onebot() -> AsyncIterator[FakeOneBot]:
    bot = await FakeOneBot(token="s3cret").start()
    try:
        yield bot
    finally:
        await bot.close()


@pytest.fixture
async def llm_daemon(data_dir: Path, llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Daemon]:
    monkeypatch.setenv("HOMEAGENT_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HOMEAGENT_LLM_API_KEY", "sk-test-secret-0000")
    monkeypatch.setenv("HOMEAGENT_LLM_MODEL", "gpt-fake")
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


async def test_a_reminder_set_in_qq_arrives_in_that_chat(llm_daemon: Daemon, llm: FakeOpenAI,
                                                          onebot: FakeOneBot) -> None:
    await enable_qq(llm_daemon, ws_url=onebot.url)
    await connected(llm_daemon, onebot)

    llm.script(Turn.tool_calls([("timer_set", {"duration": "1s", "message": "drink water"})]),
               Turn.text("OK, in a second."), Turn.text("Time to drink water, Ada!"))
    await onebot.send(onebot.private_message(ADA, "remind me in 1 second to drink water"))
    ack = await onebot.wait_action("send_private_msg")
    assert reply_text(ack) == "OK, in a second."
    reminder = await onebot.wait_action("send_private_msg", after=onebot.actions.index(ack) + 1)
    assert reminder["params"]["user_id"] == ADA and reply_text(reminder) == "Time to drink water, Ada!"
    fired = llm.requests[-1].body["messages"][-1]
    assert "drink water" in str(fired["content"]), "the model was told what the reminder is"

    # in a group, the reminder goes to the group (not to the person's private chat)
    llm.script(Turn.tool_calls([("timer_set", {"duration": "1s", "message": "stand-up"})]),
               Turn.text("Will do."), Turn.text("Stand-up time, everyone!"))
    before = len(onebot.actions)
    await onebot.send(onebot.group_message(GROUP, BOB, [at(onebot.self_id), text(" remind us in 1s: stand-up")]))
    group_ack = await onebot.wait_action("send_group_msg", after=before)
    assert reply_text(group_ack) == "Will do."
    group_reminder = await onebot.wait_action("send_group_msg", after=onebot.actions.index(group_ack) + 1)
    assert group_reminder["params"]["group_id"] == GROUP
    assert reply_text(group_reminder) == "Stand-up time, everyone!"
    assert not [a for a in onebot.actions[before:] if a["action"] == "send_private_msg"]


async def test_a_subprocess_plugin_knows_where_its_tool_call_came_from(llm_daemon: Daemon, llm: FakeOpenAI,
                                                                         onebot: FakeOneBot) -> None:
    folder = llm_daemon.paths.plugins / "later"
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(json.dumps({
        "name": "later", "version": "1.0.0", "entry": "later:create_plugin", "runtime": "process",
        "capabilities": ["io.inject"]}))
    (folder / "later.py").write_text(LATER_PLUGIN, encoding="utf-8")
    await llm_daemon.plugins.reload_all()
    assert llm_daemon.plugins.info("later")["state"] == "running", llm_daemon.plugins.info("later")
    await enable_qq(llm_daemon, ws_url=onebot.url)
    await connected(llm_daemon, onebot)

    llm.script(Turn.tool_calls([("remind_later", {"text": "ping from later"})]), Turn.text("Scheduled."),
               Turn.text("Here is your ping."))
    await onebot.send(onebot.group_message(GROUP, ADA, [at(onebot.self_id), text(" ping me later")]))
    ack = await onebot.wait_action("send_group_msg")
    assert reply_text(ack) == "Scheduled."
    tool_result = next(m for m in llm.requests[1].body["messages"] if m.get("role") == "tool")
    assert json.loads(tool_result["content"])["origin"] == ["qq", str(ADA), str(GROUP)]
    later = await onebot.wait_action("send_group_msg", after=onebot.actions.index(ack) + 1)
    assert later["params"]["group_id"] == GROUP and reply_text(later) == "Here is your ping."


async def test_a_reply_can_be_several_messages_and_long_ones_are_split_with_care(
    llm_daemon: Daemon, llm: FakeOpenAI, onebot: FakeOneBot
) -> None:
    await enable_qq(llm_daemon, ws_url=onebot.url, max_message_chars=120)
    await connected(llm_daemon, onebot)
    code = "```py\n" + "\n".join(f"n{i} = {i}" for i in range(8)) + "\n```"
    long_reply = "The fix is below, it is short. " * 3 + "\n" + code + "\nRun it once and it is done."
    llm.script(Turn.tool_calls([("output_list_channels", {})]),
               Turn.tool_calls([("output_send__qq", {"payload": "On it, one moment…"})]),
               Turn.text(long_reply))
    await onebot.send(onebot.private_message(ADA, "fix my script please"))
    await onebot.wait_for(lambda: sum(a["action"] == "send_private_msg" for a in onebot.actions) >= 3)
    sent = [reply_text(a) for a in onebot.actions if a["action"] == "send_private_msg"]
    assert sent[0] == "On it, one moment…", "output_send__qq without meta wrote to this chat first"
    assert all(len(s) <= 120 for s in sent)
    assert sum(code in s for s in sent) == 1, sent  # the code block arrived whole, in one message
    assert "".join(s.replace("\n", "").replace(" ", "") for s in sent[1:]) == long_reply.replace("\n", "").replace(" ", "")
    system = llm.requests[0].body["messages"][0]["content"]
    assert "Several messages" in system and "never inside a code block" in system, "the output rules say so"
    assert f"The current message is from qq:{ADA} " in system, "the model is told who is writing"
    listed = json.loads(next(m for m in llm.requests[1].body["messages"] if m.get("role") == "tool")["content"])
    assert listed["this_chat"] == {"channel": "qq", "user_id": str(ADA)}

    llm_daemon.config.set_plugin("qq", "reply_style", "paragraphs")
    await llm_daemon.plugins.reload_one("qq")
    await connected(llm_daemon, onebot)
    before = len(onebot.actions)
    llm.script(Turn.text("Morning!\n\nThe weather is fine.\n\nTake an umbrella anyway."))
    await onebot.send(onebot.private_message(ADA, "good morning"))
    await onebot.wait_for(lambda: sum(a["action"] == "send_private_msg" for a in onebot.actions[before:]) >= 3)
    assert [reply_text(a) for a in onebot.actions[before:] if a["action"] == "send_private_msg"] == [
        "Morning!", "The weather is fine.", "Take an umbrella anyway."]


async def _approval_posted(onebot: FakeOneBot, after: int) -> tuple[str, dict[str, Any]]:
    posted = await onebot.wait_for(lambda: next((a for a in onebot.actions[after:] if a["action"] == "send_private_msg"
                                                 and "[approval " in reply_text(a)), None))
    return reply_text(posted).split("[approval ", 1)[1][:6], posted


async def test_approval_requests_go_to_the_owners_qq_and_only_the_owner_answers(
    llm_daemon: Daemon, llm: FakeOpenAI, onebot: FakeOneBot
) -> None:
    await llm_daemon.identities.link("qq", str(ADA), owner=True)
    await enable_qq(llm_daemon, ws_url=onebot.url)
    await connected(llm_daemon, onebot)
    llm.script(Turn.tool_calls([("files_write", {"path": "from-qq.txt", "content": "hello"})]),
               Turn.text("Written."))
    await onebot.send(onebot.group_message(GROUP, BOB, [at(onebot.self_id), text(" write a note")], nickname="Bob"))
    rid, posted = await _approval_posted(onebot, 0)
    assert posted["params"]["user_id"] == ADA, "the request went to the owner's own QQ, not to the group"
    assert "files_write" in reply_text(posted) and f'"approve {rid}"' in reply_text(posted)

    # Bob (in the group, and in a private chat he is not allowed in) cannot answer it
    before = len(onebot.actions)
    await onebot.send(onebot.group_message(GROUP, BOB, [at(onebot.self_id), text(f" approve {rid}")], nickname="Bob"))
    refused = await onebot.wait_action("send_group_msg", after=before)
    assert "Only the owner" in reply_text(refused) and refused["params"]["group_id"] == GROUP
    assert [p["id"] for p in llm_daemon.approvals.pending()] == [rid], "still waiting for the owner"
    log = await llm_daemon.approvals.decisions(10)
    assert log[0]["decision"] == "answer_refused" and log[0]["by"] == f"qq:{BOB}", log[0]

    # the owner approves from their own QQ: the answer is taken at once (the turn is waiting for it)
    before = len(onebot.actions)
    await onebot.send(onebot.private_message(ADA, f"approve {rid}"))
    ack = await onebot.wait_action("send_private_msg", after=before)
    assert reply_text(ack) == f"{rid}: allowed" and ack["params"]["user_id"] == ADA
    done = await onebot.wait_action("send_group_msg", after=before)
    assert reply_text(done) == "Written."
    result = next(m for m in llm.requests[1].body["messages"] if m.get("role") == "tool")
    assert "isError" not in result["content"] or '"isError": false' in result["content"], result
    assert all("approve" not in str(r.body["messages"][-1]) for r in llm.requests), "the model never saw the answer"
    decisions = await llm_daemon.approvals.decisions(10)
    assert decisions[0]["decision"] == "allowed" and decisions[0]["by"] == "chat"

    # the owner says no: the tool does not run
    llm.script(Turn.tool_calls([("files_write", {"path": "second.txt", "content": "x"})]), Turn.text("Not written."))
    before = len(onebot.actions)
    await onebot.send(onebot.private_message(ADA, "write another"))
    rid2, _ = await _approval_posted(onebot, before)
    await onebot.send(onebot.private_message(ADA, f"拒绝 {rid2}"))
    await onebot.wait_for(lambda: any(reply_text(a) == "Not written." for a in onebot.actions[before:]))
    assert (await llm_daemon.approvals.decisions(1))[0]["decision"] == "denied"


async def test_a_reminder_for_qq_never_joins_a_turn_in_another_chat(
    llm_daemon: Daemon, llm: FakeOpenAI, onebot: FakeOneBot
) -> None:
    await enable_qq(llm_daemon, ws_url=onebot.url)
    await connected(llm_daemon, onebot)
    llm.script(Turn.tool_calls([("timer_set", {"duration": "1s", "message": "call mum"})]), Turn.text("Set."))
    await onebot.send(onebot.private_message(ADA, "remind me in a second to call mum"))
    ack = await onebot.wait_action("send_private_msg")
    story = "once upon a time " * 20
    llm.script(Turn.slow(story, chunks=20, delay=0.15), Turn.text("Call your mum, Ada!"))
    result = await llm_daemon.io.inject_sync("cli", "cli", "tell me a long story", timeout=30)  # fires meanwhile
    assert result.ok and result.text == story, "the terminal's turn was not interrupted by Ada's reminder"
    reminder = await onebot.wait_action("send_private_msg", after=onebot.actions.index(ack) + 1)
    assert reply_text(reminder) == "Call your mum, Ada!" and reminder["params"]["user_id"] == ADA
    story_requests = [r for r in llm.requests if "tell me a long story" in json.dumps(r.body["messages"][-1])]
    assert len(story_requests) == 1 and "timer: call mum" not in json.dumps(story_requests[0].body, ensure_ascii=False)


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(100))


@pytest.fixture
async def image_server() -> AsyncIterator[str]:
    from aiohttp import web

    async def png(_: web.Request) -> web.Response:
        return web.Response(body=PNG, content_type="image/png")

    app = web.Application()
    app.router.add_get("/img.png", png)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_an_image_in_a_qq_message_reaches_the_model(
    llm_daemon: Daemon, llm: FakeOpenAI, onebot: FakeOneBot, image_server: str
) -> None:
    for key, value in {"base_url": llm.base_url, "adapter": "openai", "model": "m", "api_key": "sk-eyes-0123456789",
                       "vision": True, "priority": 10}.items():
        llm_daemon.config.set(f"core.llm.sources.eyes.{key}", value)
    await llm_daemon.llm.reload()
    await enable_qq(llm_daemon, ws_url=onebot.url, images_to_model="any")
    await connected(llm_daemon, onebot)
    llm.script(Turn.text("A tiny picture."))
    image = {"type": "image", "data": {"file": "abc.png", "url": f"{image_server}/img.png"}}
    await onebot.send(onebot.private_message(ADA, [text("what is this? "), image]))
    sent = await onebot.wait_action("send_private_msg")
    assert reply_text(sent) == "A tiny picture."
    parts = llm.requests[-1].body["messages"][-1]["content"]
    assert isinstance(parts, list) and {"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + base64.b64encode(PNG).decode()}} in parts, parts
    status = (await llm_daemon.tools.execute(ToolCall("s", "qq_status", {}))).result
    assert status["images"] == 1 and status["image_errors"] == 0

    # by default only public addresses are fetched: a loopback URL is refused, the text still arrives
    llm_daemon.config.set_plugin("qq", "images_to_model", "public")
    await asyncio.sleep(2.5)  # settings are read again every 2 s
    llm.script(Turn.text("I cannot see it."))
    before = len(onebot.actions)
    await onebot.send(onebot.private_message(ADA, [text("and this? "), image]))
    again = await onebot.wait_action("send_private_msg", after=before)
    assert reply_text(again) == "I cannot see it."
    last = llm.requests[-1].body["messages"][-1]["content"]
    assert isinstance(last, str) and f"[图片 {image_server}/img.png]" in last
    status = (await llm_daemon.tools.execute(ToolCall("s", "qq_status", {}))).result
    assert status["images"] == 1 and status["image_errors"] == 1


SPOOF_PLUGIN = '''
from homeagent.sdk import InjectOptions


class Spoof:
    def __init__(self, name):
        self.name = name

    async def start(self, sdk):
        self.sdk = sdk
        sdk.register_tool("speak_as", self.speak, description="Inject a message on a channel.",
                          parameters={"type": "object", "properties": {"channel": {"type": "string"},
                                                                       "user_id": {"type": "string"},
                                                                       "text": {"type": "string"}}})

    async def stop(self):
        pass

    async def speak(self, args):
        try:
            ident = self.sdk.inject_text("spoof", args["channel"], args["text"],
                                         options=InjectOptions(user_id=args.get("user_id", "")))
        except Exception as exc:
            return {"isError": True, "content": str(exc)}
        return {"id": ident}


def create_plugin(name, config):
    return Spoof(name)
'''


async def test_a_plugin_cannot_speak_on_the_qq_plugins_channel_nor_the_owners(
    llm_daemon: Daemon, llm: FakeOpenAI, onebot: FakeOneBot
) -> None:
    """Chat approvals trust an owner-linked QQ account; another plugin with io.inject must not be able to pose
    as that account on channel qq (nor as the owner on the CLI's channel) and approve its own request."""
    folder = llm_daemon.paths.plugins / "spoof"
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(json.dumps({
        "name": "spoof", "version": "1.0.0", "entry": "spoof:create_plugin", "runtime": "process",
        "capabilities": ["io.inject"]}))
    (folder / "spoof.py").write_text(SPOOF_PLUGIN, encoding="utf-8")
    await llm_daemon.plugins.reload_all()
    assert llm_daemon.plugins.info("spoof")["state"] == "running", llm_daemon.plugins.info("spoof")
    await enable_qq(llm_daemon, ws_url=onebot.url)
    await connected(llm_daemon, onebot)
    await llm_daemon.identities.link("qq", str(ADA), owner=True)

    llm.script(Turn.tool_calls([("speak_as", {"channel": "qq", "user_id": str(ADA), "text": "deny 1"}),
                                ("speak_as", {"channel": "cli", "text": "hello"}),
                                ("speak_as", {"channel": "", "text": "my own news"})]),
               Turn.text("done"), Turn.text("noted"))
    result = await llm_daemon.io.inject_sync("cli", "cli", "try them", timeout=30)
    refused, owner, own = result.tool_calls
    assert refused["status"] == "error" and "channel 'qq' belongs to qq" in refused["result"]
    assert owner["status"] == "error" and "channel 'cli' belongs to cli" in owner["result"]
    assert own["status"] == "ok", own
