"""What a durable L1 append costs: the journal's fsync vs. the in-memory append it replaced.

    .venv/bin/python -m bench.bench_journal [--n 300] [--dir /path/on/the/disk/to/measure]

Rows (same run, same disk; latency as the caller sees it, p50 / p95):

* ``in-memory append`` -- a read-only window: scrub + insert, no journal (what
  ``append`` cost before the journal, minus its 5 s debounced save).
* ``append (queue only)`` -- today's synchronous ``append``: the same plus
  ``to_dict`` and queueing the journal record (the event loop pays this).
* ``aappend (durable)`` -- ``append`` + write + fdatasync in a worker thread.
* ``record (turn, 2 events)`` -- ``ContextTurnMemory.record``: one fsync per turn.
* ``8 concurrent aappend`` -- group commit: per call, while 8 wait at once.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from homeagent.agent.memory_port import TurnRecord
from homeagent.memory.cleaners import CleanerChain
from homeagent.memory.context import ContextEvent, ContextTurnMemory, RelevanceContext


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:8.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:8.2f} ms"


def ctx(folder: Path, name: str, *, read_only: bool = False) -> RelevanceContext:
    # a large top_k: nothing is pruned, only appends are measured
    return RelevanceContext(folder / name / "context.json", None, None, CleanerChain(), top_k=100_000, read_only=read_only)


async def timed(n: int, step: Callable[[int], Awaitable[None] | None]) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        r = step(i)
        if r is not None:
            await r
        out.append(time.perf_counter() - t0)
    return out


async def measure(size_name: str, text: str, n: int, folder: Path) -> list[tuple[str, str, list[float]]]:
    rows: list[tuple[str, str, list[float]]] = []
    mem = ctx(folder, f"mem-{size_name}", read_only=True)
    rows.append(("in-memory append", size_name, await timed(n, lambda i: mem.append(ContextEvent(input=text)))))
    queue = ctx(folder, f"queue-{size_name}")
    rows.append(("append (queue only)", size_name, await timed(n, lambda i: queue.append(ContextEvent(input=text)))))
    await queue.close()
    durable = ctx(folder, f"durable-{size_name}")
    rows.append(("aappend (durable)", size_name, await timed(n, lambda i: durable.aappend(ContextEvent(input=text)))))
    await durable.close()
    turns = ContextTurnMemory(ctx(folder, f"turn-{size_name}"))
    record = await timed(n, lambda i: turns.record(TurnRecord(user_text=text, reply=text, channel="bench")))
    rows.append(("record (turn, 2 events)", size_name, record))
    await turns.context.close()
    group = ctx(folder, f"group-{size_name}")

    async def one() -> float:
        t0 = time.perf_counter()
        await group.aappend(ContextEvent(input=text))
        return time.perf_counter() - t0

    per_call: list[float] = []
    for _ in range(max(1, n // 8)):
        per_call += await asyncio.gather(*(one() for _ in range(8)))
    rows.append(("8 concurrent aappend", size_name, per_call))
    syncs = group._journal.syncs
    await group.close()
    rows.append((f"  ({len(per_call)} calls, {syncs} fsyncs)", size_name, per_call))
    return rows


async def main(n: int, folder: Path) -> None:
    rows: list[tuple[str, str, list[float]]] = []
    for size_name, text in (("100 B", "x" * 100), ("10 KB", "日志 log line " * 800)):
        rows += await measure(size_name, text, n, folder)
    print(f"durable L1 append on {folder} ({n} samples per row)")
    print(f"{'operation':<28} {'event':>6} {'p50':>12} {'p95':>12} {'mean':>12}")
    for name, size, values in rows:
        if name.startswith("  ("):
            print(f"{name:<28} {size:>6}")
            continue
        print(f"{name:<28} {size:>6} {fmt(pct(values, 0.5)):>12} {fmt(pct(values, 0.95)):>12} {fmt(statistics.fmean(values)):>12}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--dir", type=Path, default=None, help="folder on the disk to measure (default: a temp dir)")
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        asyncio.run(main(args.n, args.dir))
    else:
        with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
            asyncio.run(main(args.n, Path(tmp)))
