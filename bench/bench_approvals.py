"""Added latency of the approval check on a tool call that needs no approval, against no check, same run.

Both sides run the real turn-runner path for one tool call (``TurnRunner._run_one``:
gate, before_toolcall stage, schema check, the tool, after_toolcall stage, the
frame and the tool_call event), one runner built without a gate and one with
the daemon's broker (real policy with the shipped defaults, real SQLite store
holding 20 always rules). Calls are interleaved in blocks so drift hits both.

Run: .venv/bin/python bench/bench_approvals.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from homeagent.agent.memory_port import RecentTurns
from homeagent.agent.process import TurnRunner, _Turn
from homeagent.agent.prompt import PromptBuilder
from homeagent.agent.stages import StageHost
from homeagent.agent.tools import ToolRegistry
from homeagent.approvals import ApprovalBroker, ApprovalPolicy, ApprovalStore, PolicyConfig
from homeagent.events import EventBus
from homeagent.io.manager import InputMessage
from homeagent.sdk.types import StageContext, ToolCall, ToolDef


async def noop(args: dict[str, Any]) -> str:
    return "ok"


async def main(calls: int) -> None:
    tools = ToolRegistry()
    schema = {"type": "object", "properties": {"command": {"type": "string"}, "path": {"type": "string"}}}
    tools.register(ToolDef("files_read", parameters=schema, plugin="files"), noop)
    tools.register(ToolDef("cmd_run", parameters=schema, plugin="cmd"), noop)
    events = EventBus()
    with tempfile.TemporaryDirectory() as tmp:
        store = ApprovalStore(Path(tmp) / "approvals.db")
        for i in range(19):
            store.add_rule("cmd_run", f"prog{i} *", by="socket")
        store.add_rule("cmd_run", "git status*", by="socket")
        broker = ApprovalBroker(ApprovalPolicy(lambda: PolicyConfig(), store.rules), store, events)

        def runner(gate: ApprovalBroker | None) -> TurnRunner:
            async def no_llm(*_: Any, **__: Any) -> Any:
                raise RuntimeError("not called")

            return TurnRunner(stages=StageHost(), tools=tools, run_llm=no_llm, prompt=PromptBuilder(lambda: ""),
                              memory=RecentTurns(), events=events, gate=gate)

        plain, gated = runner(None), runner(broker)
        turn = _Turn(InputMessage("bench", "bench", "bench"), False)
        ctx = StageContext(channel="bench", extra={"input_id": "bench"})
        read = {"path": "notes/todo.md"}
        git = {"command": "git status --short"}

        async def one(r: TurnRunner, name: str, args: dict[str, Any]) -> float:
            call = ToolCall(id="c", name=name, arguments=dict(args))
            t0 = time.perf_counter_ns()
            result = await r._run_one(ctx, turn, call)
            elapsed = (time.perf_counter_ns() - t0) / 1000
            assert result.status == "ok", result
            ctx.tool_results.clear()
            turn.tool_log.clear()
            turn.tool_outputs.clear()
            return elapsed

        cases = [("no policy check (baseline)", plain, "files_read", read),
                 ("auto-allowed: read-only tool (no rule names it)", gated, "files_read", read),
                 ("auto-allowed: cmd_run by an always rule (20 rules)", gated, "cmd_run", git)]
        samples: list[list[float]] = [[] for _ in cases]
        for _ in range(200):  # warm up
            for _, r, name, args in cases:
                await one(r, name, args)
        block = 200
        for _ in range(max(1, calls // block)):
            for i, (_, r, name, args) in enumerate(cases):
                samples[i].extend([await one(r, name, args) for _ in range(block)])
        store.close()
    base = statistics.median(samples[0])
    print(f"{'scenario':<52}  {'p50 µs':>8}  {'p95 µs':>8}  {'added p50 µs':>12}")
    for (label, *_), s in zip(cases, samples, strict=True):
        s.sort()
        p50, p95 = statistics.median(s), s[int(len(s) * 0.95)]
        print(f"{label:<52}  {p50:>8.1f}  {p95:>8.1f}  {p50 - base:>12.1f}")
    print(f"\n{len(samples[0])} calls per row; target: added ≤ 100 µs (0.1 ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    asyncio.run(main(parser.parse_args().calls))
