"""The mcp plugin against a real MCP server (the SDK's MCPServer over stdio): tools, errors, crashes, reconnects."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from homeagent.builtin.mcp import parse_servers
from homeagent.plugins.services import PluginServices
from tests.fakes.builtins_host import started, tool_value
from tests.fakes.plugins_host import make_services

SERVER = str(Path(__file__).parent / "fakes" / "mcp_stdio_server.py")


@pytest.fixture
def services(tmp_path: Path) -> PluginServices:
    return make_services(tmp_path / "data")


def configure(services: PluginServices, servers: Any, **settings: Any) -> None:
    services.config.set_plugin("mcp", "servers", json.dumps(servers))
    for key, value in settings.items():
        services.config.set_plugin("mcp", key, value)


def tool_names(services: PluginServices, prefix: str) -> set[str]:
    return {t.name for t in services.tools.tools() if t.name.startswith(prefix)}


async def wait_for(predicate: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def test_parse_servers_reports_each_bad_entry() -> None:
    specs, problems = parse_servers(json.dumps([
        {"name": "ok", "command": "x", "args": ["-v"], "env": {"A": 1}},
        {"name": "web", "url": "http://127.0.0.1:1/mcp"},
        {"name": "bad name!", "command": "x"},
        {"name": "both", "command": "x", "url": "http://h"},
        {"name": "ok", "command": "y"},
        "nope",
    ]))
    assert [(s.name, s.args, s.env) for s in specs] == [("ok", ["-v"], {"A": "1"}), ("web", [], {})]
    assert len(problems) == 4
    assert parse_servers("{not json")[1][0].startswith("servers is not JSON")
    assert parse_servers("[]") == ([], [])


async def test_tools_are_registered_called_and_survive_a_crash(
    services: PluginServices, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "homeagent.plugin.mcp")
    starts = tmp_path / "starts"
    configure(services, [{"name": "calc", "command": sys.executable, "args": [SERVER],
                          "env": {"MCP_START_LOG": str(starts)}}], ping_interval="300ms", max_backoff="1s")
    async with started(services, "mcp") as plugin:
        await wait_for(lambda: bool(tool_names(services, "calc_")))
        assert tool_names(services, "calc_") == {"calc_add", "calc_shout", "calc_fail", "calc_die", "calc_picture"}
        assert "liar" in caplog.text and "skipped" in caplog.text  # the lying schema is refused, with a log line
        add = services.tools.get("calc_add")
        assert add is not None and add.description.startswith("[MCP/calc] Add two integers")
        assert set(add.parameters["properties"]) == {"a", "b"} and add.plugin == "mcp"
        value = await tool_value(services, "calc_add", {"a": 2, "b": 3})
        assert "5" in json.dumps(value)
        assert await tool_value(services, "calc_shout", {"text": "hi"}) == "HI!"
        failed = await tool_value(services, "calc_fail", {})
        assert failed["isError"] and "fail" in failed["content"]  # the SDK hides the exception text
        bad_args = await tool_value(services, "calc_add", {"a": "two"})  # our registry checks the schema first
        assert bad_args["isError"]
        assert plugin.status()["calc"]["state"] == "connected"
        # the server crashes mid-call: an error for that call, then it is restarted and its tools come back
        died = await tool_value(services, "calc_die", {})
        assert died["isError"]
        await wait_for(lambda: len(starts.read_text().split()) >= 2 and plugin.status()["calc"]["state"] == "connected")
        assert await tool_value(services, "calc_shout", {"text": "back"}) == "BACK!"
    assert tool_names(services, "calc_") == set()  # removed with the plugin


async def test_unreachable_and_broken_servers_never_stop_the_plugin(services: PluginServices) -> None:
    configure(services, [
        {"name": "ghost", "command": "/no/such/mcp-server"},
        {"name": "web", "url": "http://127.0.0.1:9/mcp"},
        {"name": "", "command": "x"},
    ], max_backoff="1s", connect_timeout="2s")
    async with started(services, "mcp") as plugin:
        await wait_for(lambda: all(s["error"] for s in plugin.status().values()))
        status = plugin.status()
        assert set(status) == {"ghost", "web"}
        assert all(s["state"] in ("starting", "reconnecting") and not s["tools"] for s in status.values())
        assert tool_names(services, "ghost_") == set()


async def test_streamable_http_server(services: PluginServices) -> None:
    """A server reached by `url` (streamable HTTP), built with the SDK's MCPServer and served on loopback."""
    import socket

    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("homeagent-http-test")

    @server.tool(description="Multiply two integers.")
    def mul(a: int, b: int) -> int:
        return a * b

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on"))
    serving = asyncio.ensure_future(web.serve(sockets=[sock]))
    try:
        await wait_for(lambda: web.started)
        configure(services, [{"name": "web", "url": f"http://127.0.0.1:{port}/mcp"}])
        async with started(services, "mcp"):
            await wait_for(lambda: "web_mul" in tool_names(services, "web_"))
            assert "42" in json.dumps(await tool_value(services, "web_mul", {"a": 6, "b": 7}))
    finally:
        web.should_exit = True
        await serving
        sock.close()


