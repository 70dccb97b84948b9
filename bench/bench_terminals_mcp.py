"""PTY throughput of agentcli terminals and MCP tool-call overhead, each against a same-run baseline.

    .venv/bin/python -m bench.bench_terminals_mcp [--mb 20] [--calls 200]

PTY: a terminal running `head -c N /dev/zero | tr '\\0' x` until it exits, versus the same command on a bare
pty read in a loop. MCP: a no-op-ish MCP tool (`add`) through the tool registry, versus a built-in Python tool
through the same registry.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from homeagent.sdk.types import ToolCall, ToolDef

SERVER = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "mcp_stdio_server.py"


def bare_pty(command: str) -> float:
    master, slave = pty.openpty()
    started = time.perf_counter()
    proc = subprocess.Popen(["/bin/sh", "-c", command], stdout=slave, stderr=slave, stdin=slave, close_fds=True)
    os.close(slave)
    total = 0
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        total += len(data)
    proc.wait()
    os.close(master)
    return time.perf_counter() - started


async def terminal_run(daemon: Daemon, command: str) -> float:
    started = time.perf_counter()
    created = await daemon.tools.execute(ToolCall(id="c", name="terminal_create", arguments={"command": command}))
    tid = created.result["id"] if isinstance(created.result, dict) else json.loads(str(created.result))["id"]
    while True:
        listing = await daemon.tools.execute(ToolCall(id="l", name="terminal_list", arguments={}))
        rows = listing.result.get("terminals", []) if isinstance(listing.result, dict) else []
        mine = [r for r in rows if r.get("id") == tid]
        if not mine or not mine[0].get("running", True):
            break
        await asyncio.sleep(0.005)
    elapsed = time.perf_counter() - started
    await daemon.tools.execute(ToolCall(id="x", name="terminal_close", arguments={"id": tid}))
    return elapsed


async def timed_calls(daemon: Daemon, name: str, args: dict[str, Any], n: int) -> list[float]:
    times = []
    for i in range(n):
        started = time.perf_counter()
        result = await daemon.tools.execute(ToolCall(id=f"t{i}", name=name, arguments=args))
        times.append(time.perf_counter() - started)
        assert result.success, result.result
    return times[10:]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    logging.getLogger("homeagent").setLevel(logging.WARNING)
    command = f"head -c {args.mb * 1_000_000} /dev/zero | tr '\\0' x"
    with tempfile.TemporaryDirectory(prefix="ha-bench-") as tmp:
        daemon = Daemon(DataPaths(Path(tmp)), web=False)
        await daemon.start()
        daemon.config.set(
            "plugin.mcp.servers", json.dumps([{"name": "bench", "command": sys.executable, "args": [str(SERVER)]}])
        )
        await daemon.plugins.reload_one("mcp")
        for _ in range(300):
            if daemon.tools.get("bench_add") is not None:
                break
            await asyncio.sleep(0.05)
        try:
            bare = [await asyncio.to_thread(bare_pty, command) for _ in range(3)]
            term = [await terminal_run(daemon, command) for _ in range(3)]

            async def noop(_: dict[str, Any]) -> Any:
                return 3

            daemon.tools.register(
                ToolDef(
                    name="bench_noop",
                    plugin="bench",
                    parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
                ),
                noop,
            )
            builtin = await timed_calls(daemon, "bench_noop", {"a": 1, "b": 2}, args.calls)
            mcp = await timed_calls(daemon, "bench_add", {"a": 1, "b": 2}, args.calls)
        finally:
            await daemon.stop()
    mb = args.mb
    print(f"| PTY, {mb} MB of output | median s | MB/s |")
    print("|---|---|---|")
    print(f"| bare pty read loop | {statistics.median(bare):.2f} | {mb / statistics.median(bare):.0f} |")
    print(f"| agentcli terminal | {statistics.median(term):.2f} | {mb / statistics.median(term):.0f} |")
    print()

    def pct(v: list[float], q: float) -> float:
        return sorted(v)[int(q * (len(v) - 1))] * 1000

    print("| tool call | p50 ms | p95 ms |")
    print("|---|---|---|")
    print(f"| built-in Python tool | {pct(builtin, 0.5):.3f} | {pct(builtin, 0.95):.3f} |")
    print(f"| MCP tool over stdio | {pct(mcp, 0.5):.3f} | {pct(mcp, 0.95):.3f} |")
    print(f"\nMCP / built-in (p50): {pct(mcp, 0.5) / pct(builtin, 0.5):.0f}x")


if __name__ == "__main__":
    asyncio.run(main())
