"""Added latency of the bubblewrap sandbox: ``cmd_run true`` confined against unconfined, same run.

Both rows run the real ``cmd_run`` through the tool registry (argument checks,
confined workdir, program checks, scrubbed environment, process group, output
capture). One cmd plugin has the daemon's :class:`~homeagent.confine.Sandbox`
(probed as at start; network off, the default), the other runs in the weaker
mode (``core.sandbox.mode`` off). A bare ``asyncio`` subprocess of ``true`` and
a bare ``bwrap … true`` with the same options give the floor of each. Calls are
interleaved so machine load hits every row alike.

Run: .venv/bin/python bench/bench_sandbox.py [--runs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from homeagent.agent.prompt import PromptBuilder
from homeagent.agent.stages import StageHost
from homeagent.agent.tools import ToolRegistry
from homeagent.builtin.catalog import builtin_factories
from homeagent.config import ConfigRegistry, core_defs
from homeagent.confine import Sandbox, SandboxSettings
from homeagent.events import EventBus
from homeagent.io.channels import OutputChannels
from homeagent.io.manager import IOManager
from homeagent.plugins.services import HostSDK, PluginServices
from homeagent.sdk.types import ToolCall


def services(root: Path) -> PluginServices:
    tools = ToolRegistry()
    config = ConfigRegistry(root / "config.db")
    for definition in core_defs(root):
        config.register_def(definition)
    return PluginServices(
        tools=tools, stages=StageHost(), io=IOManager(), config=config, events=EventBus(),
        channels=OutputChannels(tools), prompt=PromptBuilder(identity=lambda: ""), llm=None, data_dir=root,
    )


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * q))]


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        work = root / "work"
        work.mkdir()
        sandbox = Sandbox(lambda: SandboxSettings(), hidden=lambda: [root / "data"])
        probe = await sandbox.probe()
        if not probe.usable:
            print(f"bubblewrap is not usable here ({probe.reason}); nothing to compare")
            return
        plugins = []
        runners: list[tuple[str, Callable[[], Awaitable[None]]]] = []

        async def bare() -> None:
            proc = await asyncio.create_subprocess_exec(
                "true", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
            await proc.communicate()

        bwrap_argv = sandbox.wrap(["true"], cwd=str(work), writable=[work], home="/tmp").argv

        async def bare_bwrap() -> None:
            proc = await asyncio.create_subprocess_exec(
                *bwrap_argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
            await proc.communicate()
            assert proc.returncode == 0

        runners += [("bare subprocess `true`", bare), ("bare `bwrap … true`", bare_bwrap)]
        for label, box in (("cmd_run `true`, unconfined", None), ("cmd_run `true`, sandboxed", sandbox)):
            svc = services(root / label.split(",")[1].strip())
            svc.config.set("core.agent.workdir", str(work))
            plugin = builtin_factories(sandbox=box)["cmd"]("cmd", {"services": svc})
            sdk = HostSDK(svc, "cmd")
            plugin.start(sdk)
            plugins.append((plugin, sdk))
            expected = "bwrap (network off)" if box is not None else "none (no sandbox configured)"

            async def tool(svc: PluginServices = svc, expected: str = expected) -> None:
                result = await svc.tools.execute(ToolCall(id="c", name="cmd_run", arguments={"command": "true"}))
                assert result.success and result.result["status"] == "ok", result.result
                assert result.result["sandbox"] == expected, result.result

            runners.append((label, tool))
        for _ in range(10):
            for _, fn in runners:
                await fn()
        samples: dict[str, list[float]] = {label: [] for label, _ in runners}
        for _ in range(runs):  # interleaved, so every row sees the same machine load
            for label, fn in runners:
                t0 = time.perf_counter()
                await fn()
                samples[label].append((time.perf_counter() - t0) * 1000)
        for plugin, sdk in plugins:
            sdk.close()
            plugin.stop()
    print(f"\ncmd_run `true`, sandboxed against unconfined ({runs} runs each, interleaved), ms per call")
    print(f"bubblewrap {probe.version} at {probe.binary}")
    print(f"{'path':34} {'p50':>8} {'p95':>8} {'mean':>8}")
    rows = {label: (statistics.median(s), pct(s, 0.95), statistics.fmean(s)) for label, s in samples.items()}
    for label, (p50, p95, mean) in rows.items():
        print(f"{label:34} {p50:8.2f} {p95:8.2f} {mean:8.2f}")
    plain, boxed = rows["cmd_run `true`, unconfined"], rows["cmd_run `true`, sandboxed"]
    print(f"{'added by the sandbox':34} {boxed[0] - plain[0]:8.2f} {boxed[1] - plain[1]:8.2f} "
          f"{boxed[2] - plain[2]:8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(main(args.runs))
