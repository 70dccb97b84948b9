"""Lua plugins: ``main.lua`` run in the sandbox shared with the provider adapters.

Execution model (why it is built this way):

* Each plugin has its own :class:`LuaSandbox` (memory cap, instruction budget
  per call). All Lua runs on a worker thread of a small pool the registry
  owns, never on the event loop: a tool handler may legitimately spin for its
  whole budget, and ``sdk.http`` calls block that worker (with timeouts and
  size caps), not the loop. The sandbox's lock serialises calls into one Lua
  state; different plugins run in parallel.
* ``main.lua`` runs once at load. ``sdk.register_*`` calls made while it runs
  (and inside ``plugin.start``) are only recorded; :meth:`LuaPlugin.start`
  applies them through the host SDK on the loop, so a failure there (a
  duplicate tool name) fails the plugin as a whole and nothing is left
  registered. Registrations after start go to the loop directly.
* A Lua error, an exhausted budget or memory cap inside a tool handler
  becomes an error result for the model; the plugin stays loaded.
* Python never indexes a table the plugin made (its metatable could run
  unbounded code): plugin tables are read by Lua helpers under the budget.

The Lua API: ``sdk.name``, ``sdk.log([level,] msg)``, ``sdk.register_tool(name, def, handler)``,
``sdk.register_stage(stage, handler[, "own_tools"])``, ``sdk.register_output_channel(name, caps,
description, [def,] handler)``, ``sdk.get_setting/set_setting``, ``sdk.settings.*``,
``sdk.inject_text/inject_interrupt/inject_text_no_memory([source, channel,] text)``,
``sdk.inject_media/inject_interrupt_media([source, channel,] text, media)``, ``sdk.json``,
``sdk.http.get(url[, headers])``, ``sdk.http.post(url, body[, content_type|headers])``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from homeagent.lua.runtime import HttpPolicy, LuaError, LuaSandbox
from homeagent.sdk.api import PluginSDK, SettingsAPI
from homeagent.sdk.types import MediaBlock, Stage, StageContext, ToolDef

__all__ = ["LuaLimits", "LuaPlugin"]

log = logging.getLogger("homeagent.plugins.lua")

MAX_SOURCE_BYTES = 1024 * 1024
_LOOP_WAIT = 30.0

# Builds the `sdk` table inside the sandbox from host callbacks (globals _h*), plus
# helpers the host uses to read plugin tables under the budget.
_SDK_LUA = r"""
local type, tostring, select, error, rawget = type, tostring, select, error, rawget
local concat = table.concat
local hlog, hreg, hget, hset, hsettings, hinject, hname = _hlog, _hreg, _hget, _hset, _hsettings, _hinject, _hname
local hinject_media = _hinject_media

local function text(...)
  local parts = {}
  for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
  return concat(parts, " ")
end

local sdk = {name = hname, json = json}

function sdk.log(level, ...)
  if select("#", ...) == 0 then return hlog("info", tostring(level)) end
  return hlog(tostring(level), text(...))
end

function sdk.register_tool(name, def, handler)
  if type(def) == "function" and handler == nil then def, handler = {}, def end
  if type(name) ~= "string" then error("register_tool: name must be a string", 2) end
  if def == nil then def = {} end
  if type(def) ~= "table" then error("register_tool: def must be a table", 2) end
  if type(handler) ~= "function" then error("register_tool: handler must be a function", 2) end
  hreg("tool", name, def, handler)
end

function sdk.register_stage(stage, handler, scope)
  if type(stage) ~= "string" then error("register_stage: stage must be a string", 2) end
  if type(handler) ~= "function" then error("register_stage: handler must be a function", 2) end
  hreg("stage", stage, {scope = scope and tostring(scope) or "global"}, handler)
end

function sdk.register_output_channel(name, caps, desc, def, handler)
  if type(def) == "function" and handler == nil then def, handler = {}, def end
  if type(name) ~= "string" then error("register_output_channel: name must be a string", 2) end
  if type(handler) ~= "function" then error("register_output_channel: handler must be a function", 2) end
  hreg("channel", name, {caps = caps or 1, description = desc and tostring(desc) or ""}, handler)
