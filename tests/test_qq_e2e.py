"""The shipped QQ plugin end to end: a fake OneBot v11 implementation ↔ the plugin's process ↔ a real daemon.

The daemon enables the plugin the way a user does (``plugin enable qq`` links
the shipped folder in); the plugin runs as a real subprocess and connects
over a real WebSocket on loopback to tests/fakes/onebot.py, which speaks the
OneBot v11 event and action shapes. Replies come from the offline provider.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from homeagent.daemon import Daemon
from homeagent.sdk.types import Stage, StageContext, ToolCall
from tests.conftest import run_cli
from tests.fakes.onebot import FakeOneBot, at, text

pytestmark = pytest.mark.xdist_group("processes")

ADA, BOB, GROUP = 10001, 10002, 777


@pytest.fixture
async def fake() -> AsyncIterator[FakeOneBot]:
    bot = await FakeOneBot(token="s3cret").start()
    try:
        yield bot
    finally:
        await bot.close()


async def enable_qq(daemon: Daemon, **settings: Any) -> dict[str, Any]:
    values = {"allowed_users": str(ADA), "allowed_groups": str(GROUP), "access_token": "s3cret", **settings}
    for key, value in values.items():
        daemon.config.set_plugin("qq", key, value)
    info = await daemon.plugins.enable("qq")
    assert info["state"] == "running", info
    return info


async def tool(daemon: Daemon, name: str, args: dict[str, Any] | None = None) -> Any:
    return await daemon.tools.execute(ToolCall("t1", name, args or {}))


async def status(daemon: Daemon) -> dict[str, Any]:
    result = await tool(daemon, "qq_status")
    assert result.status == "ok", result
    return dict(result.result)


async def connected(daemon: Daemon, fake: FakeOneBot) -> None:
    """Until the plugin's side of the connection is up (the fake sees its side a moment earlier)."""
    await fake.wait_connected()
    for _ in range(200):
        if (await status(daemon))["connected"]:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the plugin never connected")


def reply_text(action: dict[str, Any]) -> str:
    return "".join(s["data"]["text"] for s in action["params"]["message"] if s["type"] == "text")


async def test_private_message_round_trip_and_a_dropped_connection(daemon: Daemon, fake: FakeOneBot) -> None:
    info = await enable_qq(daemon, ws_url=fake.url)
    assert {"qq_get_message", "qq_send_private", "qq_status"} <= set(info["tools"])
    assert info["channels"] == ["qq"] and info["cleaners"] == ["qq"]
    assert (daemon.paths.root / "plugins" / "qq").is_symlink(), "enable linked the shipped folder in"
    await connected(daemon, fake)

    await fake.send(fake.private_message(ADA, "my name is Zed", nickname="Zed"))
    sent = await fake.wait_action("send_private_msg")
    assert sent["params"]["user_id"] == ADA
    assert "Noted: my name is Zed" in reply_text(sent), sent

    # The implementation restarts: the plugin reconnects by itself and the chat goes on.
    before = len(fake.actions)
    await fake.drop()
    await fake.wait_for(lambda: fake.connections >= 2 and fake._sockets)
    await fake.send(fake.private_message(ADA, "what is my name?", nickname="Zed"))
    again = await fake.wait_action("send_private_msg", after=before)
    assert "Zed" in reply_text(again) and again["params"]["user_id"] == ADA
    st = await status(daemon)
    assert st["connected"] and st["link"]["connects"] == 2 and st["link"]["disconnects"] == 1
    assert st["self_id"] == str(fake.self_id)
    opened = await tool(daemon, "config_set", {"scope": "plugin", "key": "qq.allowed_users", "value": "*"})
    assert opened.status == "error" and "owner" in str(opened.result), "a chat message cannot open the bot to all"
    assert daemon.config.get_plugin("qq", "allowed_users") == str(ADA)


