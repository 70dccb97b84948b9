"""The plugin side of a subprocess plugin written in Python: :class:`PluginSDK` over protocol v1.

:mod:`homeagent.sdk.run` (``python -m homeagent.sdk.run DIR``) imports a plugin
folder's ``create_plugin`` and serves it; this module is what that plugin's
``start(sdk)`` receives, so the same plugin code runs in the daemon's process
or in its own:

* ``register_*``, ``inject_*``, ``settings.*`` and ``llm.*`` are synchronous in
  the SDK, so here they are blocking round trips to the host (a fraction of a
  millisecond). The pipe is read by the event loop; a synchronous call made
  on the loop thread reads the pipe itself until its answer arrives (see
  :class:`Endpoint`), so a plugin's ``start`` or stage handler can wait for
  the host without a reader thread and its extra wake-up per frame. The data
  APIs (memory, documents, knowledge) stay async.
* A stage handler gets the real :class:`~homeagent.agent.stages.StageView`
  over a local copy of the context, so the permission matrix is enforced
  inside the plugin just as in-process; afterwards :func:`changes_between`
  compares the copy with what was received and returns *operations* (append
  to a list, set a field, set a key of ``extra``) — never the whole context —
  so concurrent handlers in other plugins lose no update.
* Host errors come back as the Python exceptions the in-process SDK raises:
  ``ValueError`` for a duplicate tool, ``ServiceUnavailable`` for a missing
  subsystem, :class:`CapabilityError` (a ``PermissionError``) for a call the
  manifest did not declare.
* External plugins get the narrowed SDK: ``publish`` raises, the social graph
  is read-only (:attr:`RemoteSDK.social`).
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import itertools
import logging
import os
import select
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from homeagent.sdk.api import (
    LLMAPI,
    ChannelHandler,
    DocMemoryAPI,
    EventCallback,
    KnowledgeAPI,
    MemoryAPI,
    PluginSDK,
    ServiceUnavailable,
    SettingsAPI,
    TextMemoryAPI,
    Unregister,
    coerce_tool_def,
)
from homeagent.sdk.protocol import (
    MAX_FRAME,
    ErrorCode,
    FrameBuffer,
    Oversized,
    ProtocolError,
    Request,
    Response,
    RPCError,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
    parse,
    to_json,
)
from homeagent.sdk.types import (
    ConfigDef,
    InjectOptions,
    MediaBlock,
    MemItem,
    Origin,
    OutputCap,
    Stage,
    StageContext,
    StageHandler,
    TextCleaner,
    ToolCall,
    ToolDef,
    ToolHandler,
    ToolResult,
)

__all__ = [
    "CapabilityError",
    "Endpoint",
    "Handlers",
    "RemoteError",
    "RemoteEvent",
    "RemoteSDK",
    "changes_between",
    "context_from",
]

SYNC_TIMEOUT = 30.0

TOOL_CALL: contextvars.ContextVar[str] = contextvars.ContextVar("tool_call", default="")
"""The host's token for the tool call this task or thread is running (``set_tool_blocks`` names it)."""
"""Longest a synchronous SDK call waits for the host."""

_log = logging.getLogger("homeagent.sdk.remote")


class RemoteError(RuntimeError):
    """The host answered a call with an error that has no closer Python equivalent."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class CapabilityError(PermissionError):
    """The plugin called something its manifest's ``capabilities`` do not allow."""


def _exception(err: RPCError) -> BaseException:
    """The Python exception the in-process SDK would have raised for this host error."""
    data = err.data if isinstance(err.data, dict) else {}
    kind = data.get("type")
    if err.code == ErrorCode.SERVICE_UNAVAILABLE or kind == "ServiceUnavailable":
        exc = ServiceUnavailable(str(data.get("service") or "service"))
        exc.args = (err.message,)
        return exc
    if err.code == ErrorCode.CAPABILITY_DENIED:
        return CapabilityError(err.message)
    if err.code == ErrorCode.PERMISSION_DENIED or kind == "PermissionError":
        return PermissionError(err.message)
    if err.code == ErrorCode.TIMEOUT or kind == "TimeoutError":
        return TimeoutError(err.message)
    if kind == "KeyError":
        return KeyError(err.message)
    if kind == "TypeError":
        return TypeError(err.message)
    if kind == "ValueError" or err.code == ErrorCode.INVALID_PARAMS:
        return ValueError(err.message)
    return RemoteError(err.code, err.message)