end

function sdk.get_setting(key, default)
  local v = hget("own", "", tostring(key))
  if v == nil then return default end
  return v
end
function sdk.set_setting(key, value) return hset("own", "", tostring(key), value) end

sdk.settings = {
  get = sdk.get_setting,
  set = sdk.set_setting,
  get_core = function(key) return hget("core", "", tostring(key)) end,
  get_plugin = function(plugin, key) return hget("plugin", tostring(plugin), tostring(key)) end,
  list = function(prefix) return hsettings(prefix and tostring(prefix) or "") end,
}

local function inject(mode)
  return function(a, b, c)
    if b == nil and c == nil then return hinject(mode, "", "", tostring(a)) end
    return hinject(mode, a and tostring(a) or "", b and tostring(b) or "", tostring(c))
  end
end
sdk.inject_text = inject("text")
sdk.inject_interrupt = inject("interrupt")
sdk.inject_interrupt_text = sdk.inject_interrupt
sdk.inject_text_no_memory = inject("no_memory")

-- media: a list of {data = "data:image/png;base64,...", description = "..."} or {digest = "..."}
local function inject_media(mode)
  return function(a, b, c, d)
    if c == nil and d == nil then return hinject_media(mode, "", "", tostring(a), json.encode(json.array(b or {}))) end
    return hinject_media(mode, a and tostring(a) or "", b and tostring(b) or "", tostring(c),
                         json.encode(json.array(d or {})))
  end
end
sdk.inject_media = inject_media("text")
sdk.inject_interrupt_media = inject_media("interrupt")

sdk.http = {
  get = function(url, headers) return http_get(url, headers) end,
  post = function(url, body, ct)
    local headers = ct
    if type(ct) == "string" then headers = {["content-type"] = ct} end
    return http_post(url, body, headers)
  end,
}

local function resolve(ret)
  local p = ret
  if type(p) ~= "table" then return nil, nil end
  if type(rawget(p, "start")) ~= "function" and type(rawget(p, "plugin")) == "table" then p = rawget(p, "plugin") end
  local s, t = rawget(p, "start"), rawget(p, "stop")
  if type(s) ~= "function" then s = nil end
  if type(t) ~= "function" then t = nil end
  return s, t
end

-- runs a stage handler on a copy of the context; returns the fields as they are afterwards
local function run_stage(handler, ctx)
  handler(ctx)
  return ctx
end

