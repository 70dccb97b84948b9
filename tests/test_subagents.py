"""Sub-agents on a real daemon with a scripted LLM: concurrency, restricted tools, cap, cancellation, close."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from homeagent.agent.memory_port import RecentTurns
from homeagent.agent.process import LLMSlot, TurnRunner, TurnSettings
from homeagent.agent.subagents import CHILD_PREFIX, SubAgents, child_tool_allowed
from homeagent.daemon import Daemon
from homeagent.sdk.types import ToolDef
from tests.fakes.builtins_host import llm_daemon, tool_messages
from tests.fakes.llm_openai import Turn
from tests.fakes.subagents_llm import RoutingFakeOpenAI


def runner_factory(d: Daemon) -> Callable[[Callable[[ToolDef], bool]], TurnRunner]:
    """What daemon.py does: the parent's parts, a fresh context and LLM slot, the child tool filter."""

    def make(tool_filter: Callable[[ToolDef], bool]) -> TurnRunner:
        return TurnRunner(
            stages=d.stages, tools=d.tools, run_llm=d.llm.manager.run, prompt=d.prompt, memory=RecentTurns(),
            events=d.events, channels=d.channels, settings=TurnSettings(), tool_filter=tool_filter, slot=LLMSlot(),
        )

    return make


@asynccontextmanager
async def with_subagents(d: Daemon, **kw: Any) -> AsyncIterator[SubAgents]:
    sub = SubAgents(runner_factory(d), events=d.events, **kw)
    for tool, _ in sub.tools():  # this test's instance (with its own limits) replaces the daemon's tools
        d.tools.unregister(tool.name)
    undo = [d.tools.register(tool, handler) for tool, handler in sub.tools()]
    sub.start()
    try:
        yield sub
    finally:
        await sub.close()
        for u in undo:
            u()