async def test_group_answers_a_mention_and_stays_silent_otherwise(daemon: Daemon, fake: FakeOneBot) -> None:
    await enable_qq(daemon, ws_url=fake.url, group_keywords="小助手", remember_unaddressed=True)
    await connected(daemon, fake)
    await fake.send(fake.group_message(GROUP, BOB, "just chatting, I like tea", nickname="Bob"))
    await fake.send(fake.group_message(GROUP + 1, ADA, [at(fake.self_id), text(" hi")]))  # not an allowed group
    await fake.send(fake.private_message(BOB, "hello"))  # not an allowed user
    seen: list[tuple[str, str, str, dict[str, Any]]] = []
    texts: list[str] = []

    def watch(ctx: StageContext) -> None:
        seen.append((ctx.user_id, ctx.group_id, ctx.channel, dict(ctx.extra.get("qq") or {})))
        texts.append(ctx.raw_message)

    daemon.stages.register(Stage.ON_INPUT, watch, plugin="test")
    quoted = fake.group_message(GROUP, BOB, "weather [ok] here?", nickname="Bob")
    mention = fake.group_message(GROUP, ADA, [{"type": "reply", "data": {"id": str(quoted["message_id"])}},
                                              at(fake.self_id), text(" I live in Oslo")], card="Ada (ops)")
    await fake.send(mention)
    sent = await fake.wait_action("send_group_msg")
    assert sent["params"]["group_id"] == GROUP
    segs = sent["params"]["message"]
    assert segs[0] == {"type": "reply", "data": {"id": str(mention["message_id"])}}, "the reply quotes the question"
    assert "Noted: I live in Oslo" in reply_text(sent)
    assert seen[0] == (str(ADA), str(GROUP), "qq", {"chat": "group", "chat_id": str(GROUP), "nickname": "Ada (ops)",
                                                     "message_id": str(mention["message_id"])})
    assert texts[0] == (f"[QQ 群 {GROUP} · Ada (ops)({ADA})] [回复 #{quoted['message_id']} Bob: weather （ok） here?]"
                        "  I live in Oslo"), "the quoted message is fetched with get_msg and shown"

    await fake.send(fake.group_message(GROUP, BOB, "小助手 my name is Bob", nickname="Bob"))
    keyword = await fake.wait_action("send_group_msg", after=fake.actions.index(sent) + 1)
    assert "Noted: my name is Bob" in reply_text(keyword)
    st = await status(daemon)
    assert st["received"] == 5 and st["injected"] == 2
    assert st["remembered"] == 1 and st["not_allowed"] == 2
    assert [a["action"] for a in fake.actions] == ["get_msg", "send_group_msg", "send_group_msg"], "nothing else"
    assert daemon.docs is not None
    docs = await asyncio.to_thread(lambda: [d.content for d in daemon.docs.iter_docs()])  # type: ignore[union-attr]
    assert any("[QQ 群 777 · Bob(10002)] just chatting, I like tea" in d for d in docs), docs


