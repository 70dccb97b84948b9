"""Real daemon subsystems wired for the plugin host, without the daemon, plus a tiny HTTP server.

Tests of the plugin registry construct the same classes the daemon does (tool
registry, stage host, IO manager, config registry, event bus, output
channels, prompt builder) on a temporary data directory.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from homeagent.agent.prompt import PromptBuilder
from homeagent.agent.stages import StageHost
from homeagent.agent.tools import ToolRegistry
from homeagent.config import ConfigRegistry
from homeagent.events import EventBus
from homeagent.io.channels import OutputChannels
from homeagent.io.manager import IOManager
from homeagent.plugins.lua_plugin import LuaLimits
from homeagent.plugins.registry import PluginRegistry
from homeagent.plugins.services import PluginServices

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "plugins"


def make_services(data_dir: Path, **optional: Any) -> PluginServices:
    data_dir.mkdir(parents=True, exist_ok=True)
    tools = ToolRegistry()
    return PluginServices(
        tools=tools,
        stages=StageHost(default_timeout=5.0),
        io=IOManager(),
        config=ConfigRegistry(data_dir / "config.db"),
        events=EventBus(),
        channels=OutputChannels(tools),
        prompt=PromptBuilder(identity=lambda: "test identity"),
        llm=optional.pop("llm", None),
        data_dir=data_dir,
        **optional,
    )


def copy_fixture(name: str, plugins_dir: Path, as_name: str | None = None) -> Path:
    target = plugins_dir / (as_name or name)
    shutil.copytree(FIXTURES / name, target)
    return target


@dataclass
class Host:
    services: PluginServices
    registry: PluginRegistry
    plugins_dir: Path


@asynccontextmanager
async def plugin_host(
    data_dir: Path, *, builtins: dict[str, Any] | None = None, lua_limits: LuaLimits | None = None, **optional: Any
) -> AsyncIterator[Host]:
    """A registry over real subsystems; built-ins off unless given, entry points off."""
    services = make_services(data_dir, **optional)
    plugins_dir = data_dir / "plugins"
    plugins_dir.mkdir(exist_ok=True)
    registry = PluginRegistry(services, plugins_dir, builtins=builtins or {}, entry_points=False, lua_limits=lua_limits)
    try:
        yield Host(services, registry, plugins_dir)
    finally:
        await registry.stop_all()
        await services.events.close()
        services.config.close()


Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def http_server(routes: dict[str, Route]) -> AsyncIterator[str]:
    """An aiohttp server on 127.0.0.1, port 0; yields its base URL."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_route("*", path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
