"""A plugin registry over real subsystems with the subprocess host plugged in, for the proc tests.

It builds what the daemon builds (``tests.fakes.plugins_host.make_services``),
a :class:`Supervisor`, and registers the subprocess loader with the registry
exactly as daemon.py should (``register_kind("process", …)``). Options are
short so that crash, restart and timeout paths run in tenths of a second.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from homeagent.plugins.proc.plugin import ProcOptions, ProcPlugin, make_loader
from homeagent.plugins.proc.supervisor import Supervisor
from homeagent.plugins.registry import PluginRegistry
from homeagent.plugins.services import PluginServices
from homeagent.sdk.types import ToolCall, ToolResult
from tests.fakes.plugins_host import make_services

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "proc_plugins"

FAST = ProcOptions(
    handshake_timeout=5.0,
    start_timeout=10.0,
    call_timeout=5.0,
    stop_timeout=1.0,
    kill_grace=0.5,
    hang_timeout=0.5,
    backoff_initial=0.05,
    backoff_max=0.2,
    breaker_crashes=3,
    breaker_window=30.0,
)


@dataclass
class ProcHost:
    services: PluginServices
    registry: PluginRegistry
    supervisor: Supervisor
    plugins_dir: Path

    def plugin(self, name: str) -> ProcPlugin:
        record = self.registry.get(name)
        assert record is not None and isinstance(record.plugin, ProcPlugin), f"{name} is not a running subprocess plugin"
        return record.plugin

    async def call(self, tool: str, args: dict[str, Any] | None = None, **kw: Any) -> ToolResult:
        return await self.services.tools.execute(ToolCall("call-1", tool, args or {}), **kw)

    def add(self, fixture: str, as_name: str | None = None, **manifest: Any) -> Path:
        """Copy a fixture plugin into the plugins folder, optionally changing manifest fields."""
        target = self.plugins_dir / (as_name or fixture)
        shutil.copytree(FIXTURES / fixture, target)
        if manifest or as_name:
            path = target / "plugin.json"
            data = json.loads(path.read_text())
            data.update(manifest, name=as_name or fixture)
            path.write_text(json.dumps(data))
        return target


@asynccontextmanager
async def proc_host(data_dir: Path, *, options: ProcOptions | None = None, **optional: Any) -> AsyncIterator[ProcHost]:
    services = make_services(data_dir, **optional)
    plugins_dir = data_dir / "plugins"
    plugins_dir.mkdir(exist_ok=True)
    registry = PluginRegistry(services, plugins_dir, builtins={}, entry_points=False)
    supervisor = Supervisor(kill_grace=(options or FAST).kill_grace)
    loader = make_loader(supervisor, options=options or FAST, plugins=registry)
    registry.register_kind("process", loader)
    try:
        yield ProcHost(services, registry, supervisor, plugins_dir)
    finally:
        await registry.stop_all()
        await supervisor.close()
        await services.events.close()
        services.config.close()


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` until it holds (real processes take real time)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


fast = replace  # re-exported: tests write fast(FAST, breaker_crashes=2)