# ---------------------------------------------------------------- the pipe


class Endpoint:
    """The plugin's end of the pipe: read on the event loop, written from any thread, calls sync or async.

    Frames are read by the event loop (one wake-up per frame, no thread hop). A
    synchronous call made *on* the loop thread cannot wait for the loop, so it
    reads the pipe itself until its answer arrives (parking host requests it
    reads meanwhile until it returns); one made from another thread waits for
    the loop to deliver its answer.
    """

    def __init__(self, read_fd: int, write_fd: int, *, max_frame: int = MAX_FRAME) -> None:
        self._rfd = read_fd
        self._wfd = write_fd
        self._max_frame = max_frame
        self._buffer = FrameBuffer(max_frame)
        self._wlock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, concurrent.futures.Future[Any] | asyncio.Future[Any]] = {}
        self._parked: collections.deque[Request] = collections.deque()
        self._closed = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._on_request: Callable[[Request], None] = lambda r: None
        self._on_eof: Callable[[], None] = lambda: None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def start(
        self, loop: asyncio.AbstractEventLoop, on_request: Callable[[Request], None], on_eof: Callable[[], None]
    ) -> None:
        """Start reading: requests go to ``on_request``; ``on_eof`` runs when the host hangs up (both on ``loop``)."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._on_request = on_request
        self._on_eof = on_eof
        os.set_blocking(self._rfd, False)
        loop.add_reader(self._rfd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self._rfd, 1 << 18)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._eof()
            return
        for frame in self._buffer.feed(data):
            message = self._decode(frame)
            if isinstance(message, Request):
                self._on_request(message)

    def _eof(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._rfd)
        if not self._closed.is_set():
            self._close(ConnectionError("the host closed the connection"))
            if self._loop is not None:
                self._loop.call_soon(self._on_eof)

    def _decode(self, frame: bytes | Oversized) -> Request | None:
        """Answers resolve their callers here; a request is returned for dispatch."""
        if isinstance(frame, Oversized):
            ident, method = frame.guess()
            message = f"frame of {frame.size} bytes is larger than the limit of {self._max_frame} bytes"
            if method is not None and ident is not None:
                self._send_quietly(encode_error(ident, RPCError(ErrorCode.FRAME_TOO_LARGE, f"{method}: {message}")))
            elif isinstance(ident, int):
                self._resolve(Response(ident, None, RPCError(ErrorCode.FRAME_TOO_LARGE, message)))
            return None
        try:
            decoded = parse(frame)
        except ProtocolError as e:
            print(f"WARNING homeagent.sdk: malformed frame from the host: {e.message}", file=sys.stderr)
            if e.id is not None:
                self._send_quietly(encode_error(e.id, RPCError(e.code, e.message)))
            return None
        if isinstance(decoded, Response):
            self._resolve(decoded)
            return None
        return decoded

    def _resolve(self, response: Response) -> None:
        future = self._pending.pop(response.id, None) if isinstance(response.id, int) else None
        if future is None:
            if response.id is None and response.error is not None:
                print(f"WARNING homeagent.sdk: the host reports: {response.error.message}", file=sys.stderr)
            return
        if future.done():
            return
        if response.error is not None:
            future.set_exception(response.error)
        else:
            future.set_result(response.result)

    def _close(self, reason: BaseException) -> None:
        self._closed.set()
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(reason)

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        with self._wlock:
            try:
                while view:
                    view = view[os.write(self._wfd, view) :]
            except OSError as e:
                raise ConnectionError(f"cannot write to the host: {e}") from None

    def _send_quietly(self, data: bytes) -> None:
        with contextlib.suppress(ConnectionError):
            self.send(data)

    def _request(self, method: str, params: Mapping[str, Any] | None, future: Any) -> int:
        if self._closed.is_set():
            raise ConnectionError("the host closed the connection")
        ident = next(self._ids)
        self._pending[ident] = future
        try:
            self.send(encode_request(ident, method, to_json(dict(params or {}))))
        except BaseException:
            self._pending.pop(ident, None)
            raise
        return ident

    def call(self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = SYNC_TIMEOUT) -> Any:
        """Call the host and wait for the answer (blocking the calling thread)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        ident = self._request(method, params, future)
        try:
            if threading.get_ident() == self._loop_thread:
                self._pump(future, method, timeout)
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"{method}: the host did not answer within {timeout:g}s") from None
        except RPCError as e:
            raise _exception(e) from None
        finally:
            self._pending.pop(ident, None)

    def _pump(self, future: concurrent.futures.Future[Any], method: str, timeout: float | None) -> None:
        """On the loop thread: read the pipe until ``future`` is answered; park the host's requests."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not future.done():
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not select.select([self._rfd], [], [], wait)[0]:
                    raise TimeoutError(f"{method}: the host did not answer within {timeout:g}s")
                try:
                    data = os.read(self._rfd, 1 << 18)
                except (BlockingIOError, InterruptedError):
                    continue
                if not data:
                    self._eof()
                    return
                for frame in self._buffer.feed(data):
                    message = self._decode(frame)
                    if message is not None:
                        self._parked.append(message)
        finally:
            if self._parked and self._loop is not None:
                self._loop.call_soon(self._unpark)

    def _unpark(self) -> None:
        while self._parked:
            self._on_request(self._parked.popleft())

    async def acall(self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        """Call the host without blocking the event loop (call it on the loop)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        ident = self._request(method, params, future)
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise TimeoutError(f"{method}: the host did not answer within {timeout:g}s") from None
        except RPCError as e:
            raise _exception(e) from None
        finally:
            self._pending.pop(ident, None)

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        self.send(encode_notification(method, to_json(dict(params or {}))))

    def respond(self, ident: Any, result: Any) -> None:
        if ident is not None and not self._closed.is_set():
            self.send(encode_response(ident, result))

    def respond_error(self, ident: Any, error: RPCError) -> None:
        if ident is not None and not self._closed.is_set():
            self.send(encode_error(ident, error))


