"""The provider: HTTP in Python (aiohttp, streaming), wire-format transforms in a Lua adapter.

The Lua adapter is the one implementation of each wire format: it builds every
request body and reads every response and stream payload. It runs inline on the
event loop, bounded by the sandbox's instruction budget: a request costs tens to
hundreds of microseconds, a stream payload a few (docs/PERFORMANCE.md), next to
LLM round trips of hundreds of milliseconds. Requests larger than
``OFFLOAD_BYTES`` are transformed in a worker thread so a huge history never
stalls the loop.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp

from homeagent.providers.adapter import Adapter, AdapterError, RequestContext, json_bytes, request_parts
from homeagent.providers.adapter_harness import ParsedChunk, Usage5
from homeagent.providers.base import (
    ChatRequest,
    ChatResponse,
    ProviderError,
    StreamChunk,
    ToolCallDelta,
    Usage,
    parse_tool_call,
)
from homeagent.providers.http import (
    TRANSPORT_ERRORS,
    SharedSession,
    describe_transport_error,
    new_session,
    proxy_for,
    request_timeout,
)
from homeagent.providers.stream_payloads import LineTooLong, finish_body, payload_batches

__all__ = ["LuaAdaptedProvider", "estimate_tokens", "parse_retry_after", "trim_messages"]

log = logging.getLogger("homeagent.providers")

MAX_BODY_BYTES = 32 * 1024 * 1024  # a non-streamed response larger than this is refused
OFFLOAD_BYTES = 256 * 1024  # request JSON above this size is transformed in a worker thread
CHARS_PER_TOKEN = 3  # the context-window estimate: characters / 3


class LuaAdaptedProvider:
    """One LLM source: base URL + key + model + a Lua adapter for its wire format."""

    def __init__(
        self,
        name: str,
        base_url: str,
        api_key: str,
        model: str,
        adapter: Adapter | Callable[[], Adapter],
        *,
        http_client: aiohttp.ClientSession | SharedSession | None = None,
        adapter_name: str = "",
        max_concurrent: int = 8,
        priority: int = 0,
        context_window: int = 0,
        thinking_enabled: bool = False,
        vision: bool = False,
        timeout: float = 120.0,
        connect_timeout: float = 10.0,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key or ""
        self._tools_text_cache: tuple[list[dict[str, Any]], int, bytes] | None = None
        self._adapter = adapter
        self.adapter_name = adapter_name or (adapter.name if isinstance(adapter, Adapter) else "")
        self.max_concurrent = max(1, int(max_concurrent))
        self.priority = int(priority)
        self.context_window = max(0, int(context_window))
        self.thinking_enabled = bool(thinking_enabled)
        self.vision = bool(vision)  # images go to this source as image parts; else as text (see media_input.py)
        self.timeout = request_timeout(timeout, connect_timeout)
        self._shared = http_client
        self._own_session: aiohttp.ClientSession | None = None
        self._proxy = proxy_for(self.base_url)
        key_digest = hashlib.sha256(self._api_key.encode()).hexdigest()[:16]
        self.fingerprint = "|".join(
            [self.base_url, model, self.adapter_name, key_digest, str(self.thinking_enabled),
             str(self.context_window), str(self.max_concurrent), str(self.priority), str(self.vision)]
        )

    def __repr__(self) -> str:  # never shows the key
        return f"<LuaAdaptedProvider {self.name} adapter={self.adapter_name} model={self.model} base_url={self.base_url}>"

    # ------------------------------------------------------------------ helpers
    @property
    def session(self) -> aiohttp.ClientSession:
        shared = self._shared
        if isinstance(shared, SharedSession):
            return shared.get()
        if shared is not None:
            return shared
        if self._own_session is None or self._own_session.closed:
            self._own_session = new_session()
        return self._own_session

    async def aclose(self) -> None:
        if self._own_session is not None:
            await self._own_session.close()
            self._own_session = None

    def current_adapter(self) -> Adapter:
        try:
            return self._adapter if isinstance(self._adapter, Adapter) else self._adapter()
        except AdapterError as exc:
            raise ProviderError(str(exc), kind=exc.kind, source=self.name) from None

    def _err(self, message: str, kind: str, **kw: Any) -> ProviderError:
        return ProviderError(self._redact(message), kind=kind, source=self.name, **kw)

    def _redact(self, text: str) -> str:
        if self._api_key and len(self._api_key) >= 6:
            text = text.replace(self._api_key, "***")
        return text

    def _tools_text(self, tools: list[dict[str, Any]]) -> bytes:
        """The tools as JSON (UTF-8), kept while the caller passes the same list.

        The turn runner hands every round of every turn the same list object
        until the tool set changes (and never mutates it), so dozens of schemas
        are serialised once instead of on every LLM call.
        """
        cached = self._tools_text_cache
        if cached is not None and cached[0] is tools and cached[1] == len(tools):
            return cached[2]
        text = json_bytes(tools)
        self._tools_text_cache = (tools, len(tools), text)
        return text

    def _unified(self, request: ChatRequest, stream: bool) -> tuple[dict[str, Any], bool]:
        thinking = self.thinking_enabled if request.thinking is None else bool(request.thinking)
        messages = request.messages
        if self.context_window:
            reserve = min(request.max_tokens or 0, self.context_window // 4)
            budget = self.context_window - reserve
            tools_text = self._tools_text(request.tools) if request.tools else b""
            messages, dropped, before, after = trim_messages(messages, budget, tools_chars=len(tools_text))
            if dropped:
                log.warning(
                    "source %s: context trimmed, dropped %d oldest message(s) (~%d -> ~%d tokens, window %d)",
                    self.name, dropped, before, after, self.context_window,
                )
        req: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": messages,
            "stream": stream,
            "thinking": thinking,
        }
        if request.tools:
            req["tools"] = request.tools
            if request.tool_choice:
                req["tool_choice"] = request.tool_choice
        if request.temperature is not None:
            req["temperature"] = request.temperature
        if request.max_tokens is not None:
            req["max_tokens"] = request.max_tokens
        if request.extra:
            req["extra"] = request.extra
        return req, thinking

    async def _prepare(self, request: ChatRequest, stream: bool) -> tuple[Adapter, Any, str, bytes, dict[str, str]]:
        adapter = self.current_adapter()
        unified, thinking = self._unified(request, stream)
        tools = unified.pop("tools", None)
        try:
            parts = request_parts(unified, self._tools_text(tools) if tools else b"")
        except (TypeError, ValueError) as exc:
            raise self._err(f"request is not JSON-serialisable: {exc}", "client") from None
        ctx = RequestContext(model=str(unified["model"]), stream=stream, thinking=thinking,
                             base_url=self.base_url, source=self.name)
        try:
            lua_ctx = await adapter.context(ctx)
            endpoint = await adapter.endpoint(lua_ctx)
            headers = await adapter.headers(self._api_key, lua_ctx)
            if parts.size > OFFLOAD_BYTES:
                body = await asyncio.to_thread(adapter.build_request_sync, parts, lua_ctx)
            else:
                body = await adapter.build_request(parts, lua_ctx)
        except AdapterError as exc:
            raise self._err(str(exc), exc.kind) from None
        headers.setdefault("Content-Type", "application/json")
        if stream:
            headers.setdefault("Accept", "text/event-stream")
        url = endpoint if endpoint.startswith(("http://", "https://")) else self.base_url + endpoint
        return adapter, lua_ctx, url, body, headers

    # -------------------------------------------------------------- non-stream
    async def chat(self, request: ChatRequest) -> ChatResponse:
        adapter, lua_ctx, url, body, headers = await self._prepare(request, stream=False)
        try:
            async with self.session.post(url, data=body, headers=headers, timeout=self.timeout,
                                         proxy=self._proxy) as resp:
                data = await _read_capped(resp, MAX_BODY_BYTES, self)
                if resp.status >= 400:
                    raise self._http_error(resp, data)
        except ProviderError:
            raise
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(exc) from None
        raw = data.decode("utf-8", errors="replace")
        try:
            parsed = await adapter.parse_response(raw, lua_ctx)
        except AdapterError as exc:
            kind = exc.kind
            raise self._err(f"{exc} (HTTP {resp.status}, body starts {raw[:120]!r})"
                            if kind == "bad_response" else str(exc), kind) from None
        if parsed.error:
            raise self._err(parsed.error, parsed.error_kind or "server")
        calls = [
            parse_tool_call(tc.id or f"call_{i}", tc.name, tc.arguments) for i, tc in enumerate(parsed.tool_calls)
        ]
        finish = parsed.finish_reason or ("tool_calls" if calls else "stop")
        return ChatResponse(
            content=parsed.content,
            reasoning=parsed.reasoning,
            tool_calls=calls,
            finish_reason=finish,
            usage=_usage(parsed.usage),
            source=self.name,
            model=str(request.model or self.model),
        )

    # ------------------------------------------------------------------ stream
    async def chat_stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        adapter, lua_ctx, url, body, headers = await self._prepare(request, stream=True)
        if not adapter.streams:
            response = await self.chat(request)
            yield _whole_as_chunk(response)
            return
        complete = False
        try:
            async with self.session.post(url, data=body, headers=headers, timeout=self.timeout,
                                         proxy=self._proxy) as resp:
                if resp.status >= 400:
                    data = await _read_capped(resp, 1024 * 1024, self)
                    raise self._http_error(resp, data)
                state = adapter.new_stream_state()  # the adapter's table for this stream
                batches = payload_batches(resp)
                async for batch in batches:
                    try:
                        parsed = await adapter.parse_chunks(batch, state, lua_ctx)
                    except AdapterError as exc:
                        detail = f" (line starts {exc.payload[:120]!r})" if exc.kind == "bad_response" else ""
                        raise self._err(f"{exc}{detail}", exc.kind) from None
                    for one in parsed:
                        if one.error:
                            raise self._err(one.error, one.error_kind or "server", status=resp.status)
                        if one.finish_reason or one.done:
                            complete = True
                        chunk = _to_chunk(one)
                        if chunk is not None:
                            yield chunk
                    if parsed and parsed[-1].done:
                        await finish_body(resp, batches)
                        break
        except LineTooLong as exc:
            raise self._err(str(exc), "bad_response") from None
        except ProviderError:
            raise
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(exc) from None
        if not complete:
            raise self._err("stream ended early (no finish marker from the server)", "network")

    # ------------------------------------------------------------------ errors
    def _http_error(self, resp: aiohttp.ClientResponse, data: bytes) -> ProviderError:
        status = resp.status
        message = _error_message(data) or resp.reason or "error"
        retry_after = parse_retry_after(resp.headers)
        if status in (401, 403):
            kind = "auth"
        elif status == 429:
            kind = "rate_limit"
        elif status == 408:
            kind = "timeout"
        elif status >= 500:
            kind = "server"
        else:
            kind = "client"
        return self._err(message, kind, status=status, retry_after=retry_after)

    def _transport_error(self, exc: BaseException) -> ProviderError:
        message, kind = describe_transport_error(exc, self.base_url)
        return self._err(message, kind)


def _whole_as_chunk(response: ChatResponse) -> StreamChunk:
    deltas = [
        ToolCallDelta(index=i, id=tc.id, name=tc.name, arguments=tc.raw_arguments)
        for i, tc in enumerate(response.tool_calls)
    ]
    return StreamChunk(content=response.content, reasoning=response.reasoning, tool_calls=deltas,
                       finish_reason=response.finish_reason, usage=response.usage)


def _to_chunk(parsed: ParsedChunk) -> StreamChunk | None:
    usage = _usage(parsed.usage) if parsed.usage is not None else None
    if not (parsed.content or parsed.reasoning or parsed.tool_calls or parsed.finish_reason or usage):
        return None
    deltas = [ToolCallDelta(index=i, id=cid, name=name, arguments=args) for i, cid, name, args in parsed.tool_calls]
    return StreamChunk(content=parsed.content, reasoning=parsed.reasoning, tool_calls=deltas,
                       finish_reason=parsed.finish_reason or None, usage=usage)


def _usage(values: Usage5 | None) -> Usage:
    """Usage as the adapter harness normalised it (the one place that reads vendors' shapes)."""
    if values is None:
        return Usage()
    p, c, t, cr, rs = values
    return Usage(prompt=p, completion=c, total=t, cache_read=cr, reasoning=rs)


async def _read_capped(resp: aiohttp.ClientResponse, cap: int, provider: LuaAdaptedProvider) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for piece in resp.content.iter_any():
        size += len(piece)
        if size > cap:
            raise provider._err(f"response larger than {cap} bytes", "bad_response", status=resp.status)
        parts.append(piece)
    return b"".join(parts)


def _error_message(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return ""
    try:
        doc = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        doc = doc[0]
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("msg") or err.get("detail")
            if msg:
                return str(msg)[:500]
        elif isinstance(err, str):
            return err[:500]
        if doc.get("message"):
            return str(doc["message"])[:500]
    return text[:300]


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms``; capped at 1 h."""
    lower = {k.lower(): v for k, v in headers.items()}
    value = lower.get("retry-after-ms")
    if value:
        try:
            return min(max(float(value) / 1000.0, 0.0), 3600.0)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if not value:
        return None
    value = value.strip()
    try:
        return min(max(float(value), 0.0), 3600.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return min(max(when.timestamp() - current, 0.0), 3600.0)


# --------------------------------------------------------------- context window
IMAGE_CHARS = 3000  # what an image part counts for in the estimate (~1000 tokens), not its base64 length


def _message_chars(message: dict[str, Any]) -> int:
    content = message.get("content")
    if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
        images = sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image_url")
        rest = [p for p in content if not (isinstance(p, dict) and p.get("type") == "image_url")]
        return _message_chars({**message, "content": rest}) + IMAGE_CHARS * images
    try:
        return len(json.dumps(message, ensure_ascii=False))
    except (TypeError, ValueError):
        return len(str(message))


def estimate_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    """Rough token estimate: characters of the JSON form / 3 (errs on the safe side for English and CJK)."""
    chars = sum(_message_chars(m) for m in messages)
    if tools:
        chars += len(json.dumps(tools, ensure_ascii=False))
    return chars // CHARS_PER_TOKEN


def trim_messages(
    messages: list[dict[str, Any]], budget_tokens: int, *, tools_chars: int = 0
) -> tuple[list[dict[str, Any]], int, int, int]:
    """Drop the oldest droppable messages until the estimate fits ``budget_tokens``.

    Never dropped: system messages, the last user message and everything after
    it (the current tool loop). An assistant message with tool calls and the
    tool results that answer it go together, so the history stays valid.
    Returns (messages, dropped count, tokens before, tokens after).
    """
    tool_tokens = tools_chars // CHARS_PER_TOKEN
    sizes = [_message_chars(m) // CHARS_PER_TOKEN for m in messages]
    before = sum(sizes) + tool_tokens
    if before <= budget_tokens:
        return messages, 0, before, before
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages))
    # groups of droppable indices, oldest first
    groups: list[list[int]] = []
    i = 0
    while i < last_user:
        role = messages[i].get("role")
        if role == "system":
            i += 1
            continue
        group = [i]
        if role == "assistant" and messages[i].get("tool_calls"):
            j = i + 1
            while j < last_user and messages[j].get("role") == "tool":
                group.append(j)
                j += 1
            i = j
        else:
            i += 1
            # a tool result without its call (already orphaned) goes with nothing
        groups.append(group)
    dropped: set[int] = set()
    total = before
    for group in groups:
        if total <= budget_tokens:
            break
        dropped.update(group)
        total -= sum(sizes[k] for k in group)
    # never leave a tool result at the head of the kept history
    kept = [m for k, m in enumerate(messages) if k not in dropped]
    return kept, len(dropped), before, total
