"""A sandboxed Lua 5.4 runtime (lupa) shared by provider adapters and Lua plugins.

Why it looks the way it does:

* Untrusted code is compiled with ``load(src, "@chunkname", "t", env)`` into a
  fresh whitelisted environment: no ``os``, ``io``, ``debug``, ``package``,
  ``require``, ``dofile``, ``loadfile``, ``collectgarbage``, ``coroutine``,
  no bytecode, no ``python`` bridge, and ``getmetatable`` refuses strings.
  Python objects never enter the sandbox: values cross as Lua strings,
  numbers, booleans and tables; host callbacks are captured as upvalues of Lua
  closures, and an ``attribute_filter`` denies every Python attribute anyway.
* Every call runs inside a coroutine with a count hook: an endless loop stops
  with "instruction budget exceeded" at the file and line where it spun, even
  through ``pcall``. Once over budget (or over the soft memory limit) the hook
  fires on every instruction and errors each time, and ``xpcall``'s message
  handler is skipped (Lua runs a handler for an error raised by the hook with
  hooks off, so a looping handler would never stop). Scripts get no
  ``coroutine`` library (the hook is per coroutine), and the host never runs a
  script's metamethods outside a hooked worker: a ``__tostring`` error object is
  converted on a worker with a small budget of its own, and host walks of tables
  trust ``__lazy`` only on the host's own lazy objects. Memory is capped by lupa's allocator. The cap is
  tightened only while sandboxed code runs, so the host always keeps headroom
  for its own pushes (lupa aborts the process when an unprotected API call
  runs out of memory).
* ``http_get``/``http_post`` do not block: they yield the coroutine, the host
  performs the request (awaited with httpx in :meth:`LuaSandbox.call_async`,
  or synchronously in :meth:`LuaSandbox.call`), then resumes it. So Lua runs
  inline on the event loop for microseconds and never holds it during I/O.
* JSON is encoded/decoded in Lua (measured faster than converting through
  Python objects, and it keeps arrays and objects apart: decoded arrays and
  objects carry marker metatables, ``json.array()``/``json.object()`` set them).

Not covered: time spent inside one C library call (a pathological
``string.find`` pattern) is not interruptible; memory and instruction caps
bound everything else.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import lupa.lua54 as lua54

__all__ = [
    "HttpPolicy",
    "LuaBudgetExceeded",
    "LuaError",
    "LuaJSONError",
    "LuaMemoryExceeded",
    "LuaSandbox",
    "LuaSyntaxError",
]

_HEADROOM = 4 * 1024 * 1024  # host-side allocations happen with this much room above the sandbox cap


class LuaError(Exception):
    """An error raised by sandboxed Lua code; ``location`` is ``file:line`` when known."""

    kind = "runtime"

    def __init__(self, message: str, *, chunk: str = "", location: str = "", traceback: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.chunk = chunk
        self.location = location
        self.traceback = traceback


class LuaSyntaxError(LuaError):
    kind = "syntax"


class LuaBudgetExceeded(LuaError):
    kind = "budget"


class LuaMemoryExceeded(LuaError):
    kind = "memory"


class LuaJSONError(LuaError):
    """``json.decode`` rejected its input (for adapters: the server sent malformed JSON)."""

    kind = "json"


@dataclass(frozen=True)
class HttpPolicy:
    """Limits for the ``http_get``/``http_post`` builtins."""

    enabled: bool = True
    timeout: float = 10.0
    max_response_bytes: int = 1_000_000
    max_request_bytes: int = 1_000_000
    allowed_schemes: tuple[str, ...] = ("http", "https")


_ERROR_TYPES: dict[str, type[LuaError]] = {
    "runtime": LuaError,
    "syntax": LuaSyntaxError,
    "budget": LuaBudgetExceeded,
    "memory": LuaMemoryExceeded,
    "json": LuaJSONError,
}


def _deny_attributes(obj: Any, name: Any, is_setting: bool) -> Any:
    raise AttributeError("Python attributes are not accessible from the Lua sandbox")


# The trusted prelude runs once per runtime in the real global environment and
# returns the host's private API. Sandboxed code never sees this table.
_PRELUDE = (Path(__file__).parent / "prelude.lua").read_text(encoding="utf-8")
"""The prelude's source, read once at import (package data next to this module)."""

