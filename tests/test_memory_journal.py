"""The L1 journal: durable appends, replay over the snapshot, torn lines, compaction, kill -9 at any moment."""

from __future__ import annotations

import asyncio
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
from homeagent.memory.context import ContextEvent, RelevanceContext, parse_context_snapshot
from homeagent.memory.journal import ContextJournal, read_journal

BASE = 1_700_000_000.0


def ctx_at(path: Path, **kw: object) -> RelevanceContext:
    return RelevanceContext(path, None, None, CleanerChain(), **kw)  # type: ignore[arg-type]


async def test_replay_applies_adds_and_removals_after_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "context.json"
    ctx = ctx_at(path, top_k=2, keep_recent=1)
    for i in range(4):
        await ctx.aappend(ContextEvent(kind="user", input=f"message {i}", ts=BASE + i, id=f"e{i}"))
    await ctx.prune("message")  # no document store: the pruned two are dropped, and the removal is journaled
    await ctx.durable()
    kept = [e.id for e in ctx.timeline()]
    assert len(kept) == 2 and "e3" in kept
    # no close, no snapshot: what a kill -9 leaves behind
    assert not path.exists()
    assert [e.id for e in ctx_at(path).timeline()] == kept


async def test_torn_last_line_is_ignored_logged_and_cut_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "context.json"
    ctx = ctx_at(path)
    for i in range(3):
        await ctx.aappend(ContextEvent(kind="user", input=f"m{i}", ts=BASE + i, id=f"e{i}"))
    journal = path.with_name("context.journal")
    good = journal.read_bytes()
    journal.write_bytes(good + b'{"s":4,"op":"add","event":{"kind":"user","inp')  # a write cut short
    with caplog.at_level(logging.WARNING):
        again = ctx_at(path)
    assert [e.id for e in again.timeline()] == ["e0", "e1", "e2"]
    assert "torn last line" in caplog.text
    assert journal.read_bytes() == good  # cut back to the last complete line
    await again.aappend(ContextEvent(kind="user", input="after", ts=BASE + 9, id="e9"))
    assert [e.id for e in ctx_at(path).timeline()] == ["e0", "e1", "e2", "e9"]
    # a read-only reader (the CLI) never writes: it skips the torn line and leaves the file alone
    journal.write_bytes(journal.read_bytes() + b'{"s":9')
    assert len(ctx_at(path, read_only=True).timeline()) == 4 and journal.read_bytes().endswith(b'{"s":9')


def test_broken_middle_line_is_skipped_with_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = b'{"s":1,"op":"add","event":{"kind":"user","input":"a","ts":1.0,"id":"a"}}\n\xff\xfe garbage\n' \
           b'{"s":3,"op":"del","ids":["a"]}\n{"s":4,"op":"add","event":{"kind":"user","input":"b","ts":2.0,"id":"b"}}\n'
    found = read_journal(data)
    assert [r["s"] for r in found.records] == [1, 3, 4] and found.bad_lines == [2] and found.torn_bytes == 0
    path = tmp_path / "context.json"
    path.with_name("context.journal").write_bytes(data)
    with caplog.at_level(logging.ERROR):
        ctx = ctx_at(path)
    assert [e.id for e in ctx.timeline()] == ["b"] and "unreadable lines" in caplog.text


async def test_crash_between_snapshot_and_journal_truncation_duplicates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "context.json"
    ctx = ctx_at(path, top_k=3, keep_recent=1)
    for i in range(5):
        await ctx.aappend(ContextEvent(kind="user", input=f"m{i}", ts=BASE + i, id=f"e{i}"))
    await ctx.prune("m")
    await ctx.durable()
    journal = path.with_name("context.journal")
    before = journal.read_bytes()
    expected = [e.id for e in ctx.timeline()]
    await ctx.flush()
    events, seq = parse_context_snapshot(path.read_bytes())
    assert seq == 6 and [e.id for e in events] == expected
    journal.write_bytes(before)  # as if the process died after the snapshot's rename, before the truncation
    again = ctx_at(path)
    assert [e.id for e in again.timeline()] == expected
    await again.aappend(ContextEvent(kind="user", input="new", ts=BASE + 10, id="n"))
    assert [e.id for e in ctx_at(path).timeline()] == [*expected, "n"]


async def test_compaction_past_the_threshold_keeps_newer_records(tmp_path: Path) -> None:
    path = tmp_path / "context.json"
    ctx = ctx_at(path)
    ctx._journal.max_records = 5
    for i in range(6):
        await ctx.aappend(ContextEvent(kind="user", input=f"m{i}", ts=BASE + i, id=f"e{i}"))
    for _ in range(250):  # the background compaction: the snapshot is renamed in, then the journal cut
        if path.exists() and ctx._journal.records < 5:
            break
        await asyncio.sleep(0.02)
    assert path.exists() and ctx._journal.records < 5
    await ctx.aappend(ContextEvent(kind="user", input="late", ts=BASE + 20, id="late"))
    assert [e.id for e in ctx_at(path).timeline()] == [*(f"e{i}" for i in range(6)), "late"]


