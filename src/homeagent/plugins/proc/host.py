"""The host side of one plugin process: the methods it may call, and proxies for what it offers.

A :class:`HostSession` lives exactly as long as one child process. It owns
the :class:`~homeagent.plugins.proc.connection.Connection` and every
registration made through it: each ``tool.register`` becomes a tool in the
daemon's registry whose handler is a proxy calling ``tool.invoke`` back in
the child, and so on for stage handlers, output channels, cleaners and event
subscriptions. :meth:`HostSession.close` removes all of them at once (and
fails the calls in flight) when the process exits, which is what makes a
crash harmless to the rest of the daemon.

Every plugin → host call goes through one gate (:meth:`HostSession.dispatch`):
the manifest's capabilities are checked first, then the arguments, then the
in-process SDK object the registry gave the plugin does the work — so a
subprocess plugin can do nothing an in-process one of the same name could
not. Host exceptions become JSON-RPC errors whose ``data.type`` names the
Python exception class (``ValueError``, ``PermissionError``,
``ServiceUnavailable``), which the Python SDK turns back into the same
exception inside the plugin.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import dataclasses
import inspect
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from homeagent.agent.media_input import TOOL_BLOCKS
from homeagent.memory.media.inputs import MAX_BLOCKS
from homeagent.plugins.proc.capabilities import Capabilities
from homeagent.plugins.proc.connection import CallTimeout, Connection, ConnectionStats, Pipes, PluginGone
from homeagent.plugins.proc.stagewire import SNAPSHOT_FIELDS, StageChangeError, apply_changes, snapshot
from homeagent.ratelimit import TokenBucket
from homeagent.sdk.api import PluginSDK, ServiceUnavailable, SocialReadAPI, Unregister
from homeagent.sdk.protocol import MAX_FRAME, ErrorCode, Request, RPCError, to_json
from homeagent.sdk.stageview import StagePermissionError, parse_stage, writable_fields
from homeagent.sdk.types import ConfigDef, InjectOptions, MediaBlock, OutputCap, StageContext, ToolDef

if TYPE_CHECKING:
    from homeagent.events import Event

__all__ = ["HostSession", "PluginCallError", "SessionOptions"]

log = logging.getLogger("homeagent.plugins.proc")

_CLEAN_CACHE = 64
_CLEAN_CACHE_MAX_TEXT = 1024 * 1024
_CONFIG_FIELDS = {f.name for f in dataclasses.fields(ConfigDef)}


class PluginControl(Protocol):
    """What the ``plugins`` capability's methods use of the registry (``plugins.registry.PluginRegistry``)."""

    def running(self) -> list[str]: ...

    def is_disabled(self, name: str) -> bool: ...

    async def reload_one(self, name: str) -> dict[str, Any]: ...


class PluginCallError(RuntimeError):
    """A stage handler in a plugin process failed; the stage host records this message."""


@dataclass
class SessionOptions:
    """Limits of one session; the plugin-level defaults live in :class:`~homeagent.plugins.proc.plugin.ProcOptions`."""

    call_timeout: float = 60.0
    cleaner_timeout: float = 0.5
    inject_sync_timeout: float = 600.0
    max_frame: int = MAX_FRAME
    max_inflight: int = 64
    inject_rate: float = 20.0
    inject_burst: float = 100.0
    log_rate: float = 50.0  # plugin `log` lines per second; more are dropped and counted
    log_burst: float = 200.0


# ---------------------------------------------------------------- parameter checks

_MISSING: Any = object()


def _get(params: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], what: str, default: Any) -> Any:
    value = params.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise RPCError(ErrorCode.INVALID_PARAMS, f"params.{key} is required ({what})", {"param": key})
        return default
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise RPCError(ErrorCode.INVALID_PARAMS, f"params.{key} must be {what}, got a boolean", {"param": key})
    if not isinstance(value, kinds):
        raise RPCError(
            ErrorCode.INVALID_PARAMS, f"params.{key} must be {what}, got {type(value).__name__}", {"param": key}
        )
    return value


