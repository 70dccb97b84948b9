"""Built-in plugins: timer firing accuracy and cmd_run overhead, each against a bare-asyncio baseline in the same run.

* timer: N one-off timers due at random moments over a few seconds; lateness is
  measured where the agent would see the interrupt (when it is taken off the
  interrupt queue) against the due time. Baseline: ``loop.call_at`` callbacks
  scheduled for the same moments.
* cmd: ``cmd_run`` of ``true`` through the real tool registry (argument
  validation, confined workdir, program check, scrubbed env, process group,
  output capture) against a bare ``asyncio.create_subprocess_exec("true")``
  with piped output.

Run: .venv/bin/python bench/bench_builtins.py [--timers 300] [--runs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from homeagent.agent.prompt import PromptBuilder
from homeagent.agent.stages import StageHost
from homeagent.agent.tools import ToolRegistry
from homeagent.builtin.catalog import builtin_factories
from homeagent.config import ConfigRegistry
from homeagent.events import EventBus
from homeagent.io.channels import OutputChannels
from homeagent.io.manager import IOManager
from homeagent.plugins.services import HostSDK, PluginServices
from homeagent.sdk.types import ToolCall


def services(root: Path) -> PluginServices:
    tools = ToolRegistry()
    return PluginServices(
        tools=tools, stages=StageHost(), io=IOManager(), config=ConfigRegistry(root / "config.db"), events=EventBus(),
        channels=OutputChannels(tools), prompt=PromptBuilder(identity=lambda: ""), llm=None, data_dir=root,
    )


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * q))]


async def bench_timer(root: Path, n: int, span: float) -> list[tuple[str, float, float, float]]:
    svc = services(root / "timer")
    plugin = builtin_factories()["timer"]("timer", {"services": svc})
    sdk = HostSDK(svc, "timer")
    await plugin.start(sdk)
    svc.config.set("plugin.timer.max_timers", n + 10)
    rng = random.Random(7)
    offsets = sorted(0.3 + rng.random() * span for _ in range(n))
    loop = asyncio.get_running_loop()

    # baseline: bare call_at for the same moments
    base_late: list[float] = []
    done = asyncio.Event()
    start_wall, start_loop = time.time(), loop.time()

    def fired(due_wall: float) -> None:
        base_late.append((time.time() - due_wall) * 1000)
        if len(base_late) == n:
            done.set()

    for off in offsets:
        loop.call_at(start_loop + off, fired, start_wall + off)
    await asyncio.wait_for(done.wait(), span + 10)

    # the timer plugin
    dues: dict[str, float] = {}
    for off in offsets:
        call = ToolCall(id="c", name="timer_set", arguments={"duration": off, "message": f"m{len(dues)}"})
        t_set = time.time()
        result = await svc.tools.execute(call)
        dues[f"timer: m{len(dues)}"] = t_set + off
        assert result.success, result.result
    late: list[float] = []
    while len(late) < n:
        message = await asyncio.wait_for(svc.io.interrupts.get(), span + 10)
        late.append((time.time() - dues[message.text]) * 1000)
    sdk.close()
    await plugin.stop()
    rows = [
        ("loop.call_at (baseline)", statistics.median(base_late), pct(base_late, 0.95), max(base_late)),
        ("timer plugin -> interrupt queue", statistics.median(late), pct(late, 0.95), max(late)),
    ]
    return rows


async def bench_cmd(root: Path, runs: int) -> list[tuple[str, float, float]]:
    svc = services(root / "cmd")
    plugin = builtin_factories()["cmd"]("cmd", {"services": svc})
    sdk = HostSDK(svc, "cmd")
    plugin.start(sdk)

    async def bare() -> None:
        proc = await asyncio.create_subprocess_exec(
            "true", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        await proc.communicate()

    async def tool() -> None:
        result = await svc.tools.execute(ToolCall(id="c", name="cmd_run", arguments={"command": "true"}))
        assert result.success and result.result["status"] == "ok", result.result

    variants = (("bare asyncio subprocess `true`", bare), ("cmd_run `true` (tool registry)", tool))
    for _ in range(10):
        for _, fn in variants:
            await fn()
    samples: dict[str, list[float]] = {label: [] for label, _ in variants}
    for _ in range(runs):  # interleaved, so both see the same machine load
        for label, fn in variants:
            t0 = time.perf_counter()
            await fn()
            samples[label].append((time.perf_counter() - t0) * 1000)
    out = [(label, statistics.median(samples[label]), pct(samples[label], 0.95)) for label, _ in variants]
    sdk.close()
    plugin.stop()
    return out


async def main(timers: int, runs: int, span: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        timer_rows = await bench_timer(root, timers, span)
        cmd_rows = await bench_cmd(root, runs)
    print(f"\nTimer firing lateness ({timers} timers over {span:g}s), ms")
    print(f"{'path':36} {'p50':>8} {'p95':>8} {'max':>8}")
    for label, p50, p95, mx in timer_rows:
        print(f"{label:36} {p50:8.2f} {p95:8.2f} {mx:8.2f}")
    base, ours = timer_rows
    print(f"{'p95 extra over baseline':36} {'':8} {ours[2] - base[2]:8.2f}")
    print(f"\ncmd_run overhead ({runs} runs each), ms per call")
    print(f"{'path':36} {'p50':>8} {'p95':>8} {'ratio':>7}")
    b50 = cmd_rows[0][1]
    for label, p50, p95 in cmd_rows:
        print(f"{label:36} {p50:8.2f} {p95:8.2f} {p50 / b50:6.2f}x")
    print(f"{'added by cmd_run (p50)':36} {cmd_rows[1][1] - b50:8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=300)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--span", type=float, default=3.0)
    args = parser.parse_args()
    asyncio.run(main(args.timers, args.runs, args.span))
