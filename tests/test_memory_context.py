"""L1: pruning by relevance, sinking into L2, chat messages, and crash-safe persistence."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from homeagent.memory.cleaners import CleanerChain
from homeagent.memory.context import ContextEvent, RelevanceContext, parse_context_file
from homeagent.memory.documents import DocumentStore
from homeagent.memory.embedder import UseEmbedder
from homeagent.memory.lexical import Analyzer
from homeagent.memory.tools import doc_tools
from homeagent.sdk.types import ToolDef
from tests.fakes.memory_shared import shared_analyzer, shared_embedder

BASE = 1_700_000_000.0
CHATTER = [
    "今天好累啊",
    "Traffic was awful this morning.",
    "晚饭吃什么好呢？",
    "I finished the book I was reading.",
    "下午一直在下雨",
    "Let's plan the weekend.",
    "衣服又堆成山了",
    "My back hurts from sitting all day.",
    "给我讲个笑话吧",
    "I should drink more water.",
    "早上堵车堵得厉害",
    "The laundry is piling up again.",
]


@pytest.fixture(scope="session")
def embedder() -> UseEmbedder:
    return shared_embedder()


@pytest.fixture(scope="session")
def analyzer() -> Analyzer:
    return shared_analyzer()


@pytest.fixture
def docs(tmp_path: Path, embedder: UseEmbedder, analyzer: Analyzer) -> DocumentStore:
    store = DocumentStore(tmp_path / "memory" / "documents.db", embedder, analyzer=analyzer)
    yield store
    store.close()


def _files(root: Path, pattern: str) -> list[Path]:
    return list(root.glob(pattern))


def make_ctx(
    tmp_path: Path, embedder: UseEmbedder, docs: DocumentStore | None, chain: CleanerChain | None = None, **kw: object
) -> RelevanceContext:
    return RelevanceContext(tmp_path / "memory" / "context.json", embedder, docs, chain or CleanerChain(), **kw)  # type: ignore[arg-type]


async def test_prune_keeps_recent_and_relevant_and_sinks_the_rest(
    tmp_path: Path, embedder: UseEmbedder, docs: DocumentStore
) -> None:
    chain = CleanerChain(tool_lookup={"cmd_run": ToolDef("cmd_run", no_memory=True)}.get)
    ctx = make_ctx(tmp_path, embedder, docs, chain, top_k=6, keep_recent=3)
    ctx.append(ContextEvent(kind="user", input="我家的小狗叫旺财", ts=BASE + 1, id="dog"))
    ctx.append(ContextEvent(kind="user", input="secret timer ping", ts=BASE + 2, id="nomem", no_memory=True))
    ctx.append(
        ContextEvent(
            kind="agent",
            response="ran it",
            ts=BASE + 3,
            id="shell",
            tool_outputs=[{"tool": "cmd_run", "text": "rm -rf output"}],
        )
    )
    for i, text in enumerate(CHATTER):
        ctx.append(
            ContextEvent(kind="user" if i % 2 else "agent", input=text, response=text, ts=BASE + 10 + i, id=f"c{i}")
        )
    kept = await ctx.prune("what's my puppy called?")
    ids = [e.id for e in kept]
    assert len(kept) == 6 and ids[-3:] == ["c9", "c10", "c11"] and "dog" in ids
    assert [e.ts for e in kept] == sorted(e.ts for e in kept)
    assert ctx.timeline() == kept
    sunk = {d.id: d for d in docs.iter_docs()}
    assert "ctx-nomem" not in sunk and "ctx-shell" not in sunk and "ctx-dog" not in sunk
    assert len(sunk) == 15 - 6 - 2
    assert sunk["ctx-c0"].ts == BASE + 10 and sunk["ctx-c0"].source == "context:agent"
    assert await ctx.prune("anything") == kept  # at top_k already: nothing moves


async def test_small_window_is_not_pruned_and_empty_input_is_fine(
    tmp_path: Path, embedder: UseEmbedder, docs: DocumentStore
) -> None:
    ctx = make_ctx(tmp_path, embedder, docs, top_k=30)
    for i in range(5):
        ctx.append(ContextEvent(kind="user", input=f"msg {i}", ts=BASE + i))
    assert len(await ctx.prune("")) == 5 and docs.count() == 0
    ctx2 = make_ctx(tmp_path / "b", embedder, docs, top_k=3, keep_recent=1)
    for i in range(6):
        ctx2.append(ContextEvent(kind="user", input="" if i == 2 else f"event {i}", ts=BASE + i))
    kept = await ctx2.prune("   ")
    assert len(kept) == 3 and kept[-1].input == "event 5"


async def test_failed_sink_keeps_events(
    tmp_path: Path, embedder: UseEmbedder, docs: DocumentStore, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = make_ctx(tmp_path, embedder, docs, top_k=2, keep_recent=1)
    for i in range(5):
        ctx.append(ContextEvent(kind="user", input=f"event {i}", ts=BASE + i))
    docs.close()
    with caplog.at_level(logging.WARNING):
        kept = await ctx.prune("event")
    assert len(kept) == 5 and "keeping them" in caplog.text


async def test_doc_query_round_trip_via_tools(tmp_path: Path, embedder: UseEmbedder, docs: DocumentStore) -> None:
    ctx = make_ctx(tmp_path, embedder, docs, top_k=30)
    docs.insert("My sister Anna is a nurse in Berlin.", summary="sister", ts=BASE - 86400, id="anna", tags=["family"])
    tools = dict((d.name, (d, h)) for d, h in doc_tools(ctx, docs))
    qdef, query = tools["doc_query"]
    cdef, commit = tools["doc_commit"]
    assert qdef.parameters["required"] == ["query"] and cdef.serial
    out = await query({"query": "what does my sister do?", "top_k": 2})
    assert out["count"] == 1 and out["documents"][0]["id"] == "anna" and docs.get("anna") is None
    (event,) = ctx.timeline()
    assert event.kind == "cold_storage" and event.ts == BASE - 86400 and event.meta["doc_id"] == "anna"
    msg = ctx.to_messages()[0]
    assert msg["role"] == "system" and "recalled" in msg["content"] and "Anna" in msg["content"]
    assert qdef.cleaner is not None and qdef.cleaner("x") == ""  # its output is not embedded twice
    # sinking it again restores the same document
    ctx.top_k, ctx.keep_recent = 1, 1
    ctx.append(ContextEvent(kind="user", input="hello", ts=BASE + 10))
    await ctx.prune("hello")
    back = docs.get("anna")
    assert back is not None and back.ts == BASE - 86400 and back.summary == "sister" and back.tags == ["family"]
    assert (await commit({"content": "Buy milk on Friday", "tags": ["todo"]}))["ok"]
    assert (await query({"query": ""}))["isError"] and (await commit({"content": " "}))["isError"]
    assert (await query({"query": "x", "top_k": "many"}))["isError"]


async def test_to_messages(tmp_path: Path, embedder: UseEmbedder) -> None:
    ctx = make_ctx(tmp_path, embedder, None)
    ctx.append(ContextEvent(kind="user", input="hi", ts=BASE + 2))
    ctx.append(
        ContextEvent(kind="agent", response="hello!", ts=BASE + 3, tool_outputs=[{"tool": "t", "text": "tool text"}])
    )
    ctx.append(ContextEvent(kind="agent", response="", ts=BASE + 4))
    ctx.append(ContextEvent(kind="cold_storage", input="old fact", ts=BASE))
    msgs = ctx.to_messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[0]["content"].startswith("【recalled memory · 2023-11-")
    assert ctx.to_messages(limit=2) == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello!"}]
    assert ctx.to_messages(limit=0) == []


async def test_changes_are_journaled_at_once_and_compacted_atomically(tmp_path: Path, embedder: UseEmbedder) -> None:
    ctx = make_ctx(tmp_path, embedder, None)
    journal = ctx.path.with_name("context.journal")
    await ctx.aappend(ContextEvent(kind="user", input="第一条 🎉", ts=BASE, id="e1"))
    assert not ctx.path.exists() and b'"e1"' in journal.read_bytes()  # durable in the journal, no snapshot yet
    assert [e.id for e in make_ctx(tmp_path, embedder, None, read_only=True).timeline()] == ["e1"]
    ctx.append(ContextEvent(kind="user", input="plain append", ts=BASE + 0.5, id="e15"))
    await asyncio.sleep(0.3)  # a plain append is fsynced in the background, nobody has to await it
    assert b'"e15"' in journal.read_bytes() and not ctx._journal.pending()
    await ctx.flush()  # snapshot, journal emptied
    assert journal.read_bytes() == b"" and [e.id for e in parse_context_file(ctx.path.read_bytes())] == ["e1", "e15"]
    ctx.append(ContextEvent(kind="user", input="bad \udcff surrogate", ts=BASE + 1, id="e2", meta={"by": "x\udcff"}))
    await ctx.close()
    assert ctx.path.with_name("context.json.bak").exists() and journal.read_bytes() == b""
    with pytest.raises(RuntimeError):
        ctx.append(ContextEvent())
    again = make_ctx(tmp_path, embedder, None)
    assert [e.input for e in again.timeline()] == ["第一条 🎉", "plain append", "bad \ufffd surrogate"]
    assert again.timeline()[-1].meta == {"by": "x\ufffd"}
    assert not _files(tmp_path, "memory/*.tmp")


async def test_corrupt_file_falls_back_to_backup(
    tmp_path: Path, embedder: UseEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = make_ctx(tmp_path, embedder, None)
    ctx.append(ContextEvent(kind="user", input="one", ts=BASE, id="a"))
    await ctx.flush()
    ctx.append(ContextEvent(kind="user", input="two", ts=BASE + 1, id="b"))
    await ctx.flush()
    ctx.path.write_bytes(ctx.path.read_bytes()[:-20])  # truncated
    with caplog.at_level(logging.WARNING):
        restored = make_ctx(tmp_path, embedder, None)
    assert [e.id for e in restored.timeline()] == ["a"]
    assert len(_files(tmp_path, "memory/context.json.corrupt-*")) == 1
    assert "unreadable" in caplog.text and "restored 1 events" in caplog.text
    assert [e.id for e in parse_context_file(restored.path.read_bytes())] == ["a"]
    # both broken: start empty, say so
    restored.path.write_text("{not json", encoding="utf-8")
    restored.path.with_name("context.json.bak").write_bytes(b"\xff\xfe")
    with caplog.at_level(logging.ERROR):
        empty = make_ctx(tmp_path, embedder, None)
    assert empty.timeline() == [] and "starting empty" in caplog.text


async def test_huge_message_prunes_quickly(tmp_path: Path, embedder: UseEmbedder, docs: DocumentStore) -> None:
    ctx = make_ctx(tmp_path, embedder, docs, top_k=2, keep_recent=1)
    big = "今天的日志 log line with words " * 40_000  # ~1 MB
    ctx.append(ContextEvent(kind="user", input=big, ts=BASE))
    ctx.append(ContextEvent(kind="user", input="small", ts=BASE + 1))
    ctx.append(ContextEvent(kind="user", input="newest", ts=BASE + 2))
    t0 = time.perf_counter()
    kept = await ctx.prune("日志")
    assert time.perf_counter() - t0 < 8  # uncapped embedding + segmentation: ~1 min
    assert len(kept) == 2 and kept[0].input == big
    await ctx.close()
    assert len(json.loads(ctx.path.read_text(encoding="utf-8"))["events"][0]["input"]) == len(big)


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from homeagent.memory.cleaners import CleanerChain
    from homeagent.memory.context import ContextEvent, RelevanceContext

    async def main():
        ctx = RelevanceContext(sys.argv[1], None, None, CleanerChain(), save_delay=0.01)
        i = 0
        while True:
            ctx.append(ContextEvent(kind="user", input=("payload %d " % i) * 3000, id="e%d" % i))
            if i % 3 == 0:
                await ctx.flush()
                print("ACK", i, flush=True)
            else:
                await asyncio.sleep(0)
            i += 1

    asyncio.run(main())
    """
)


