"""One loaded adapter script and the calls the provider makes into its sandbox.

Every call goes through the trusted harness (adapter_harness.py) and comes back
as plain Python values. The request goes in as JSON text in parts
(:class:`RequestJSON`): Lua decodes ``messages`` and ``tools`` only if the
script reads them, and where the body holds them unchanged the host splices its
own bytes in, so a long history is not copied through Lua.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from homeagent.lua.runtime import LuaError, LuaJSONError, LuaSandbox
from homeagent.providers.adapter_harness import (
    HARNESS,
    ParsedChunk,
    ParsedResponse,
    headers_from,
    parsed_chunks,
    parsed_response,
)

__all__ = ["Adapter", "AdapterError", "RequestContext", "RequestJSON", "chunkname", "json_bytes", "request_parts"]

BUDGET_PER_BYTE = 60  # instructions allowed per byte of input on top of the adapter's budget


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
        self.payload = ""  # the stream payload being parsed, if any


@dataclass(frozen=True)
class RequestContext:
    model: str
    stream: bool
    thinking: bool
    base_url: str = ""
    source: str = ""


@dataclass(frozen=True)
class RequestJSON:
    """The unified request as UTF-8 JSON, messages and tools apart (they decode lazily in Lua).

    ``message_sizes`` holds the size of each message's JSON text in ``messages``
    (little-endian uint32s), so Lua cuts out one message's text without scanning
    (``json.items``); adapters key their per-message conversion caches by those texts.
    """

    rest: bytes
    messages: bytes
    tools: bytes
    message_sizes: bytes = b""

    @property
    def size(self) -> int:
        return len(self.rest) + len(self.messages) + len(self.tools)


def json_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON (``{1: x}`` written as ``{"1": x}``), or ValueError."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError as exc:  # a TypeError: lone surrogates, huge ints, odd objects
        raise ValueError(str(exc)) from None


def request_parts(request: dict[str, Any], tools_json: bytes | None = None) -> RequestJSON:
    """Serialise a unified request; raises ValueError for values JSON cannot hold.

    orjson writes the history, the largest serialisation of every LLM call, many
    times faster than the json module and as UTF-8 that goes to Lua as it is. NaN
    and infinities become null, as in most JSON writers. ``tools_json``: the
    request's tools already serialised (the same list is sent every round).
    """
    rest = {k: v for k, v in request.items() if k not in ("messages", "tools")}
    if tools_json is None:
        tools = request.get("tools")
        tools_json = json_bytes(tools) if tools else b""
    messages = request.get("messages") or []
    if type(messages) is not list:
        return RequestJSON(json_bytes(rest), json_bytes(messages), tools_json)
    texts = [json_bytes(m) for m in messages]
    sizes = struct.pack(f"<{len(texts)}I", *map(len, texts))
    return RequestJSON(json_bytes(rest), b"[" + b",".join(texts) + b"]", tools_json, sizes)


def chunkname(path: Path, builtin: bool) -> str:
    """How errors name an adapter file: shipped ones by their place in the source tree."""
    return f"adapters/{path.name}" if builtin else str(path)


class Adapter:
    """One loaded adapter script; the provider calls these per request and per stream payload."""

    def __init__(self, sandbox: LuaSandbox, table: Any, path: Path, *, builtin: bool, mtime_ns: int) -> None:
        self.sandbox = sandbox
        self.path = path
        self.builtin = builtin
        self.mtime_ns = mtime_ns
        self.chunkname = chunkname(path, builtin)
        self.name = str(table["name"] or path.stem)
        self.version = str(table["version"] if table["version"] is not None else "0")
        needs = table["needs_api_key"]
        self.needs_api_key = True if needs is None else bool(needs)
        self.streams = table["transform_stream_chunk"] is not None
        endpoint = table["endpoint"]
        self._static_endpoint: str | None = endpoint if isinstance(endpoint, str) else None
        harness = sandbox.load_trusted(HARNESS, "homeagent/adapter-harness", table, self.chunkname)
        self._h_request = harness["request"]
        self._h_response = harness["response"]
        self._h_chunks = harness["chunks"]
        self._h_where = harness["where"]
        self._h_endpoint = harness["endpoint"]
        self._h_headers = harness["headers"]
        self._h_ctx = harness["ctx"]
        self._budget = sandbox.instruction_budget
        # The shipped adapters' headers depend on the API key alone and none of them writes to
        # its ctx: both are made once, not on every LLM round (two sandbox calls, 30-50 µs with
        # the CPU caches cold as between rounds). A user's adapter may fetch tokens or keep
        # state in ctx: asked every time.
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
        try:
            return await self.sandbox.call_scalars_async(fn, *args, budget=self._budget + BUDGET_PER_BYTE * size)
        except LuaError as exc:
            raise self._fail(exc) from None

    async def context(self, ctx: RequestContext) -> Any:
        """The ``ctx`` table the adapter's functions get for one request."""
        made = self._contexts.get(ctx)
        if made is None:
            (made,) = await self._run(self._h_ctx, ctx.model, ctx.stream, ctx.thinking, ctx.base_url, ctx.source)
            if self.builtin:
                _remember(self._contexts, ctx, made, 64)
        return made

    async def endpoint(self, lua_ctx: Any) -> str:
        if self._static_endpoint is not None:
            return self._static_endpoint
        return str((await self._run(self._h_endpoint, lua_ctx))[0])

    async def headers(self, api_key: str, lua_ctx: Any) -> dict[str, str]:
        """The request headers; a fresh dict the caller may change."""
        made = self._headers_by_key.get(api_key)
        if made is None:
            made = headers_from(await self._run(self._h_headers, api_key, lua_ctx))
            if self.builtin:
                _remember(self._headers_by_key, api_key, made, 16)
        return dict(made)

    async def build_request(self, parts: RequestJSON, lua_ctx: Any) -> bytes:
        """The body (UTF-8 JSON) for one request (``parts`` from :func:`request_parts`)."""
        args = (parts.rest, parts.messages, parts.tools, lua_ctx, parts.message_sizes)
        try:
            res = await self._run(self._h_request, *args, False, size=parts.size)
        except UnicodeDecodeError:  # the adapter put invalid UTF-8 in: run it again, replacing it
            res = await self._run(self._h_request, *args, True, size=parts.size)
        return _join_body(res, parts)

    def build_request_sync(self, parts: RequestJSON, lua_ctx: Any) -> bytes:
        """For worker threads: same as :meth:`build_request`, ``http_*`` builtins block."""
        args = (parts.rest, parts.messages, parts.tools, lua_ctx, parts.message_sizes)
        budget = self._budget + BUDGET_PER_BYTE * parts.size
        try:
            try:
                res = self.sandbox.call_multi(self._h_request, *args, False, budget=budget)
            except UnicodeDecodeError:  # the adapter put invalid UTF-8 in: run it again, replacing it
                res = self.sandbox.call_multi(self._h_request, *args, True, budget=budget)
        except LuaError as exc:
            raise self._fail(exc) from None
        return _join_body(res, parts)

    async def parse_response(self, raw: str, lua_ctx: Any) -> ParsedResponse:
        return parsed_response(await self._run(self._h_response, raw, lua_ctx, size=len(raw)))

    def new_stream_state(self) -> Any:
        return self.sandbox.new_table()

    async def parse_chunks(self, lines: list[str], state: Any, lua_ctx: Any) -> list[ParsedChunk]:
        """Stream payloads that arrived together, each through the adapter's ``transform_stream_chunk``,
        in one call into the sandbox (a stream has hundreds of payloads; entering Lua costs more
        than parsing a small one). Skipped payloads give no chunk; a ``done`` chunk is the last.

        A failure names the payload that caused it (:attr:`AdapterError.payload`); the chunks
        parsed before it in the same batch are lost with the stream.
        """
        try:
            return parsed_chunks(await self._run(self._h_chunks, state, lua_ctx, *lines,
                                                 size=sum(map(len, lines))))
        except AdapterError as exc:
            if len(lines) > 1:
                (at,) = await self._run(self._h_where)
                exc.payload = lines[int(at) - 1]
            else:
                exc.payload = lines[0]
            raise


def _join_body(res: tuple[Any, ...], parts: RequestJSON) -> bytes:
    """The harness's answer as one body: a text, or texts with the request's own
    messages (1) / tools (2) JSON between them, which the host holds already."""
    if len(res) == 1:
        return str(res[0]).encode()
    host = (b"", parts.messages, parts.tools)
    return b"".join(str(piece).encode() if i % 2 == 0 else host[int(piece)] for i, piece in enumerate(res))


def _remember(memo: dict[Any, Any], key: Any, value: Any, size: int) -> None:
    if len(memo) >= size:
        memo.clear()
    memo[key] = value


def _has_location(message: str) -> bool:
    head, sep, _ = message.partition(": ")
    return bool(sep) and ":" in head and head.rsplit(":", 1)[1].isdigit()
