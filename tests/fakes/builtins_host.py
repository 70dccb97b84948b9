"""Helpers for the built-in plugin tests: run them on a real daemon (fake LLM) or on bare services.

``attached(daemon, "timer", "cmd")`` checks that the daemon itself runs the
named built-ins (through its own registry and ``Daemon.plugin_services``) and
hands back their instances; it never starts one on the side, so a daemon
that stopped wiring its plugins fails every test that uses it.
``run_tool`` executes a tool through the real ToolRegistry (schema checks and
all), as the agent loop does.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from homeagent.builtin.catalog import builtin_factories
from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from homeagent.plugins.services import HostSDK, PluginServices
from homeagent.sdk.types import ToolCall, ToolResult
from tests.fakes.llm_openai import FakeOpenAI

_ids = itertools.count(1)


async def _maybe(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def daemon_services(d: Daemon) -> PluginServices:
    """The PluginServices the daemon handed its plugin registry (its own wiring, not a copy)."""
    services = d.plugins.services
    assert isinstance(services, PluginServices)
    return services


@asynccontextmanager
async def attached(d: Daemon, *names: str) -> AsyncIterator[dict[str, Any]]:
    """The running built-ins ``names`` of daemon ``d``, name → plugin; fails when the daemon does not run one."""
    out: dict[str, Any] = {}
    for name in names:
        record = d.plugins.get(name)
        assert record is not None and record.builtin, f"the daemon does not know the built-in {name!r}"
        assert record.state == "running" and record.plugin is not None, f"built-in {name!r} is {record.state}"
        assert name in {t.plugin for t in d.tools.tools()}, f"built-in {name!r} registered no tool"
        out[name] = record.plugin
    yield out


@asynccontextmanager
async def started(services: PluginServices, name: str, **config: Any) -> AsyncIterator[Any]:
    """One built-in on bare services (no daemon, no agent loop)."""
    factories = builtin_factories(health=config.pop("health", None))
    plugin = factories[name](name, {"services": services, **config})
    sdk = HostSDK(services, name)
    await _maybe(plugin.start(sdk))
    try:
        yield plugin
    finally:
        sdk.close()
        await _maybe(plugin.stop())


async def run_tool(services: PluginServices, name: str, args: dict[str, Any], timeout: float = 30) -> ToolResult:
    """Execute tool ``name`` the way the agent loop does (validation, error shaping, stats)."""
    return await services.tools.execute(ToolCall(id=f"call_{next(_ids)}", name=name, arguments=args), timeout=timeout)


async def tool_value(services: PluginServices, name: str, args: dict[str, Any], timeout: float = 30) -> Any:
    return (await run_tool(services, name, args, timeout)).result


@asynccontextmanager
async def llm_daemon(
    data_dir: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, *, ask: str | None = ""
) -> AsyncIterator[Daemon]:
    """A real daemon whose only LLM is the scripted fake server.

    ``ask`` is written to ``core.approvals.ask``: tests of other things turn asking off (no owner is there to
    answer); pass None to keep the shipped default, as tests/test_approvals.py does.
    """
    monkeypatch.setenv("HOMEAGENT_LLM_BASE_URL", fake.base_url)
    monkeypatch.setenv("HOMEAGENT_LLM_API_KEY", "sk-test-secret-0000")
    monkeypatch.setenv("HOMEAGENT_LLM_MODEL", "gpt-fake")
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    if ask is not None:
        d.config.set("core.approvals.ask", ask)
    try:
        yield d
    finally:
        await d.stop()


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool-result messages of one recorded LLM request."""
    return [m for m in body["messages"] if m["role"] == "tool"]