return {sdk = sdk, resolve = resolve, run_stage = run_stage}
"""

_STAGE_SCALARS = ("raw_message", "llm_text", "final_text", "response", "no_memory")
_STAGE_READ = ("user_id", "group_id", "channel", "source", "reasoning_content", "phase")


@dataclass(frozen=True)
class LuaLimits:
    """Per-plugin sandbox limits."""

    max_memory: int = 32 * 1024 * 1024
    instruction_budget: int = 20_000_000
    http: HttpPolicy = field(default_factory=HttpPolicy)


@dataclass
class _Held:
    kind: str  # tool | stage | channel
    name: str
    spec: dict[str, Any]
    fn: Any  # a Lua function


def _fix_schema(value: Any) -> Any:
    """Empty Lua tables come back as {}; JSON Schema wants [] for these keys."""
    if isinstance(value, dict):
        return {k: ([] if k in ("required", "enum") and v == {} else _fix_schema(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_fix_schema(v) for v in value]
    return value


class LuaPlugin:
    """A plugin defined by ``main.lua``; :meth:`load` must run before :meth:`start`."""

    kind = "lua"

    def __init__(
        self,
        name: str,
        folder: Path,
        *,
        entry: str = "main.lua",
        executor: concurrent.futures.Executor,
        limits: LuaLimits | None = None,
        settings: SettingsAPI | None = None,
    ) -> None:
        self.name = name
        self._load_settings = settings
        self.folder = folder
        self.entry = entry
        self._pool = executor
        self.limits = limits or LuaLimits()
        self._log = logging.getLogger(f"homeagent.plugin.{name}")
        self._sb: LuaSandbox | None = None
        self._api: Any = None
        self._sdk_table: Any = None
        self._start_fn: Any = None
        self._stop_fn: Any = None
        self._held: list[_Held] = []
        self._live = False
        self._host: PluginSDK | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self.calls = 0
        self.errors = 0

    # -- lifecycle --------------------------------------------------------------

    async def load(self) -> None:
        """Read and run ``main.lua`` (on a worker thread); registrations it makes are held."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        path = self.folder / self.entry
        await self._run(self._load_sync, path)

    def _load_sync(self, path: Path) -> None:
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise LuaError(f"cannot read {path}: {e.strerror or e}") from None
        if len(raw) > MAX_SOURCE_BYTES:
            raise LuaError(f"{path.name} is larger than {MAX_SOURCE_BYTES // 1024} KB")
        try:
            source = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise LuaError(f"{path.name} is not UTF-8 text") from None
        sb = LuaSandbox(
            f"plugin:{self.name}",
            max_memory=self.limits.max_memory,
            instruction_budget=self.limits.instruction_budget,
            http=self.limits.http,
            logger=self._log,
        )
        self._sb = sb
        host = {
            "_hlog": sb.wrap_function(self._h_log, "sdk.log"),
            "_hreg": sb.wrap_function(self._h_register, "sdk.register"),
            "_hget": sb.wrap_function(self._h_get, "sdk.get_setting"),
            "_hset": sb.wrap_function(self._h_set, "sdk.set_setting"),
            "_hsettings": sb.wrap_function(self._h_settings, "sdk.settings.list"),
            "_hinject": sb.wrap_function(self._h_inject, "sdk.inject"),
            "_hinject_media": sb.wrap_function(self._h_inject_media, "sdk.inject_media"),
            "_hname": self.name,
        }
        api = sb.load(_SDK_LUA, "homeagent/lua_plugin_sdk", globals=host)
        self._api = api
        self._sdk_table = api["sdk"]
        chunk = f"plugins/{self.name}/{self.entry}"
        ret = sb.load(source, chunk, globals={"sdk": self._sdk_table})
        start, stop = sb.call_multi(api["resolve"], ret)
        self._start_fn, self._stop_fn = start, stop

    async def start(self, sdk: PluginSDK) -> None:
        """Run ``plugin.start(sdk)`` if there is one, then apply every held registration."""
        if self._sb is None:
            await self.load()
        self._host = sdk
        if self._start_fn is not None:
            await self._run(self._call_sync, self._start_fn, self._sdk_table)
        held, self._held = self._held, []
        for item in held:
            self._apply(item)
        self._live = True

    async def stop(self) -> None:
        self._live = False
        try:
            if self._stop_fn is not None and self._sb is not None:
                try:
                    await self._run(self._call_sync, self._stop_fn)
                except LuaError as e:
                    self._log.warning("plugin.stop() failed: %s", e)
        finally:
            self._host = None
            sb, self._sb = self._sb, None
            self._api = self._sdk_table = self._start_fn = self._stop_fn = None
            self._held.clear()
            if sb is not None:
                await sb.aclose()

    # -- running Lua off the loop -----------------------------------------------

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, fn, *args)

    def _call_sync(self, fn: Any, *args: Any) -> tuple[Any, ...]:
        sb = self._sb
        if sb is None:
            raise LuaError(f"plugin {self.name!r} has been stopped")
        return sb.call_multi(fn, *args)

    def _on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the event loop and wait for it (host state belongs to the loop)."""
        if self._loop is None or threading.get_ident() == self._loop_thread:
            return fn()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as e:
                done.set_exception(e)

        self._loop.call_soon_threadsafe(run)
        return done.result(timeout=_LOOP_WAIT)

    # -- host callbacks (called from Lua, on the worker thread) -------------------

    def _h_log(self, level: Any, message: Any) -> None:
        levels = {"debug": logging.DEBUG, "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR}
        self._log.log(levels.get(str(level), logging.INFO), "%s", message)

    def _h_register(self, kind: str, name: str, spec: Any, fn: Any) -> None:
        item = _Held(str(kind), str(name), spec if isinstance(spec, dict) else {}, fn)
        if not self._live:
            self._held.append(item)
            return
        self._on_loop(lambda: self._apply(item))

    def _settings(self) -> SettingsAPI:
        settings = self._host.settings if self._host is not None else self._load_settings
        if settings is None:
            raise RuntimeError("settings are not available to this plugin")
        return settings

    def _h_get(self, scope: str, plugin: str, key: str) -> Any:
        settings = self._settings()
        if scope == "core":
            return self._shown(settings, key, settings.get_core(key))
        if scope == "plugin" and plugin != self.name:
            return self._shown(settings, f"plugin.{plugin}.{key}", settings.get_plugin(plugin, key))
        return settings.get(key)

    @staticmethod
    def _shown(settings: SettingsAPI, qkey: str, value: Any) -> Any:
        """A core or other plugin's setting as a sandboxed plugin may see it: secrets masked (LLM keys stay home)."""
        if value is None:
            return value
        masked = settings.dump(mask_secrets=True)
        return masked.get(qkey, value)

    def _h_set(self, scope: str, plugin: str, key: str, value: Any) -> Any:
        settings = self._settings()
        return self._on_loop(lambda: settings.set(key, value))

    def _h_settings(self, prefix: str) -> Any:
        return self._settings().list(prefix)

    def _h_inject(self, mode: str, source: str, channel: str, text: str) -> None:
        host = self._host
        if host is None:
            raise RuntimeError("inject_* is available from plugin.start on")
        source = source or self.name
        channel = channel or self.name
        if mode == "interrupt":
            fn: Callable[[], Any] = lambda: host.inject_interrupt_text(source, channel, text)  # noqa: E731
        elif mode == "no_memory":
            fn = lambda: host.inject_text_no_memory(source, channel, text)  # noqa: E731
        else:
            fn = lambda: host.inject_text(source, channel, text)  # noqa: E731
        self._on_loop(fn)

    def _h_inject_media(self, mode: str, source: str, channel: str, text: str, media_json: str) -> None:
        """An input (or interrupt) with media; the blocks come as JSON text: data URLs or digests."""
        host = self._host
        if host is None:
            raise RuntimeError("inject_media is available from plugin.start on")
        raw = json.loads(media_json)
        blocks = [MediaBlock.from_json(b) for b in raw] if isinstance(raw, list) else []
        source = source or self.name
        channel = channel or self.name
        if mode == "interrupt":
            fn: Callable[[], Any] = lambda: host.inject_interrupt_media(source, channel, text, blocks)  # noqa: E731
        else:
            fn = lambda: host.inject_input_media(source, channel, text, blocks)  # noqa: E731
        self._on_loop(fn)

    # -- registrations (on the loop) ---------------------------------------------

    def _apply(self, item: _Held) -> None:
        host = self._host
        if host is None:
            raise RuntimeError(f"plugin {self.name!r} is not started")
        if item.kind == "tool":
            spec = item.spec
            params = _fix_schema(spec.get("parameters")) or {"type": "object", "properties": {}}
            tool = ToolDef(
                name=item.name,
                description=str(spec.get("description") or ""),
                parameters=params,
                no_memory=bool(spec.get("no_memory")),
                serial=bool(spec.get("serial")),
                parallel_safe=not bool(spec.get("serial")),
            )
            host.register_tool(tool, self._tool_handler(item.name, item.fn))
        elif item.kind == "stage":
            handler = self._stage_handler(item.name, item.fn)
            if item.spec.get("scope") == "own_tools":
                host.register_stage_own_tools(item.name, handler)
            else:
                host.register_stage(item.name, handler)
        elif item.kind == "channel":
            host.register_output_channel(
                item.name,
                int(item.spec.get("caps") or 1),
                str(item.spec.get("description") or ""),
                self._channel_handler(item.name, item.fn),
            )
        else:
            raise ValueError(f"unknown registration kind {item.kind!r}")

    def _tool_handler(self, name: str, fn: Any) -> Callable[[dict[str, Any]], Any]:
        async def handler(args: dict[str, Any]) -> Any:
            return await self._run(self._invoke_tool, name, fn, args)

        handler.__name__ = f"lua:{name}"
        return handler

    def _invoke_tool(self, name: str, fn: Any, args: dict[str, Any]) -> Any:
        sb = self._sb
        if sb is None:
            return {"isError": True, "content": f"{name}: plugin {self.name!r} has been stopped"}
        self.calls += 1
        try:
            res = sb.call_multi(fn, args)
            value = sb.to_python(res[0]) if res else None
            err = res[1] if len(res) > 1 else None
        except LuaError as e:
            self.errors += 1
            self._log.warning("tool %s: Lua %s error: %s", name, e.kind, e)
            return {"isError": True, "content": f"{name} failed in Lua ({e.kind}): {e}"}
        except Exception as e:
            self.errors += 1
            return {"isError": True, "content": f"{name} returned a value that cannot be used: {e}"}
        if value is None and err is not None:
            return {"isError": True, "content": str(err)}
        return value

    def _channel_handler(self, name: str, fn: Any) -> Callable[[str, dict[str, Any], str], Any]:
        async def handler(payload: str, meta: dict[str, Any], type_: str) -> Any:
            return await self._run(
                self._invoke_tool, f"output_send__{name}", fn, {"payload": payload, "meta": meta, "type": type_}
            )

        return handler

    def _stage_handler(self, stage: str, fn: Any) -> Callable[[StageContext], Any]:
        async def handler(ctx: StageContext) -> None:
            snapshot = _stage_snapshot(ctx)
            after = await self._run(self._invoke_stage, fn, snapshot)
            if not isinstance(after, dict):
                return
            async with ctx.lock:
                _apply_stage_changes(ctx, snapshot, after)

        handler.__name__ = f"lua:{stage}"
        return handler

    def _invoke_stage(self, fn: Any, snapshot: dict[str, Any]) -> Any:
        sb, api = self._sb, self._api
        if sb is None or api is None:
            return None  # stopped meanwhile: change nothing
        res = sb.call_multi(api["run_stage"], fn, snapshot)
        return sb.to_python(res[0]) if res else None


