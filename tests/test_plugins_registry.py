"""The plugin registry: loading every kind, isolation of failures, reload, enable/disable, install, RPC."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from homeagent.cli.client import Client, RemoteError
from homeagent.io.socket_server import SocketServer
from homeagent.memory.cleaners import CleanerChain
from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_api import GraphMemoryService
from homeagent.plugins.package import PackageError, pack_plugin
from homeagent.plugins.registry import BUILTIN_PLUGINS, PluginError, PluginRegistry, PluginSource
from homeagent.plugins.rpc import register_rpc
from homeagent.plugins.services import HostSDK
from homeagent.sdk import Plugin, PluginSDK, ServiceUnavailable
from homeagent.sdk.types import StageContext, ToolCall, ToolResult
from tests.fakes.plugins_host import FIXTURES, Host, copy_fixture, http_server, make_services, plugin_host


def write_python(host: Host, name: str, body: str, *, entry: str = "main.py") -> Path:
    folder = host.plugins_dir / name
    folder.mkdir()
    (folder / "plugin.json").write_text(json.dumps({"name": name, "version": "1.0.0", "entry": entry}))
    (folder / "main.py").write_text(textwrap.dedent(body))
    return folder


TOOL_PLUGIN = """
    from homeagent.sdk import PluginSDK

    class P:
        def __init__(self, name):
            self.name = name

        def start(self, sdk: PluginSDK):
            sdk.register_tool("{tool}", lambda args: "{answer}", description="d")

        def stop(self):
            pass

    def create_plugin(name, config):
        return P(name)