async def test_tools_actions_and_their_errors(daemon: Daemon, fake: FakeOneBot, tmp_path: Path) -> None:
    await enable_qq(daemon, ws_url=fake.url, max_message_chars=100)
    await connected(daemon, fake)

    long = " ".join(f"Sentence number {i} is here." for i in range(12))  # ~330 characters
    result = await tool(daemon, "output_send__qq", {"payload": long, "meta": {"group_id": str(GROUP)}})
    assert result.status == "ok" and result.result["parts"] == 4, result
    parts = [reply_text(a) for a in fake.actions]
    assert all(len(p) <= 100 for p in parts) and " ".join(parts) == long

    denied = await tool(daemon, "output_send__qq", {"payload": "hi", "meta": {"group_id": "123"}})
    assert denied.status == "error" and "allowed_groups" in str(denied.result)
    forged = await tool(daemon, "output_send__qq", {"payload": "hi", "meta": {"user_id": "55", "reply_to": "x"}})
    assert forged.status == "error" and "allowed_users" in str(forged.result), "a made-up reply_to opens nothing"
    help_ = await tool(daemon, "output_send__qq_help")
    assert help_.result["caps"] == ["text", "file", "image"] and "group_id" in help_.result["meta"]

    mid = result.result["message_ids"][0]
    recalled = await tool(daemon, "qq_recall_message", {"message_id": mid})
    assert recalled.result == {"status": "recalled", "message_id": mid}
    assert fake.actions[-1]["action"] == "delete_msg" and fake.actions[-1]["params"] == {"message_id": int(mid)}
    foreign = await tool(daemon, "qq_recall_message", {"message_id": 5})
    assert foreign.status == "error" and "only its own messages" in str(foreign.result)

    quoted = fake.group_message(GROUP, ADA, [text("look "), {"type": "face", "data": {"id": "178"}},
                                             {"type": "image", "data": {"file": "a.jpg", "url": "http://img/a.jpg"}}])
    got = await tool(daemon, "qq_get_message", {"message_id": quoted["message_id"]})
    assert got.result["text"] == "look [表情][图片 http://img/a.jpg]" and got.result["sender"]["user_id"] == ADA
    missing = await tool(daemon, "qq_get_message", {"message_id": 999999})
    assert missing.status == "error" and "get_msg failed (retcode 1404" in str(missing.result)

    member = await tool(daemon, "qq_group_member_info", {"group_id": GROUP, "user_id": ADA})
    assert member.result["role"] == "admin" and member.result["card"] == "Ada (ops)"

    await fake.send({"time": 1, "self_id": fake.self_id, "post_type": "notice", "notice_type": "group_decrease",
                     "sub_type": "kick_me", "group_id": GROUP, "operator_id": BOB, "user_id": fake.self_id})
    fake.errors["send_group_msg"] = (1200, "not a member of this group")
    kicked = await tool(daemon, "qq_send_group", {"group_id": GROUP, "text": "still here?"})
    assert kicked.status == "error" and "retcode 1200" in str(kicked.result)
    assert (await status(daemon))["kicked_from"] == [str(GROUP)]
    del fake.errors["send_group_msg"]  # invited back

    fake.errors["send_private_msg"] = (100, "the user is not your friend")
    failed = await tool(daemon, "qq_send_private", {"user_id": ADA, "text": "hi"})
    assert failed.status == "error"
    assert "send_private_msg failed (retcode 100, status failed): the user is not your friend" in str(failed.result)

    picture = tmp_path / "p.png"
    picture.write_bytes(b"\x89PNG")
    image = await tool(daemon, "output_send__qq", {"payload": str(picture), "type": "image",
                                                   "meta": {"group_id": GROUP}})
    assert image.status == "ok" and fake.actions[-1]["params"]["message"] == [
        {"type": "image", "data": {"file": picture.as_uri()}}
    ]
    nofile = await tool(daemon, "output_send__qq", {"payload": "/nonexistent/x.png", "type": "image",
                                                    "meta": {"group_id": GROUP}})
    assert nofile.status == "error" and "no such image" in str(nofile.result)

    assert daemon.cleaners is not None
    cleaned = await asyncio.to_thread(daemon.cleaners.clean, "[QQ 群 777 · Ada(10001)] [回复 #5] hi [表情][CQ:face,id=1]")
    assert cleaned == "Ada: hi", "memory's cleaner chain runs the plugin's cleaner in its process"


async def test_bad_frames_and_a_flood_do_not_hurt(daemon: Daemon, fake: FakeOneBot) -> None:
    await enable_qq(daemon, ws_url=fake.url, queue_size=10, rate_per_minute=600)
    await connected(daemon, fake)
    pid = daemon.plugins.info("qq")["health"]["pid"]
    await fake.send_raw("this is not json {")
    await fake.send_raw("[1, 2, 3]")
    await fake.send({"post_type": "something_new", "self_id": fake.self_id})
    await fake.send(fake.heartbeat())
    await fake.send(fake.private_message(ADA, [{"type": "text", "data": {}}, {"type": "mystery"}, "junk"]))  # type: ignore[list-item]
    await fake.wait_action("send_private_msg")
    await fake.send(fake.private_message(ADA, "x" * 10_000_000))  # a 10 MB message
    await fake.wait_action("send_private_msg", after=1)

    before = len(fake.actions)
    flood = [fake.group_message(GROUP, BOB, [at(fake.self_id), text(f" n{i}")]) for i in range(1000)]
    for event in flood:
        await fake.send(event)
    for _ in range(200):
        st = await status(daemon)
        if st["received"] == 1002:
            break
        await asyncio.sleep(0.05)
    assert st["link"]["malformed"] == 2
    assert st["received"] == 1002 and st["dropped"] >= 800, st
    assert st["queue"] <= 10 and 1001 <= st["dropped"] + st["injected"] + st["queue"] <= 1002, st
    assert daemon.plugins.info("qq")["health"]["pid"] == pid, "the plugin process survived"
    await fake.wait_action("send_group_msg", after=before)


