"""Lua plugins: the luademo example end to end, held registrations, and Lua that misbehaves."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from homeagent.lua.runtime import HttpPolicy
from homeagent.plugins.lua_plugin import LuaLimits
from homeagent.sdk.types import StageContext, ToolCall, ToolResult
from tests.fakes.plugins_host import Host, copy_fixture, http_server, plugin_host

LIMITS = LuaLimits(
    max_memory=16 * 1024 * 1024, instruction_budget=2_000_000, http=HttpPolicy(timeout=1.0, max_response_bytes=10_000)
)


def write_plugin(host: Host, name: str, main_lua: str) -> Path:
    folder = host.plugins_dir / name
    folder.mkdir()
    (folder / "plugin.json").write_text(json.dumps({"name": name, "version": "0.1.0", "entry": "main.lua"}))
    (folder / "main.lua").write_text(main_lua)
    return folder


async def call(host: Host, name: str, args: dict[str, Any]) -> ToolResult:
    return await host.services.tools.execute(ToolCall("c1", name, args))


async def test_luademo_tools_settings_and_stage(data_dir: Path) -> None:
    async with plugin_host(data_dir, lua_limits=LIMITS) as host:
        copy_fixture("luademo", host.plugins_dir)
        await host.registry.load_all()
        info = host.registry.info("luademo")
        assert info["state"] == "running", info
        assert info["tools"] == ["luademo_echo", "luademo_fetch"] and info["stages"] == ["on_input"]

        first = await call(host, "luademo_echo", {"text": "hi", "upper": True})
        second = await call(host, "luademo_echo", {"text": "hi"})
        assert first.result == {"echo": "HI", "calls": 1}
        assert second.result == {"echo": "hi", "calls": 2}
        assert host.services.config.get_plugin("luademo", "calls") == 2, "set_setting wrote the plugin's table"

        bad = await call(host, "luademo_echo", {"upper": True})
        assert bad.status == "error" and "text" in bad.result["content"], "schema from Lua is enforced"

        ctx = StageContext(raw_message="!shout good morning")
        await host.services.stages.run("on_input", ctx)
        assert ctx.raw_message == "GOOD MORNING" and ctx.errors == []


async def test_http_get_with_caps(data_dir: Path) -> None:
    async def ok(_: web.Request) -> web.StreamResponse:
        return web.json_response({"temp": 21})

    async def big(_: web.Request) -> web.StreamResponse:
        return web.Response(text="x" * 50_000)

    async def slow(_: web.Request) -> web.StreamResponse:
        await asyncio.sleep(1.6)
        return web.Response(text="late")

    async with (
        http_server({"/ok": ok, "/big": big, "/slow": slow}) as base,
        plugin_host(data_dir, lua_limits=LIMITS) as host,
    ):
        copy_fixture("luademo", host.plugins_dir)
        await host.registry.load_all()
        result = await call(host, "luademo_fetch", {"url": f"{base}/ok"})
        assert result.result["status"] == 200 and result.result["json"] == {"temp": 21}
        too_big = await call(host, "luademo_fetch", {"url": f"{base}/big"})
        assert too_big.status == "error" and "larger than 10000 bytes" in too_big.result["content"]
        started = time.perf_counter()
        late = await call(host, "luademo_fetch", {"url": f"{base}/slow"})
        assert late.status == "error" and "timed out" in late.result["content"], late.result
        assert time.perf_counter() - started < 1.5
        bad_scheme = await call(host, "luademo_fetch", {"url": "file:///etc/passwd"})
        assert "scheme 'file' is not allowed" in bad_scheme.result["content"]


async def test_registrations_are_held_until_start(data_dir: Path) -> None:
    async with plugin_host(data_dir, lua_limits=LIMITS) as host:
        write_plugin(
            host,
            "held",
            """
            sdk.register_tool("held_a", {description = "a"}, function() return "a" end)
            local plugin = {}
            function plugin.start(s)
              s.register_tool("held_b", {description = "b"}, function() return "b" end)
            end
            return plugin
        """,
        )
        await host.registry.load_all()
        assert {"held_a", "held_b"} <= {t.name for t in host.services.tools.tools()}
        assert (await call(host, "held_b", {})).result == "b"


async def test_errors_in_tool_handlers_keep_the_plugin_loaded(data_dir: Path) -> None:
    async with plugin_host(data_dir, lua_limits=LIMITS) as host:
        write_plugin(
            host,
            "flaky",
            """
            sdk.register_tool("flaky_error", {}, function() error("the printer is on fire") end)
            sdk.register_tool("flaky_loop", {}, function() while true do end end)
            sdk.register_tool("flaky_hog", {}, function()
              local t = {}
              for i = 1, 1e9 do t[i] = string.rep("x", 4096) .. i end
            end)
            sdk.register_tool("flaky_soft", {}, function() return nil, "no data today" end)
            sdk.register_tool("flaky_ok", {}, function() return {fine = true} end)
        """,
        )
        await host.registry.load_all()
        err = await call(host, "flaky_error", {})
        assert err.status == "error" and "the printer is on fire" in err.result["content"]
        assert "main.lua:2" in err.result["content"], "the Lua location is reported"
        loop = await call(host, "flaky_loop", {})
        assert loop.status == "error" and "instruction budget exceeded" in loop.result["content"]
        hog = await call(host, "flaky_hog", {})
        assert hog.status == "error" and ("memory" in hog.result["content"] or "budget" in hog.result["content"])
        soft = await call(host, "flaky_soft", {})
        assert soft.result == {"isError": True, "content": "no data today"}
        assert (await call(host, "flaky_ok", {})).result == {"fine": True}
        info = host.registry.info("flaky")
        assert info["state"] == "running" and info["lua"]["errors"] == 3


async def test_bad_main_lua_fails_only_that_plugin(data_dir: Path) -> None:
    async with plugin_host(data_dir, lua_limits=LIMITS) as host:
        write_plugin(host, "forever", "while true do end")
        write_plugin(host, "greedy", "local t = {} for i = 1, 1e9 do t[i] = string.rep('y', 8192) .. i end")
        write_plugin(host, "syntax", "sdk.register_tool('x', {}, function() end")
        write_plugin(host, "boom", "error('refusing to start')")
        write_plugin(host, "badreg", "sdk.register_tool(42, {}, function() end)")
        copy_fixture("luademo", host.plugins_dir)
        summary = await host.registry.load_all()
        assert summary["states"] == {"failed": 5, "running": 1}
        failed = summary["failed"]
        assert "instruction budget exceeded" in failed["forever"]
        assert "memory" in failed["greedy"] or "budget" in failed["greedy"]
        assert "main.lua:1" in failed["syntax"]
        assert "refusing to start" in failed["boom"]
        assert "name must be a string" in failed["badreg"]
        assert (await call(host, "luademo_echo", {"text": "still here"})).result["echo"] == "still here"


async def test_lua_runs_off_the_event_loop(data_dir: Path) -> None:
    """A tool spinning for its whole budget does not stall other coroutines."""
    limits = LuaLimits(instruction_budget=60_000_000)
    async with plugin_host(data_dir, lua_limits=limits) as host:
        write_plugin(
            host,
            "spin",
            "sdk.register_tool('spin', {}, function() local x = 0 for i = 1, 4e6 do x = x + i end return x end)",
        )
        await host.registry.load_all()
        task = asyncio.ensure_future(call(host, "spin", {}))
        worst = 0.0
        while not task.done():
            t0 = time.perf_counter()
            await asyncio.sleep(0.005)
            worst = max(worst, time.perf_counter() - t0)
        result = task.result()
        assert result.status == "ok"
        # on the loop, the stall would be the whole call; off it, only scheduling noise (generous: CI machines are busy)
        assert worst < min(0.25, result.duration_ms / 1000 / 3), (
            f"the loop stalled for {worst * 1000:.0f} ms during a {result.duration_ms:.0f} ms Lua call"
        )


async def test_stage_writes_respect_the_permission_matrix(data_dir: Path) -> None:
    async with plugin_host(data_dir, lua_limits=LIMITS) as host:
        write_plugin(
            host,
            "stager",
            """
            sdk.register_stage("before_output", function(ctx) ctx.final_text = ctx.final_text .. " (checked)" end)
            sdk.register_stage("after_output", function(ctx) ctx.final_text = "rewritten too late" end)
            sdk.register_stage("on_input", function(ctx) if ctx.raw_message == "stop" then ctx.response = "stopped" end end)
        """,
        )
        await host.registry.load_all()
        ctx = StageContext(final_text="answer")
        await host.services.stages.run("before_output", ctx)
        assert ctx.final_text == "answer (checked)"
        await host.services.stages.run("after_output", ctx)
        assert ctx.final_text == "answer (checked)" and "read-only" in ctx.errors[0]
        short = StageContext(raw_message="stop")
        assert await host.services.stages.run("on_input", short) is True and short.response == "stopped"


async def test_inject_from_lua_reaches_the_input_queue(data_dir: Path) -> None:
    async with plugin_host(data_dir, lua_limits=LIMITS) as host:
        write_plugin(
            host,
            "poke",
            """
            sdk.register_tool("poke", {}, function(args)
              sdk.inject_text("poke", "timer", "wake up")
              sdk.inject_interrupt("urgent")
              return "ok"
            end)
        """,
        )
        await host.registry.load_all()
        await call(host, "poke", {})
        message = await asyncio.wait_for(host.services.io.next_input(), 2)
        assert (message.source, message.channel, message.text) == ("poke", "timer", "wake up")
        interrupt = await asyncio.wait_for(host.services.io.interrupts.get(), 2)
        assert interrupt.text == "urgent" and interrupt.source == "poke"


async def test_inject_media_from_lua_carries_data_urls_and_refuses_bad_ones(data_dir: Path) -> None:
    async with plugin_host(data_dir, lua_limits=LIMITS) as host:
        write_plugin(
            host,
            "cam",
            """
            sdk.register_tool("cam_snap", {}, function(args)
              sdk.inject_media("cam", "camera", "motion at the door",
                               {{data = "data:image/png;base64,iVBORw0KGgoAAAAN", description = "door"}})
              sdk.inject_interrupt_media("now", {{digest = "a1b2c3d4e5f6"}})
              return "ok"
            end)
            sdk.register_tool("cam_bad", {}, function(args)
              sdk.inject_media("x", {{data = "https://example.org/cat.png"}})
              return "not reached"
            end)
        """,
        )
        await host.registry.load_all()
        assert (await call(host, "cam_snap", {})).status == "ok"
        message = await asyncio.wait_for(host.services.io.next_input(), 2)
        assert (message.source, message.channel, message.text) == ("cam", "camera", "motion at the door")
        (block,) = message.media
        assert block.mime == "image/png" and block.data.startswith(b"\x89PNG") and block.description == "door"
        interrupt = await asyncio.wait_for(host.services.io.interrupts.get(), 2)
        assert interrupt.text == "now" and interrupt.media[0].digest == "a1b2c3d4e5f6"
        bad = await call(host, "cam_bad", {})
        assert bad.status == "error" and "must be a data URL" in str(bad.result)
        assert host.services.io.pending_inputs() == 0