"""


async def call(host: Host, name: str, args: dict[str, Any] | None = None) -> ToolResult:
    return await host.services.tools.execute(ToolCall("c", name, args or {}))


async def test_all_fixture_kinds_and_the_builtin_load(data_dir: Path) -> None:
    cleaners = CleanerChain()
    async with plugin_host(data_dir, builtins=dict(BUILTIN_PLUGINS), cleaners=cleaners) as host:
        for name in ("luademo", "pydemo", "unit-convert"):
            copy_fixture(name, host.plugins_dir)
        summary = await host.registry.load_all()
        assert summary == {"plugins": 4, "states": {"running": 4}, "failed": {}}
        by_name = {p["name"]: p for p in host.registry.list()}
        assert next(p["name"] for p in host.registry.list()) == "pluginmgr", "built-ins are listed first"
        assert by_name["pydemo"]["channels"] == ["pydemo"] and by_name["pydemo"]["stages"] == ["before_output"]
        assert by_name["pydemo"]["cleaners"] == ["pydemo-tags"]
        assert cleaners.names() == ["pydemo:pydemo-tags"]
        assert by_name["unit-convert"]["kind"] == "skill" and by_name["luademo"]["kind"] == "lua"
        assert {"plugin_install", "plgreload"} <= set(by_name["pluginmgr"]["tools"])

        assert (await call(host, "pydemo_add", {"a": 2, "b": 40})).result == {"sum": 42}
        host.services.config.set_plugin("pydemo", "suffix", "(py)")
        ctx = StageContext(final_text="hello")
        await host.services.stages.run("before_output", ctx)
        assert ctx.final_text == "hello (py)"
        sent = await call(host, "output_send__pydemo", {"payload": "to the demo channel"})
        assert sent.result == {"status": "sent", "count": 1}


async def test_duplicate_tool_name_second_plugin_fails_first_keeps_working(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        write_python(host, "alpha", TOOL_PLUGIN.format(tool="shared_tool", answer="from alpha"))
        write_python(host, "beta", TOOL_PLUGIN.format(tool="shared_tool", answer="from beta"))
        (host.plugins_dir / "gamma").mkdir()
        (host.plugins_dir / "gamma" / "plugin.json").write_text(
            json.dumps({"name": "gamma", "version": "1", "entry": "main.lua"})
        )
        (host.plugins_dir / "gamma" / "main.lua").write_text(
            'sdk.register_tool("gamma_ok", {}, function() return 1 end)\n'
            'sdk.register_tool("shared_tool", {}, function() return "lua" end)\n'
        )
        summary = await host.registry.load_all()
        assert summary["states"] == {"running": 1, "failed": 2}
        assert summary["failed"]["beta"] == "start failed: tool 'shared_tool' is already registered by plugin 'alpha'"
        assert "already registered by plugin 'alpha'" in summary["failed"]["gamma"]
        assert (await call(host, "shared_tool")).result == "from alpha"
        assert "gamma_ok" not in host.services.tools, "a failed plugin leaves nothing registered"


async def test_a_failing_start_is_reported_and_rolled_back(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        write_python(
            host,
            "halfway",
            """
            class P:
                name = "halfway"
                stopped = False
                def start(self, sdk):
                    sdk.register_tool("halfway_tool", lambda a: 1)
                    sdk.register_stage("on_input", lambda ctx: None)
                    raise RuntimeError("database unreachable")
                def stop(self):
                    pass
            def create_plugin(name, config):
                return P()
        """,
        )
        write_python(host, "nofactory", "x = 1\n")
        write_python(host, "badimport", "import does_not_exist_anywhere\n")
        write_python(host, "notaplugin", "def create_plugin(name, config):\n    return 42\n")
        write_python(
            host,
            "slow",
            """
            import asyncio
            class P:
                name = "slow"
                async def start(self, sdk):
                    await asyncio.sleep(30)
                async def stop(self):
                    pass
            def create_plugin(name, config):
                return P()
        """,
        )
        copy_fixture("luademo", host.plugins_dir)
        host.registry.start_timeout = 0.5
        summary = await host.registry.load_all()
        failed = summary["failed"]
        assert failed["halfway"] == "start failed: RuntimeError: database unreachable"
        assert failed["nofactory"] == "main.py defines no create_plugin(name, config) factory"
        assert "No module named 'does_not_exist_anywhere'" in failed["badimport"]
        assert "has no start/stop()" in failed["notaplugin"]
        assert failed["slow"] == "start did not finish within 0.5s"
        assert "halfway_tool" not in host.services.tools and not host.services.stages.handlers("on_input")[1:]
        assert host.registry.info("luademo")["state"] == "running"


async def test_manifest_problems_are_reported_per_folder(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        for name, manifest in {
            "nover": {"name": "nover", "entry": "main.lua"},
            "wrongtype": {"name": "wrongtype", "version": 1, "entry": "main.lua", "tags": "x"},
        }.items():
            (host.plugins_dir / name).mkdir()
            (host.plugins_dir / name / "plugin.json").write_text(json.dumps(manifest))
        (host.plugins_dir / "empty").mkdir()
        (host.plugins_dir / "core").mkdir()
        (host.plugins_dir / "core" / "SKILL.md").write_text("---\nname: core\ndescription: d\n---\n")
        (host.plugins_dir / "binary").mkdir()
        (host.plugins_dir / "binary" / "plugin.json").write_text(
            json.dumps({"name": "binary", "version": "1", "entry": "plugin.bin"})
        )
        summary = await host.registry.load_all()
        failed = summary["failed"]
        assert "'version' is missing" in failed["nover"]
        assert (
            "'version' must be a string, got number" in failed["wrongtype"]
            and "'tags' must be a list" in failed["wrongtype"]
        )
        assert "no plugin.json (and no SKILL.md)" in failed["empty"]
        assert "reserved for the core" in failed["core"]
        assert "no subprocess plugin host yet" in failed["binary"]


async def test_subprocess_kind_hook(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        (host.plugins_dir / "ext").mkdir()
        (host.plugins_dir / "ext" / "plugin.json").write_text(
            json.dumps({"name": "ext", "version": "1", "entry": "plugin.bin"})
        )
        seen: list[PluginSource] = []

        class Proc:
            name = "ext"

            def start(self, sdk: PluginSDK) -> None:
                sdk.register_tool("ext_ping", lambda args: "pong")

            def stop(self) -> None:
                pass

        def loader(source: PluginSource) -> Plugin:
            seen.append(source)
            return Proc()

        host.registry.register_kind("process", loader)
        await host.registry.load_all()
        assert seen[0].folder == host.plugins_dir / "ext" and seen[0].manifest is not None
        assert (await call(host, "ext_ping")).result == "pong"


async def test_reload_one_replaces_everything_the_old_instance_registered(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        folder = write_python(host, "reloady", TOOL_PLUGIN.format(tool="reloady_v1", answer="one"))
        copy_fixture("luademo", host.plugins_dir)
        await host.registry.load_all()
        assert (await call(host, "reloady_v1")).result == "one"
        (folder / "main.py").write_text(textwrap.dedent(TOOL_PLUGIN.format(tool="reloady_v2", answer="two")))
        info = await host.registry.reload_one("reloady")
        assert info["tools"] == ["reloady_v2"] and "reloady_v1" not in host.services.tools
        assert (await call(host, "reloady_v2")).result == "two"

        lua_main = host.plugins_dir / "luademo" / "main.lua"
        lua_main.write_text(lua_main.read_text().replace("luademo_echo", "luademo_echo2"))
        await host.registry.reload_one("luademo")
        assert "luademo_echo" not in host.services.tools and "luademo_echo2" in host.services.tools
        assert len(host.services.stages.handlers("on_input")) == 1, "the old stage handler was removed"

        (host.plugins_dir / "later").mkdir()
        (host.plugins_dir / "later" / "SKILL.md").write_text("---\nname: later\ndescription: added later\n---\nbody\n")
        summary = await host.registry.reload_all()
        assert summary["states"] == {"running": 3}
        with pytest.raises(PluginError, match=r"no plugin named 'nope'"):
            await host.registry.reload_one("nope")


async def test_enable_disable_is_persisted(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        copy_fixture("luademo", host.plugins_dir)
        await host.registry.load_all()
        await host.registry.disable("luademo", by="test")
        assert "luademo_echo" not in host.services.tools
        assert host.registry.info("luademo")["state"] == "disabled"
        assert host.services.config.is_disabled("luademo")
    async with plugin_host(data_dir) as host:  # a new daemon on the same data dir
        summary = await host.registry.load_all()
        assert summary["states"] == {"disabled": 1} and "luademo_echo" not in host.services.tools
        info = await host.registry.enable("luademo")
        assert info["state"] == "running" and "luademo_echo" in host.services.tools
        with pytest.raises(PluginError, match=r"no plugin named"):
            await host.registry.disable("ghost")


async def test_python_package_entry_with_relative_imports(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        folder = host.plugins_dir / "pkgdemo"
        (folder / "pkgdemo_impl").mkdir(parents=True)
        (folder / "plugin.json").write_text(
            json.dumps({"name": "pkgdemo", "version": "1", "entry": "pkgdemo_impl.entry:make"})
        )
        (folder / "pkgdemo_impl" / "__init__.py").write_text("")
        (folder / "pkgdemo_impl" / "helper.py").write_text("ANSWER = 'from helper'\n")
        (folder / "pkgdemo_impl" / "entry.py").write_text(
            textwrap.dedent("""
            from .helper import ANSWER

            class P:
                name = "pkgdemo"
                def start(self, sdk):
                    sdk.register_tool("pkgdemo_answer", lambda args: ANSWER)
                def stop(self):
                    pass

            def make(name, config):
                assert config["manifest"]["entry"] == "pkgdemo_impl.entry:make"
                return P()
        """)
        )
        await host.registry.load_all()
        assert (await call(host, "pkgdemo_answer")).result == "from helper"


async def test_services_and_service_unavailable(data_dir: Path) -> None:
    graph = await GraphDB.open(data_dir / "graph.db")
    try:
        async with plugin_host(data_dir / "a", memory=GraphMemoryService(graph)) as host:
            sdk = HostSDK(host.services, "probe")
            await sdk.memory.commit([{"subject": "Alice", "relation": "likes", "object": "tea"}])
            recall = await sdk.memory.recall(["Alice"], 1)
            assert any(r["object"] == "tea" for r in recall["relations"])
            assert (await sdk.memory.introspect())["entities"] >= 2
            for attr, service in [
                ("doc_memory", "document memory"),
                ("knowledge", "knowledge base"),
                ("text_memory", "text memory"),
                ("llm", "LLM source management"),
            ]:
                with pytest.raises(ServiceUnavailable, match=f"{service} .*is not available"):
                    getattr(sdk, attr)
            with pytest.raises(ServiceUnavailable, match=r"text cleaner chain"):
                sdk.register_text_cleaner("x", str.strip)
            sdk.close()
            with pytest.raises(RuntimeError, match=r"plugin 'probe' is unloaded"):
                sdk.register_tool("late", lambda a: 1)
    finally:
        await graph.close()


async def test_events_subscription_is_removed_on_unload(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        got: list[Any] = []
        sdk = HostSDK(host.services, "listener")
        sdk.subscribe("ping", got.append)
        sdk.publish("ping", {"n": 1})
        for _ in range(50):
            if got:
                break
            await asyncio.sleep(0.01)
        assert got and got[0].data == {"n": 1, "plugin": "listener"}
        sdk.close()
        host.services.events.publish("ping", {"n": 2})
        await asyncio.sleep(0.05)
        assert len(got) == 1
        assert not any(s["name"] == "plugin:listener" for s in host.services.events.stats())


async def test_install_upgrade_remove_through_the_registry(data_dir: Path, tmp_path: Path) -> None:
    package, _, digest = pack_plugin(FIXTURES / "luademo", tmp_path / "luademo.hmap")

    async def serve(_: web.Request) -> web.StreamResponse:
        return web.Response(body=package.read_bytes())

    async with (
        http_server({"/luademo.hmap": serve}) as base,
        plugin_host(data_dir, builtins=dict(BUILTIN_PLUGINS)) as host,
    ):
        await host.registry.load_all()
        # the model may not install (it would run new code); the owner's path (CLI, web UI) can
        refused = await call(host, "plugin_install", {"url": f"{base}/luademo.hmap"})
        assert refused.status == "error" and "homeagent plugin install" in refused.result["content"]
        assert not (host.plugins_dir / "luademo").exists()
        installed = await host.registry.install(f"{base}/luademo.hmap")
        assert installed["status"] == "installed" and installed["sha256"] == digest
        assert installed["state"] == "running"
        assert (await call(host, "luademo_echo", {"text": "x"})).status == "ok"
        with pytest.raises(PackageError, match="use --upgrade"):
            await host.registry.install(str(package))
        upgraded = await host.registry.install(str(package), upgrade=True)
        assert upgraded["status"] == "upgraded" and upgraded["state"] == "running"
        info = await call(host, "plugin_info", {"name": "luademo"})
        assert info.result["install"]["sha256"] == digest
        listed = await call(host, "plugin_list")
        assert {"luademo", "pluginmgr"} <= {p["name"] for p in listed.result["plugins"]}
        with pytest.raises(PluginError, match="cannot be removed; disable it instead"):
            await host.registry.remove("pluginmgr")
        refused = await call(host, "plugin_remove", {"name": "luademo"})
        assert refused.status == "error" and "homeagent plugin remove luademo" in refused.result["content"]
        assert (host.plugins_dir / "luademo").exists()
        reloaded = (await call(host, "plgreload")).result
        assert [p["name"] for p in reloaded["reloaded"]] == ["luademo"] and reloaded["reloaded"][0]["state"] == "running"
        removed = await host.registry.remove("luademo")
        assert removed["status"] == "removed" and "luademo_echo" not in host.services.tools
        assert not (host.plugins_dir / "luademo").exists()


async def test_socket_rpc_methods(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        copy_fixture("luademo", host.plugins_dir)
        await host.registry.load_all()
        server = SocketServer(data_dir / "t.sock", host.services.io, cancel_turn=lambda: False)
        register_rpc(server, host.registry)
        await server.start()
        client = await Client.connect(data_dir / "t.sock")
        try:
            listed = await client.call("plugins.list")
            assert [p["name"] for p in listed] == ["luademo"]
            assert (await client.call("plugins.info", {"name": "luademo"}))["tools"] == [
                "luademo_echo",
                "luademo_fetch",
            ]
            assert (await client.call("plugins.disable", {"name": "luademo"}))["state"] == "disabled"
            assert (await client.call("plugins.enable", {"name": "luademo"}))["state"] == "running"
            assert (await client.call("plugins.reload", {"name": "luademo"}))["state"] == "running"
            with pytest.raises(RemoteError, match=r"no plugin named 'nope'"):
                await client.call("plugins.info", {"name": "nope"})
            with pytest.raises(RemoteError, match=r"missing 'source'"):
                await client.call("plugins.install", {})
        finally:
            await client.close()
            await server.close()


def test_registry_needs_no_daemon_objects_beyond_services(tmp_path: Path) -> None:
    services = make_services(tmp_path / "d")
    registry = PluginRegistry(services, tmp_path / "d" / "plugins", builtins={}, entry_points=False)
    assert registry.list() == []
    services.config.close()


def test_the_sdk_imports_none_of_the_daemon() -> None:
    import subprocess
    import sys

    code = "import sys, homeagent.sdk; print(sorted(m for m in sys.modules if m.startswith('homeagent')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['homeagent', 'homeagent.sdk', 'homeagent.sdk.api', 'homeagent.sdk.types']"


def test_docs_point_at_the_examples_the_tests_load() -> None:
    import re

    docs = (Path(__file__).parent.parent / "docs" / "plugins.md").read_text()
    links = set(re.findall(r"\(\.\./(tests/fixtures/plugins/[^)]+)\)", docs))
    assert {
        "tests/fixtures/plugins/luademo",
        "tests/fixtures/plugins/pydemo",
        "tests/fixtures/plugins/unit-convert",
    } <= links
    for link in links:
        assert (Path(__file__).parent.parent / link).exists(), link
