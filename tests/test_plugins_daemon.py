"""Plugins inside a real daemon: tools driven through the offline provider over the socket, and the CLI."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from homeagent.cli.client import Client
from homeagent.daemon import Daemon
from homeagent.plugins.package import pack_plugin
from homeagent.plugins.registry import PluginRegistry
from tests.conftest import run_cli
from tests.fakes.plugins_host import FIXTURES, copy_fixture


@pytest.fixture
async def plugged(daemon: Daemon) -> AsyncIterator[Daemon]:
    """The daemon with the example plugins, loaded by the daemon's own registry (no registry is built here)."""
    assert isinstance(daemon.plugins, PluginRegistry), "daemon.py no longer wires a plugin registry"
    for name in ("luademo", "pydemo", "unit-convert"):
        copy_fixture(name, daemon.paths.plugins)
    await daemon.plugins.reload_all()
    yield daemon


async def chat(daemon: Daemon, text: str) -> list[dict[str, Any]]:
    client = await Client.connect(daemon.paths.socket)
    try:
        return [frame async for frame in client.chat(text)]
    finally:
        await client.close()


async def tool_frame(daemon: Daemon, text: str) -> dict[str, Any]:
    frames = await chat(daemon, text)
    assert frames[-1]["type"] == "response" and frames[-1]["ok"], frames
    return next(f for f in frames if f["type"] == "tool_call" and f.get("status") != "running")


async def test_plugin_tools_run_through_the_offline_provider(plugged: Daemon) -> None:
    echo = await tool_frame(plugged, '/tool luademo_echo {"text": "hello from lua", "upper": true}')
    assert echo["tool"] == "luademo_echo" and echo["status"] == "ok"
    assert "HELLO FROM LUA" in echo["result"]
    add = await tool_frame(plugged, '/tool pydemo_add {"a": 20, "b": 22}')
    assert add["status"] == "ok" and "42" in add["result"]
    skill = await tool_frame(plugged, '/tool skill_read {"name": "unit-convert"}')
    assert skill["status"] == "ok" and "Unit conversion" in skill["result"]
    bad = await tool_frame(plugged, '/tool luademo_echo {"upper": 1}')
    assert bad["status"] == "error" and "text" in bad["result"]


async def test_plugin_cli_against_the_daemon(plugged: Daemon, tmp_path: Path) -> None:
    data_dir = plugged.paths.root
    listed = await run_cli(data_dir, "plugin", "list", "--json")
    assert listed.code == 0, listed.err
    states = {p["name"]: p["state"] for p in json.loads(listed.out)}
    assert states["luademo"] == "running" and states["pydemo"] == "running" and states["unit-convert"] == "running"
    assert states["pluginmgr"] == "running"

    info = await run_cli(data_dir, "plugin", "info", "luademo")
    assert info.code == 0 and "luademo_echo" in info.out and "running" in info.out

    off = await run_cli(data_dir, "plugin", "disable", "luademo")
    assert off.code == 0 and "disabled" in off.out
    gone = await chat(plugged, '/tool luademo_echo {"text": "x"}')
    assert not any(f["type"] == "tool_call" for f in gone)
    assert "There is no tool named 'luademo_echo'" in gone[-1]["text"]
    on = await run_cli(data_dir, "plugin", "enable", "luademo")
    assert on.code == 0 and "running" in on.out
    assert (await tool_frame(plugged, '/tool luademo_echo {"text": "back"}'))["status"] == "ok"

    reload = await run_cli(data_dir, "plugin", "reload", "pydemo")
    assert reload.code == 0 and "pydemo: running" in reload.out


async def test_install_a_package_into_the_running_daemon(plugged: Daemon, tmp_path: Path) -> None:
    src = tmp_path / "greeter"
    src.mkdir()
    (src / "plugin.json").write_text(json.dumps({"name": "greeter", "version": "0.2.0", "entry": "main.lua"}))
    (src / "main.lua").write_text('sdk.register_tool("greeter_hi", {}, function() return "hi there" end)\n')
    package, _, digest = pack_plugin(src, tmp_path / "greeter.hmap")
    result = await run_cli(plugged.paths.root, "plugin", "install", str(package))
    assert result.code == 0, result.err
    assert "installed greeter 0.2.0 (lua)" in result.out and digest in result.out and "state  running" in result.out
    assert (await tool_frame(plugged, "/tool greeter_hi {}"))["result"] == "hi there"
    again = await run_cli(plugged.paths.root, "plugin", "install", str(package))
    assert again.code == 1 and "--upgrade" in again.err
    removed = await run_cli(plugged.paths.root, "plugin", "remove", "greeter")
    assert removed.code == 0 and not (plugged.paths.plugins / "greeter").exists()
    assert (FIXTURES / "luademo").exists()