# Wraps a host callable so Lua only ever sees a Lua closure. Arguments are
# parked in a main-state table and fetched by the host from the main state:
# lupa remembers the lua_State a value was wrapped on, and a wrapper made on
# a coroutine's state would dangle once that coroutine is collected.
_WRAP = r"""
local tramp, name, stash = ...
local pack, unpack, error, tostring = table.pack, table.unpack, error, tostring
local counter = 0
return function(...)
  counter = counter + 1
  local id = counter
  stash[id] = pack(...)
  local r = pack(tramp(id))
  stash[id] = nil
  if r[1] then return unpack(r, 2, r.n) end
  error(tostring(name) .. ": " .. tostring(r[2]), 2)
end
"""


class LuaSandbox:
    """One sandboxed Lua state. Not thread-safe by itself; every entry point takes ``self._lock``.

    Call Lua functions only through :meth:`call` / :meth:`call_async` (never
    directly through lupa): they apply the instruction budget and the memory
    cap and serve ``http_get``/``http_post``.
    """

    def __init__(
        self,
        name: str,
        *,
        max_memory: int = 64 * 1024 * 1024,
        instruction_budget: int = 10_000_000,
        http: HttpPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.name = name
        self.max_memory = int(max_memory)
        self.instruction_budget = int(instruction_budget)
        self.http_policy = http or HttpPolicy()
        self._soft_kb = int(self.max_memory * 0.9 / 1024)
        self._http_client = http_client
        self._own_http_client: httpx.AsyncClient | None = None
        self._sync_client: httpx.Client | None = None
        self.log = logger or logging.getLogger(f"homeagent.lua.{name}")
        self._lock = threading.RLock()
        self._rt = lua54.LuaRuntime(
            register_eval=False,
            register_builtins=False,
            unpack_returned_tuples=True,
            attribute_filter=_deny_attributes,
            max_memory=self.max_memory + _HEADROOM,
        )
        self._depth = 0  # Lua executions in progress (nested through host callbacks)
        me = weakref.ref(self)  # the Lua state must not keep the sandbox alive (lupa cannot see that cycle)

        def lua_log(level: str, message: str) -> None:
            sandbox = me()
            if sandbox is not None:
                sandbox._lua_log(level, message)

        loader = self._rt.execute("return function(src, name) return load(src, name, 't', _ENV) end")
        api = loader(_PRELUDE, "=homeagent/lua/prelude")(lua_log)
        self._api = api
        self._start = api["start"]
        self._resume = api["resume"]
        self._abandon = api["abandon"]
        self._flatten = api["flatten"]
        self._compile = api["compile"]
        self._new_env = api["new_env"]
        self._decode = api["decode"]
        self._encode = api["encode"]
        self._collect = api["collect"]
        self._table_type = lua54.lua_type
        self._take = api["take"]
        self._stash = api["stash"]
        wrap = self._rt.execute("return function(src) return load(src, '=homeagent/wrap', 't', _ENV) end")
        self._wrap_factory = wrap(_WRAP)

    # ----------------------------------------------------------------- internals
    # Memory discipline: the allocator cap is ``max_memory`` only while sandboxed
    # code runs, and ``max_memory + headroom`` whenever the host pushes values
    # (an allocation failure in an unprotected lupa call aborts the process).
    def _tighten(self) -> None:
        self._rt.set_max_memory(self.max_memory)

    def _loosen(self) -> None:
        self._rt.set_max_memory(self.max_memory + _HEADROOM)

    def _lua_log(self, level: str, message: str) -> None:
        try:
            lvl = {"debug": logging.DEBUG, "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR}
            self.log.log(lvl.get(str(level), logging.INFO), "[lua %s] %s", self.name, message)
        except Exception:  # logging must never raise into Lua
            pass

    def _check_room(self, incoming: int = 0, *, tight: bool = False) -> None:
        """Refuse pushes that could hit the allocator cap."""
        limit = self.max_memory if tight else self.max_memory + _HEADROOM
        used = self._rt.get_memory_used()
        if used + incoming + 256 * 1024 < limit:
            return
        self._collect()
        used = self._rt.get_memory_used()
        if used + incoming + 256 * 1024 >= limit:
            raise LuaMemoryExceeded(
                f"Lua state '{self.name}' is out of memory ({used // 1024} KiB used, cap {self.max_memory // 1024} KiB)",
                chunk=self.name,
            )

    def _raise(self, res: tuple[Any, ...]) -> None:
        _, kind, message, location, function, tb = res[:6]
        cls = _ERROR_TYPES.get(str(kind), LuaError)
        message = str(message)
        location = str(location or "")
        text = message
        if location and location not in message:
            text = f"{message} (at {location}{function or ''})"
        raise cls(text, chunk=self.name, location=location, traceback=str(tb or ""))

    def _step(self, entry: Any, head: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
        """One run of sandboxed code (start or resume) under the tight cap."""
        size = 0
        for a in args:
            if type(a) is str:
                size += len(a)
        with self._lock:
            rt = self._rt
            used = rt.get_memory_used()
            if used + 4 * size + 262144 >= self.max_memory or (self._depth == 0 and used > self.max_memory // 2):
                self._collect()  # garbage left by earlier calls must not eat this call's allowance
                self._check_room(4 * size, tight=True)
            self._depth += 1
            rt.set_max_memory(self.max_memory)
            try:
                res = entry(*head, *args)
            except lua54.LuaMemoryError as exc:
                raise LuaMemoryExceeded(f"{exc} (Lua state '{self.name}')", chunk=self.name) from None
            finally:
                self._depth -= 1
                rt.set_max_memory(self.max_memory + _HEADROOM)
            if type(res) is not tuple:
                res = (res,)
            if res[0] == "box":
                packed = self._take(res[1])
                packed = packed if type(packed) is tuple else (packed,)
                count = int(packed[0] or 0)
                return ("ok", count, *packed[1 : 1 + count])
            return res

    def _step_start(self, budget: int, fn: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return self._step(self._start, (budget, self._soft_kb, False, fn), args)

    def _step_resume(self, handle: int, values: tuple[Any, ...]) -> tuple[Any, ...]:
        return self._step(self._resume, (handle,), values)

    def _outcome(self, res: tuple[Any, ...]) -> tuple[Any, ...]:
        if res[0] == "ok":
            count = int(res[1])
            return tuple(res[2 : 2 + count]) + (None,) * max(0, count - (len(res) - 2))
        self._raise(res)
        raise AssertionError("unreachable")

    def _prepare_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(self.to_lua(a) for a in args)

    # ------------------------------------------------------------------ public API
    def load(self, source: str, chunkname: str, *, globals: Mapping[str, Any] | None = None) -> Any:
        """Compile and run ``source`` in a fresh sandbox environment.

        Returns the chunk's return value, or its environment table when it
        returned nothing. ``chunkname`` (usually the file path) names the
        chunk in error messages: ``openai.lua:12: ...``.
        """
        with self._lock:
            self._check_room(len(source) * 2)
            env = self._new_env()
            for key, value in (globals or {}).items():
                env[key] = self.to_lua(value)
            fn, err = self._compile_chunk(source, chunkname, env)
        if fn is None:
            raise LuaSyntaxError(str(err), chunk=chunkname, location=_location_of(str(err)))
        result = self.call_multi(fn)
        if result and result[0] is not None:
            return result[0]
        return env

    def _compile_chunk(self, source: str, chunkname: str, env: Any) -> tuple[Any, Any]:
        res = self._compile(source, "@" + chunkname, env)
        if isinstance(res, tuple):
            return res[0], res[1]
        return res, None

    def load_trusted(self, source: str, chunkname: str, *args: Any) -> Any:
        """Run host-written Lua with full access (debug, raw metatables). Never pass user code here."""
        with self._lock:
            self._check_room(len(source) * 2)
            fn = self._rt.execute(f"return load(..., {json.dumps('=' + chunkname)}, 't', _ENV)", source)
            return fn(self._api, *args)

    def call(self, fn: Any, *args: Any) -> Any:
        """Call a Lua function under the budget; returns its first result (raw Lua value).

        ``http_get``/``http_post`` inside are performed synchronously (use
        :meth:`call_async` on the event loop).
        """
        res = self.call_multi(fn, *args)
        return res[0] if res else None

    def call_multi(self, fn: Any, *args: Any, budget: int | None = None) -> tuple[Any, ...]:
        res = self._step_start(budget or self.instruction_budget, fn, self._prepare_args(args))
        while res[0] == "yield":
            handle = res[1]
            try:
                reply = self._http_sync(*res[2:6])
            except BaseException:
                with self._lock:
                    self._abandon(handle)
                raise
            res = self._step_resume(handle, reply)
        return self._outcome(res)

    async def call_async(self, fn: Any, *args: Any, budget: int | None = None) -> tuple[Any, ...]:
        """Like :meth:`call_multi`, but ``http_*`` builtins are awaited without blocking the loop."""
        return await self.finish_async(self._step_start(budget or self.instruction_budget, fn, self._prepare_args(args)))

    async def call_scalars_async(self, fn: Any, *args: Any, budget: int | None = None) -> tuple[Any, ...]:
        """Like :meth:`call_async` for host-written functions that take and return scalars only.

        ``args`` go to Lua as they are (strings, numbers, booleans, Lua values: nothing is
        converted) and the results come back without the check for tables, so a call costs a
        single crossing. On the event loop it never waits for the state: when a worker thread
        holds it (transforming a huge request), the call runs in a thread as well.
        """
        head = (budget or self.instruction_budget, self._soft_kb, True, fn)
        if self._lock.acquire(blocking=False):
            try:
                res = self._step(self._start, head, args)
            finally:
                self._lock.release()
        else:
            res = await asyncio.to_thread(self._step, self._start, head, args)
        if res[0] == "ok":
            return res[2:]
        return await self.finish_async(res)

    @staticmethod
    def lua_type(value: Any) -> str:
        """The Lua type name of a value the sandbox handed out (``"table"``, ``"function"``, …;
        Python scalars as Lua sees them: ``"nil"``, ``"boolean"``, ``"number"``, ``"string"``)."""
        if value is None:
            return "nil"
        if isinstance(value, bool):
            return "boolean"
        if isinstance(value, int | float):
            return "number"
        if isinstance(value, str | bytes):
            return "string"
        return str(lua54.lua_type(value))

    async def finish_async(self, res: tuple[Any, ...]) -> tuple[Any, ...]:
        """Serve pending ``http_*`` yields of a started call and return its results."""
        while res[0] == "yield":
            handle = res[1]
            try:
                reply = await self._http_async(*res[2:6])
            except BaseException:
                with self._lock:
                    self._abandon(handle)
                raise
            res = self._step_resume(handle, reply)
        return self._outcome(res)

    def to_lua(self, obj: Any) -> Any:
        """Convert JSON-like Python data (dict/list/tuple/str/int/float/bool/None) to Lua values;
        ``bytes`` become Lua strings as they are."""
        if obj is None or isinstance(obj, bool | int | float | str | bytes):
            return obj
        if isinstance(obj, dict | list | tuple):
            try:
                text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"cannot pass to Lua: {exc}") from exc
            with self._lock:
                self._check_room(len(text) * 6)
                return self._decode(text)
        if self._table_type(obj) is not None:  # already a Lua value
            return obj
        raise TypeError(f"cannot pass a {type(obj).__name__} to Lua")

    def to_python(self, obj: Any) -> Any:
        """Convert a Lua value to Python: tables become dicts/lists (json.array/object markers win),
        functions stay callable Lua objects (call them through :meth:`call`)."""
        if self._table_type(obj) != "table":
            return obj
        with self._lock:
            res = self._flatten(obj)
        types, big, count = res[0], res[1], res[2]
        if big:
            values: Any = [big[i] for i in range(1, int(count) + 1)]
        else:
            values = res[3:]
        return _rebuild(str(types), values, self._table_type)

    def encode_json(self, obj: Any) -> str:
        """Encode a Lua value as JSON text with the sandbox's own encoder."""
        with self._lock:
            return str(self._encode(obj))

    def wrap_function(self, fn: Callable[..., Any], name: str = "host") -> Any:
        """Expose a host callable to Lua as a plain Lua closure.

        Arguments reach ``fn`` converted with :meth:`to_python`; its result is
        converted with :meth:`to_lua`. A Python exception becomes a Lua error
        carrying only its message.
        """

        me = weakref.ref(self)

        def trampoline(box_id: int) -> tuple[Any, ...]:
            sandbox = me()
            if sandbox is None:
                return (False, "the Lua sandbox is closed")
            running = sandbox._depth > 0
            if running:
                sandbox._loosen()  # host work may push values; Lua itself is paused meanwhile
            try:
                with sandbox._lock:
                    packed = sandbox._take(box_id)
                packed = packed if isinstance(packed, tuple) else (packed,)
                count = int(packed[0] or 0)
                values = list(packed[1 : 1 + count]) + [None] * max(0, count - (len(packed) - 1))
                result = fn(*(sandbox.to_python(a) for a in values))
                return (True, sandbox.to_lua(result))
            except Exception as exc:
                return (False, str(exc) or type(exc).__name__)
            finally:
                if running:
                    sandbox._tighten()

        with self._lock:
            return self._wrap_factory(trampoline, name, self._stash)

    def memory_used(self) -> int:
        return int(self._rt.get_memory_used())

    def new_table(self) -> Any:
        with self._lock:
            return self._rt.table()

    async def aclose(self) -> None:
        if self._own_http_client is not None:
            await self._own_http_client.aclose()
            self._own_http_client = None
        if self._sync_client is not None:
            self._sync_client.close()
            self._sync_client = None

    # ----------------------------------------------------------------- http builtins
    def _http_checks(self, method: str, url: Any, body: Any) -> str | None:
        policy = self.http_policy
        if not policy.enabled:
            return "http is disabled for this sandbox"
        if not isinstance(url, str):
            return "url must be a string"
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme not in policy.allowed_schemes:
            return f"scheme '{scheme}' is not allowed"
        if body is not None and len(str(body).encode()) > policy.max_request_bytes:
            return f"request body larger than {policy.max_request_bytes} bytes"
        return None

    def _http_reply(self, status: int, headers: httpx.Headers, data: bytes) -> tuple[Any, ...]:
        text = data.decode("utf-8", errors="replace")
        payload = json.dumps(
            {"status": status, "body": text, "headers": {k.lower(): v for k, v in headers.items()}},
            ensure_ascii=False,
        )
        with self._lock:
            self._check_room(len(payload) * 3)
            return (self._decode(payload),)

    def _http_sync(self, method: str, url: Any, body: Any, headers: Any) -> tuple[Any, ...]:
        problem = self._http_checks(method, url, body)
        if problem:
            return (None, problem)
        hdrs = _headers_from(headers)
        if self._sync_client is None:
            self._sync_client = httpx.Client(timeout=self.http_policy.timeout)
        try:
            with self._sync_client.stream(method, url, content=body, headers=hdrs) as resp:
                data = _read_capped_sync(resp, self.http_policy.max_response_bytes)
                return self._http_reply(resp.status_code, resp.headers, data)
        except _TooLarge as exc:
            return (None, str(exc))
        except httpx.HTTPError as exc:
            return (None, f"{type(exc).__name__}: {exc}")

    async def _http_async(self, method: str, url: Any, body: Any, headers: Any) -> tuple[Any, ...]:
        problem = self._http_checks(method, url, body)
        if problem:
            return (None, problem)
        hdrs = _headers_from(headers)
        client = self._http_client
        if client is None:
            if self._own_http_client is None:
                self._own_http_client = httpx.AsyncClient()
            client = self._own_http_client
        try:
            async with asyncio.timeout(self.http_policy.timeout):
                async with client.stream(
                    method, url, content=body, headers=hdrs, timeout=self.http_policy.timeout
                ) as resp:
                    data = await _read_capped(resp, self.http_policy.max_response_bytes)
                    return self._http_reply(resp.status_code, resp.headers, data)
        except _TooLarge as exc:
            return (None, str(exc))
        except TimeoutError:
            return (None, f"timed out after {self.http_policy.timeout}s")
        except httpx.HTTPError as exc:
            return (None, f"{type(exc).__name__}: {exc}")


def _headers_from(text: Any) -> dict[str, str]:
    try:
        value = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


class _TooLarge(Exception):
    pass


async def _read_capped(resp: httpx.Response, cap: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for piece in resp.aiter_bytes():
        size += len(piece)
        if size > cap:
            raise _TooLarge(f"response larger than {cap} bytes")
        parts.append(piece)
    return b"".join(parts)


def _read_capped_sync(resp: httpx.Response, cap: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    for piece in resp.iter_bytes():
        size += len(piece)
        if size > cap:
            raise _TooLarge(f"response larger than {cap} bytes")
        parts.append(piece)
    return b"".join(parts)


def _location_of(message: str) -> str:
    """``path/file.lua:12: msg`` -> ``path/file.lua:12``."""
    head, sep, _ = message.partition(": ")
    if sep and ":" in head and head.rsplit(":", 1)[1].isdigit():
        return head
    return ""


def _rebuild(types: str, values: Any, lua_type: Callable[[Any], Any]) -> Any:
    """Inverse of the prelude's ``flatten``: rebuild nested dicts/lists from the type string."""
    root: Any = None
    stack: list[Any] = []
    pos = 0
    for ch in types:
        if ch == "{" or ch == "[":
            new: Any = {} if ch == "{" else []
            if not stack:
                root = new
            else:
                top = stack[-1]
                if type(top) is list:
                    top.append(new)
                else:
                    top[values[pos]] = new
                    pos += 1
            stack.append(new)
        elif ch == "}" or ch == "]":
            stack.pop()
        else:
            if not stack:
                root = None if ch == "z" else values[pos]
                pos += 0 if ch == "z" else 1
                continue
            top = stack[-1]
            if type(top) is list:
                if ch == "z":
                    top.append(None)
                else:
                    top.append(values[pos])
                    pos += 1
            else:
                key = values[pos]
                pos += 1
                if ch == "z":
                    top[key] = None
                else:
                    top[key] = values[pos]
                    pos += 1
    return root
