"""Kernel overhead of the stage pipeline and of tool execution, against direct calls in the same run.

Run: .venv/bin/python bench/bench_stages_tools.py [--turns 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from homeagent.agent.stages import StageHost
from homeagent.agent.tools import ToolRegistry
from homeagent.sdk.types import STAGES, StageContext, ToolCall, ToolDef

HANDLERS_PER_STAGE = 3


async def noop_stage(ctx: StageContext) -> None:
    return None


def noop_stage_sync(ctx: StageContext) -> None:
    return None


async def noop_tool(args: dict[str, Any]) -> str:
    return "ok"


def noop_tool_sync(args: dict[str, Any]) -> str:
    return "ok"


async def measure(fn: Callable[[], Awaitable[object]], n: int) -> tuple[float, float]:
    for _ in range(min(200, n)):
        await fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        await fn()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95)]


async def main(turns: int) -> None:
    rows: list[tuple[str, float, float, str]] = []

    # stages: one "turn" = running all 7 stages once
    handlers = [noop_stage] * (len(STAGES) * HANDLERS_PER_STAGE)

    async def direct_turn() -> None:
        ctx = StageContext()
        for h in handlers:
            await h(ctx)

    empty = StageHost()
    full = StageHost()
    full_sync = StageHost()
    for stage in STAGES:
        for i in range(HANDLERS_PER_STAGE):
            full.register(stage, noop_stage, plugin=f"p{i}")
            full_sync.register(stage, noop_stage_sync, plugin=f"p{i}")

    def turn_with(host: StageHost) -> Callable[[], Awaitable[None]]:
        async def turn() -> None:
            ctx = StageContext()
            for stage in STAGES:
                await host.run(stage, ctx)

        return turn

    base_p50, base_p95 = await measure(direct_turn, turns)
    rows.append(("21 no-op handlers awaited directly (baseline)", base_p50, base_p95, "1.0×"))
    for label, host in [
        ("StageHost: 7 stages, nothing registered", empty),
        ("StageHost: 7 stages × 3 async no-op handlers", full),
        ("StageHost: 7 stages × 3 sync no-op handlers", full_sync),
    ]:
        p50, p95 = await measure(turn_with(host), turns)
        rows.append((label, p50, p95, f"{p50 / base_p50:.1f}×"))

    # tools
    reg = ToolRegistry()
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city"],
    }
    reg.register(ToolDef("noop"), noop_tool)
    reg.register(ToolDef("noop_schema", parameters=schema), noop_tool)
    reg.register(ToolDef("noop_sync"), noop_tool_sync)
    args = {"city": "Paris", "days": 3}

    async def direct_tool() -> None:
        await noop_tool(args)

    async def direct_sync() -> None:
        noop_tool_sync(args)

    t_base50, t_base95 = await measure(direct_tool, turns * 3)
    rows.append(("async no-op tool called directly (baseline)", t_base50, t_base95, "1.0×"))
    for label, name in [
        ("execute(): async no-op, empty schema", "noop"),
        ("execute(): async no-op, 2-property schema", "noop_schema"),
    ]:
        c = ToolCall("c1", name, dict(args) if name == "noop_schema" else {})

        async def via_execute(c: ToolCall = c) -> None:
            await reg.execute(c)

        p50, p95 = await measure(via_execute, turns * 3)
        rows.append((label, p50, p95, f"{p50 / t_base50:.0f}×"))
    s_base50, s_base95 = await measure(direct_sync, turns * 3)
    rows.append(("sync no-op tool called directly (baseline)", s_base50, s_base95, "1.0×"))
    sync_call = ToolCall("c1", "noop_sync")

    async def via_thread() -> None:
        await reg.execute(sync_call)

    p50, p95 = await measure(via_thread, turns)
    rows.append(("execute(): sync no-op via asyncio.to_thread", p50, p95, f"{p50 / s_base50:.0f}×"))

    width = max(len(r[0]) for r in rows)
    print(f"{'scenario':<{width}}  {'p50 µs':>9}  {'p95 µs':>9}  {'vs base':>8}")
    for label, p50, p95, ratio in rows:
        print(f"{label:<{width}}  {p50:>9.1f}  {p95:>9.1f}  {ratio:>8}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=3000)
    asyncio.run(main(parser.parse_args().turns))