# ---------------------------------------------------------------- stage contexts

_LIST_FIELDS = frozenset({"context_msgs", "tool_calls", "tool_results", "memory", "errors"})
_DICT_FIELDS = frozenset({"extra"})
_DEFAULTS: dict[str, Any] = {
    f.name: to_json(f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)
    for f in dataclasses.fields(StageContext)
    if f.name != "lock"
}


def _items(cls: type, values: Any) -> list[Any]:
    if not isinstance(values, list):
        return []
    return [_obj(cls, v) for v in values if isinstance(v, dict)]


def _obj(cls: type, value: Any) -> Any:
    if not isinstance(value, dict):
        return None
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in value.items() if k in known})


def _json_copy(value: Any) -> Any:
    """A deep copy of decoded JSON (dicts, lists, scalars); much cheaper than copy.deepcopy."""
    kind = type(value)
    if kind is dict:
        return {k: _json_copy(v) for k, v in value.items()}
    if kind is list:
        return [_json_copy(v) for v in value]
    return value


def context_from(data: Mapping[str, Any], writable: Iterable[str] | None = None) -> StageContext:
    """A local StageContext from the fields the host sent.

    Writable fields are copied, so that ``data`` stays as received to diff
    against; the others are shared (the stage view only hands out frozen copies of them).
    """
    copied = frozenset(data) if writable is None else frozenset(writable)
    ctx = StageContext()
    for name, received in data.items():
        value = _json_copy(received) if name in copied else received
        if name == "tool_calls":
            ctx.tool_calls = _items(ToolCall, value)
        elif name == "tool_results":
            ctx.tool_results = _items(ToolResult, value)
        elif name == "memory":
            ctx.memory = _items(MemItem, value)
        elif name == "tool_call":
            ctx.tool_call = _obj(ToolCall, value)
        elif name == "tool_result":
            ctx.tool_result = _obj(ToolResult, value)
        elif name == "phase":
            try:
                ctx.phase = Stage(value)
            except ValueError:
                pass
        elif name in _DEFAULTS:
            setattr(ctx, name, value)
    return ctx


