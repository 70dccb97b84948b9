"""Loads Lua provider adapters (built-in and the user's adapters folder) and reloads them on change.

Each adapter lives in its own :class:`LuaSandbox`. A small trusted harness
(Lua, running inside the same sandbox under the same budget) calls the
adapter's functions, checks what they return and flattens it into a tuple,
so one crossing brings a whole stream chunk to Python. A wrong shape becomes
an :class:`AdapterError` that names the adapter file and the line where the
offending function is defined.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from homeagent.lua.runtime import HttpPolicy, LuaError, LuaJSONError, LuaSandbox
from homeagent.providers.native_requests import native_builder, openai_request
from homeagent.providers.request_json import RequestJSON, request_parts

__all__ = [
    "NO_CHUNK",
    "Adapter",
    "AdapterError",
    "AdapterInfo",
    "AdapterLoader",
    "FastResult",
    "ParsedChunk",
    "ParsedResponse",
    "RequestContext",
    "RequestJSON",
    "anthropic_chunk_fast",
    "gemini_chunk_fast",
    "ollama_chunk_fast",
    "openai_chunk_fast",
    "request_parts",
]

_log = logging.getLogger("homeagent.providers.adapters")
BUILTIN_DIR = Path(__file__).parent / "adapters"
COMPAT_LIB = "_openai_compat.lua"
STREAM_FORMATS = ("openai", "anthropic", "gemini", "ollama")  # values of an adapter's `stream_format` field


class AdapterError(Exception):
    """An adapter failed to load or returned something unusable.

    ``kind`` is ``adapter`` for bugs in the script and ``bad_response`` when
    the server's payload could not be decoded.
    """

    def __init__(self, message: str, *, path: str = "", location: str = "", kind: str = "adapter") -> None:
        super().__init__(message)
        self.path = path
        self.location = location
        self.kind = kind


@dataclass(frozen=True)
class RequestContext:
    model: str
    stream: bool
    thinking: bool
    base_url: str = ""
    source: str = ""


@dataclass
class ParsedToolCall:
    id: str
    name: str
    arguments: str


@dataclass
class ParsedResponse:
    content: str = ""
    reasoning: str = ""
    finish_reason: str = ""
    usage: tuple[int, int, int, int, int] | None = None
    tool_calls: list[ParsedToolCall] = field(default_factory=list)
    error: str = ""
    error_kind: str = ""


@dataclass
class ParsedChunk:
    content: str = ""
    reasoning: str = ""
    finish_reason: str = ""
    done: bool = False
    usage: tuple[int, int, int, int, int] | None = None
    error: str = ""
    error_kind: str = ""
    tool_calls: list[tuple[int, str, str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    path: str
    builtin: bool
    overrides_builtin: bool
    version: str
    error: str


# Trusted harness: validates and flattens what the adapter returns. Runs in the
# adapter's sandbox, under the same budget, but in the host environment.
_HARNESS = r"""
local api, A, chunkname = ...
local decode, encode, fix_utf8, describe = api.decode, api.encode, api.fix_utf8, api.describe
local memo_begin, memo_end = api.memo_begin, api.memo_end
local type, tostring, tonumber, error, rawlen, select = type, tostring, tonumber, error, rawlen, select
local floor = math.floor
local unpack = table.unpack

local H = {}

local function defined(fname)
  local f = A[fname]
  if type(f) == "function" then return " (function defined at " .. describe(f) .. ")" end
  return ""
end

local function bad(fname, msg)
  error(chunkname .. ": " .. fname .. " " .. msg .. defined(fname), 0)
end

local function text(fname, r, key, alt)
  local v = r[key]
  if v == nil and alt then v = r[alt]; key = alt end
  if v == nil then return nil end
  local tv = type(v)
  if tv == "string" then return fix_utf8(v) end
  if tv == "number" then return tostring(v) end
  if v == api.null or v == false then return nil end
  bad(fname, "returned field '" .. key .. "' as a " .. tv .. ", expected a string")
end

local function int(v)
  if type(v) == "number" and v == v then return floor(v) end
  if type(v) == "string" then local n = tonumber(v); if n then return floor(n) end end
  return nil
end

local function pick(u, ...)
  for i = 1, select("#", ...) do
    local n = int(u[(select(i, ...))])
    if n then return n end
  end
  return nil
end

local function sub(u, key, field)
  local t = u[key]
  if type(t) == "table" then return int(t[field]) end
  return nil
end

-- Accepts the normalised shape {prompt, completion, total, cache_read, reasoning}
-- as well as the usual raw shapes (OpenAI, DeepSeek, Anthropic, Gemini, Ollama).
local function usage5(fname, u)
  if u == nil or u == api.null then return nil end
  if type(u) ~= "table" then bad(fname, "returned 'usage' as a " .. type(u) .. ", expected a table") end
  local p = pick(u, "prompt", "prompt_tokens", "input_tokens", "promptTokenCount", "prompt_eval_count") or 0
  local c = pick(u, "completion", "completion_tokens", "output_tokens", "candidatesTokenCount", "eval_count") or 0
  local cr = pick(u, "cache_read", "cached_tokens", "prompt_cache_hit_tokens", "cache_read_input_tokens",
                  "cachedContentTokenCount") or sub(u, "prompt_tokens_details", "cached_tokens") or 0
  local rs = pick(u, "reasoning", "reasoning_tokens", "thoughtsTokenCount")
             or sub(u, "completion_tokens_details", "reasoning_tokens") or 0
  local t = pick(u, "total", "total_tokens", "totalTokenCount") or 0
  return p, c, t, cr, rs
end

local function args_text(fname, v)
  if v == nil or v == api.null then return "" end
  if type(v) == "string" then return fix_utf8(v) end
  if type(v) == "table" then return encode(v) end
  bad(fname, "returned tool call arguments as a " .. type(v) .. ", expected a string or table")
end

