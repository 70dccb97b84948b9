"""The cleaner chain and the three-branch memory text (no_memory and per-tool cleaners)."""

from __future__ import annotations

import logging
import re

import pytest

from homeagent.memory.cleaners import CleanerChain, memory_text_for, normalize_whitespace
from homeagent.memory.context import ContextEvent
from homeagent.sdk.types import ToolDef

QQ_SUFFIX = re.compile(r"\[群消息 \d+\]")


def test_cleaners_run_in_order_then_whitespace() -> None:
    chain = CleanerChain()
    chain.register("strip-qq", lambda t: QQ_SUFFIX.sub("", t), plugin="qq")
    chain.register("upper", lambda t: t.upper(), plugin="demo")
    assert chain.clean("  hello [群消息 12345]   world \n\n\n bye ") == "HELLO WORLD\n\nBYE"
    assert chain.names() == ["qq:strip-qq", "demo:upper"]


def test_undo_and_unregister_plugin() -> None:
    chain = CleanerChain()
    undo = chain.register("a", lambda t: t + "A", plugin="p1")
    chain.register("b", lambda t: t + "B", plugin="p2")
    chain.register("c", lambda t: t + "C", plugin="p2")
    undo()
    undo()  # idempotent
    assert chain.clean("x") == "xBC"
    assert chain.unregister_plugin("p2") == 2
    assert chain.clean("x") == "x"


def test_raising_or_bad_cleaner_is_skipped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    chain = CleanerChain()

    def boom(text: str) -> str:
        raise RuntimeError("regex exploded")

    chain.register("boom", boom, plugin="bad")
    chain.register("none", lambda t: None, plugin="bad")  # type: ignore[arg-type,return-value]
    chain.register("ok", lambda t: t.replace("noise", ""), plugin="good")
    with caplog.at_level(logging.WARNING):
        assert chain.clean("signal noise") == "signal"
    assert "boom" in caplog.text and "regex exploded" in caplog.text and "not str" in caplog.text
    with pytest.raises(TypeError):
        chain.register("x", "not callable")  # type: ignore[arg-type]


def test_normalize_whitespace() -> None:
    assert normalize_whitespace("，  你好\u3000世界\r\n\r\n\r\n再见\t ") == "你好 世界\n\n再见"
    assert normalize_whitespace("   ") == ""


def test_three_branches_and_tool_rules() -> None:
    tools = {
        "cmd_run": ToolDef("cmd_run", no_memory=True),
        "web_get": ToolDef("web_get", cleaner=lambda t: t.replace("<ad>", "")),
        "flaky": ToolDef("flaky", cleaner=lambda t: 1 / 0),  # type: ignore[arg-type,return-value]
    }
    chain = CleanerChain(tool_lookup=tools.get)
    chain.register("qq", lambda t: QQ_SUFFIX.sub("", t))
    user = ContextEvent(kind="user", input="hi [群消息 1] there", response="ignored")
    agent = ContextEvent(
        kind="agent",
        input="ignored",
        response="Here  you go",
        tool_outputs=[
            {"tool": "cmd_run", "text": "secret shell output"},
            {"tool": "web_get", "text": "page <ad>text"},
            {"tool": "terminal_read", "text": "screen", "no_memory": True},
            {"tool": "flaky", "text": "kept as is"},
        ],
    )
    cold = ContextEvent(kind="cold_storage", input="old note", response="old reply")
    assert chain.memory_text_for(user) == "hi there"
    assert memory_text_for(agent, chain) == "Here you go\npage text\nkept as is"
    assert chain.memory_text_for(cold) == "old note\nold reply"
    assert chain.memory_text_for(ContextEvent(kind="user", input="x", no_memory=True)) == ""
    assert chain.uses_no_memory_tool(agent)
    assert not chain.uses_no_memory_tool(user)
    # the stored original is untouched
    assert user.input == "hi [群消息 1] there" and agent.tool_outputs[1]["text"] == "page <ad>text"


def test_tool_lookup_can_be_set_later() -> None:
    chain = CleanerChain()
    event = ContextEvent(kind="agent", response="r", tool_outputs=[{"tool": "cmd_run", "text": "out"}])
    assert chain.memory_text_for(event) == "r\nout"
    chain.set_tool_lookup({"cmd_run": ToolDef("cmd_run", no_memory=True)}.get)
    assert chain.memory_text_for(event) == "r"
    with pytest.raises(ValueError):
        ContextEvent(kind="robot")