def changes_between(before: Mapping[str, Any], ctx: StageContext, writable: Iterable[str]) -> list[dict[str, Any]]:
    """The operations that turn ``before`` (JSON as received) into ``ctx`` — appends where possible."""
    ops: list[dict[str, Any]] = []
    for name in writable:
        if name not in _DEFAULTS:
            continue
        old = before.get(name, _DEFAULTS[name])
        new = to_json(getattr(ctx, name))
        if new == old:
            continue
        if name in _LIST_FIELDS and isinstance(old, list) and isinstance(new, list):
            if len(new) > len(old) and new[: len(old)] == old:
                ops.append({"op": "append", "field": name, "values": new[len(old) :]})
                continue
        if name in _DICT_FIELDS and isinstance(old, dict) and isinstance(new, dict):
            for key, value in new.items():
                if key not in old or old[key] != value:
                    ops.append({"op": "set_key", "field": name, "key": key, "value": value})
            for key in old:
                if key not in new:
                    ops.append({"op": "del_key", "field": name, "key": key})
            continue
        ops.append({"op": "set", "field": name, "value": new})
    return ops


# ---------------------------------------------------------------- service proxies


@dataclass(frozen=True)
class RemoteEvent:
    """An event delivered by the host, shaped like the daemon's own ``Event``."""

    id: int
    type: str
    data: dict[str, Any]
    ts: float

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "ts": self.ts, "data": self.data}


class _Remote:
    def __init__(self, endpoint: Endpoint) -> None:
        self._e = endpoint


class RemoteSettings(_Remote, SettingsAPI):
    def get(self, key: str, default: Any = None) -> Any:
        return self._e.call("settings.get", {"key": key, "default": default})

    def set(self, key: str, value: Any) -> Any:
        return self._e.call("settings.set", {"key": key, "value": value})

    def delete(self, key: str) -> bool:
        return bool(self._e.call("settings.delete", {"key": key}))

    def list(self, prefix: str = "") -> dict[str, Any]:
        return dict(self._e.call("settings.list", {"prefix": prefix}) or {})

    def get_core(self, key: str, default: Any = None) -> Any:
        return self._e.call("settings.getCore", {"key": key, "default": default})

    def set_core(self, key: str, value: Any) -> Any:
        return self._e.call("settings.setCore", {"key": key, "value": value})

    def list_core(self, prefix: str = "") -> dict[str, Any]:
        return dict(self._e.call("settings.listCore", {"prefix": prefix}) or {})

    def get_plugin(self, plugin: str, key: str, default: Any = None) -> Any:
        return self._e.call("settings.getPlugin", {"plugin": plugin, "key": key, "default": default})

    def set_plugin(self, plugin: str, key: str, value: Any) -> Any:
        return self._e.call("settings.setPlugin", {"plugin": plugin, "key": key, "value": value})

    def list_plugin(self, plugin: str, prefix: str = "") -> dict[str, Any]:
        return dict(self._e.call("settings.listPlugin", {"plugin": plugin, "prefix": prefix}) or {})

    def register_def(self, d: ConfigDef) -> None:
        self._e.call("settings.registerDef", {"def": to_json(d)})

    def defs(self, prefix: str = "") -> builtins.list[ConfigDef]:
        known = {f.name for f in dataclasses.fields(ConfigDef)}
        return [
            ConfigDef(**{k: v for k, v in d.items() if k in known})
            for d in self._e.call("settings.defs", {"prefix": prefix}) or []
        ]

    def dump(self, mask_secrets: bool = True) -> dict[str, Any]:
        return dict(self._e.call("settings.dump", {"mask_secrets": True}) or {})

    def plugins(self) -> builtins.list[str]:
        return builtins.list(self._e.call("settings.plugins", {}) or [])

    def data_dir(self) -> Path:
        path = Path(self._e.call("settings.dataDir", {}))
        path.mkdir(parents=True, exist_ok=True)
        return path


