"""The QQ plugin without a daemon: its text handling, and how a user finds and installs it.

The text tests use the plugin's own modules (imported from the shipped folder
the way its runtime imports them), fed with message shapes from the OneBot v11
spec: messages to text, replies to QQ-sized parts, the memory cleaner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import time
from pathlib import Path

import pytest

from homeagent.plugins.shipped import BUNDLED_DIR
from tests.conftest import run_cli

sys.path.insert(0, str(BUNDLED_DIR / "qq"))

from qqbot.cleaner import clean
from qqbot.message import MAX_INPUT_CHARS, header, segments, split_paragraphs, split_text, to_text
from qqbot.plugin import Chat, Pacer
from qqbot.transport import NotConnected, OneBotLink, backoff_delays


def test_segments_and_cq_strings_read_the_same() -> None:
    array = [
        {"type": "reply", "data": {"id": "42"}},
        {"type": "at", "data": {"qq": "2000"}},
        {"type": "text", "data": {"text": " look [x] & "}},
        {"type": "face", "data": {"id": "178"}},
        {"type": "image", "data": {"file": "a.jpg", "url": "http://img/a.jpg"}},
        {"type": "at", "data": {"qq": "all"}},
        {"type": "at", "data": {"qq": "10002", "name": "Bob"}},
    ]
    cq = "[CQ:reply,id=42][CQ:at,qq=2000] look &#91;x&#93; &amp; [CQ:face,id=178][CQ:image,file=a.jpg,url=http://img/a.jpg][CQ:at,qq=all][CQ:at,qq=10002,name=Bob]"
    for message in (array, cq):
        parsed = to_text(segments(message), self_id="2000")
        assert parsed.text == "[回复 #42]  look [x] & [表情][图片 http://img/a.jpg]@全体成员 @Bob", message
        assert parsed.mentioned and parsed.reply_to == "42" and parsed.images == ["http://img/a.jpg"]
    assert not to_text(segments(cq), self_id="3000").mentioned


@pytest.mark.parametrize("junk", [None, 42, {"type": "text"}, [1, "x", {"data": {}}], "", []])
def test_messages_of_the_wrong_shape_give_no_text(junk: object) -> None:
    assert to_text(segments(junk)).text == ""


def test_a_huge_message_is_cut() -> None:
    parsed = to_text(segments("y" * 1_000_000))
    assert len(parsed.text) < MAX_INPUT_CHARS + 60 and parsed.text.endswith("more characters]")


def test_long_replies_split_at_natural_ends_and_never_flood() -> None:
    paragraphs = "\n\n".join("第" + str(i) + "段。" + "内容" * 200 for i in range(3))
    parts = split_text(paragraphs, 500)
    assert all(len(p) <= 500 for p in parts) and parts[0].startswith("第0段")
    assert "".join(parts).replace("\n", "") == paragraphs.replace("\n", "")
    words = " ".join(["word"] * 400)  # no sentence ends: cut between words
    assert all(p.endswith("word") for p in split_text(words, 120, max_parts=50))
    runaway = split_text("z" * 100_000, 1000, max_parts=5)
    assert len(runaway) == 5 and all(len(p) <= 1000 for p in runaway)
    assert runaway[-1].endswith("more characters not sent]")
    assert split_text("   ", 100) == []


def test_the_cleaner_keeps_the_words_and_drops_the_qq_decoration() -> None:
    text = f"{header('10001', 'Ada', '777')} [回复 #42] @全体成员 look [表情][图片 http://img/a.jpg]  at 2024-05-01 12:00:05"
    assert clean(text) == "Ada: look at"
    assert clean(f"{header('10001', '')} [CQ:face,id=1]hi &#91;x&#93;") == "10001: hi [x]"
    assert clean("请使用最新版手机QQ体验新功能") == ""
    assert clean("[回复 #42 Bob: weather （ok） here?] sure") == "sure", "the quoted message is another message's text"
    assert clean("plain   text, nothing to do") == "plain text, nothing to do"


async def test_the_shipped_plugin_is_listed_enabled_and_removed_without_a_daemon(data_dir: Path) -> None:
    listed = await run_cli(data_dir, "plugin", "list")
    assert listed.code == 0 and any(
        line.split()[:4] == ["qq", "process", "0.1.0", "available"] for line in listed.out.splitlines()
    ), listed.out
    enabled = await run_cli(data_dir, "plugin", "enable", "qq")
    assert enabled.code == 0 and "next `homeagent run`" in enabled.out, enabled
    link = data_dir / "plugins" / "qq"
    assert link.is_symlink() and link.resolve() == (BUNDLED_DIR / "qq").resolve()
    removed = await run_cli(data_dir, "plugin", "remove", "qq")
    assert removed.code == 0 and not link.exists() and not link.is_symlink()
    assert (BUNDLED_DIR / "qq" / "plugin.json").is_file(), "removing deleted the link, not the shipped folder"
    assert not [p for p in (data_dir / "plugins").iterdir()], "no leftover link in the plugins folder"


def test_every_qq_setting_is_documented_with_its_default() -> None:
    from qqbot.plugin import _defs

    doc = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text(encoding="utf-8")
    for d in _defs():
        default = str(d.default).lower() if isinstance(d.default, bool) else str(d.default)
        kind = f"{d.type}, owner-only" if d.owner_only else d.type
        row = f"| `plugin.qq.{d.key}` | {kind} | `{default}` |"
        assert row in doc, f"docs/configuration.md lacks {row}"


def test_reconnect_delays_double_up_to_the_cap() -> None:
    delays = backoff_delays(1.0, 60.0)
    first = [next(delays) for _ in range(12)]
    assert 0.8 <= first[0] <= 1.2 and 1.6 <= first[1] <= 2.4
    assert all(d <= 60.0 for d in first) and first[-1] >= 48.0
    hour = 0.0
    attempts = 0
    while hour < 3600:
        hour += next(delays)
        attempts += 1
    assert attempts < 80, "an implementation gone for an hour costs a few dozen attempts"


async def test_a_server_that_is_gone_is_retried_without_a_busy_loop() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    states: list[tuple[str, str]] = []
    link = OneBotLink(lambda ev: None, lambda st, detail: states.append((st, detail)), log=logging.getLogger("t"))
    task = asyncio.create_task(link.run_forward(f"ws://127.0.0.1:{port}/", "", backoff_initial=0.05, backoff_max=0.2))
    await asyncio.sleep(1.0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    errors = [d for s, d in states if s == "error"]
    assert 4 <= len(errors) <= 12, errors  # 0.05, 0.1, 0.2, 0.2 … not thousands
    assert "cannot connect to ws://127.0.0.1:" in errors[0] and "retrying in" in errors[0]
    with pytest.raises(NotConnected, match="not connected to a OneBot implementation"):
        await link.call("get_login_info", {})


async def test_reverse_mode_will_not_listen_on_the_network_without_a_token() -> None:
    states: list[tuple[str, str]] = []
    link = OneBotLink(lambda ev: None, lambda st, detail: states.append((st, detail)), log=logging.getLogger("t"))
    task = asyncio.create_task(link.run_reverse("0.0.0.0", 1, ""))
    await asyncio.sleep(0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert states == [("error", "refusing to listen on 0.0.0.0 without an access token; set plugin.qq.access_token")]


async def test_the_pacer_lets_a_burst_through_then_paces_then_refuses() -> None:
    pacer = Pacer(600, burst=3, max_wait=0.25)  # 10 a second
    chat = Chat("group", "1")
    started = time.monotonic()
    for _ in range(3):
        await pacer.wait(chat)
    assert time.monotonic() - started < 0.05
    await pacer.wait(chat)
    assert time.monotonic() - started >= 0.08
    other = time.monotonic()
    await pacer.wait(Chat("group", "2"))  # another chat has its own bucket
    assert time.monotonic() - other < 0.05
    crowd = await asyncio.gather(*(pacer.wait(chat) for _ in range(8)), return_exceptions=True)
    refused = [r for r in crowd if isinstance(r, RuntimeError)]
    assert 3 <= len(refused) <= 6 and "rate limit of 600 messages a minute" in str(refused[0]), crowd


def test_a_code_block_is_never_cut_when_it_fits_in_a_message() -> None:
    code = "```python\n" + "\n".join(f"x{i} = {i}  # line" for i in range(12)) + "\n```"
    reply = "Here is the script, run it as it is. " * 4 + "\n" + code + "\nThat is all."
    parts = split_text(reply, 300)
    assert all(len(p) <= 300 for p in parts)
    holding = [p for p in parts if "x0 = 0" in p]
    assert len(holding) == 1 and code in holding[0], parts


def test_a_code_block_longer_than_a_message_is_closed_and_reopened() -> None:
    code = "```js\n" + "\n".join(f"let v{i} = {i};" for i in range(80)) + "\n```"
    parts = split_text("Look:\n\n" + code, 200, max_parts=50)
    assert all(len(p) <= 200 for p in parts), [len(p) for p in parts]
    pieces = [p for p in parts if "let v" in p]
    assert len(pieces) > 3
    for p in pieces:
        body = p[p.index("```js"):]
        assert body.startswith("```js\n") and body.endswith("\n```"), p  # each piece renders as code
    lines = [ln for p in pieces for ln in p.splitlines() if ln.startswith("let v")]
    assert lines == [f"let v{i} = {i};" for i in range(80)], "no line lost, cut or repeated"


def test_no_emoji_flag_or_accented_letter_is_cut_in_two() -> None:
    family = "\U0001F468\u200D\U0001F469\u200D\U0001F467"  # one glyph, five code points
    flag = "\U0001F1E8\U0001F1F3"
    accented = "e\u0301"
    for unit in (family, flag, accented, "\U0001F44D\U0001F3FD"):
        text = unit * 200  # no space, no sentence end: only a hard cut is possible
        parts = split_text(text, 97, max_parts=100)
        assert "".join(parts) == text and all(len(p) <= 97 for p in parts)
        assert all(len(p) % len(unit) == 0 and p.startswith(unit) for p in parts), (unit, [len(p) for p in parts])


def test_chinese_replies_are_cut_after_a_sentence() -> None:
    text = "今天天气很好，我们去公园散步吧！" * 20
    parts = split_text(text, 100, max_parts=50)
    assert all(p.endswith("！") for p in parts[:-1]) and "".join(parts) == text


def test_paragraph_replies_are_one_message_each() -> None:
    reply = "First thought.\n\nSecond thought.\n\n```\na = 1\n\nb = 2\n```\n\nLast."
    assert split_paragraphs(reply, 500) == ["First thought.", "Second thought.", "```\na = 1\n\nb = 2\n```", "Last."]
    many = "\n\n".join(f"p{i}" for i in range(30))
    assert split_paragraphs(many, 500, max_parts=8) == [many], "too many paragraphs: fewer, fuller messages"


async def test_images_are_fetched_from_public_addresses_only_unless_allowed() -> None:
    from qqbot.images import ImageFetcher

    fetcher = ImageFetcher(allow_private=False, max_bytes=1000)
    try:
        for url, why in (("http://127.0.0.1:9/a.png", "not a public address"),
                         ("http://[::1]:9/a.png", "not a public address"),
                         ("http://localhost:9/a.png", "no public address"),  # a name that resolves to loopback
                         ("file:///etc/passwd", r"not an http\(s\) image URL")):
            with pytest.raises(Exception, match=why):
                await fetcher.fetch(url)
    finally:
        await fetcher.close()


def test_what_counts_as_an_answer_to_an_approval_request() -> None:
    from homeagent.approvals.chat import parse_answer

    assert parse_answer("approve 3f9a2c") == (True, "3f9a2c", False)
    assert parse_answer("[QQ 私聊 · Ada(10001)]  Approve #3F9A2C always.") == (True, "3f9a2c", True)
    assert parse_answer("[QQ 群 777 · Ada(10001)] 拒绝 3f9a2c") == (False, "3f9a2c", False)
    assert parse_answer("deny 3f9a2c always") == (False, "3f9a2c", False), "always goes with approve only"
    for chat in ("no cafe12", "approve 3f9a2c please, and also rm -rf", "I approve 3f9a2c", "approve 3f9a2", ""):
        assert parse_answer(chat) is None, chat