def test_drop_through_keeps_the_tail_written_after_the_snapshot(tmp_path: Path) -> None:
    j = ContextJournal(tmp_path / "c.journal")
    for i in range(1, 5):
        j.add({"kind": "user", "input": str(i), "ts": float(i), "id": str(i)})
    j.sync()
    j.drop_through(2)
    assert [r["s"] for r in read_journal((tmp_path / "c.journal").read_bytes()).records] == [3, 4]
    j.add({"kind": "user", "input": "5", "ts": 5.0, "id": "5"})
    j.sync()
    j.drop_through(4)
    assert [r["s"] for r in read_journal((tmp_path / "c.journal").read_bytes()).records] == [5]
    j.drop_through(5)
    assert (tmp_path / "c.journal").read_bytes() == b""
    j.close()


def test_a_failed_write_leaves_no_half_line_and_keeps_the_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    j = ContextJournal(tmp_path / "c.journal")
    j.add({"kind": "user", "input": "one", "ts": 1.0, "id": "1"})
    j.sync()
    j.add({"kind": "user", "input": "two" * 1000, "ts": 2.0, "id": "2"})
    real_write = os.write
    calls = {"n": 0}

    def flaky(fd: int, data: bytes | memoryview) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data[:100]))  # a short write, then the disk fills up
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", flaky)
    with pytest.raises(OSError):
        j.sync()
    monkeypatch.setattr(os, "write", real_write)
    assert read_journal((tmp_path / "c.journal").read_bytes()).torn_bytes == 0 and j.pending()
    j.sync()
    assert [r["s"] for r in read_journal((tmp_path / "c.journal").read_bytes()).records] == [1, 2]
    j.close()


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from homeagent.memory.cleaners import CleanerChain
    from homeagent.memory.context import ContextEvent, RelevanceContext

    async def main():
        ctx = RelevanceContext(sys.argv[1], None, None, CleanerChain(), top_k=60, keep_recent=60)
        ctx._journal.max_records = 40  # compact now and then, so kills land in compactions too
        i = 0
        while True:
            event = ContextEvent(kind="user", input=("payload %d " % i) * 3000, id="e%d" % i)
            if i % 4 == 3:
                ctx.append(event)  # not awaited: durable in the background, never acknowledged
            else:
                await ctx.aappend(event)
                print("ACK", i, flush=True)
            if i % 10 == 9:
                await ctx.prune("payload")
            i += 1

    asyncio.run(main())
    """
)


def test_kill_9_at_any_moment_loses_nothing_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "context.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for round_, kill_after in enumerate((2, 7, 13, 21, 30)):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        acked: list[int] = []
        for _ in range(kill_after):
            line = proc.stdout.readline()
            assert line, "writer died"
            acked.append(int(line.split()[1]))
        time.sleep((round_ * 0.0037) % 0.011)  # somewhere inside the next write or fsync
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        ctx = ctx_at(path)  # what the daemon would load; it also cuts off a torn line
        ids = {e.id for e in ctx.timeline()}
        # every acknowledged event of this round is still there (pruning keeps the newest 60)
        assert {f"e{i}" for i in acked} <= ids, (acked, sorted(ids))
        assert not list(tmp_path.glob("context.json.corrupt-*"))
        journal = path.with_name("context.journal")
        assert not journal.exists() or journal.read_bytes()[-1:] in (b"", b"\n")


async def test_doc_query_makes_l1_durable_before_removing_from_l2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from homeagent.memory.documents import DocumentStore
    from homeagent.memory.tools import doc_tools

    docs = DocumentStore(tmp_path / "documents.db", None)
    try:
        doc_id = docs.commit("The spare key is under the blue flower pot.", "spare key")
        ctx = ctx_at(tmp_path / "context.json")
        handlers = {d.name: h for d, h in doc_tools(ctx, docs)}

        async def crash() -> None:  # the process dies before the journal fsync returned
            raise OSError("killed")

        monkeypatch.setattr(ctx, "durable", crash)
        with pytest.raises(OSError):
            await handlers["doc_query"]({"query": "spare key flower pot"})
        assert docs.get(doc_id) is not None  # still in L2: not acknowledged, not removed
        monkeypatch.undo()

        fresh = ctx_at(tmp_path / "context2.json")
        handlers = {d.name: h for d, h in doc_tools(fresh, docs)}
        result = await handlers["doc_query"]({"query": "spare key flower pot"})
        assert result["count"] == 1 and docs.get(doc_id) is None
        # no close: a restart right now still has the document, in L1
        recalled = [e for e in ctx_at(tmp_path / "context2.json").timeline() if e.kind == "cold_storage"]
        assert [e.meta["doc_id"] for e in recalled] == [doc_id]
        # two concurrent calls: one document moves once
        docs.commit("The bicycle pump is in the garage.", "pump")
        a, b = await asyncio.gather(*(handlers["doc_query"]({"query": "bicycle pump garage"}) for _ in range(2)))
        assert a["count"] + b["count"] == 1
        assert sum(e.meta.get("summary") == "pump" for e in fresh.timeline()) == 1
    finally:
        docs.close()