class RemoteMemory(_Remote, MemoryAPI):
    async def recall(self, keywords: list[str], depth: int = 2) -> Any:
        return await self._e.acall("memory.recall", {"keywords": list(keywords), "depth": depth})

    async def commit(self, triples: list[Any]) -> Any:
        return await self._e.acall("memory.commit", {"triples": to_json(list(triples))})

    async def introspect(self) -> dict[str, Any]:
        return dict(await self._e.acall("memory.introspect", {}) or {})

    async def merge_entities(self, source: str, target: str) -> Any:
        return await self._e.acall("memory.merge", {"source": source, "target": target})

    async def purge(self, criteria: Mapping[str, str], mode: str = "soft") -> Any:
        return await self._e.acall("memory.purge", {"criteria": dict(criteria), "mode": mode})


class RemoteDocs(_Remote, DocMemoryAPI):
    async def query(self, text: str, top_k: int = 3) -> list[Any]:
        return list(await self._e.acall("doc.query", {"text": text, "top_k": top_k}) or [])

    async def insert(self, doc: Any) -> Any:
        return await self._e.acall("doc.insert", {"doc": to_json(doc)})

    async def remove(self, doc_id: str) -> Any:
        return await self._e.acall("doc.remove", {"id": doc_id})

    async def stats(self) -> dict[str, Any]:
        return dict(await self._e.acall("doc.stats", {}) or {})

    async def insert_with_media(self, doc: Any, attachments: Sequence[MediaBlock]) -> Any:
        return await self._e.acall("doc.insertWithMedia", {"doc": to_json(doc),
                                                           "attachments": [b.to_json() for b in attachments]})


class RemoteKnowledge(_Remote, KnowledgeAPI):
    async def search(self, query: str, top_k: int = 5) -> list[Any]:
        return list(await self._e.acall("knowledge.search", {"query": query, "top_k": top_k}) or [])

    async def add(self, name: str, content: str) -> Any:
        return await self._e.acall("knowledge.add", {"name": name, "content": content})

    async def list(self) -> list[str]:
        return [str(n) for n in await self._e.acall("knowledge.list", {}) or []]


class RemoteTextMemory(_Remote, TextMemoryAPI):
    async def append(self, role: str, content: str, *, channel: str = "", **extra: Any) -> None:
        await self._e.acall("textmemory.append", {"role": role, "content": content, "channel": channel, "extra": extra})


class RemoteLLM(_Remote, LLMAPI):
    def list_sources(self) -> list[str]:
        return [str(s) for s in self._e.call("llm.listSources", {}) or []]

    def set_source(self, name: str) -> None:
        self._e.call("llm.setSource", {"name": name})

    def current_source(self) -> str:
        return str(self._e.call("llm.currentSource", {}))


class RemoteSocial(_Remote):
    """The social graph, read-only (external plugins cannot change it)."""

    async def get_person(self, name: str) -> Any:
        return await self._e.acall("social.getPerson", {"name": name})

    async def get_network(self, name: str = "", depth: int = 1) -> Any:
        return await self._e.acall("social.getNetwork", {"name": name, "depth": depth})

    async def get_trait(self, person: str, trait: str) -> Any:
        return await self._e.acall("social.getTrait", {"person": person, "trait": trait})

    async def get_relations(self, person: str) -> Any:
        return await self._e.acall("social.getRelations", {"person": person})

    async def list_persons(self) -> Any:
        return await self._e.acall("social.listPersons", {})


