"""Kernel overhead per turn, daemon cold start and idle RSS.

Overhead = wall time of a turn minus the time the fake LLM itself takes. The
fake LLM's time is measured by replaying, with a bare aiohttp client (the
providers' own client stack, so its cost is not counted as overhead), the exact
request bodies the turn sent (one per LLM round, same scripted answers) right
after the turn: overhead is taken turn by turn, so drift of a noisy machine
cancels out. What is left is the daemon's own work (stages, tool loop, prompt,
Lua adapter, provider manager, socket-free inject). The CPU column is the same
difference in this process's CPU time (daemon and bare client), which time
stolen by a busy host does not inflate. The ratio to a bare tiny request is
printed as well.

The fake LLM runs in its own process, as a real API runs on its own machine: its
work overlaps the daemon's. ``--fake-in-process`` puts it on the daemon's event
loop instead (how earlier runs measured); the two take turns there, and the
overhead then also holds that scheduling.

    .venv/bin/python -m bench.bench_kernel [--turns 200] [--fake-in-process] [--memory-off-only] [--cold 0]

A/B of two trees in one run: run this script alternately with ``PYTHONPATH=<tree>/src``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench.fake_llm_proc import LocalFake, RemoteFake, fake_llm
from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from homeagent.providers.base import ChatRequest
from homeagent.sdk.types import Stage, StageContext, ToolDef
from tests.fakes.llm_openai import Turn

Fake = LocalFake | RemoteFake


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bare_requests(fake: Fake, n: int) -> list[float]:
    body = {
        "model": "gpt-fake",
        "stream": True,
        "messages": [{"role": "system", "content": "x" * 2000}, {"role": "user", "content": "hi"}],
    }
    times = []
    async with httpx.AsyncClient() as client:
        for _ in range(n):
            await fake.script(Turn.text("ok"))
            started = time.perf_counter()
            async with client.stream("POST", fake.base_url + "/chat/completions", json=body) as response:
                async for _line in response.aiter_lines():
                    pass
            times.append(time.perf_counter() - started)
    return times


async def kernel_turns(fake: Fake, turns: int, memory_on: bool = True) -> dict[str, list[float]]:
    os.environ.update(
        HOMEAGENT_LLM_BASE_URL=fake.base_url, HOMEAGENT_LLM_API_KEY="sk-bench-000000", HOMEAGENT_LLM_MODEL="gpt-fake"
    )
    logging.getLogger("homeagent").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="ha-bench-") as tmp:
        daemon = Daemon(DataPaths(Path(tmp)), web=False)
        await daemon.start()
        try:

            async def noop_handler(ctx: StageContext) -> None:
                return None

            for stage in Stage:
                for i in range(3):
                    daemon.stages.register(stage, noop_handler, plugin=f"bench{i}")

            async def noop(args: dict[str, Any]) -> Any:
                return "ok"

            daemon.tools.register(ToolDef(name="noop", plugin="bench"), noop)
            results: dict[str, list[float]] = {}

            base = {
                "0 tool calls": lambda: [Turn.text("done")],
                "1 tool call": lambda: [Turn.tool_calls([("noop", {})]), Turn.text("done")],
                "3 tool calls": lambda: [Turn.tool_calls([("noop", {})] * 3), Turn.text("done")],
            }
            await asyncio.sleep(8)  # let the embedder and dictionaries finish loading
            provider_times = []
            request = ChatRequest(messages=[{"role": "system", "content": "x" * 2000}, {"role": "user", "content": "hi"}])
            for i in range(turns + 10):
                await fake.script(Turn.text("ok"))
                started = time.perf_counter()
                await daemon.llm.manager.run(request, lambda chunk: None)
                if i >= 10:
                    provider_times.append(time.perf_counter() - started)
            results["provider.run only"] = provider_times
            scenarios = {f"{k}, memory on": v for k, v in base.items()} if memory_on else {}
            scenarios.update({f"{k}, memory off": v for k, v in base.items()})
            full_memory, full_prompt = daemon.runner.memory, daemon.runner.prompt
            llm_time = [0.0]
            real_run = daemon.runner.run_llm

            async def timed_run(*a: Any, **kw: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await real_run(*a, **kw)
                finally:
                    llm_time[0] += time.perf_counter() - started

            daemon.runner.run_llm = timed_run
            last_request: list[ChatRequest] = []

            async def spy_run(request: ChatRequest, *a: Any, **kw: Any) -> Any:
                last_request[:] = [request]
                return await timed_run(request, *a, **kw)

            daemon.runner.run_llm = spy_run
            for name, script in scenarios.items():
                if name.endswith("memory off"):
                    # the kernel alone: no context window, no memory prompt sections, no distiller hook
                    from homeagent.agent.memory_port import RecentTurns
                    from homeagent.agent.prompt import PromptBuilder

                    daemon.runner.memory = RecentTurns()
                    daemon.runner.prompt = PromptBuilder(identity=lambda: "")
                    daemon.stages.unregister_plugin("core")
                else:
                    daemon.runner.memory, daemon.runner.prompt = full_memory, full_prompt
                times, outside, fake_times, overhead, cpu_overhead = [], [], [], [], []
                async with aiohttp.ClientSession() as bare_client:
                    for i in range(turns + 10):
                        answers = script()
                        await fake.script(*answers)
                        llm_time[0] = 0.0
                        cpu = time.process_time()
                        started = time.perf_counter()
                        result = await daemon.io.inject_sync("bench", "bench", f"turn {i}")
                        elapsed = time.perf_counter() - started
                        cpu_turn = time.process_time() - cpu
                        assert result.ok, result.error
                        # the fake LLM's own time for this very turn: its request bodies sent again, bare
                        bodies = await fake.bodies(len(answers))
                        fake_time, cpu_fake = await replay(bare_client, fake, bodies, script())
                        if i >= 10:  # warm-up
                            times.append(elapsed)
                            outside.append(elapsed - llm_time[0])
                            fake_times.append(fake_time)
                            overhead.append(elapsed - fake_time)
                            cpu_overhead.append(cpu_turn - cpu_fake)
                results[name] = times
                results[name + " (outside the provider)"] = outside
                results[name + " (fake LLM)"] = fake_times
                results[name + " (overhead)"] = overhead
                results[name + " (CPU overhead)"] = cpu_overhead
            results.update(await one_round(daemon, fake, last_request[0], turns))
            return results
        finally:
            await daemon.stop()


async def send_bare(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    """Seconds for one streamed request with a bare aiohttp client (the daemon's own client stack)."""
    started = time.perf_counter()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
        async for _piece in response.content.iter_any():
            pass
    return time.perf_counter() - started


async def send_bare_httpx(client: httpx.AsyncClient, url: str, body: bytes) -> float:
    started = time.perf_counter()
    async with client.stream("POST", url, content=body, headers={"Content-Type": "application/json"}) as response:
        async for _line in response.aiter_lines():
            pass
    return time.perf_counter() - started


async def one_round(daemon: Daemon, fake: Fake, request: Any, turns: int) -> dict[str, list[float]]:
    """One LLM round with the last turn's final request: ProviderManager.run against the same body sent bare."""
    run = daemon.llm.manager.run
    await fake.script(Turn.text("done"))
    await run(request, None)
    (body,) = await fake.bodies(1)
    url = fake.base_url + "/chat/completions"
    manager, bare, bare_httpx = [], [], []
    async with aiohttp.ClientSession() as session, httpx.AsyncClient() as client:
        for i in range(turns + 10):  # interleaved, so all three see the same machine
            await fake.script(Turn.text("done"))
            started = time.perf_counter()
            await run(request, lambda chunk: None)
            took = time.perf_counter() - started
            await fake.script(Turn.text("done"))
            plain = await send_bare(session, url, body)
            await fake.script(Turn.text("done"))
            plain_httpx = await send_bare_httpx(client, url, body)
            if i >= 10:
                manager.append(took)
                bare.append(plain)
                bare_httpx.append(plain_httpx)
    return {"round: ProviderManager.run": manager, "round: bare": bare, "round: bare httpx": bare_httpx,
            "round: body bytes": [float(len(body))]}


async def replay(
    session: aiohttp.ClientSession, fake: Fake, bodies: list[bytes], answers: list[Any]
) -> tuple[float, float]:
    """Seconds (wall, this process's CPU) the fake LLM takes to answer these request bodies, sent bare."""
    total = cpu = 0.0
    for body, answer in zip(bodies, answers, strict=True):
        await fake.script(answer)
        started = time.process_time()
        total += await send_bare(session, fake.base_url + "/chat/completions", body)
        cpu += time.process_time() - started
    return total, cpu


def timed_reference() -> float:
    """Seconds for a fixed pure-Python workload: how fast this machine is right now."""
    started = time.perf_counter()
    total = 0
    for i in range(1_000_000):
        total += i & 7
    return time.perf_counter() - started


def cold_start(runs: int) -> tuple[list[float], list[int]]:
    times, rss = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="ha-cold-") as tmp:
            sock = Path(tmp) / "cli.sock"
            started = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-m", "homeagent", "--data-dir", tmp, "run", "--no-web"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            while not sock.exists():
                time.sleep(0.002)
            import socket as socketlib

            while True:
                try:
                    with socketlib.socket(socketlib.AF_UNIX) as s:
                        s.connect(str(sock))
                        s.recv(100)
                    break
                except OSError:
                    time.sleep(0.002)
            times.append(time.perf_counter() - started)
            time.sleep(8.0)  # after the embedder has loaded in the background
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss.append(int(line.split()[1]))
            proc.terminate()
            proc.wait(10)
    return times, rss


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--cold", type=int, default=5)
    parser.add_argument("--fake-in-process", action="store_true",
                        help="run the fake LLM on the daemon's event loop (how runs before 2026-12-03 measured)")
    parser.add_argument("--memory-off-only", action="store_true",
                        help="only the kernel-overhead scenarios (memory off): a quicker A/B of two trees")
    args = parser.parse_args()
    async with fake_llm(not args.fake_in_process) as fake:
        baseline = await bare_requests(fake, args.turns)
        scenarios = await kernel_turns(fake, args.turns, not args.memory_off_only)
    base50 = statistics.median(baseline)
    reference = min(timed_reference() for _ in range(5))
    where = "on the daemon's event loop" if args.fake_in_process else "in its own process"
    print(f"fake LLM: {where}")
    print(f"machine: pure-Python reference loop {reference * 1000:.1f} ms (compare runs by it); "
          "the turn and the fake LLM slow down together, so overhead / fake LLM time is the steadier figure")
    print(f"bare httpx streaming request to the fake LLM: p50 {base50 * 1000:.2f} ms, p95 {pct(baseline, 0.95) * 1000:.2f} ms")
    print()
    provider50 = statistics.median(scenarios.pop("provider.run only"))
    print(f"ProviderManager.run (Lua adapter + aiohttp) to the same server: p50 {provider50 * 1000:.2f} ms")
    round_run, round_bare = scenarios.pop("round: ProviderManager.run"), scenarios.pop("round: bare")
    round_httpx = scenarios.pop("round: bare httpx")
    size = int(scenarios.pop("round: body bytes")[0])
    print(f"one LLM round with a turn's real request ({size} bytes, the daemon's tools included): "
          f"ProviderManager.run p50 {statistics.median(round_run) * 1000:.2f} ms, the same body sent bare "
          f"{statistics.median(round_bare) * 1000:.2f} ms: the provider adds "
          f"{(statistics.median(round_run) - statistics.median(round_bare)) * 1000:.2f} ms per round")
    print(f"the same body sent bare with httpx (the providers' client before 2026-12-03): "
          f"{statistics.median(round_httpx) * 1000:.2f} ms")
    print()
    print("| turn (7 stages x 3 handlers) | LLM rounds | turn p50 ms | turn p95 ms | fake LLM p50 ms "
          "| **overhead p50 / p95 ms** | overhead / fake LLM | CPU overhead p50 ms | outside the provider p50 / p95 ms "
          "| turn / bare tiny request |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, times in scenarios.items():
        if name.endswith(")"):
            continue
        outside = scenarios[name + " (outside the provider)"]
        fake50 = statistics.median(scenarios[name + " (fake LLM)"])
        rounds = 1 if name.startswith("0") else 2
        overhead = scenarios[name + " (overhead)"]
        print(
            f"| {name} | {rounds} | {statistics.median(times) * 1000:.2f} | {pct(times, 0.95) * 1000:.2f} | "
            f"{fake50 * 1000:.2f} | {statistics.median(overhead) * 1000:.2f} / {pct(overhead, 0.95) * 1000:.2f} | "
            f"{statistics.median(overhead) / fake50:.2f} | "
            f"{statistics.median(scenarios[name + ' (CPU overhead)']) * 1000:.2f} | "
            f"{statistics.median(outside) * 1000:.2f} / {pct(outside, 0.95) * 1000:.2f} | "
            f"{statistics.median(times) / base50:.1f}x |"
        )
    if not args.cold:
        return
    times, rss = cold_start(args.cold)
    print()
    print(f"cold start to socket ready: p50 {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms ({args.cold} runs)")
    print(f"idle RSS 8 s after start (embedder loaded): {statistics.median(rss) / 1024:.1f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
