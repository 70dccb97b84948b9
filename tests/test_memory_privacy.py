"""``no_memory`` turns, end to end through a real daemon: nothing of them is remembered.

A turn is ``no_memory`` when (1) its input was injected so, (2) an ``on_input``
handler set ``ctx.no_memory``, or (3) the model called a tool declared
``no_memory``. Each path gets one test: a turn carrying a distinctive fact,
then everything that would normally persist it is forced (the window is
pruned with ``context_top_k = 1``, so every older event leaves L1; the rule
distiller runs; the text log is flushed), and the fact must be in no memory
store: not in L2, not in the graph (no entity, relation or raw record), not
in the text log, never given a vector, and in no file of the data directory.
A control test runs the same fact through an ordinary turn and finds it in
each of those places, so the checks can fail.

The model is a fake OpenAI-compatible server over loopback HTTP, so a tool
call can be scripted; the daemon, its stores and loops are the real ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from homeagent.config import ConfigRegistry, core_defs
from homeagent.daemon import Daemon
from homeagent.memory.context import ContextEvent
from homeagent.paths import DataPaths
from homeagent.sdk.types import InjectOptions, Stage, StageContext, ToolDef
from tests.fakes.llm_openai import FakeOpenAI, Turn

ZH_NAME = "李雷"
EN_NAME = "Zebulon"
FACT = f"我叫{ZH_NAME}。My name is {EN_NAME}."
REPLY = f"Nice to meet you, {EN_NAME} ({ZH_NAME})."
DIARY = "Quixotemarmalade"  # what the no_memory tool returns: private too
SECRETS = (ZH_NAME, EN_NAME, DIARY)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        server.default_turn = Turn.text("OK.")  # fillers: a reply that says nothing of the fact
        yield server


@pytest.fixture
async def daemon(data_dir: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Daemon]:
    """A real daemon whose window keeps one event, so every older event is pruned (sunk or dropped)."""
    paths = DataPaths(data_dir)
    paths.ensure()
    config = ConfigRegistry(paths.config_db)  # what `homeagent config set` does without a daemon
    for definition in core_defs(paths.root):
        config.register_def(definition)
    config.set("core.agent.context_top_k", 1)
    config.close()
    monkeypatch.setenv("HOMEAGENT_LLM_BASE_URL", fake.base_url)
    monkeypatch.setenv("HOMEAGENT_LLM_API_KEY", "sk-test-privacy")
    monkeypatch.setenv("HOMEAGENT_LLM_MODEL", "gpt-fake")
    d = Daemon(paths, web=False)
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


async def wait_turn(daemon: Daemon, input_id: str, timeout: float = 15.0) -> dict[str, Any]:
    """The ``agent_output`` of a turn started without a reply future (memory is recorded before it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in daemon.events.recent(types=["agent_output"]):
            if event.data.get("input_id") == input_id:
                return dict(event.data)
        await asyncio.sleep(0.02)
    raise AssertionError(f"turn {input_id} did not finish in {timeout} s")


def fact_events(daemon: Daemon) -> list[ContextEvent]:
    return [e for e in daemon.context.timeline() if any(s in e.input or s in e.response for s in SECRETS)]


def has_vector(daemon: Daemon, event: ContextEvent) -> bool:
    """Whether L1 gave the event a vector (read-only look at the window's index; nothing is wrapped)."""
    vectors = daemon.context._index.vectors
    return vectors is not None and vectors.get(event.id) is not None


async def persist_everything(daemon: Daemon, fake: FakeOpenAI) -> list[tuple[ContextEvent, bool]]:
    """Push the fact's turn through every path to storage.

    Returns the fact's events as the window held them once indexed, each with
    whether it got a vector (checked before the last prune removes them).
    """
    await daemon.io.inject_sync("cli", "cli", "thanks", timeout=15)  # its prune sinks the fact's user event
    indexed = [(e, has_vector(daemon, e)) for e in fact_events(daemon)]  # the fact's reply, indexed by that prune
    await daemon.memory_loops.run_now("distill")  # prunes the rest: nothing of the fact's turn stays in L1
    await daemon.memory_loops.run_now("rules")
    await daemon.context.flush()
    await daemon.textlog.flush()
    assert fake.pending == 0
    return indexed


async def documents_with_fact(daemon: Daemon) -> list[str]:
    docs = await asyncio.to_thread(lambda: list(daemon.docs.iter_docs()))
    hits = [d.content for d in docs if any(s in d.content or s in d.summary for s in SECRETS)]
    found = await daemon.docs.aquery(f"{ZH_NAME} {EN_NAME}", 10, touch=False, min_score=0.0)
    return hits + [d.content for d in found if any(s in d.content for s in SECRETS)]


async def graph_with_fact(daemon: Daemon) -> list[str]:
    graph = daemon.graph
    found = [name for name in (ZH_NAME, EN_NAME, DIARY) if await graph.entity(name) is not None]
    found += [e.name for e in await graph.all_entities() if any(s in e.name for s in SECRETS)]
    found += [r.line() for r in await graph.current_relations() if any(s in r.line() for s in SECRETS)]
    raw = [r.content for r in await graph.raw_records()]
    return found + [text for text in raw if any(s in text for s in SECRETS)]


def text_log_with_fact(data_dir: Path) -> list[str]:
    files = [p for p in (data_dir / "memory" / "text").glob("*") if p.is_file()]
    assert files, "the text log was never written (the filler turn should be in it)"
    return [p.name for p in files if any(s in p.read_text(encoding="utf-8") for s in SECRETS)]


def files_with_fact(data_dir: Path) -> list[str]:
    """Every file of the data directory holding a secret's bytes (SQLite WAL files and logs included).

    ``context.json.bak`` is skipped: it is the window's previous copy, and the
    window may hold a no_memory turn while it is recent (if the debounced save
    ran before the prune, the copy has it until the next save).
    """
    needles = [s.encode() for s in SECRETS]
    out = []
    for path in data_dir.rglob("*"):
        if path.is_file() and not path.is_socket() and path.name != "context.json.bak":
            data = path.read_bytes()
            if any(n in data for n in needles):
                out.append(str(path.relative_to(data_dir)))
    return sorted(out)


async def assert_forgotten(daemon: Daemon, fake: FakeOpenAI, events: list[tuple[ContextEvent, bool]]) -> None:
    """The fact's turn, already pruned out of the window, left nothing in any store."""
    assert events, "the fact's reply should have been in the window before the last prune"
    for event, embedded in events:
        assert event.no_memory, event
        assert daemon.cleaners.memory_text_for(event) == ""
        assert not embedded, f"event {event.id} was embedded"
    assert fact_events(daemon) == []  # pruned and dropped, not kept
    assert await documents_with_fact(daemon) == []
    assert await graph_with_fact(daemon) == []
    assert text_log_with_fact(daemon.paths.root) == []
    assert files_with_fact(daemon.paths.root) == []
    assert any(ZH_NAME in str(r.body) for r in fake.requests)  # the model did see the fact


async def test_control_an_ordinary_turn_with_the_fact_is_remembered(daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(Turn.text(REPLY))
    result = await daemon.io.inject_sync("cli", "cli", FACT, timeout=15)
    assert result.ok and result.text == REPLY
    assert all(not e.no_memory and daemon.cleaners.memory_text_for(e) for e in fact_events(daemon))
    events = await persist_everything(daemon, fake)
    assert events and all(embedded for _, embedded in events)
    assert fact_events(daemon) == []  # out of the window, but not forgotten:
    docs = await documents_with_fact(daemon)
    assert any(FACT in d for d in docs) and any(REPLY in d for d in docs)
    graph = await graph_with_fact(daemon)
    assert ZH_NAME in graph and EN_NAME in graph  # entities from the rule distiller
    assert f"user --name--> {EN_NAME}" in graph and FACT in graph  # the current fact, and its raw record
    assert text_log_with_fact(daemon.paths.root) == ["turns.jsonl"]
    files = files_with_fact(daemon.paths.root)
    assert any(f.startswith("memory/documents.db") for f in files) and any("graph.db" in f for f in files)


async def test_input_injected_no_memory_is_not_remembered(daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(Turn.text(REPLY))
    input_id = daemon.io.inject_text_no_memory("diary", "cli", FACT)
    output = await wait_turn(daemon, input_id)
    assert output["text"] == REPLY and not output["error"]
    await assert_forgotten(daemon, fake, await persist_everything(daemon, fake))


async def test_input_marked_no_memory_by_an_on_input_handler_is_not_remembered(
    daemon: Daemon, fake: FakeOpenAI
) -> None:
    def private_channel(ctx: StageContext) -> None:
        if ctx.channel == "diary":
            ctx.no_memory = True

    daemon.stages.register(Stage.ON_INPUT, private_channel, plugin="diary", name="private-channel")
    seen: list[bool] = []
    daemon.stages.register(Stage.AFTER_OUTPUT, lambda ctx: seen.append(ctx.no_memory), plugin="diary", name="probe")
    fake.script(Turn.text(REPLY))
    result = await daemon.io.inject_sync("diary", "diary", FACT, options=InjectOptions(), timeout=15)
    assert result.ok and result.text == REPLY
    assert seen == [True]
    await assert_forgotten(daemon, fake, await persist_everything(daemon, fake))


async def test_turn_that_called_a_no_memory_tool_is_not_remembered(daemon: Daemon, fake: FakeOpenAI) -> None:
    async def read_diary(_: dict[str, Any]) -> str:
        return f"diary, page 1: {DIARY}"

    daemon.tools.register(
        ToolDef(name="diary_read", description="Read the private diary.", plugin="diary", no_memory=True), read_diary
    )
    seen: list[bool] = []
    daemon.stages.register(Stage.AFTER_OUTPUT, lambda ctx: seen.append(ctx.no_memory), plugin="diary", name="probe")
    fake.script(Turn.tool_calls([("diary_read", {})]), Turn.text(REPLY))
    result = await daemon.io.inject_sync("cli", "cli", FACT, timeout=15)
    assert result.ok and result.text == REPLY
    assert [t["tool"] for t in result.tool_calls] == ["diary_read"] and DIARY in result.tool_calls[0]["result"]
    assert seen == [True]  # after_output (the rule distiller's stage) saw the turn as no_memory
    await assert_forgotten(daemon, fake, await persist_everything(daemon, fake))