class RemotePlugins(_Remote):
    """Plugin management (needs the ``plugins`` capability)."""

    async def reload_one(self, name: str) -> Any:
        return await self._e.acall("plugin.reloadOne", {"name": name})

    def list_loaded(self) -> list[str]:
        return list(self._e.call("plugin.listLoaded", {}) or [])

    def is_disabled(self, name: str) -> bool:
        return bool(self._e.call("plugin.isDisabled", {"name": name}))


# ---------------------------------------------------------------- the SDK


@dataclass
class Handlers:
    """What the plugin registered, by the names the host will use to invoke it."""

    tools: dict[str, ToolHandler] = field(default_factory=dict)
    stages: dict[str, StageHandler] = field(default_factory=dict)
    channels: dict[str, ChannelHandler] = field(default_factory=dict)
    cleaners: dict[tuple[str, str], TextCleaner] = field(default_factory=dict)
    subscriptions: dict[str, EventCallback] = field(default_factory=dict)


TOOL_ORIGIN: ContextVar[Origin | None] = ContextVar("homeagent_remote_tool_origin", default=None)
"""The origin the host sent with the ``tool.invoke`` being handled (each request runs in its own task)."""


def origin_from(raw: Any) -> Origin | None:
    """The ``origin`` of a ``tool.invoke`` request, or None when it is absent or malformed."""
    if not isinstance(raw, dict) or not isinstance(raw.get("channel"), str) or not raw["channel"]:
        return None
    return Origin(raw["channel"], str(raw.get("user_id") or ""), str(raw.get("group_id") or ""))