def test_kill_9_mid_write_never_corrupts_or_loses_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "context.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for kill_after in (3, 11, 25):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        last = -1
        for _ in range(kill_after):
            line = proc.stdout.readline()
            assert line, "child died"
            last = int(line.split()[1])
        time.sleep(0.003 * kill_after % 0.02)  # land somewhere inside the next write
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        ctx = RelevanceContext(path, None, None, CleanerChain())  # what the daemon would load
        ids = {e.id for e in ctx.timeline()}
        assert {f"e{i}" for i in range(last + 1)} <= ids
        assert not list(tmp_path.glob("context.json.corrupt-*"))


async def test_turn_memory_port(tmp_path: Path, embedder: UseEmbedder, docs: DocumentStore) -> None:
    from homeagent.agent.memory_port import ToolOutput, TurnRecord
    from homeagent.memory.context import ContextTurnMemory

    ctx = make_ctx(tmp_path, embedder, docs, top_k=4, keep_recent=2)
    mem = ContextTurnMemory(ctx)
    for i in range(4):
        await mem.record(TurnRecord(user_text=f"question {i}", reply=f"answer {i}", channel="cli", ts=BASE + i,
                                    tool_outputs=[ToolOutput("cmd_run", "ls output", None)] if i == 0 else []))
    assert len(ctx) == 8 and ctx.timeline()[1].tool_outputs[0]["no_memory"] is True
    messages = await mem.history("question 3", "cli")
    assert len(messages) == 4 and messages[-1] == {"role": "assistant", "content": "answer 3"}
    assert docs.get(f"ctx-{ctx.timeline()[0].id}") is None  # kept ones are not archived
    assert docs.count() == 3  # 4 pruned, but the agent event that used a no_memory tool is not archived
