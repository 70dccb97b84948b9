"""The healthcheck plugin: what it reports about tools, events, the loop and plugins, and the LLM self-test."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from homeagent.builtin.catalog import builtin_factories
from homeagent.builtin.healthcheck import SELFTEST_TOOLS, HealthSources
from homeagent.plugins.registry import PluginRegistry
from homeagent.plugins.services import PluginServices
from homeagent.sdk.types import ToolDef
from tests.fakes.builtins_host import (
    attached,
    llm_daemon,
    run_tool,
    started,
    tool_messages,
    tool_value,
)
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.plugins_host import make_services


@pytest.fixture
def services(tmp_path: Path) -> PluginServices:
    return make_services(tmp_path / "data")


def _broken(_: dict[str, Any]) -> Any:
    raise RuntimeError("disk on fire")


async def test_summary_names_real_problems(services: PluginServices) -> None:
    services.tools.register(ToolDef(name="flaky", plugin="demo"), _broken)
    sources = HealthSources(started_at=time.time() - 90, agent_status=lambda: {"busy": False, "turns": 4})
    async with started(services, "healthcheck", health=sources) as plugin:
        plugin.probe.interval = 0.05
        healthy = await tool_value(services, "healthcheck", {})
        assert healthy["status"] == "ok" and healthy["problems"] == []
        assert healthy["uptime_s"] >= 90 and healthy["uptime_of"] == "daemon"
        assert healthy["agent"] == {"busy": False, "turns": 4, "state": "idle"}
        for _ in range(3):
            await run_tool(services, "flaky", {})
        sub = services.events.subscribe(["noise"], maxsize=1, name="slow-ui")
        for i in range(5):
            services.events.publish("noise", {"i": i})
        time.sleep(0.3)  # noqa: ASYNC251 - block the loop on purpose: the probe must notice
        await asyncio.sleep(0.2)
        sick = await tool_value(services, "healthcheck", {})
        sub.close()
    assert sick["status"] == "degraded"
    problems = " | ".join(sick["problems"])
    assert "tool flaky failed 3 of 3 calls" in problems
    assert "dropped 4 events" in problems
    assert "event loop lag" in problems and sick["loop_lag_ms"]["max_ms"] >= 200


async def test_tools_perf_memory_and_report(services: PluginServices) -> None:
    services.tools.register(ToolDef(name="flaky", plugin="demo"), _broken)
    extra = HealthSources(memory_stats=lambda: {"context_events": 12})
    async with started(services, "healthcheck", health=extra):
        await run_tool(services, "flaky", {})
        tools = await tool_value(services, "healthcheck_tools", {"only_problems": True})
        assert [t["name"] for t in tools["tools"]] == ["flaky"] and tools["tools"][0]["errors"] == 1
        every = await tool_value(services, "healthcheck_tools", {})
        assert {"healthcheck", "healthcheck_selftest", "flaky"} <= {t["name"] for t in every["tools"]}
        perf = await tool_value(services, "healthcheck_perf", {})
        assert perf["process"]["rss_mb"] > 0 and perf["process"]["open_fds"] > 0
        assert perf["slowest_tools"][0]["name"] in {"flaky", "healthcheck_tools"}
        memory = await tool_value(services, "healthcheck_memory", {})
        assert memory["graph"] == "unavailable" and memory["documents"] == "unavailable"
        assert memory["extra"] == {"context_events": 12}
        plugins = await tool_value(services, "healthcheck_plugins", {})
        assert {"name": "demo", "state": "running", "tools": 1} in plugins["plugins"]
        report = await tool_value(services, "healthcheck_report", {})
        assert report["report"].startswith("# HomeAgent health: ")
        assert "flaky: 1 calls, 1 errors" in report["report"] and report["health"]["agent"]["state"] == "unknown"
        assert services.tools.get("healthcheck_report").no_memory is True  # type: ignore[union-attr]


async def test_healthcheck_and_selftest_through_the_agent_loop(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d, \
            attached(d, "healthcheck", "cmd", "timer"):
        fake.script(
            Turn.tool_calls([("healthcheck", {})]),
            Turn.tool_calls([("healthcheck_selftest", {})]),
            # the self-test's own turn: one offered tool, one that is not offered
            Turn.tool_calls([("llm_list_sources", {}), ("cmd_run", {"command": "touch pwned"})]),
            Turn.text("Sources answer."),
            # back in the outer turn
            Turn.text("All good."),
        )
        result = await d.io.inject_sync("test", "test", "are you healthy?", timeout=30)
        assert result.ok and result.text == "All good."
        health = json.loads(tool_messages(fake.requests[1].body)[0]["content"])
        assert health["status"] in ("ok", "degraded") and health["uptime_of"] == "daemon"
        assert health["agent"]["busy"] is True and health["llm"]["sources"]["env"] == "ok"

        inner = fake.requests[2].body
        offered = {t["function"]["name"] for t in inner["tools"]}
        assert offered and offered <= SELFTEST_TOOLS
        assert {"llm_list_sources", "output_list_channels"} <= offered
        assert inner["messages"][-1]["content"].startswith("This is an automatic self-test")
        selftest = json.loads(tool_messages(fake.requests[4].body)[-1]["content"])
        assert selftest["reply"] == "Sources answer." and selftest["source"] == "env"
        assert selftest["tool_calls"] == [{"tool": "llm_list_sources", "status": "ok"},
                                          {"tool": "cmd_run", "status": "denied"}]
        assert selftest["ok"] is False  # the model reached for a tool it was not offered
        assert not (d.paths.root / "plugin_data" / "cmd" / "pwned").exists()
        assert "cmd_run" not in selftest["tools_offered"]
        # the self-test's turn stays out of the chat: no agent_output event for it
        outputs = [e for e in d.events.recent() if e.type == "agent_output"]
        assert [e.data["text"] for e in outputs] == ["All good."]


async def test_selftest_reports_a_model_that_does_not_answer(services: PluginServices) -> None:
    async def silent_llm(request: Any, on_chunk: Any = None) -> Any:
        await asyncio.sleep(30)

    async with started(services, "healthcheck", health=HealthSources(run_llm=silent_llm)):
        services.config.set("plugin.healthcheck.selftest_timeout", "300ms")
        started_at = time.monotonic()
        value = await tool_value(services, "healthcheck_selftest", {"prompt": "ping"})
    assert value["ok"] is False and "within 0.3s" in value["error"]
    assert time.monotonic() - started_at < 2


async def test_catalog_starts_through_the_plugin_registry(services: PluginServices, tmp_path: Path) -> None:
    registry = PluginRegistry(services, tmp_path / "plugins", builtins=builtin_factories(
        health=HealthSources(started_at=time.time())), entry_points=False)
    summary = await registry.load_all()
    try:
        assert summary["states"] == {"running": 7}, summary
        plugins = await tool_value(services, "healthcheck_plugins", {})
        assert {p["name"]: p["state"] for p in plugins["plugins"]} == {
            "cfgmgr": "running", "cmd": "running", "files": "running", "healthcheck": "running", "timer": "running",
            "agentcli": "running", "mcp": "running"}
        listed = await tool_value(services, "config_list_plugins", {})
        assert {"timer", "cmd", "files"} <= {p["name"] for p in listed["plugins"] if p.get("state") == "running"}
        await registry.disable("cmd")
        assert services.tools.get("cmd_run") is None
        await registry.enable("cmd")
        assert services.tools.get("cmd_run") is not None
    finally:
        await registry.stop_all()
    assert not [t.name for t in services.tools.tools() if t.plugin in builtin_factories()]