class RemoteSDK(PluginSDK):
    """The PluginSDK of a plugin running as a subprocess."""

    def __init__(self, endpoint: Endpoint, handlers: Handlers, name: str, plugin_dir: Path | None) -> None:
        self._rt = handlers
        self._e = endpoint
        self._name = name
        self._dir = plugin_dir
        self._log = logging.getLogger(f"homeagent.plugin.{name}")
        self._handler_ids = itertools.count(1)

    @property
    def name(self) -> str:
        return self._name

    @property
    def log(self) -> logging.Logger:
        return self._log

    @property
    def plugin_dir(self) -> Path | None:
        return self._dir

    def current_origin(self) -> Origin | None:
        """The origin of the turn whose tool call this plugin is handling (the host sends it with each call)."""
        return TOOL_ORIGIN.get()

    def _unregister(self, method: str, params: dict[str, Any], local: Callable[[], object]) -> Unregister:
        done = False

        def undo() -> None:
            nonlocal done
            if done:
                return
            done = True
            local()
            if not self._e.closed:
                try:
                    self._e.call(method, params)
                except (ConnectionError, TimeoutError):
                    pass

        return undo

    def register_tool(
        self,
        tool: ToolDef | str,
        handler: ToolHandler,
        *,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        no_memory: bool = False,
        cleaner: TextCleaner | None = None,
        serial: bool = False,
        parallel_safe: bool = True,
    ) -> Unregister:
        tool = coerce_tool_def(
            tool,
            description=description,
            parameters=parameters,
            no_memory=no_memory,
            cleaner=cleaner,
            serial=serial,
            parallel_safe=parallel_safe,
        )
        if not callable(handler):
            raise TypeError(f"tool {tool.name!r}: handler must be callable, got {type(handler).__name__}")
        name = tool.name
        if name in self._rt.tools:
            raise ValueError(f"tool {name!r} is already registered by plugin {self._name!r}")
        self._rt.tools[name] = handler  # before the host can invoke it
        if tool.cleaner is not None:
            self._rt.cleaners[("tool", name)] = tool.cleaner
        try:
            self._e.call(
                "tool.register",
                {
                    "name": name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "no_memory": tool.no_memory,
                    "serial": tool.serial,
                    "parallel_safe": tool.parallel_safe,
                    "cleaner": tool.cleaner is not None,
                },
            )
        except BaseException:
            self._rt.tools.pop(name, None)
            self._rt.cleaners.pop(("tool", name), None)
            raise

        def local() -> None:
            self._rt.tools.pop(name, None)
            self._rt.cleaners.pop(("tool", name), None)

        return self._unregister("tool.unregister", {"name": name}, local)

    def _stage(self, stage: Stage | str, handler: StageHandler, own: bool, timeout: float | None) -> Unregister:
        if not callable(handler):
            raise TypeError(f"stage handler must be callable, got {type(handler).__name__}")
        label = stage.value if isinstance(stage, Stage) else str(stage)
        hid = f"{label}#{next(self._handler_ids)}"
        params: dict[str, Any] = {"stage": label, "handler": hid, "own_tools": own}
        if timeout is not None:
            params["timeout"] = timeout
        self._rt.stages[hid] = handler
        try:
            self._e.call("stage.register", params)
        except BaseException:
            self._rt.stages.pop(hid, None)
            raise
        return self._unregister("stage.unregister", {"handler": hid}, lambda: self._rt.stages.pop(hid, None))

    def register_stage(self, stage: Stage | str, handler: StageHandler, *, timeout: float | None = None) -> Unregister:
        return self._stage(stage, handler, False, timeout)

    def register_stage_own_tools(
        self, stage: Stage | str, handler: StageHandler, *, timeout: float | None = None
    ) -> Unregister:
        return self._stage(stage, handler, True, timeout)

    def _inject(self, method: str, source: str, channel: str, text: str, options: InjectOptions | None) -> str:
        params: dict[str, Any] = {"source": source, "channel": channel, "text": text}
        if options is not None:
            params["options"] = to_json(options)
        return str(self._e.call(method, params)["id"])

    def inject_text(self, source: str, channel: str, text: str, *, options: InjectOptions | None = None) -> str:
        return self._inject("io.injectText", source, channel, text, options)

    def inject_interrupt_text(
        self, source: str, channel: str, text: str, *, options: InjectOptions | None = None
    ) -> str:
        return self._inject("io.injectInterrupt", source, channel, text, options)

    def inject_text_no_memory(self, source: str, channel: str, text: str) -> str:
        return self._inject("io.injectTextNoMem", source, channel, text, None)

    def _media_params(
        self, source: str, channel: str, text: str, media: Sequence[MediaBlock], options: InjectOptions | None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"source": source, "channel": channel, "text": text,
                                  "media": [b.to_json() for b in media]}
        if options is not None:
            params["options"] = to_json(options)
        return params

    def inject_input_media(
        self, source: str, channel: str, text: str, media: Sequence[MediaBlock], *,
        options: InjectOptions | None = None,
    ) -> str:
        return str(self._e.call("io.injectMedia", self._media_params(source, channel, text, media, options))["id"])

    async def inject_input_media_sync(
        self, source: str, channel: str, text: str, media: Sequence[MediaBlock], *,
        options: InjectOptions | None = None, timeout: float = 300.0,
    ) -> dict[str, Any]:
        params = {**self._media_params(source, channel, text, media, options), "timeout": timeout}
        return dict(await self._e.acall("io.injectMediaSync", params, timeout=timeout + 5.0))

    def inject_interrupt_media(
        self, source: str, channel: str, text: str, media: Sequence[MediaBlock], *,
        options: InjectOptions | None = None,
    ) -> str:
        params = self._media_params(source, channel, text, media, options)
        return str(self._e.call("io.injectInterruptMedia", params)["id"])

    def set_tool_blocks(self, blocks: Sequence[MediaBlock]) -> None:
        call = TOOL_CALL.get()
        if not call:
            raise RuntimeError("set_tool_blocks works only inside a tool handler, while its call runs")
        self._e.call("io.setToolBlocks", {"call": call, "blocks": [b.to_json() for b in blocks]})

    async def inject_text_sync(
        self, source: str, channel: str, text: str, *, options: InjectOptions | None = None, timeout: float = 300.0
    ) -> dict[str, Any]:
        """Queue ``text`` and wait for the turn it starts; returns the turn's result (ok, text, error, …)."""
        params: dict[str, Any] = {"source": source, "channel": channel, "text": text, "timeout": timeout}
        if options is not None:
            params["options"] = to_json(options)
        return dict(await self._e.acall("io.injectInputSync", params, timeout=timeout + 5.0))

    def register_output_channel(
        self,
        name: str,
        caps: OutputCap | int,
        description: str,
        handler: ChannelHandler,
        *,
        meta_help: str = "",
        types: list[str] | None = None,
    ) -> Unregister:
        if not callable(handler):
            raise TypeError(f"output channel {name!r}: handler must be callable")
        params: dict[str, Any] = {"name": name, "caps": int(caps), "description": description, "meta_help": meta_help}
        if types is not None:
            params["types"] = list(types)
        if name in self._rt.channels:
            raise ValueError(f"output channel {name!r} is already registered by plugin {self._name!r}")
        self._rt.channels[name] = handler
        try:
            self._e.call("output.register", params)
        except BaseException:
            self._rt.channels.pop(name, None)
            raise
        return self._unregister("output.unregister", {"name": name}, lambda: self._rt.channels.pop(name, None))

    def register_input_channel(self, name: str, description: str = "") -> None:
        """Declare an input channel this plugin feeds (shown on the plugin's page)."""
        self._e.call("input.register", {"name": name, "description": description})

    def subscribe(self, event_types: str | Iterable[str] | None, callback: EventCallback) -> Unregister:
        types = [event_types] if isinstance(event_types, str) else list(event_types) if event_types is not None else None
        sid = str(self._e.call("events.subscribe", {"types": types})["subscription"])
        self._rt.subscriptions[sid] = callback
        return self._unregister(
            "events.unsubscribe", {"subscription": sid}, lambda: self._rt.subscriptions.pop(sid, None)
        )

    def publish(self, event_type: str, data: dict[str, Any] | None = None) -> None:
        raise PermissionError("external plugins may subscribe to events but not publish them")

    def register_text_cleaner(self, name: str, cleaner: TextCleaner) -> Unregister:
        if not callable(cleaner):
            raise TypeError(f"cleaner {name!r} is not callable")
        if ("text", name) in self._rt.cleaners:
            raise ValueError(f"text cleaner {name!r} is already registered by plugin {self._name!r}")
        self._rt.cleaners[("text", name)] = cleaner
        try:
            self._e.call("cleaner.register", {"name": name})
        except BaseException:
            self._rt.cleaners.pop(("text", name), None)
            raise
        return self._unregister(
            "cleaner.unregister", {"name": name}, lambda: self._rt.cleaners.pop(("text", name), None)
        )

    def auto_restart(self, enabled: bool) -> None:
        """Whether the host restarts this plugin after a crash (default: yes)."""
        self._e.call("lifecycle.autoRestart", {"enabled": bool(enabled)})

    def set_status(self, state: str, detail: str = "") -> None:
        """Say how the plugin's own work is going (``connected``, ``error`` …); shown by `homeagent plugin info`."""
        self._e.call("lifecycle.status", {"state": str(state), "detail": str(detail)})

    @property
    def settings(self) -> SettingsAPI:
        return RemoteSettings(self._e)

    @property
    def memory(self) -> MemoryAPI:
        return RemoteMemory(self._e)

    @property
    def text_memory(self) -> TextMemoryAPI:
        return RemoteTextMemory(self._e)

    @property
    def doc_memory(self) -> DocMemoryAPI:
        return RemoteDocs(self._e)

    @property
    def knowledge(self) -> KnowledgeAPI:
        return RemoteKnowledge(self._e)

    @property
    def llm(self) -> LLMAPI:
        return RemoteLLM(self._e)

    @property
    def social(self) -> RemoteSocial:
        """The social graph, read-only (needs ``memory.read``)."""
        return RemoteSocial(self._e)

    @property
    def plugins(self) -> RemotePlugins:
        """Reload and list plugins (needs ``plugins``)."""
        return RemotePlugins(self._e)