def _stage_snapshot(ctx: StageContext) -> dict[str, Any]:
    snap: dict[str, Any] = {}
    for name in (*_STAGE_SCALARS, *_STAGE_READ):
        value = getattr(ctx, name)
        if isinstance(value, Stage):
            value = value.value
        if value is not None:
            snap[name] = value
    call = ctx.tool_call
    if call is not None:
        snap["tool_call"] = {"id": call.id, "name": call.name, "arguments": dict(call.arguments), "plugin": call.plugin}
    result = ctx.tool_result
    if result is not None:
        snap["tool_result"] = {"name": result.name, "plugin": result.plugin, "success": result.success}
    return snap


def _apply_stage_changes(ctx: StageContext, before: dict[str, Any], after: dict[str, Any]) -> None:
    """Write back the fields a Lua handler changed; the stage view enforces the permission matrix."""
    for name in _STAGE_SCALARS:
        if after.get(name) != before.get(name):
            value = after.get(name)
            if name == "no_memory":
                value = bool(value)
            elif name != "response" or value is not None:
                value = "" if value is None else str(value)
            setattr(ctx, name, value)
    call = after.get("tool_call")
    if isinstance(call, dict) and ctx.tool_call is not None and (call.get("denied") or call.get("deny")):
        ctx.tool_call.denied = True
        ctx.tool_call.deny_reason = str(call.get("deny_reason") or call.get("deny") or "denied by a Lua plugin")
