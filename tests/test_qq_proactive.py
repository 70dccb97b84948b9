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

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
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