async def test_wrong_access_token_is_reported_in_plugin_info(daemon: Daemon, fake: FakeOneBot) -> None:
    await enable_qq(daemon, ws_url=fake.url, access_token="wrong")
    await fake.wait_for(lambda: fake.auth_failures >= 1)
    for _ in range(100):
        state = (daemon.plugins.info("qq")["health"].get("status") or {})
        if state.get("state") == "error":
            break
        await asyncio.sleep(0.05)
    assert "rejected the access token (HTTP 403)" in state["detail"], state
    cli = await run_cli(daemon.paths.root, "plugin", "info", "qq")
    assert cli.code == 0 and "status:       error:" in cli.out and "plugin.qq.access_token" in cli.out, cli.out
    attempts = fake.auth_failures
    await asyncio.sleep(1.5)
    assert fake.auth_failures - attempts <= 2, "retries back off instead of hammering the server"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_reverse_websocket_checks_the_token(daemon: Daemon, fake: FakeOneBot) -> None:
    port = _free_port()
    await enable_qq(daemon, mode="reverse", reverse_port=port)
    url = f"ws://127.0.0.1:{port}/onebot/v11/ws"
    for _ in range(100):
        code = await fake.connect_reverse(url, token="wrong")
        if code != 0:
            break
        await asyncio.sleep(0.05)
    assert code == 403
    assert "wrong access token" in daemon.plugins.info("qq")["health"]["status"]["detail"]
    assert await fake.connect_reverse(url, token="s3cret") == 101
    await connected(daemon, fake)
    await fake.send(fake.private_message(ADA, "I like rain"))
    sent = await fake.wait_action("send_private_msg")
    assert "Noted: I like rain" in reply_text(sent)


async def test_http_api_and_signed_event_posts(daemon: Daemon, fake: FakeOneBot) -> None:
    port = _free_port()
    await enable_qq(daemon, mode="http", http_api_url=f"http://127.0.0.1:{fake.port}", reverse_port=port,
                    http_secret="sig-key")
    url = f"http://127.0.0.1:{port}/"
    for _ in range(100):
        try:
            code = await fake.post_event(url, fake.heartbeat(), secret="wrong-key")
            break
        except OSError:  # not listening yet
            await asyncio.sleep(0.05)
    assert code == 403
    assert "wrong or no X-Signature" in daemon.plugins.info("qq")["health"]["status"]["detail"]
    assert await fake.post_event(url, fake.private_message(ADA, "I like snow"), secret="sig-key") == 204
    sent = await fake.wait_action("send_private_msg")
    assert sent["params"]["user_id"] == ADA and "Noted: I like snow" in reply_text(sent)
    missing = await tool(daemon, "qq_get_message", {"message_id": 424242})
    assert missing.status == "error" and "retcode 1404" in str(missing.result)
    fake.token = "rotated"  # the implementation's token changed behind our back
    refused = await tool(daemon, "qq_send_private", {"user_id": ADA, "text": "hi"})
    assert refused.status == "error" and "rejected the access token (HTTP 403)" in str(refused.result)
    assert "plugin.qq.access_token" in daemon.plugins.info("qq")["health"]["status"]["detail"]


async def test_allow_lists_apply_without_a_restart(daemon: Daemon, fake: FakeOneBot) -> None:
    await enable_qq(daemon, ws_url=fake.url)
    await connected(daemon, fake)
    await fake.send(fake.private_message(BOB, "my name is Bob", nickname="Bob"))
    await asyncio.sleep(1.0)
    assert not fake.actions, "Bob is not allowed yet"
    daemon.config.set_plugin("qq", "allowed_users", f"{ADA},{BOB}")
    await asyncio.sleep(2.5)  # the plugin reads its settings every 2 s
    await fake.send(fake.private_message(BOB, "my name is Bob", nickname="Bob"))
    sent = await fake.wait_action("send_private_msg")
    assert sent["params"]["user_id"] == BOB and "Noted: my name is Bob" in reply_text(sent)
    assert (await status(daemon))["not_allowed"] == 1