def _s(p: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    return _get(p, key, str, "a string", default)


def _b(p: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    return _get(p, key, bool, "true or false", default)


def _n(p: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    value = _get(p, key, (int, float), "a number", default)
    return float(value) if isinstance(value, int | float) and value is not default else value


def _i(p: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    return _get(p, key, int, "an integer", default)


def _d(p: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    return _get(p, key, dict, "an object", default)


def _ls(p: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    value = _get(p, key, list, "an array of strings", default)
    if value is not default and not all(isinstance(v, str) for v in value):
        raise RPCError(ErrorCode.INVALID_PARAMS, f"params.{key} must be an array of strings", {"param": key})
    return value


def _blocks(p: Mapping[str, Any], key: str) -> list[MediaBlock]:
    """Media blocks in their wire form (``{"data": <data URL>}`` or ``{"digest": ...}``), at most ``MAX_BLOCKS``."""
    raw = _get(p, key, list, "an array of media blocks", _MISSING)
    if len(raw) > MAX_BLOCKS:
        raise RPCError(ErrorCode.INVALID_PARAMS, f"params.{key}: at most {MAX_BLOCKS} media blocks", {"param": key})
    try:
        return [MediaBlock.from_json(b) for b in raw]
    except ValueError as e:
        raise RPCError(ErrorCode.INVALID_PARAMS, f"params.{key}: {e}", {"param": key}) from None


def _options(p: Mapping[str, Any]) -> InjectOptions | None:
    raw = _d(p, "options", None)
    if raw is None:
        return None
    try:
        return InjectOptions(
            no_memory=bool(raw.get("no_memory", False)),
            priority=int(raw.get("priority", 2)),
            user_id=str(raw.get("user_id", "")),
            group_id=str(raw.get("group_id", "")),
            meta=dict(raw.get("meta") or {}),
            deliver_to=str(raw.get("deliver_to", "")),  # an origin kept from an earlier turn (current_origin)
            user_name=str(raw.get("user_name", "")),
        )
    except (TypeError, ValueError) as e:
        raise RPCError(ErrorCode.INVALID_PARAMS, f"params.options: {e}") from None


def _error_from(exc: BaseException, method: str) -> RPCError:
    """The JSON-RPC error a plugin gets for an exception raised by the host's side of ``method``."""
    if isinstance(exc, RPCError):
        return exc
    if isinstance(exc, ServiceUnavailable):
        return RPCError(ErrorCode.SERVICE_UNAVAILABLE, str(exc), {"type": "ServiceUnavailable", "service": exc.service})
    if isinstance(exc, PermissionError):
        return RPCError(ErrorCode.PERMISSION_DENIED, str(exc), {"type": "PermissionError"})
    if isinstance(exc, TimeoutError):
        return RPCError(ErrorCode.TIMEOUT, f"{method}: timed out", {"type": "TimeoutError"})
    kind = "KeyError" if isinstance(exc, KeyError) else "TypeError" if isinstance(exc, TypeError) else "ValueError"
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    if not isinstance(exc, ValueError | TypeError | KeyError) and type(exc).__name__ != "ConfigError":
        log.error("host side of %s failed", method, exc_info=exc)
        text = f"{type(exc).__name__}: {text}"
    return RPCError(ErrorCode.CALL_FAILED, text or type(exc).__name__, {"type": kind})


def _own_task(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
    return asyncio.get_running_loop().create_task(coro, name=name)


def _tool_error(content: str) -> dict[str, Any]:
    return {"isError": True, "content": content}


# ---------------------------------------------------------------- the session


class HostSession:
    """One child process's connection, served methods and registrations."""

    def __init__(
        self,
        name: str,
        pipes: Pipes,
        capabilities: Capabilities,
        *,
        options: SessionOptions | None = None,
        on_fatal: Callable[[str], None] | None = None,
        on_auto_restart: Callable[[bool], None] | None = None,
        on_status: Callable[[str, str], None] | None = None,
        on_call_problem: Callable[[], None] | None = None,
        plugins: PluginControl | None = None,
        detach: Callable[[Coroutine[Any, Any, Any], str], asyncio.Task[Any]] | None = None,
        plugin_log: logging.Logger | None = None,
        stats: ConnectionStats | None = None,
    ) -> None:
        self.name = name
        self.capabilities = capabilities
        self.options = options or SessionOptions()
        self.sdk: PluginSDK | None = None
        self.plugin_log = plugin_log or logging.getLogger(f"homeagent.plugin.{name}")
        self._on_auto_restart = on_auto_restart
        self._on_status = on_status
        self._on_call_problem = on_call_problem
        self._plugins = plugins
        self._detach = detach or _own_task
        self._registrations: dict[tuple[str, str], Unregister] = {}
        self._tool_calls: dict[str, list[MediaBlock]] = {}  # running tool calls' media sinks, by their token
        self._cleaned: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._bucket = TokenBucket(self.options.inject_rate, self.options.inject_burst)
        self._log_bucket = TokenBucket(self.options.log_rate, self.options.log_burst)
        self.log_dropped = 0
        self._log_dropped_unreported = 0
        self._log_summary: asyncio.TimerHandle | None = None
        self._subscription_ids = 0
        self.denied = 0
        self.cleaner_skipped = 0
        self.closed_reason = ""
        self.connection = Connection(
            name,
            pipes,
            self.dispatch,
            max_frame=self.options.max_frame,
            max_inflight=self.options.max_inflight,
            on_fatal=on_fatal,
            log=log,
            stats=stats,
        )
        self._methods: dict[str, Callable[[dict[str, Any]], Any]] = {
            "tool.register": self._tool_register,
            "tool.unregister": lambda p: self._unregister("tool", _s(p, "name")),
            "stage.register": self._stage_register,
            "stage.unregister": lambda p: self._unregister("stage", _s(p, "handler")),
            "output.register": self._output_register,
            "output.unregister": lambda p: self._unregister("channel", _s(p, "name")),
            "input.register": self._input_register,
            "cleaner.register": self._cleaner_register,
            "cleaner.unregister": lambda p: self._unregister("cleaner", _s(p, "name")),
            "lifecycle.autoRestart": self._auto_restart,
            "lifecycle.status": self._status,
            "io.injectText": lambda p: self._inject("text", p),
            "io.injectInterrupt": lambda p: self._inject("interrupt", p),
            "io.injectTextNoMem": lambda p: self._inject("no_memory", p),
            "io.injectInputSync": self._inject_sync,
            "io.injectMedia": lambda p: self._inject_media("text", p),
            "io.injectInterruptMedia": lambda p: self._inject_media("interrupt", p),
            "io.injectMediaSync": self._inject_media_sync,
            "io.setToolBlocks": self._set_tool_blocks,
            "doc.insertWithMedia": lambda p: self._sdk.doc_memory.insert_with_media(
                _get(p, "doc", (dict, str), "an object", _MISSING), _blocks(p, "attachments")
            ),
            "memory.recall": lambda p: self._sdk.memory.recall(_ls(p, "keywords"), _i(p, "depth", 2)),
            "memory.commit": lambda p: self._sdk.memory.commit(list(_get(p, "triples", list, "an array", _MISSING))),
            "memory.introspect": lambda p: self._sdk.memory.introspect(),
            "memory.merge": lambda p: self._sdk.memory.merge_entities(_s(p, "source"), _s(p, "target")),
            "memory.purge": lambda p: self._sdk.memory.purge(_d(p, "criteria"), _s(p, "mode", "soft")),
            "doc.query": lambda p: self._sdk.doc_memory.query(_s(p, "text"), _i(p, "top_k", 3)),
            "doc.insert": lambda p: self._sdk.doc_memory.insert(_get(p, "doc", (dict, str), "an object", _MISSING)),
            "doc.remove": lambda p: self._sdk.doc_memory.remove(_s(p, "id")),
            "doc.stats": lambda p: self._sdk.doc_memory.stats(),
            "knowledge.search": lambda p: self._sdk.knowledge.search(_s(p, "query"), _i(p, "top_k", 5)),
            "knowledge.add": lambda p: self._sdk.knowledge.add(_s(p, "name"), _s(p, "content")),
            "knowledge.list": lambda p: self._sdk.knowledge.list(),
            "textmemory.append": lambda p: self._sdk.text_memory.append(
                _s(p, "role"), _s(p, "content"), channel=_s(p, "channel", ""), **_d(p, "extra", {})
            ),
            "settings.get": lambda p: self._settings.get(_s(p, "key"), p.get("default")),
            "settings.set": lambda p: self._settings.set(_s(p, "key"), p.get("value")),
            "settings.delete": lambda p: self._settings.delete(_s(p, "key")),
            "settings.list": lambda p: self._settings.list(_s(p, "prefix", "")),
            "settings.registerDef": self._register_def,
            "settings.defs": lambda p: [to_json(d) for d in self._settings.defs(_s(p, "prefix", ""))],
            "settings.dataDir": lambda p: str(self._settings.data_dir()),
            "settings.getCore": lambda p: self._masked(_s(p, "key"), self._settings.get_core(_s(p, "key"), p.get("default"))),
            "settings.setCore": self._set_core,
            "settings.listCore": lambda p: self._masked_all("", self._settings.list_core(_s(p, "prefix", ""))),
            "settings.getPlugin": self._get_plugin_setting,
            "settings.setPlugin": self._set_plugin,
            "settings.listPlugin": lambda p: self._masked_all(
                _s(p, "plugin"), self._settings.list_plugin(_s(p, "plugin"), _s(p, "prefix", ""))
            ),
            "settings.dump": lambda p: self._settings.dump(True),
            "settings.plugins": lambda p: self._settings.plugins(),
            "llm.listSources": lambda p: self._sdk.llm.list_sources(),
            "llm.setSource": lambda p: self._sdk.llm.set_source(_s(p, "name")),
            "llm.currentSource": lambda p: self._sdk.llm.current_source(),
            "social.getPerson": lambda p: self._social().get_person(_s(p, "name")),
            "social.getNetwork": lambda p: self._social().get_network(_s(p, "name", ""), _i(p, "depth", 1)),
            "social.getTrait": lambda p: self._social().get_trait(_s(p, "person"), _s(p, "trait")),
            "social.getRelations": lambda p: self._social().get_relations(_s(p, "person")),
            "social.listPersons": lambda p: self._social().list_persons(),
            "events.subscribe": self._subscribe,
            "events.unsubscribe": lambda p: self._unregister("subscription", _s(p, "subscription")),
            "plugin.reloadOne": self._reload_one,
            "plugin.listLoaded": lambda p: self._registry().running(),
            "plugin.isDisabled": lambda p: self._registry().is_disabled(_s(p, "name")),
        }

    # ---------------------------------------------------------------- lifecycle

    def bind(self, sdk: PluginSDK) -> None:
        """Let the plugin use the host: from now on its calls go to ``sdk``."""
        self.sdk = sdk

    @property
    def closed(self) -> bool:
        return self.connection.closed

    def close(self, reason: str) -> None:
        """The process is gone: fail calls in flight, remove everything it registered. Idempotent."""
        if self.connection.closed:
            return
        self.closed_reason = reason
        if self._log_summary is not None:
            self._log_summary.cancel()
            self._report_dropped_logs()
        self.connection.close(PluginGone(reason))
        registrations, self._registrations = self._registrations, {}
        for (kind, name), undo in reversed(list(registrations.items())):
            try:
                undo()
            except Exception:
                log.exception("plugin %s: removing %s %r failed", self.name, kind, name)
        self._cleaned.clear()

    def registrations(self, kind: str | None = None) -> list[str]:
        return [name for (k, name) in self._registrations if kind is None or k == kind]

    # ---------------------------------------------------------------- calls into the plugin

    async def call(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        """Call the plugin; a timeout or an outside cancellation asks the owner to check the plugin is alive."""
        try:
            return await self.connection.call(method, params, timeout=timeout)
        except (CallTimeout, asyncio.CancelledError):
            if self._on_call_problem is not None and not self.connection.closed:
                self._on_call_problem()
            raise

    # ---------------------------------------------------------------- the gate

    def dispatch(self, request: Request) -> Any:
        method = request.method
        if method == "ping":
            return {"pong": True, "time": time.time()}
        if method == "log":
            return self._log(request.params)
        try:
            self.capabilities.check(method)
        except RPCError as e:
            if e.code == ErrorCode.CAPABILITY_DENIED:
                self.denied += 1
                self.plugin_log.warning("refused: %s", e.message)
            raise
        if self.sdk is None:
            raise RPCError(ErrorCode.UNAVAILABLE, f"{method} is available once plugin.init has been received")
        try:
            result = self._methods[method](request.params)
        except Exception as e:
            raise _error_from(e, method) from None
        if inspect.isawaitable(result):
            return self._settle(method, result)
        return result  # encode() converts what JSON cannot carry

    async def _settle(self, method: str, pending: Awaitable[Any]) -> Any:
        try:
            return await pending
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise _error_from(e, method) from None

    @property
    def _sdk(self) -> PluginSDK:
        assert self.sdk is not None
        return self.sdk

    @property
    def _settings(self) -> Any:
        return self._sdk.settings

    def _log(self, p: dict[str, Any]) -> None:
        if not self._log_bucket.take():
            # dropped, counted, and summed up in one line a second later (not one line per drop)
            self.log_dropped += 1
            self._log_dropped_unreported += 1
            if self._log_summary is None:
                self._log_summary = asyncio.get_running_loop().call_later(1.0, self._report_dropped_logs)
            return
        level = logging.getLevelName(str(p.get("level", "info")).upper())
        self.plugin_log.log(level if isinstance(level, int) else logging.INFO, "%s", str(p.get("message", ""))[:10_000])

    def _report_dropped_logs(self) -> None:
        self._log_summary = None
        count, self._log_dropped_unreported = self._log_dropped_unreported, 0
        if count:
            self.plugin_log.warning(
                "… %d log lines from plugin %s dropped (more than %g a second; %d dropped in all)",
                count,
                self.name,
                self.options.log_rate,
                self.log_dropped,
            )

    def _add(self, kind: str, name: str, undo: Unregister) -> None:
        old = self._registrations.pop((kind, name), None)
        if old is not None:
            old()
        self._registrations[(kind, name)] = undo

    def _unregister(self, kind: str, name: str) -> dict[str, Any]:
        undo = self._registrations.pop((kind, name), None)
        if undo is not None:
            undo()
        return {"removed": undo is not None}

    # ---------------------------------------------------------------- tools

    def _tool_register(self, p: dict[str, Any]) -> dict[str, Any]:
        name = _s(p, "name")
        if ("tool", name) in self._registrations:
            raise ValueError(f"tool {name!r} is already registered by this plugin")
        timeout = _n(p, "timeout", self.options.call_timeout)
        cleaner = self._remote_cleaner("tool", name) if _b(p, "cleaner", False) else None
        tool = ToolDef(
            name=name,
            description=_s(p, "description", ""),
            parameters=_d(p, "parameters", {"type": "object", "properties": {}}),
            no_memory=_b(p, "no_memory", False),
            cleaner=cleaner,
            serial=_b(p, "serial", False),
            parallel_safe=_b(p, "parallel_safe", True),
        )
        undo = self._sdk.register_tool(tool, self._tool_proxy(name, timeout, cleaner is not None))
        self._add("tool", name, undo)
        return {"name": name}

    def _tool_proxy(self, name: str, timeout: float, clean: bool) -> Callable[[dict[str, Any]], Awaitable[Any]]:
        async def invoke(args: dict[str, Any]) -> Any:
            params: dict[str, Any] = {"name": name, "args": args}
            sink = TOOL_BLOCKS.get()  # the turn's place for this call's media (set_tool_blocks)
            if sink is not None:
                params["call"] = call = secrets.token_hex(8)
                self._tool_calls[call] = sink
            origin = self._sdk.current_origin()
            if origin is not None:  # the plugin's current_origin() during this call (a timer-like tool keeps it)
                params["origin"] = {"channel": origin.channel, "user_id": origin.user_id, "group_id": origin.group_id}
            try:
                result = await self.call("tool.invoke", params, timeout=timeout)
            except PluginGone as e:
                return _tool_error(f"{name}: plugin {self.name!r} is not running ({e})")
            except CallTimeout:
                return _tool_error(f"{name}: plugin {self.name!r} did not answer within {timeout:g}s")
            except RPCError as e:
                return _tool_error(f"{name} failed: {e.message}")
            finally:
                if sink is not None:
                    self._tool_calls.pop(params["call"], None)
            if clean and not (isinstance(result, dict) and result.get("isError")):
                await self._precompute_clean(name, result)
            return result

        invoke.__qualname__ = f"{self.name}.{name}"
        return invoke

    # ---------------------------------------------------------------- stages

    def _stage_register(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            stage = parse_stage(_s(p, "stage"))
        except ValueError as e:
            raise RPCError(ErrorCode.INVALID_PARAMS, str(e), {"param": "stage"}) from None
        handler_id = _s(p, "handler", stage.value)
        if ("stage", handler_id) in self._registrations:
            raise ValueError(f"stage handler {handler_id!r} is already registered by this plugin")
        fields = _ls(p, "fields", list(SNAPSHOT_FIELDS))
        unknown = [f for f in fields if f not in SNAPSHOT_FIELDS]
        if unknown:
            raise RPCError(ErrorCode.INVALID_PARAMS, f"params.fields: StageContext has no field {unknown[0]!r}")
        timeout = _get(p, "timeout", (int, float), "a number of seconds", None)
        writable = sorted(writable_fields(stage))
        wanted = tuple(fields)

        async def proxy(ctx: StageContext) -> None:
            shared = getattr(ctx, "_shared", ctx)  # the StageView's context: read it without per-field freezing
            params = {"stage": stage.value, "handler": handler_id, "ctx": snapshot(shared, wanted), "writable": writable}
            try:
                result = await self.call("stage.invoke", params)
            except PluginGone as e:
                raise PluginCallError(f"plugin process is not running ({e})") from None
            except RPCError as e:
                if e.code == ErrorCode.PERMISSION_DENIED:
                    raise StagePermissionError(e.message) from None
                raise PluginCallError(e.message) from None
            changes = result.get("changes") if isinstance(result, dict) else None
            if changes:
                async with ctx.lock:
                    try:
                        apply_changes(ctx, stage, changes)
                    except StageChangeError as e:
                        raise PluginCallError(f"unusable changes: {e}") from None

        proxy.__qualname__ = handler_id
        own = _b(p, "own_tools", False)
        register = self._sdk.register_stage_own_tools if own else self._sdk.register_stage
        undo = register(stage, proxy, timeout=float(timeout) if timeout is not None else None)
        self._add("stage", handler_id, undo)
        return {"handler": handler_id, "writable": writable}

    # ---------------------------------------------------------------- channels

    def _output_register(self, p: dict[str, Any]) -> dict[str, Any]:
        name = _s(p, "name")
        timeout = _n(p, "timeout", self.options.call_timeout)

        async def send(payload: str, meta: dict[str, Any], type_: str) -> Any:
            params = {"channel": name, "payload": payload, "meta": meta, "type": type_}
            try:
                return await self.call("output.invoke", params, timeout=timeout)
            except PluginGone as e:
                return _tool_error(f"channel {name}: plugin {self.name!r} is not running ({e})")
            except CallTimeout:
                return _tool_error(f"channel {name}: plugin {self.name!r} did not answer within {timeout:g}s")
            except RPCError as e:
                return _tool_error(f"channel {name} failed: {e.message}")

        types = _ls(p, "types", None)
        undo = self._sdk.register_output_channel(
            name,
            OutputCap(_i(p, "caps", int(OutputCap.TEXT)) & 31),
            _s(p, "description", ""),
            send,
            meta_help=_s(p, "meta_help", ""),
            types=types,
        )
        self._add("channel", name, undo)
        return {"name": name, "tools": [f"output_send__{name}", f"output_send__{name}_help"]}

    def _input_register(self, p: dict[str, Any]) -> dict[str, Any]:
        name = _s(p, "name")
        add = getattr(self._sdk, "add_registration", None)
        undo: Unregister = add("input", name, lambda: None) if callable(add) else (lambda: None)
        self._add("input", name, undo)
        return {"name": name}

    # ---------------------------------------------------------------- cleaners

    def _cleaner_register(self, p: dict[str, Any]) -> dict[str, Any]:
        name = _s(p, "name")
        undo = self._sdk.register_text_cleaner(name, self._remote_cleaner("text", name))
        self._add("cleaner", name, undo)
        return {"name": name}

    def _remote_cleaner(self, scope: str, name: str) -> Callable[[str], str]:
        """A synchronous cleaner answering from the cache, else asking the plugin (briefly)."""

        def clean(text: str) -> str:
            hit = self._cleaned.get(f"{scope}\0{name}\0{text}") if scope == "tool" else None
            if hit is not None:
                return hit
            if self.connection.closed:
                return text
            try:
                result = self.connection.call_blocking(
                    "cleaner.invoke", {"scope": scope, "name": name, "text": text}, timeout=self.options.cleaner_timeout
                )
            except Exception as e:
                self.cleaner_skipped += 1
                log.debug("plugin %s: cleaner %s skipped: %s", self.name, name, e)
                return text
            return result if isinstance(result, str) else text

        clean.__qualname__ = f"{self.name}.{name}"
        return clean

    async def _precompute_clean(self, name: str, result: Any) -> None:
        """Clean a tool's output while the call is still async, so the later synchronous lookup is a hit."""
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        if len(text) > _CLEAN_CACHE_MAX_TEXT:
            return
        try:
            cleaned = await self.call(
                "cleaner.invoke", {"scope": "tool", "name": name, "text": text}, timeout=self.options.cleaner_timeout
            )
        except (PluginGone, CallTimeout, RPCError):
            return
        if isinstance(cleaned, str):
            self._cleaned[f"tool\0{name}\0{text}"] = cleaned
            while len(self._cleaned) > _CLEAN_CACHE:
                self._cleaned.popitem(last=False)

    # ---------------------------------------------------------------- io and lifecycle

    def _inject(self, mode: str, p: dict[str, Any]) -> dict[str, Any]:
        if not self._bucket.take():
            raise RPCError(
                ErrorCode.BUSY,
                f"io rate limit: at most {self.options.inject_rate:g} inputs per second "
                f"(bursts of {self.options.inject_burst:g})",
            )
        text = _s(p, "text")
        source, channel = _s(p, "source", ""), _s(p, "channel", "")
        sdk = self._sdk
        if mode == "text":
            ident = sdk.inject_text(source, channel, text, options=_options(p))
        elif mode == "interrupt":
            ident = sdk.inject_interrupt_text(source, channel, text, options=_options(p))
        else:
            ident = sdk.inject_text_no_memory(source, channel, text)
        return {"id": ident}

    def _inject_media(self, mode: str, p: dict[str, Any]) -> dict[str, Any]:
        media = _blocks(p, "media")  # checked before the rate limit takes a token
        if not self._bucket.take():
            raise RPCError(ErrorCode.BUSY, f"io rate limit: at most {self.options.inject_rate:g} inputs per second")
        source, channel, text = _s(p, "source", ""), _s(p, "channel", ""), _s(p, "text", "")
        if mode == "text":
            return {"id": self._sdk.inject_input_media(source, channel, text, media, options=_options(p))}
        return {"id": self._sdk.inject_interrupt_media(source, channel, text, media, options=_options(p))}

    async def _inject_media_sync(self, p: dict[str, Any]) -> Any:
        media = _blocks(p, "media")
        if not self._bucket.take():
            raise RPCError(ErrorCode.BUSY, f"io rate limit: at most {self.options.inject_rate:g} inputs per second")
        timeout = min(_n(p, "timeout", self.options.inject_sync_timeout), self.options.inject_sync_timeout)
        return await self._sdk.inject_input_media_sync(
            _s(p, "source", "") or self.name, _s(p, "channel", "") or self.name, _s(p, "text", ""), media,
            options=_options(p), timeout=timeout,
        )

    def _set_tool_blocks(self, p: dict[str, Any]) -> dict[str, Any]:
        """Media for a call of one of this plugin's tools that is still running (named by the token the host
        sent with ``tool.invoke``): a plugin cannot attach media to anyone else's call."""
        sink = self._tool_calls.get(_s(p, "call"))
        if sink is None:
            raise ValueError("io.setToolBlocks: no tool call of this plugin with that token is running "
                             "(call it from inside the tool handler, before it returns)")
        blocks = _blocks(p, "blocks")
        token = TOOL_BLOCKS.set(sink)
        try:
            self._sdk.set_tool_blocks(blocks)
        finally:
            TOOL_BLOCKS.reset(token)
        return {"blocks": len(sink)}

    async def _inject_sync(self, p: dict[str, Any]) -> Any:
        if not self._bucket.take():
            raise RPCError(ErrorCode.BUSY, f"io rate limit: at most {self.options.inject_rate:g} inputs per second")
        timeout = min(_n(p, "timeout", self.options.inject_sync_timeout), self.options.inject_sync_timeout)
        return await self._sdk.inject_input_media_sync(
            _s(p, "source", ""), _s(p, "channel", ""), _s(p, "text"), [], options=_options(p), timeout=timeout
        )

    def _auto_restart(self, p: dict[str, Any]) -> dict[str, Any]:
        enabled = _b(p, "enabled")
        if self._on_auto_restart is not None:
            self._on_auto_restart(enabled)
        return {"auto_restart": enabled}

    def _status(self, p: dict[str, Any]) -> dict[str, Any]:
        state = _s(p, "state")[:40]
        detail = _s(p, "detail", "")[:500]
        if self._on_status is not None:
            self._on_status(state, detail)
        return {"state": state}

    # ---------------------------------------------------------------- settings

    def _register_def(self, p: dict[str, Any]) -> dict[str, Any]:
        raw = _d(p, "def")
        unknown = sorted(set(raw) - _CONFIG_FIELDS)
        if unknown:
            raise RPCError(ErrorCode.INVALID_PARAMS, f"params.def has unknown fields: {', '.join(unknown)}")
        try:
            definition = ConfigDef(**raw)
        except TypeError as e:
            raise RPCError(ErrorCode.INVALID_PARAMS, f"params.def: {e}") from None
        self._settings.register_def(definition)
        return {"key": definition.key}

    def _config(self) -> Any:
        services = getattr(self._sdk, "services", None)
        return getattr(services, "config", None)

    def _refuse_owner_only(self, qkey: str) -> None:
        """An owner-only setting (it starts processes, loads code, moves a confined folder, widens access) is the
        owner's to change, not a plugin's: refused at the RPC boundary whatever capabilities the plugin holds."""
        config = self._config()
        if config is None:
            return
        for key in dict.fromkeys((qkey, qkey if qkey.startswith(("core.", "plugin.")) else f"core.{qkey}")):
            try:
                definition = config.get_def(key)
            except Exception:  # an unknown or malformed key: the setter itself says what is wrong
                continue
            if definition is not None and definition.owner_only:
                raise RPCError(
                    ErrorCode.PERMISSION_DENIED,
                    f"{key} is an owner-only setting: plugins may not change it (the owner can, with "
                    f"`homeagent config set {key} <value>`)",
                    {"key": key},
                )

    def _set_core(self, p: dict[str, Any]) -> Any:
        key = _s(p, "key")
        self._refuse_owner_only(key)
        return self._masked(key, self._settings.set_core(key, p.get("value")))

    def _set_plugin(self, p: dict[str, Any]) -> Any:
        plugin, key = _s(p, "plugin"), _s(p, "key")
        config = self._config()
        if plugin != self.name and config is not None:  # its own table is the plugin's business
            self._refuse_owner_only(config.qualify(plugin, key))
        return self._settings.set_plugin(plugin, key, p.get("value"))

    def _masked(self, key: str, value: Any) -> Any:
        """Secrets never leave the host for an external plugin (only its own table is unmasked)."""
        config = self._config()
        return config.masked(key, value) if config is not None and hasattr(config, "masked") else value

    def _masked_all(self, plugin: str, values: dict[str, Any]) -> dict[str, Any]:
        config = self._config()
        if config is None or not hasattr(config, "masked"):
            return values
        qualify = (lambda k: config.qualify(plugin, k)) if plugin else (lambda k: k)
        return {k: config.masked(qualify(k), v) for k, v in values.items()}

    def _get_plugin_setting(self, p: dict[str, Any]) -> Any:
        plugin, key = _s(p, "plugin"), _s(p, "key")
        value = self._settings.get_plugin(plugin, key, p.get("default"))
        config = self._config()
        if plugin == self.name or config is None or not hasattr(config, "qualify"):
            return value
        return self._masked(config.qualify(plugin, key), value)

    # ---------------------------------------------------------------- social, events, plugins

    def _social(self) -> SocialReadAPI:
        """The social graph as external plugins see it: its read methods only (the RPC table has no writes)."""
        return self._sdk.social

    def _subscribe(self, p: dict[str, Any]) -> dict[str, Any]:
        raw = p.get("types")
        if raw is None or raw == "*":
            types: builtins.list[str] | None = None
        elif isinstance(raw, str):
            types = [raw]
        else:
            types = _ls(p, "types")
        self._subscription_ids += 1
        sid = f"s{self._subscription_ids}"
        connection = self.connection

        def deliver(event: Event) -> None:
            connection.notify("event", {"subscription": sid, "event": to_json(event.to_dict())}, droppable=True)

        undo = self._sdk.subscribe(types, deliver)
        self._add("subscription", sid, undo)
        return {"subscription": sid}

    def _registry(self) -> PluginControl:
        if self._plugins is None:
            raise ServiceUnavailable("plugin management", "this host was started without a plugin registry")
        return self._plugins

    async def _reload_one(self, p: dict[str, Any]) -> Any:
        registry = self._registry()
        name = _s(p, "name")
        # The reload runs on its own task: reloading this very plugin kills the
        # process whose request is being served, which must not cancel the reload.
        task = self._detach(registry.reload_one(name), f"plugin-reload:{name}")
        if name == self.name:
            return {"status": "scheduled", "name": name}
        return await asyncio.shield(task)