def tool_names(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


async def wait_for(predicate: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def test_child_tool_filter() -> None:
    assert not child_tool_allowed(ToolDef("spawn_child", plugin="core"))
    assert not child_tool_allowed(ToolDef("child_result", plugin="core"))
    assert not child_tool_allowed(ToolDef("config_set", plugin="cfgmgr"))
    assert not child_tool_allowed(ToolDef("plugin_install", plugin="pluginmgr"))
    assert not child_tool_allowed(ToolDef("anything", plugin="pluginmgr"))
    assert child_tool_allowed(ToolDef("output_send__cli", plugin="cli"))
    assert child_tool_allowed(ToolDef("timer_set", plugin="timer"))


async def test_child_runs_beside_the_parent_with_its_own_context_and_tools(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with RoutingFakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d, with_subagents(d) as sub:
        fake.script(Turn.text("Remember: my cat is Tom."))
        assert (await d.io.inject_sync("test", "test", "my cat is called Tom", timeout=30)).ok
        fake.script_child(
            Turn.tool_calls([("llm_list_sources", {})]),
            Turn.text("The capital of France is Paris.", chunks=5, delay=0.2),  # ~1 s: the parent goes on meanwhile
        )
        fake.script(
            Turn.tool_calls([("spawn_child", {"task": "Find the capital of France."})]),
            Turn.text("I asked a helper."),
        )
        first = await d.io.inject_sync("test", "test", "delegate: capital of France", timeout=30)
        assert first.ok and first.text == "I asked a helper."
        assert sub.status()[0]["status"] == "running", "the parent waited for the child"
        spawned = tool_messages(fake.parent_requests()[-1])[-1]["content"]
        assert "child_1" in spawned and "running" in spawned

        fake.script(Turn.tool_calls([("child_result", {"task_id": "child_1", "wait": 10})]), Turn.text("Paris."))
        second = await d.io.inject_sync("test", "test", "what did the helper find?", timeout=30)
        assert second.ok and second.text == "Paris."
        collected = tool_messages(fake.parent_requests()[-1])[-1]["content"]
        assert '"status": "done"' in collected and "The capital of France is Paris." in collected
        assert "llm_list_sources" in collected  # tools_used

        child_calls = fake.child_requests()
        assert len(child_calls) == 2
        first_child = child_calls[0]
        messages = first_child["messages"]
        assert isinstance(messages, list)
        assert [m["role"] for m in messages] == ["system", "user"]  # none of the parent's history
        assert messages[1]["content"] == CHILD_PREFIX + "Find the capital of France."
        names = tool_names(first_child)
        parent_names = tool_names(fake.parent_requests()[0])
        assert "spawn_child" in parent_names and "spawn_child" not in names and "child_result" not in names
        assert "llm_list_sources" in names and "output_send__cli" in names
        assert not {n for n in names if n.startswith("config_")}
        assert {n for n in parent_names if n.startswith("config_")}  # cfgmgr is there, just not for children
        # the child's exchange is not in the parent's memory, nor the parent's in the child's
        assert "Tom" not in str(child_calls)
        assert sub.status()[0]["status"] == "done"


async def test_the_cap_bad_input_and_a_child_that_overruns(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with RoutingFakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d, \
            with_subagents(d, max_children=lambda: 1, child_timeout=lambda: 1.0) as sub:
        fake.script_child(Turn.text("slow " * 60, chunks=60, delay=0.05))  # 3 s > the 1 s limit
        fake.script(
            Turn.tool_calls([("spawn_child", {"task": "one"})]),
            Turn.tool_calls([("spawn_child", {"task": "two"})]),
            Turn.tool_calls([("child_result", {"task_id": "child_9"})]),
            Turn.tool_calls([("spawn_child", {"task": "   "})]),
            Turn.tool_calls([("child_result", {"task_id": "1", "wait": 5})]),
            Turn.text("ok"),
        )
        result = await d.io.inject_sync("test", "test", "spawn two", timeout=30)
        assert result.ok
        contents = [m["content"] for m in tool_messages(fake.parent_requests()[-1])]
        assert "child_1" in contents[0]
        assert "already running" in contents[1] and "max 1" in contents[1]
        assert "no sub-agent 'child_9'" in contents[2]
        assert "task is empty" in contents[3]
        assert '"status": "error"' in contents[4] and "timed out after 1s" in contents[4]
        assert sub.status()[0]["status"] == "error"


async def test_children_die_with_an_interrupted_parent_and_on_close(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with RoutingFakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d, with_subagents(d) as sub:
        fake.script_child(Turn.text("never " * 200, chunks=200, delay=0.05))  # 10 s
        fake.script(
            Turn.tool_calls([("spawn_child", {"task": "a long job"})]),
            Turn.slow("thinking " * 100, chunks=100, delay=0.05),
        )
        turn = asyncio.create_task(d.io.inject_sync("test", "test", "start a long job", timeout=30))
        await wait_for(lambda: bool(sub.status()) and len(fake.child_requests()) == 1 and len(fake.parent_requests()) >= 2)
        assert sub.status()[0]["status"] == "running"
        assert d.agent.cancel_turn()
        result = await turn
        assert result.interrupted
        await wait_for(lambda: sub.status()[0]["status"] == "cancelled")
        await wait_for(lambda: len(fake.disconnects) >= 2)  # the child's LLM stream was cut too

        # a parent turn that ends normally leaves its child running; close() stops it
        fake.script_child(Turn.text("never " * 200, chunks=200, delay=0.05))
        fake.script(Turn.tool_calls([("spawn_child", {"task": "another long job"})]), Turn.text("started"))
        assert (await d.io.inject_sync("test", "test", "start it", timeout=30)).ok
        await asyncio.sleep(0.3)
        assert sub.status()[1]["status"] == "running"
        began = time.monotonic()
        await sub.close()
        assert time.monotonic() - began < 2
        assert sub.status()[1]["status"] == "cancelled"
        refused = await sub.tools()[0][1]({"task": "more"})
        assert refused["isError"] and "shutting down" in refused["content"]