-- checked: false leaves invalid UTF-8 in the body for the host to notice (it then asks
-- again with checked = true, which replaces it): checking in Lua costs ~1 ns a byte.
function H.request(req_json, messages_json, tools_json, ctx, message_sizes, checked)
  memo_begin() -- strings of the host's request JSON are re-encoded without a scan
  local pending = {messages = messages_json}
  if tools_json ~= "" then pending.tools = tools_json end
  local sizes = nil
  if message_sizes and message_sizes ~= "" then sizes = {messages = message_sizes} end
  local req = api.lazy_object(decode(req_json, true), pending, sizes)
  local body = A.transform_request(req, ctx)
  if type(body) == "string" then memo_end(); return checked and fix_utf8(body) or body end
  if type(body) ~= "table" then memo_end(); bad("transform_request", "returned a " .. type(body) .. ", expected a table or a JSON string") end
  local text = encode(body, not checked, messages_json, tools_json)
  memo_end()
  if type(text) == "table" then return unpack(text) end
  return text
end

function H.response(raw, ctx)
  local fname = "transform_response"
  local r = A.transform_response(raw, ctx)
  if type(r) ~= "table" then bad(fname, "returned a " .. type(r) .. ", expected a table") end
  local out = {
    text(fname, r, "content") or "",
    text(fname, r, "reasoning_content", "reasoning") or "",
    text(fname, r, "finish_reason") or "",
  }
  local p, c, t, cr, rs = usage5(fname, r.usage or r.token_usage)
  out[4], out[5], out[6], out[7], out[8] = p or -1, c or 0, t or 0, cr or 0, rs or 0
  local err, err_kind = r.error, r.error_kind
  if err ~= nil and err ~= api.null and err ~= false then
    if type(err) == "table" then err = err.message or encode(err) end
    err = tostring(err)
  else
    err = ""
  end
  if type(err_kind) ~= "string" then err_kind = "" end
  out[10], out[11] = err, err_kind
  local calls = r.tool_calls
  local n = 12
  local count = 0
  if calls ~= nil and calls ~= api.null then
    if type(calls) ~= "table" then bad(fname, "returned 'tool_calls' as a " .. type(calls) .. ", expected a list") end
    for i = 1, rawlen(calls) do
      local tc = calls[i]
      if type(tc) ~= "table" then bad(fname, "returned tool_calls[" .. i .. "] as a " .. type(tc) .. ", expected a table") end
      local fn = type(tc["function"]) == "table" and tc["function"] or tc
      local name = fn.name
      if type(name) ~= "string" or name == "" then bad(fname, "returned tool_calls[" .. i .. "] without a name") end
      local id = tc.id
      if type(id) ~= "string" then id = (id ~= nil and id ~= api.null) and tostring(id) or "" end
      local a = fn.arguments
      if a == nil then a = fn.raw_arguments end
      out[n + 1], out[n + 2], out[n + 3] = id, name, args_text(fname, a)
      n = n + 3
      count = count + 1
    end
  end
  out[12] = count
  return unpack(out, 1, n)
end

function H.chunk(line, state, ctx)
  local fname = "transform_stream_chunk"
  local r = A.transform_stream_chunk(line, state, ctx)
  if r == nil or r == "" or r == false or r == api.null then return nil end
  if type(r) ~= "table" then bad(fname, "returned a " .. type(r) .. ", expected a table, nil or \"\"") end
  local p, c, t, cr, rs = usage5(fname, r.usage or r.token_usage)
  local err, err_kind = r.error, r.error_kind
  if err ~= nil and err ~= api.null and err ~= false then
    if type(err) == "table" then err = err.message or encode(err) end
    err = tostring(err)
  else
    err = ""
  end
  if type(err_kind) ~= "string" then err_kind = "" end
  local out = {
    "c",
    text(fname, r, "content") or "",
    text(fname, r, "reasoning", "reasoning_content") or "",
    text(fname, r, "finish_reason") or "",
    r.done and true or false,
    p or -1, c or 0, t or 0, cr or 0, rs or 0,
    err, err_kind, 0,
  }
  local n = 13
  local calls = r.tool_calls
  if calls ~= nil and calls ~= api.null then
    if type(calls) ~= "table" then bad(fname, "returned 'tool_calls' as a " .. type(calls) .. ", expected a list") end
    local count = 0
    for i = 1, rawlen(calls) do
      local tc = calls[i]
      if type(tc) ~= "table" then bad(fname, "returned tool_calls[" .. i .. "] as a " .. type(tc) .. ", expected a table") end
      local fn = type(tc["function"]) == "table" and tc["function"] or tc
      local index = int(tc.index) or int(tc.stream_index) or (i - 1)
      local id = tc.id
      if type(id) ~= "string" then id = (id ~= nil and id ~= api.null) and tostring(id) or "" end
      local name = fn.name
      if type(name) ~= "string" then name = "" end
      local a = fn.arguments
      if a == nil then a = fn.raw_arguments end
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = index, id, name, args_text(fname, a)
      n = n + 4
      count = count + 1
    end
    out[13] = count
  end
  return unpack(out, 1, n)
end

function H.endpoint(ctx)
  local e = A.endpoint
  if type(e) == "function" then e = e(ctx) end
  if type(e) ~= "string" then bad("endpoint", "returned a " .. type(e) .. ", expected a string") end
  return e
end

function H.headers(api_key, ctx)
  local h = A.headers
  if type(h) == "function" then h = h(api_key, ctx) end
  if h == nil then return end
  if type(h) ~= "table" then bad("headers", "returned a " .. type(h) .. ", expected a table") end
  local out, n = {}, 0
  for k, v in pairs(h) do
    if type(k) ~= "string" then bad("headers", "returned a non-string header name") end
    if type(v) ~= "string" and type(v) ~= "number" then bad("headers", "returned header '" .. k .. "' as a " .. type(v)) end
    out[n + 1], out[n + 2] = k, tostring(v)
    n = n + 2
  end
  return unpack(out, 1, n)
