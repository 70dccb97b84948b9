"""Subprocess plugins vs in-process: tool round trip, throughput, a 3-plugin stage, restart time.

Run:  .venv/bin/python bench/bench_proc.py [--calls 3000] [--restarts 5]

Everything is real: the daemon's ToolRegistry and StageHost, child processes
started by the Supervisor, protocol v1 over pipes. Rows:

* ``in-process``  — the same no-op tool registered in the daemon process (baseline)
* ``proc (SDK)``  — a Python plugin run by ``python -m homeagent.sdk.run``
* ``proc (raw)``  — a stdlib-only child answering NDJSON in a plain read loop: the
  floor the host side allows with a Python child
* ``rpc only``    — ``tool.invoke`` on the connection, without the tool registry
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from homeagent.agent.prompt import PromptBuilder
from homeagent.agent.stages import StageHost
from homeagent.agent.tools import ToolRegistry
from homeagent.config import ConfigRegistry
from homeagent.events import EventBus
from homeagent.io.channels import OutputChannels
from homeagent.io.manager import IOManager
from homeagent.plugins.manifest import Manifest
from homeagent.plugins.proc.plugin import ProcOptions, ProcPlugin
from homeagent.plugins.proc.supervisor import Supervisor
from homeagent.plugins.services import HostSDK, PluginServices
from homeagent.sdk.types import Stage, StageContext, ToolCall, ToolDef

SDK_PLUGIN = '''
from homeagent.sdk import Stage

class Bench:
    def __init__(self, name):
        self.name = name

    async def start(self, sdk):
        async def noop(args):
            return None

        async def crash(args):
            import os
            os._exit(1)

        sdk.register_tool(f"{self.name}_noop", noop)
        sdk.register_tool(f"{self.name}_crash", crash)

        def note(ctx):
            ctx.context_msgs.append({"role": "system", "content": self.name})

        sdk.register_stage(Stage.PRE_ACTION, note)

    async def stop(self):
        pass

def create_plugin(name, config):
    return Bench(name)
'''

RAW_PLUGIN = r'''#!PYTHON
import json, os, sys
NAME = os.environ["HOMEAGENT_PLUGIN_NAME"]
rd, wr = sys.stdin.buffer, sys.stdout.buffer
def send(m):
    wr.write(json.dumps(m).encode() + b"\n"); wr.flush()
for line in rd:
    m = json.loads(line)
    method, ident = m.get("method"), m.get("id")
    if method == "handshake":
        send({"id": ident, "result": {"protocol": 1, "sdk_version": "raw"}})
    elif method == "plugin.start":
        send({"id": 1, "method": "tool.register", "params": {"name": NAME + "_noop"}})
        json.loads(rd.readline())
        send({"id": ident, "result": {}})
    elif method == "plugin.stop":
        send({"id": ident, "result": {}}); break
    elif ident is not None:
        send({"id": ident, "result": None})
'''


def services_in(root: Path) -> PluginServices:
    tools = ToolRegistry()
    return PluginServices(
        tools=tools, stages=StageHost(default_timeout=10.0), io=IOManager(), config=ConfigRegistry(root / "config.db"),
        events=EventBus(), channels=OutputChannels(tools), prompt=PromptBuilder(identity=lambda: ""), llm=None,
        data_dir=root,
    )


def write_plugin(root: Path, name: str, raw: bool) -> Path:
    folder = root / "plugins" / name
    folder.mkdir(parents=True)
    if raw:
        (folder / "plugin.json").write_text(f'{{"name": "{name}", "version": "1", "entry": "raw"}}')
        (folder / "raw").write_text(RAW_PLUGIN.replace("PYTHON", sys.executable))
        (folder / "raw").chmod(0o755)
    else:
        manifest = f'{{"name": "{name}", "version": "1", "entry": "main.py", "runtime": "process", "capabilities": ["stages"]}}'
        (folder / "plugin.json").write_text(manifest)
        (folder / "main.py").write_text(textwrap.dedent(SDK_PLUGIN))
    return folder


async def start_plugin(services: PluginServices, supervisor: Supervisor, root: Path, name: str, raw: bool,
                       options: ProcOptions) -> ProcPlugin:
    folder = write_plugin(root, name, raw)
    plugin = ProcPlugin(
        name, folder, Manifest.load(folder / "plugin.json"), supervisor=supervisor, options=options,
        events=services.events,
    )
    await plugin.launch()
    await plugin.start(HostSDK(services, name, plugin_dir=folder))
    return plugin


def pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def latency(fn: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    for _ in range(min(200, n // 10)):
        await fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


async def throughput(fn: Callable[[], Awaitable[Any]], n: int, concurrency: int) -> float:
    per = n // concurrency

    async def worker() -> None:
        for _ in range(per):
            await fn()

    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return per * concurrency / (time.perf_counter() - t)


async def main(calls: int, restarts: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-proc-"))
    services = services_in(root)
    supervisor = Supervisor()
    options = ProcOptions(backoff_initial=0.0, breaker_crashes=restarts + 5, call_timeout=30)
    try:
        async def inproc(args: dict[str, Any]) -> Any:
            return None

        services.tools.register(ToolDef("inproc_noop", plugin="core"), inproc)
        sdk = await start_plugin(services, supervisor, root, "sdk", False, options)
        raw = await start_plugin(services, supervisor, root, "raw", True, options)
        extra = [await start_plugin(services, supervisor, root, f"stage{i}", False, options) for i in (1, 2)]

        def tool(name: str) -> Callable[[], Awaitable[Any]]:
            call = ToolCall("b", name, {})
            return lambda: services.tools.execute(call)

        session = sdk._session
        assert session is not None
        rows: list[tuple[str, Callable[[], Awaitable[Any]], int | None]] = [
            ("in-process", tool("inproc_noop"), None),
            ("proc (SDK)", tool("sdk_noop"), sdk.pid),
            ("proc (raw)", tool("raw_noop"), raw.pid),
            ("rpc only (SDK)", lambda: session.call("tool.invoke", {"name": "sdk_noop", "args": {}}), sdk.pid),
        ]
        loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
        print(f"HomeAgent subprocess plugins — Python {sys.version.split()[0]} ({loop_name}), {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}, {calls} calls per row\n")
        print(f"{'no-op tool.invoke':<18}{'p50 ms':>9}{'p95 ms':>9}{'1 caller/s':>12}{'8 callers/s':>13}"
              f"{'p50 vs in-proc':>16}{'host CPU us':>13}{'child CPU us':>14}")
        base = 0.0
        for label, fn, pid in rows:
            host0, child0 = time.process_time(), cpu_seconds(pid) if pid else 0.0
            lat = await latency(fn, calls)
            host_cpu = (time.process_time() - host0) / len(lat) * 1e6
            child_cpu = (cpu_seconds(pid) - child0) / len(lat) * 1e6 if pid else 0.0
            one = await throughput(fn, calls, 1)
            eight = await throughput(fn, calls, 8)
            p50 = statistics.median(lat)
            base = base or p50
            print(f"{label:<18}{p50:>9.3f}{pct(lat, 0.95):>9.3f}{one:>12.0f}{eight:>13.0f}{p50 / base:>15.1f}x"
                  f"{host_cpu:>13.0f}{child_cpu:>14.0f}")

        # one stage, three subprocess plugins (each appends to context_msgs) vs three in-process handlers
        stage_lat = await latency(lambda: services.stages.run(Stage.PRE_ACTION, StageContext(raw_message="x")), calls // 3)
        ctx = StageContext()
        await services.stages.run(Stage.PRE_ACTION, ctx)
        assert len(ctx.context_msgs) == 3 and not ctx.errors, ctx
        local = StageHost()
        for i in range(3):
            local.register(Stage.PRE_ACTION, lambda c, i=i: c.context_msgs.append({"role": "system", "content": str(i)}))
        local_lat = await latency(lambda: local.run(Stage.PRE_ACTION, StageContext(raw_message="x")), calls // 3)
        print(f"\n{'stage pre_action':<18}{'p50 ms':>9}{'p95 ms':>9}")
        print(f"{'3 in-process':<18}{statistics.median(local_lat):>9.3f}{pct(local_lat, 0.95):>9.3f}")
        print(f"{'3 subprocess':<18}{statistics.median(stage_lat):>9.3f}{pct(stage_lat, 0.95):>9.3f}"
              f"   ({statistics.median(stage_lat) / statistics.median(local_lat):.0f}x)")

        # restart: crash → tools gone → process respawned, handshake, init, start → tools back
        for plugin, crash in ((sdk, "sdk_crash"), (raw, None)):
            times = []
            for _ in range(restarts):
                events = services.events.subscribe(["plugin"])
                t = time.perf_counter()
                if crash:
                    await services.tools.execute(ToolCall("c", crash, {}))
                else:
                    pid = plugin.pid
                    assert pid is not None
                    os.kill(pid, 9)
                while not ((e := await events.get()).data["name"] == plugin.name and e.data["state"] == "running"):
                    pass
                times.append((time.perf_counter() - t) * 1e3)
                events.close()
            label = "SDK plugin" if crash else "raw plugin"
            print(f"\nrestart after a crash ({label}, no backoff): median {statistics.median(times):.0f} ms, "
                  f"max {max(times):.0f} ms over {restarts}")
        for p in (sdk, raw, *extra):
            await p.stop()
    finally:
        await supervisor.close()
        await services.events.close()
        services.config.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--uvloop", action="store_true", help="run the host (and SDK children) on uvloop, if installed")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the crashes below are on purpose
    if args.uvloop:
        import uvloop

        os.environ["HOMEAGENT_PLUGIN_UVLOOP"] = "1"
        uvloop.run(main(args.calls, args.restarts))
    else:
        asyncio.run(main(args.calls, args.restarts))