async def test_mcp_tool_through_the_agent_loop(daemon: Any) -> None:
    """The daemon's own mcp plugin, configured at run time and reloaded, called by the model in a turn."""
    daemon.config.set("plugin.mcp.servers", json.dumps([{"name": "calc", "command": sys.executable, "args": [SERVER]}]))
    await daemon.plugins.reload_one("mcp")
    await wait_for(lambda: daemon.tools.get("calc_add") is not None, within=30)
    result = await daemon.io.inject_sync("test", "test", '/tool calc_add {"a": 20, "b": 22}', timeout=30)
    assert result.ok and "42" in result.text
    assert result.tool_calls[0]["tool"] == "calc_add" and result.tool_calls[0]["status"] == "ok"


def test_a_claude_desktop_block_is_read_as_pasted() -> None:
    block = {"mcpServers": {
        "fs": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"], "env": {"TOKEN": "s3cret"}},
        "web": {"type": "http", "url": "http://127.0.0.1:1/mcp"},
        "broken": {"args": ["no command"]},
    }}
    specs, problems = parse_servers(json.dumps(block))
    assert [(s.name, s.command, s.args, s.env, s.url) for s in specs] == [
        ("fs", "npx", ["-y", "server-filesystem", "/tmp"], {"TOKEN": "s3cret"}, ""),
        ("web", "", [], {}, "http://127.0.0.1:1/mcp"),
    ]
    assert problems == ["server 'broken': give exactly one of command (stdio) or url (HTTP)"]
    assert [s.name for s in parse_servers(block["mcpServers"])[0]] == ["fs", "web"]  # the inner object alone


async def test_claude_desktop_import_status_and_no_secret_in_the_log(
    daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """What the web UI's import does: the pasted block is stored, the plugin reloaded, each server's status shown."""
    caplog.set_level(logging.DEBUG)
    secret = "mcp-env-secret-9137"
    block = {"mcpServers": {
        "calc": {"command": sys.executable, "args": [SERVER], "env": {"API_TOKEN": secret}},
        "ghost": {"command": "/no/such/mcp-server"},
    }}
    daemon.config.set("plugin.mcp.connect_timeout", "3s")
    daemon.config.set("plugin.mcp.servers", block)
    await daemon.plugins.reload_one("mcp")
    await wait_for(lambda: daemon.tools.get("calc_add") is not None, within=30)

    def servers() -> dict[str, Any]:
        return dict(daemon.plugins.info("mcp")["health"]["servers"])

    await wait_for(lambda: bool(servers()["ghost"]["error"]), within=30)
    status = servers()
    registered = sorted(t.name for t in daemon.tools.tools() if t.name.startswith("calc_"))
    assert status["calc"]["state"] == "connected" and not status["calc"]["error"]
    assert status["calc"]["tools"] == len(registered) > 0 and status["calc"]["tool_names"] == registered
    assert status["ghost"]["state"] in ("starting", "reconnecting") and status["ghost"]["tools"] == 0
    assert "no/such/mcp-server" in status["ghost"]["error"] or "No such file" in status["ghost"]["error"]
    assert secret not in caplog.text
    assert secret not in json.dumps(daemon.plugins.info("mcp"))