end

function H.ctx(model, stream, thinking, base_url, source)
  return {model = model, stream = stream, thinking = thinking, base_url = base_url, source = source}
end

return H
"""


class Adapter:
    """One loaded adapter script; the provider calls these per request / per stream line."""

    def __init__(self, sandbox: LuaSandbox, table: Any, path: Path, *, builtin: bool, mtime_ns: int) -> None:
        self.sandbox = sandbox
        self.path = path
        self.builtin = builtin
        self.mtime_ns = mtime_ns
        self.chunkname = _chunkname(path, builtin)
        self.name = str(table["name"] or path.stem)
        self.version = str(table["version"] if table["version"] is not None else "0")
        needs = table["needs_api_key"]
        self.needs_api_key = True if needs is None else bool(needs)
        self.streams = table["transform_stream_chunk"] is not None
        fmt = table["stream_format"]
        if fmt is not None and fmt not in STREAM_FORMATS:
            raise LuaError(f"field 'stream_format' is {fmt!r}, expected one of: {', '.join(STREAM_FORMATS)}")
        self.stream_format: str = str(fmt or "")
        self._fast = _fast_parser(self.stream_format)
        # The shipped adapters' bodies are built by the host (same JSON as their transform_request;
        # see native_requests.py). A user's file runs its Lua, unless it declares request_format.
        options = _request_options(sandbox, table)
        if builtin:
            native = native_builder(path.stem)
        elif options is not None:  # request_format = "openai": the host writes openai_compat.request's body
            native = openai_request(options)
        else:
            native = None
        self._native = native.build if native is not None else None
        # the per-message texts key the message caches (Lua's json.items and the host's):
        # the host-built pass-through bodies need none
        self.wants_message_sizes = native is None or native.message_texts
        endpoint = table["endpoint"]
        self._static_endpoint: str | None = endpoint if isinstance(endpoint, str) else None
        self._harness = sandbox.load_trusted(_HARNESS, "homeagent/adapter-harness", table, self.chunkname)
        self._h_request = self._harness["request"]
        self._h_response = self._harness["response"]
        self._h_chunk = self._harness["chunk"]
        self._h_endpoint = self._harness["endpoint"]
        self._h_headers = self._harness["headers"]
        self._h_ctx = self._harness["ctx"]
        self._budget = sandbox.instruction_budget
        # The built-in adapters' headers depend on the API key alone and none of them
        # writes to its ctx table: both are made once, not on every request (~35 µs a call
        # in a busy loop). A user's adapter may fetch tokens or keep state: always called.
        self._headers_by_key: dict[str, dict[str, str]] = {}
        self._contexts: dict[RequestContext, Any] = {}

    def __repr__(self) -> str:
        return f"<Adapter {self.name} v{self.version} {self.chunkname}>"

    def _fail(self, exc: LuaError) -> AdapterError:
        kind = "bad_response" if isinstance(exc, LuaJSONError) else "adapter"
        message = exc.message
        if self.chunkname not in message and not exc.location and not _has_location(message):
            message = f"{self.chunkname}: {message}"
        return AdapterError(f"adapter '{self.name}': {message}", path=str(self.path), location=exc.location, kind=kind)

    async def _run(self, fn: Any, *args: Any, size: int = 0) -> tuple[Any, ...]:
        sb = self.sandbox
        head = (self._budget + 60 * size, sb._soft_kb, True, fn)  # the harness returns scalars only
        try:
            if sb._lock.acquire(blocking=False):
                try:
                    res = sb._step(sb._start, head, args)
                finally:
                    sb._lock.release()
            else:  # a worker thread is transforming a huge request: never wait for it on the loop
                res = await asyncio.to_thread(sb._step, sb._start, head, args)
            if res[0] == "ok":
                return res[2:]  # the harness returns scalars only
            return await sb.finish_async(res)
        except LuaError as exc:
            raise self._fail(exc) from None

    def context(self, ctx: RequestContext) -> Any:
        if self.builtin:
            made = self._contexts.get(ctx)
            if made is not None:
                return made
        with self.sandbox._lock:
            made = self._h_ctx(ctx.model, ctx.stream, ctx.thinking, ctx.base_url, ctx.source)
        if self.builtin:
            if len(self._contexts) >= 64:
                self._contexts.clear()
            self._contexts[ctx] = made
        return made

    async def endpoint(self, lua_ctx: Any) -> str:
        if self._static_endpoint is not None:
            return self._static_endpoint
        (value,) = (await self._run(self._h_endpoint, lua_ctx))[:1]
        return str(value)

    async def headers(self, api_key: str, lua_ctx: Any) -> dict[str, str]:
        """The request headers; a fresh dict the caller may change."""
        known = self._headers_by_key.get(api_key) if self.builtin else None
        if known is not None:
            return dict(known)
        values = await self._run(self._h_headers, api_key, lua_ctx)
        made = {str(values[i]): str(values[i + 1]) for i in range(0, len(values) - 1, 2) if values[i] is not None}
        if self.builtin:
            if len(self._headers_by_key) >= 16:
                self._headers_by_key.clear()
            self._headers_by_key[api_key] = dict(made)
        return made

    def _native_body(self, parts: RequestJSON) -> bytes | None:
        """The host-built body of a shipped adapter; None: the Lua builds it (also when the
        host's builder fails: a bug there must not cost the user the adapter)."""
        if self._native is None:
            return None
        try:
            return self._native(parts)
        except Exception as exc:  # the Lua is the reference and still works
            _log.warning("adapter '%s': the host-built request failed (%s: %s); its Lua builds it",
                         self.name, type(exc).__name__, exc)
            return None

    async def build_request(self, parts: RequestJSON, lua_ctx: Any) -> bytes:
        """The body (UTF-8 JSON) for one request (``parts`` from :func:`request_parts`)."""
        body = self._native_body(parts)
        if body is not None:
            return body
        args = (parts.rest, parts.messages, parts.tools, lua_ctx, parts.message_sizes)
        try:
            res = await self._run(self._h_request, *args, False, size=parts.size)
        except UnicodeDecodeError:  # the adapter put invalid UTF-8 in: run it again, replacing it
            res = await self._run(self._h_request, *args, True, size=parts.size)
        return _join_body(res, parts)

    def build_request_sync(self, parts: RequestJSON, lua_ctx: Any) -> bytes:
        """For worker threads: same as :meth:`build_request`, ``http_*`` builtins block."""
        body = self._native_body(parts)
        if body is not None:
            return body
        args = (parts.rest, parts.messages, parts.tools, lua_ctx, parts.message_sizes)
        budget = self._budget + 60 * parts.size
        try:
            try:
                res = self.sandbox.call_multi(self._h_request, *args, False, budget=budget)
            except UnicodeDecodeError:  # the adapter put invalid UTF-8 in: run it again, replacing it
                res = self.sandbox.call_multi(self._h_request, *args, True, budget=budget)
        except LuaError as exc:
            raise self._fail(exc) from None
        return _join_body(res, parts)

    async def parse_response(self, raw: str, lua_ctx: Any) -> ParsedResponse:
        v = await self._run(self._h_response, raw, lua_ctx, size=len(raw))
        out = ParsedResponse(content=v[0] or "", reasoning=v[1] or "", finish_reason=v[2] or "")
        if v[3] is not None and v[3] >= 0:
            out.usage = (int(v[3]), int(v[4]), int(v[5]), int(v[6]), int(v[7]))
        out.error, out.error_kind = v[9] or "", v[10] or ""
        count = int(v[11] or 0)
        for i in range(count):
            base = 12 + 3 * i
            out.tool_calls.append(ParsedToolCall(id=v[base] or "", name=v[base + 1], arguments=v[base + 2] or ""))
        return out

    def new_stream_state(self) -> Any:
        return self.sandbox.new_table()

    def parse_chunk_fast(self, line: str) -> FastResult:
        """The host's parse of a payload (see :meth:`parse_chunk`); None when Lua must decide."""
        fast = self._fast
        return None if fast is None else fast(line)

    async def parse_chunk(self, line: str, state: Any, lua_ctx: Any) -> ParsedChunk | None:
        """One stream payload -> a chunk. With a ``stream_format`` the host parses the
        ordinary, stateless chunks natively (same result as the built-in Lua parser of
        that format); the rest, and every chunk of other adapters, go through
        ``transform_stream_chunk``."""
        fast = self._fast
        if fast is not None:
            got = fast(line)
            if isinstance(got, ParsedChunk):
                return got
            if got is NO_CHUNK:
                return None
        return await self.parse_chunk_lua(line, state, lua_ctx)

    async def parse_chunk_lua(self, line: str, state: Any, lua_ctx: Any) -> ParsedChunk | None:
        """One stream payload through the adapter's ``transform_stream_chunk`` (never the fast path)."""
        v = await self._run(self._h_chunk, line, state, lua_ctx, size=len(line))
        if not v or v[0] is None:
            return None
        out = ParsedChunk(content=v[1], reasoning=v[2], finish_reason=v[3], done=bool(v[4]), error=v[10], error_kind=v[11])
        if v[5] >= 0:
            out.usage = (int(v[5]), int(v[6]), int(v[7]), int(v[8]), int(v[9]))
        count = int(v[12])
        for i in range(count):
            base = 13 + 4 * i
            out.tool_calls.append((int(v[base]), v[base + 1], v[base + 2], v[base + 3]))
        return out


def _join_body(res: tuple[Any, ...], parts: RequestJSON) -> bytes:
    """The harness's answer as one body: a text, or texts with the request's own
    messages (1) / tools (2) JSON between them, which the host holds already."""
    if len(res) == 1:
        return str(res[0]).encode()
    host = (b"", parts.messages, parts.tools)
    return b"".join(str(piece).encode() if i % 2 == 0 else host[int(piece)] for i, piece in enumerate(res))


def _chunkname(path: Path, builtin: bool) -> str:
    return f"adapters/{path.name}" if builtin else str(path)


@dataclass
class _Entry:
    path: Path
    builtin: bool
    mtime_ns: int
    size: int
    adapter: Adapter | None
    error: AdapterError | None


class AdapterLoader:
    """Finds adapters by name: the user's folder first, then the built-in ones.

    :meth:`get` checks the file's mtime and size (a ``stat`` per candidate
    file) and reloads a changed file; a newly added user file overrides the
    built-in of the same name, and removing it falls back again. A broken file
    raises :class:`AdapterError` (with file and line) until it is fixed.

    The check runs at most once per ``recheck_seconds`` for each adapter (the
    daemon uses 1 s): every LLM call asks for its adapter, and the stats cost
    ~30 µs a call, while an edited file only needs to be noticed within a
    moment. 0 checks on every call. :meth:`forget` drops the remembered
    answers, for callers that just wrote a file.
    """

    def __init__(
        self,
        builtin_dir: Path | str | None = None,
        user_dir: Path | str | None = None,
        *,
        max_memory: int = 64 * 1024 * 1024,
        instruction_budget: int = 2_000_000,
        http_client: httpx.AsyncClient | None = None,
        http_policy: HttpPolicy | None = None,
        logger: logging.Logger | None = None,
        recheck_seconds: float = 0.0,
    ) -> None:
        self.user_dir = Path(user_dir) if user_dir else None
        self.builtin_dir = Path(builtin_dir) if builtin_dir else BUILTIN_DIR
        self.max_memory = max_memory
        self.instruction_budget = instruction_budget
        self.http_client = http_client
        self.http_policy = http_policy or HttpPolicy()
        self.log = logger or logging.getLogger("homeagent.providers.adapters")
        self._entries: dict[str, _Entry] = {}
        self._compat_source: tuple[int, str] | None = None
        self.recheck_seconds = max(0.0, float(recheck_seconds))
        # key -> (monotonic time of the last file check, what it gave)
        self._checked: dict[str, tuple[float, Adapter | AdapterError]] = {}

    def forget(self) -> None:
        """Check the files again on the next :meth:`get` (after writing or removing one)."""
        self._checked.clear()

    def _recent(self, key: str) -> Adapter | None:
        hit = self._checked.get(key) if self.recheck_seconds else None
        if hit is None or time.monotonic() - hit[0] >= self.recheck_seconds:
            return None
        if isinstance(hit[1], AdapterError):
            raise hit[1]
        return hit[1]

    def _remember(self, key: str, found: Callable[[], Adapter]) -> Adapter:
        if not self.recheck_seconds:
            return found()
        try:
            adapter = found()
        except AdapterError as exc:
            self._checked[key] = (time.monotonic(), exc)
            raise
        self._checked[key] = (time.monotonic(), adapter)
        return adapter

    # ---------------------------------------------------------------- discovery
    def _candidates(self, name: str) -> Iterator[tuple[Path, bool]]:
        if self.user_dir is not None:
            yield self.user_dir / f"{name}.lua", False
        yield self.builtin_dir / f"{name}.lua", True

    def names(self) -> list[str]:
        found: set[str] = set()
        for folder in (self.builtin_dir, self.user_dir):
            if folder is not None and folder.is_dir():
                found.update(p.stem for p in folder.glob("*.lua") if not p.name.startswith("_"))
        return sorted(found)

    def exists(self, name: str) -> bool:
        return _valid_name(name) and any(path.is_file() for path, _ in self._candidates(name))

    # ------------------------------------------------------------------ loading
    def get(self, name: str) -> Adapter:
        """The current adapter called ``name`` (reloaded if its file changed)."""
        key = f"name:{name}"
        return self._recent(key) or self._remember(key, lambda: self._find(name, key))

    def _find(self, name: str, key: str) -> Adapter:
        if not _valid_name(name):
            raise AdapterError(f"invalid adapter name {name!r}")
        for path, builtin in self._candidates(name):
            try:
                st = path.stat()
            except OSError:
                continue
            return self._load_cached(key, path, builtin, st)
        raise AdapterError(f"adapter '{name}' not found (available: {', '.join(self.names()) or 'none'})")

    def load_path(self, path: Path | str) -> Adapter:
        """The adapter in an explicit file (``adapter_path``), reloaded if it changed."""
        key = f"path:{path}"
        return self._recent(key) or self._remember(key, lambda: self._load_path(Path(path).expanduser()))

    def _load_path(self, p: Path) -> Adapter:
        try:
            st = p.stat()
        except OSError as exc:
            raise AdapterError(f"adapter file {p} cannot be read: {exc.strerror}", path=str(p)) from None
        builtin = p.resolve().parent == self.builtin_dir.resolve()
        return self._load_cached(f"path:{p.resolve()}", p, builtin, st)

    def check_file(self, path: Path | str) -> Adapter:
        """Load a file as an adapter to validate it; nothing is kept (raises AdapterError)."""
        p = Path(path)
        try:
            st = p.stat()
        except OSError as exc:
            raise AdapterError(f"adapter file {p} cannot be read: {exc.strerror}", path=str(p)) from None
        return self._load_file(p, False, st.st_mtime_ns)

    def _load_cached(self, key: str, path: Path, builtin: bool, st: os.stat_result) -> Adapter:
        entry = self._entries.get(key)
        if entry is not None and entry.path == path and entry.mtime_ns == st.st_mtime_ns and entry.size == st.st_size:
            if entry.adapter is not None:
                return entry.adapter
            assert entry.error is not None
            raise entry.error
        adapter: Adapter | None = None
        error: AdapterError | None = None
        try:
            adapter = self._load_file(path, builtin, st.st_mtime_ns)
            verb = "reloaded" if entry is not None else "loaded"
            self.log.info("adapter %s %s from %s (version %s)", adapter.name, verb, path, adapter.version)
        except AdapterError as exc:
            error = exc
            self.log.error("adapter %s rejected: %s", path, exc)
        self._entries[key] = _Entry(path, builtin, st.st_mtime_ns, st.st_size, adapter, error)
        if adapter is None:
            assert error is not None
            raise error
        return adapter

    def _compat(self) -> str:
        path = self.builtin_dir / COMPAT_LIB
        st = path.stat()
        if self._compat_source is None or self._compat_source[0] != st.st_mtime_ns:
            self._compat_source = (st.st_mtime_ns, path.read_text(encoding="utf-8"))
        return self._compat_source[1]

    def _load_file(self, path: Path, builtin: bool, mtime_ns: int) -> Adapter:
        chunk = _chunkname(path, builtin)
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise AdapterError(f"{chunk}: cannot read: {exc}", path=str(path)) from None
        sandbox = LuaSandbox(
            f"adapter:{path.stem}",
            max_memory=self.max_memory,
            instruction_budget=self.instruction_budget,
            http=self.http_policy,
            http_client=self.http_client,
            logger=logging.getLogger(f"homeagent.adapters.{path.stem}"),
        )
        try:
            compat_globals: dict[str, Any] = {}
            if (self.builtin_dir / COMPAT_LIB).is_file():
                compat_globals["openai_compat"] = sandbox.load(self._compat(), f"adapters/{COMPAT_LIB}")
            table = sandbox.load(source, chunk, globals=compat_globals)
        except LuaError as exc:
            message = exc.message if chunk in exc.message else f"{chunk}: {exc.message}"
            raise AdapterError(message, path=str(path), location=exc.location) from None
        _check_shape(sandbox, table, chunk, path)
        if table["request_format"] is not None:
            _declared_request(sandbox, table, compat_globals, chunk, path)
        try:
            return Adapter(sandbox, table, path, builtin=builtin, mtime_ns=mtime_ns)
        except LuaError as exc:
            raise AdapterError(f"{chunk}: {exc.message}", path=str(path)) from None

    def info(self) -> list[AdapterInfo]:
        """Every adapter name with where it comes from and whether it loads."""
        out: list[AdapterInfo] = []
        for name in self.names():
            builtin_file = (self.builtin_dir / f"{name}.lua").is_file()
            user_file = self.user_dir is not None and (self.user_dir / f"{name}.lua").is_file()
            try:
                adapter = self.get(name)
                out.append(AdapterInfo(name, str(adapter.path), adapter.builtin, bool(user_file and builtin_file),
                                       adapter.version, ""))
            except AdapterError as exc:
                path = (self.user_dir / f"{name}.lua") if (user_file and self.user_dir) else self.builtin_dir / f"{name}.lua"
                out.append(AdapterInfo(name, str(path), not user_file, bool(user_file and builtin_file), "", str(exc)))
        return out


def _has_location(message: str) -> bool:
    head, sep, _ = message.partition(": ")
    return bool(sep) and ":" in head and head.rsplit(":", 1)[1].isdigit()


def _valid_name(name: str) -> bool:
    return bool(name) and all(c.isalnum() or c in "-_." for c in name) and not name.startswith(".")


def _check_shape(sandbox: LuaSandbox, table: Any, chunk: str, path: Path) -> None:
    def lua_type(v: Any) -> str:
        if v is None:
            return "nil"
        if isinstance(v, bool):
            return "boolean"
        if isinstance(v, int | float):
            return "number"
        if isinstance(v, str):
            return "string"
        return str(sandbox._table_type(v))

    if lua_type(table) != "table":
        raise AdapterError(f"{chunk}: the script must return a table (got {lua_type(table)})", path=str(path))
    declared = table["request_format"] is not None
    rules = {
        "transform_request": ("nil",) if declared else ("function",),
        "request_format": ("string", "nil"),
        "request_options": ("table", "nil"),
        "transform_response": ("function",),
        "transform_stream_chunk": ("function", "nil"),
        "endpoint": ("string", "function"),
        "headers": ("table", "function", "nil"),
        "name": ("string", "nil"),
        "version": ("string", "number", "nil"),
        "needs_api_key": ("boolean", "nil"),
        "stream_format": ("string", "nil"),
    }
    for key, allowed in rules.items():
        actual = lua_type(table[key])
        if actual not in allowed:
            if key == "transform_request" and declared:
                raise AdapterError(f"{chunk}: give either 'transform_request' or 'request_format', not both",
                                   path=str(path))
            want = " or ".join(a for a in allowed if a != "nil")
            missing = "is missing" if actual == "nil" else f"is a {actual}"
            raise AdapterError(f"{chunk}: field '{key}' {missing}, expected a {want}", path=str(path))


REQUEST_FORMATS = ("openai",)  # values of an adapter's `request_format` field
# request_options: what openai_compat.request takes (name -> the Lua type it must have)
_REQUEST_OPTIONS = {"stream_usage": "boolean", "strip": "set", "max_tokens_field": "string", "extra": "boolean",
                    "drop_extra": "set"}


def _request_options(sandbox: LuaSandbox, table: Any) -> dict[str, Any] | None:
    """A checked ``request_format = "openai"`` adapter's ``request_options`` as Python values
    (sets as lists of names); None when the adapter declares no request format."""
    if table["request_format"] is None:
        return None
    options = table["request_options"]
    out: dict[str, Any] = {}
    if options is None:
        return out
    for key, value in options.items():
        if _REQUEST_OPTIONS.get(key) == "set":
            out[key] = [str(name) for name in value.keys()]
        else:
            out[key] = value
    return out


def _declared_request(sandbox: LuaSandbox, table: Any, compat_globals: dict[str, Any], chunk: str,
                      path: Path) -> None:
    """Checks ``request_format`` / ``request_options`` and gives the adapter the Lua transform they
    stand for (``openai_compat.request(req, request_options)``): the host writes the same body, and
    the Lua builds what the host declines."""
    fmt = table["request_format"]
    if fmt not in REQUEST_FORMATS:
        raise AdapterError(f"{chunk}: field 'request_format' is {fmt!r}, expected one of: {', '.join(REQUEST_FORMATS)}",
                           path=str(path))
    if "openai_compat" not in compat_globals:
        raise AdapterError(f"{chunk}: 'request_format' needs {COMPAT_LIB}, which is missing", path=str(path))
    options = table["request_options"]
    for key, value in (options.items() if options is not None else ()):
        want = _REQUEST_OPTIONS.get(key) if isinstance(key, str) else None
        if want is None:
            raise AdapterError(f"{chunk}: request_options.{key} is not an option; known: {', '.join(_REQUEST_OPTIONS)}",
                               path=str(path))
        if want == "set":
            ok = sandbox._table_type(value) == "table" and all(
                isinstance(k, str) and v is True for k, v in value.items())
            if not ok:
                raise AdapterError(f"{chunk}: request_options.{key} must be a table of names set to true, "
                                   'e.g. {reasoning_content = true}', path=str(path))
        elif not isinstance(value, bool if want == "boolean" else str) or (want == "string" and not value):
            raise AdapterError(f"{chunk}: request_options.{key} must be a {want}", path=str(path))
    make = sandbox.load("return function(t) local o = t.request_options "
                        "t.transform_request = function(req) return openai_compat.request(req, o) end end",
                        "homeagent/request_format", globals=compat_globals)
    sandbox.call(make, table)


# ------------------------------------------------------------ stream fast path
def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # the Lua decoder rejects NaN/Infinity too


_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_INDEX = 2**53  # beyond this a Lua number is a float


def openai_chunk_fast(line: str) -> ParsedChunk | None:
    """An OpenAI chat-completion stream payload parsed in Python, or None to decline.

    Gives exactly what ``openai_compat.chunk`` plus the harness give for the
    common chunks (content, reasoning, tool-call deltas, finish reason, ``[DONE]``,
    usage in OpenAI's own shape). Declines, so the adapter's Lua runs instead, for
    anything else: other usage shapes, error chunks, content given as parts, values
    of unexpected types, text orjson reads differently from the sandbox (invalid
    JSON, NaN, lone surrogate escapes: orjson refuses them). Duplicate keys are the
    one case not detected.
    """
    if line == "[DONE]":
        return ParsedChunk(done=True)
    try:
        doc = orjson.loads(line)  # 3-4x the json module; rejects what the sandbox reads otherwise (NaN, lone surrogates)
    except orjson.JSONDecodeError:
        return None
    if type(doc) is not dict:
        return None
    get = doc.get
    if get("error") is not None or get("x_groq") is not None:
        return None
    usage = get("usage")
    if usage is not None:
        usage = _openai_usage(usage)
        if usage is None:
            return None
    choices = get("choices")
    if choices is None or choices == []:
        return ParsedChunk(usage=usage)
    if type(choices) is not list:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("usage") is not None:
        return None
    finish = choice.get("finish_reason")
    if finish is None:
        finish = ""
    elif type(finish) is not str:
        return None
    out = ParsedChunk(finish_reason=finish, usage=usage)
    d = choice.get("delta")
    if d is None:
        d = choice.get("message")
    if d is None:
        return out
    if type(d) is not dict:
        return None
    content = d.get("content")
    if content is None:
        content = ""
    elif type(content) is not str:
        return None  # content parts, numbers...: the Lua side handles them
    reasoning = d.get("reasoning_content")  # Lua: reasoning_content or reasoning
    if reasoning is None:
        reasoning = d.get("reasoning")
    if reasoning is None:
        reasoning = ""
    elif type(reasoning) is not str:
        return None
    out.content, out.reasoning = content, reasoning
    calls = d.get("tool_calls")
    if calls is not None:
        if type(calls) is not list:
            return None
        deltas = out.tool_calls
        for i, tc in enumerate(calls):
            if type(tc) is not dict:
                return None
            fn = tc.get("function")
            if fn is None:
                fn = tc
            elif type(fn) is not dict:
                return None
            index = tc.get("index")
            if index is None:
                index = tc.get("stream_index")
                if index is None:
                    index = i
            if type(index) is not int or not -_MAX_INDEX < index < _MAX_INDEX:
                return None
            cid = tc.get("id")
            if cid is None:
                cid = ""
            elif type(cid) is not str:
                return None
            name = fn.get("name")
            if type(name) is not str:
                name = ""
            args = fn.get("arguments")
            if args is None:
                args = fn.get("raw_arguments")
            if args is None:
                args = ""
            elif type(args) is not str:
                return None
            deltas.append((index, cid, name, args))
    return out  # no lone surrogates: orjson refused them (the sandbox would make them U+FFFD)


_USAGE_TOP = frozenset({"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
                        "completion_tokens_details", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens"})


def _count(value: Any) -> int | None:
    """A token count as every adapter's Lua reads it; None for anything it might read otherwise."""
    if type(value) is int and -_MAX_INDEX < value < _MAX_INDEX:
        return value
    return None


def _openai_usage(usage: Any) -> tuple[int, int, int, int, int] | None:
    """OpenAI's usage object (DeepSeek's cache fields too) as (prompt, completion, total, cache_read,
    reasoning); None, so Lua decides, for any other shape: adapters normalise the odd ones differently."""
    if type(usage) is not dict or not usage.keys() <= _USAGE_TOP:
        return None
    prompt, completion, total = (_count(usage.get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if prompt is None or completion is None or total is None:
        return None
    extra = {}
    for key in ("prompt_tokens_details", "completion_tokens_details"):
        details = usage.get(key)
        if details is None:
            continue
        if type(details) is not dict or any(_count(v) is None for v in details.values()):
            return None
        extra[key] = details
    cached = extra.get("prompt_tokens_details", {}).get("cached_tokens")
    hit = usage.get("prompt_cache_hit_tokens")
    for value in (hit, usage.get("prompt_cache_miss_tokens")):
        if value is not None and _count(value) is None:
            return None
    if cached is not None and hit is not None:
        return None  # adapters disagree on which one wins
    reasoning = extra.get("completion_tokens_details", {}).get("reasoning_tokens")
    return prompt, completion, total, cached if cached is not None else (hit or 0), reasoning or 0


def _has_surrogate(chunk: ParsedChunk) -> bool:
    search = _SURROGATE.search
    if search(chunk.content) or search(chunk.reasoning) or search(chunk.finish_reason):
        return True
    return any(search(cid) or search(name) or search(args) for _, cid, name, args in chunk.tool_calls)


class _NoChunk(enum.Enum):
    NO_CHUNK = "no chunk"


NO_CHUNK = _NoChunk.NO_CHUNK  # a fast parser's answer for a payload the Lua parser maps to nil (pings)
FastResult = ParsedChunk | _NoChunk | None  # None: declined, the adapter's Lua decides


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")  # Lua keeps an earlier value over a later null: not worth mimicking
    return out


_CHUNK_DECODER_STRICT = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=_unique_keys)


def _chunk_doc(line: str) -> dict[str, Any] | None:
    """``line`` as a JSON object read exactly like the sandbox reads it, or None (decline)."""
    # Duplicate keys read differently only when a later one is null; they are checked then.
    try:
        doc = _CHUNK_DECODER_STRICT.decode(line) if "null" in line else orjson.loads(line)
    except (ValueError, RecursionError):  # orjson.JSONDecodeError is a ValueError
        return None
    return doc if type(doc) is dict else None


def _opt_text(value: Any) -> str | None:
    """A Lua text field: null/absent -> "" (the harness's default); other non-strings -> None (decline)."""
    if value is None:
        return ""
    return value if type(value) is str else None


def _finish(out: ParsedChunk, line: str) -> ParsedChunk | None:
    if "\\u" in line and _has_surrogate(out):
        return None  # the sandbox turns lone surrogates into U+FFFD; Python keeps them
    return out


def anthropic_chunk_fast(line: str) -> FastResult:
    """An Anthropic Messages SSE payload parsed in Python, as ``anthropic.lua`` parses it.

    Takes text / thinking / tool-input deltas, the text and thinking block starts, and
    ``ping`` / ``content_block_stop`` (:data:`NO_CHUNK`). Declines (None) the rest: tool-use
    block starts, message start/delta/stop (usage, stop reason), errors, unknown event
    types and values of unexpected types. ``anthropic.lua`` keeps no stream state.
    """
    doc = _chunk_doc(line)
    if doc is None:
        return None
    t = doc.get("type")
    if t == "content_block_delta":
        d = doc.get("delta")
        if type(d) is not dict:
            return None
        dt = d.get("type")
        if dt == "text_delta":
            text = _opt_text(d.get("text"))
            return None if text is None else _finish(ParsedChunk(content=text), line)
        if dt == "thinking_delta":
            text = _opt_text(d.get("thinking"))
            return None if text is None else _finish(ParsedChunk(reasoning=text), line)
        if dt == "input_json_delta":
            index = doc.get("index")
            if index is None:
                index = 0
            elif type(index) is not int or not -_MAX_INDEX < index < _MAX_INDEX:
                return None
            args = _opt_text(d.get("partial_json"))
            if args is None:
                return None
            return _finish(ParsedChunk(tool_calls=[(index, "", "", args)]), line)
        if dt == "signature_delta" or dt == "citations_delta":
            return NO_CHUNK
        return None
    if t == "content_block_start":
        b = doc.get("content_block")
        if type(b) is not dict:
            return None
        bt = b.get("type")
        if bt == "text" or bt == "thinking":
            text = b.get(bt)
            if text is None or text == "":
                return NO_CHUNK
            if type(text) is not str:
                return None
            out = ParsedChunk(content=text) if bt == "text" else ParsedChunk(reasoning=text)
            return _finish(out, line)
        return None
    if t == "ping" or t == "content_block_stop":
        return NO_CHUNK
    return None


_GEMINI_USAGE = ("promptTokenCount", "candidatesTokenCount", "totalTokenCount", "cachedContentTokenCount",
                 "thoughtsTokenCount")


def gemini_chunk_fast(line: str) -> FastResult:
    """A Gemini ``streamGenerateContent`` SSE payload parsed in Python, as ``gemini.lua`` parses it.

    Takes chunks of text / thought parts with or without ``usageMetadata``. Declines (None)
    chunks with a ``functionCall`` part or a ``finishReason`` (``gemini.lua`` reads and updates
    its stream state for those), errors, ``promptFeedback`` and values of unexpected types.
    """
    doc = _chunk_doc(line)
    if doc is None:
        return None
    get = doc.get
    if get("error") is not None or get("promptFeedback") is not None:
        return None
    out = ParsedChunk()
    um = get("usageMetadata")
    if um is not None:
        if type(um) is not dict:
            return None
        counts = []
        for key in _GEMINI_USAGE:
            v = um.get(key)
            if v is None:
                v = 0
            elif type(v) is not int or not 0 <= v < _MAX_INDEX:
                return None
            counts.append(v)
        prompt, candidates, total, cached, thoughts = counts
        out.usage = (prompt, candidates + thoughts, total, cached, thoughts)
    cands = get("candidates")
    if cands is None or cands == []:
        return out
    if type(cands) is not list:
        return None
    cand = cands[0]
    if type(cand) is not dict or cand.get("finishReason") is not None:
        return None
    content = cand.get("content")
    if content is None:
        return out
    if type(content) is not dict:
        return None
    parts = content.get("parts")
    if parts is None:
        return out
    if type(parts) is not list:
        return None
    text: list[str] = []
    thought: list[str] = []
    for p in parts:
        if type(p) is not dict or p.get("functionCall") is not None:
            return None
        t = p.get("text")
        if type(t) is str:
            flag = p.get("thought")
            (text if flag is None or flag is False else thought).append(t)
    out.content = "".join(text)
    out.reasoning = "".join(thought)
    return _finish(out, line)


def ollama_chunk_fast(line: str) -> FastResult:
    """An Ollama ``/api/chat`` NDJSON line parsed in Python, as ``ollama.lua`` parses it.

    Takes the ``done: false`` message chunks with text and thinking. Declines (None) the
    final ``done`` chunk and chunks with tool calls (``ollama.lua`` reads and updates its
    stream state for those), errors and values of unexpected types.
    """
    doc = _chunk_doc(line)
    if doc is None:
        return None
    done = doc.get("done")
    if (done is not None and done is not False) or doc.get("error") is not None:
        return None
    m = doc.get("message")
    if m is None:
        return ParsedChunk()
    if type(m) is not dict or m.get("tool_calls") is not None:
        return None
    content = _opt_text(m.get("content"))
    thinking = _opt_text(m.get("thinking"))
    if content is None or thinking is None:
        return None
    return _finish(ParsedChunk(content=content, reasoning=thinking), line)


def _fast_parser(stream_format: str) -> Callable[[str], FastResult] | None:
    if stream_format == "openai":
        return openai_chunk_fast
    if stream_format == "anthropic":
        return anthropic_chunk_fast
    if stream_format == "gemini":
        return gemini_chunk_fast
    if stream_format == "ollama":
        return ollama_chunk_fast
    return None
