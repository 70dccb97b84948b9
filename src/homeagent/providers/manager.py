"""Chooses an LLM source per call and falls back across sources.

Fallback happens only while nothing has been shown to the user: once a
content, reasoning or tool-call delta of this call went out, an error is
raised to the caller instead (the agent loop keeps what it got). Sources
that fail are parked: 401/403 disables one until its configuration changes,
everything transient puts it in an exponential cooldown that honours
``Retry-After``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from homeagent.msg import Msg
from homeagent.providers.base import (
    AllProvidersFailed,
    ChatRequest,
    ChatResponse,
    Provider,
    ProviderError,
    StreamChunk,
    ToolCallAssembler,
    ToolCallDelta,
    Usage,
    without_images,
)

__all__ = ["ChunkCallback", "ProviderManager", "SourceInfo"]

ChunkCallback = Callable[[StreamChunk], Awaitable[None] | None]

COOLDOWN_KINDS = frozenset({"rate_limit", "server", "timeout", "network", "bad_response", "adapter"})


@dataclass(frozen=True)
class SourceInfo:
    """What ``homeagent llm sources`` and the web UI show; never contains the API key."""

    name: str
    adapter: str
    model: str
    base_url: str
    priority: int
    state: str  # ok | cooldown | disabled
    last_error: str
    cooldown_remaining: float
    max_concurrent: int
    in_flight: int
    context_window: int
    preferred: bool
    fallback: bool
    vision: bool = False


class _Source:
    def __init__(self, provider: Provider, seq: int, *, fallback: bool = False) -> None:
        self.provider = provider
        self.seq = seq
        self.fallback = fallback
        self.priority = _int_attr(provider, "priority", 0)
        self.max_concurrent = max(1, _int_attr(provider, "max_concurrent", 8))
        self.vision = getattr(provider, "vision", False) is True  # the source's own setting; unknown = cannot see
        self.semaphore = asyncio.Semaphore(self.max_concurrent)
        self.fingerprint = getattr(provider, "fingerprint", None)
        self.disabled_reason = ""
        self.cooldown_until = 0.0
        self.failures = 0
        self.last_error = ""
        self.last_kind = ""
        self.in_flight = 0

    @property
    def name(self) -> str:
        return str(self.provider.name)


def _int_attr(obj: Any, name: str, default: int) -> int:
    try:
        return int(getattr(obj, name, default))
    except (TypeError, ValueError):
        return default


class _ConsumerError(Exception):
    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


class ProviderManager:
    """Holds the LLM sources in order and runs one call with fallback.

    Order: the preferred source (``set_source`` / ``core.llm.provider``), then
    higher ``priority`` first, then registration order; the fallback source
    (the offline provider) always comes last unless it is the preferred one.
    """

    def __init__(
        self,
        providers: Iterable[Provider] = (),
        *,
        preferred: str | None = None,
        fallback: Provider | None = None,
        cooldown_base: float = 2.0,
        cooldown_max: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
    ) -> None:
        self.cooldown_base = cooldown_base
        self.cooldown_max = cooldown_max
        self._clock = clock
        self.log = logger or logging.getLogger("homeagent.providers.manager")
        self._sources: dict[str, _Source] = {}
        self._seq = 0
        self._preferred = preferred or ""
        self._fallback: _Source | None = None
        for provider in providers:
            self.add(provider)
        if fallback is not None:
            self.set_fallback(fallback)

    # -------------------------------------------------------------- membership
    def add(self, provider: Provider) -> None:
        """Register one more source (after the existing ones of the same priority)."""
        name = str(provider.name)
        if name in self._sources or (self._fallback is not None and self._fallback.name == name):
            raise ValueError(f"LLM source '{name}' is already registered")
        self._seq += 1
        self._sources[name] = _Source(provider, self._seq)

    def set_fallback(self, provider: Provider | None) -> None:
        """The source tried after every other one (the offline provider); kept across ``set_sources``."""
        self._seq += 1
        self._fallback = _Source(provider, self._seq, fallback=True) if provider is not None else None

    def set_sources(self, providers: Sequence[Provider], *, preferred: str | None = None) -> None:
        """Replace the configured sources (after a config change).

        A source whose name and ``fingerprint`` (base URL, model, adapter, key
        digest, …) are unchanged keeps its state; a changed one starts fresh,
        which is what re-enables a source disabled by 401/403.
        """
        old = self._sources
        self._sources = {}
        for provider in providers:
            name = str(provider.name)
            if name in self._sources:
                self.log.warning("duplicate LLM source '%s' ignored", name)
                continue
            previous = old.get(name)
            self._seq += 1
            source = _Source(provider, self._seq)
            fingerprint = source.fingerprint
            if previous is not None:
                source.seq = previous.seq  # keeps its place among equal priorities
            if previous is not None and fingerprint is not None and previous.fingerprint == fingerprint:
                source.disabled_reason = previous.disabled_reason
                source.cooldown_until = previous.cooldown_until
                source.failures = previous.failures
                source.last_error = previous.last_error
                source.last_kind = previous.last_kind
                source.semaphore = previous.semaphore
                source.in_flight = previous.in_flight
            self._sources[name] = source
        if preferred is not None:
            self._preferred = preferred

    def remove(self, name: str) -> None:
        if name not in self._sources:
            raise ValueError(self._unknown(name))
        del self._sources[name]

    def reset(self, name: str | None = None) -> None:
        """Clear disabled/cooldown state of one source (or all)."""
        for source in self._all():
            if name is None or source.name == name:
                source.disabled_reason = ""
                source.cooldown_until = 0.0
                source.failures = 0

    def get(self, name: str) -> Provider | None:
        for source in self._all():
            if source.name == name:
                return source.provider
        return None

    def provider(self, name: str) -> Provider:
        found = self.get(name)
        if found is None:
            raise ValueError(self._unknown(name))
        return found

    # ----------------------------------------------------------------- ordering
    def _all(self) -> list[_Source]:
        out = list(self._sources.values())
        if self._fallback is not None:
            out.append(self._fallback)
        return out

    def _ordered(self) -> list[_Source]:
        def key(s: _Source) -> tuple[int, int, int, int]:
            return (0 if s.name == self._preferred else 1, 1 if s.fallback else 0, -s.priority, s.seq)

        return sorted(self._all(), key=key)

    def _unknown(self, name: str) -> str:
        names = ", ".join(s.name for s in self._ordered()) or Msg("none")
        return Msg("unknown LLM source '{name}' (available: {names})", name=name, names=names)

    def set_source(self, name: str) -> None:
        """Make ``name`` the first source tried."""
        if not any(s.name == name for s in self._all()):
            raise ValueError(self._unknown(name))
        self._preferred = name

    def current_source(self) -> str:
        """The source the next call will try first ("" when there is none)."""
        now = self._clock()
        ordered = self._ordered()
        for s in ordered:
            if not s.disabled_reason and s.cooldown_until <= now:
                return s.name
        cooling = [s for s in ordered if not s.disabled_reason]
        if cooling:
            return min(cooling, key=lambda s: s.cooldown_until).name
        return ""

    def sees_images(self) -> bool:
        """Whether the source the next call tries first can see images (its ``vision`` setting)."""
        name = self.current_source()
        return any(s.name == name and s.vision for s in self._all())

    def list_sources(self) -> list[SourceInfo]:
        now = self._clock()
        out: list[SourceInfo] = []
        for s in self._ordered():
            p = s.provider
            if s.disabled_reason:
                state = "disabled"
            elif s.cooldown_until > now:
                state = "cooldown"
            else:
                state = "ok"
            out.append(
                SourceInfo(
                    name=s.name,
                    adapter=str(getattr(p, "adapter_name", "") or ""),
                    model=str(getattr(p, "model", "") or ""),
                    base_url=str(getattr(p, "base_url", "") or ""),
                    priority=s.priority,
                    state=state,
                    last_error=s.last_error,
                    cooldown_remaining=max(0.0, s.cooldown_until - now),
                    max_concurrent=s.max_concurrent,
                    in_flight=s.in_flight,
                    context_window=_int_attr(p, "context_window", 0),
                    preferred=s.name == self._preferred,
                    fallback=s.fallback,
                    vision=s.vision,
                )
            )
        return out

    # ------------------------------------------------------------------ running
    async def run(
        self,
        request: ChatRequest,
        on_chunk: ChunkCallback | None = None,
        *,
        stream: bool = True,
    ) -> ChatResponse:
        """One LLM call with fallback; ``on_chunk`` sees every delta as it arrives."""
        attempts: list[str] = []
        ordered = self._ordered()
        now = self._clock()
        forced: _Source | None = None
        blind: ChatRequest | None = None  # the request without its images, for sources that cannot see
        if not any(not s.disabled_reason and s.cooldown_until <= now for s in ordered):
            cooling = [s for s in ordered if not s.disabled_reason]
            if cooling:
                forced = min(cooling, key=lambda s: s.cooldown_until)
        for source in ordered:
            if source.disabled_reason:
                attempts.append(f"{source.name}: skipped (disabled: {source.disabled_reason})")
                continue
            if source.cooldown_until > now and source is not forced:
                remaining = source.cooldown_until - now
                attempts.append(f"{source.name}: skipped (cooling down {remaining:.0f}s after {source.last_kind})")
                continue
            started = [False]
            sent = request
            if not source.vision:
                if blind is None:
                    stripped = without_images(request.messages)
                    blind = request if stripped is None else dataclasses.replace(request, messages=stripped)
                sent = blind
            try:
                async with source.semaphore:
                    source.in_flight += 1
                    try:
                        if stream:
                            response = await self._stream_one(source, sent, on_chunk, started)
                        else:
                            response = await self._chat_one(source, sent, on_chunk, started)
                    finally:
                        source.in_flight -= 1
            except _ConsumerError as exc:
                raise exc.original from None
            except ProviderError as exc:
                if exc.kind == "cancelled":
                    raise
                if not exc.source:
                    exc.source = source.name
                self._record_failure(source, exc)
                if started[0]:
                    raise
                attempts.append(exc.describe())
                self.log.warning("LLM source %s failed, trying the next one: %s", source.name, exc.describe())
                continue
            except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # a provider bug must not take the daemon down
                self.log.exception("LLM source %s raised unexpectedly", source.name)
                error = ProviderError(f"internal error: {type(exc).__name__}: {exc}", kind="server", source=source.name)
                self._record_failure(source, error)
                if started[0]:
                    raise error from exc
                attempts.append(error.describe())
                continue
            self._record_success(source)
            response.source = source.name
            if ordered[0] is not source:
                response.fallback_from = ordered[0].name
            return response
        raise AllProvidersFailed(attempts)

    async def _emit(self, on_chunk: ChunkCallback | None, chunk: StreamChunk) -> None:
        if on_chunk is None:
            return
        try:
            result = on_chunk(chunk)
            if inspect.isawaitable(result):
                await result
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            raise _ConsumerError(exc) from exc

    async def _chat_one(
        self, source: _Source, request: ChatRequest, on_chunk: ChunkCallback | None, started: list[bool]
    ) -> ChatResponse:
        response = await source.provider.chat(request)
        if on_chunk is not None and (response.content or response.reasoning or response.tool_calls):
            started[0] = True
            deltas = [
                ToolCallDelta(index=i, id=tc.id, name=tc.name, arguments=tc.raw_arguments)
                for i, tc in enumerate(response.tool_calls)
            ]
            await self._emit(on_chunk, StreamChunk(content=response.content, reasoning=response.reasoning,
                                                   tool_calls=deltas, finish_reason=response.finish_reason,
                                                   usage=response.usage))
        return response

    async def _stream_one(
        self, source: _Source, request: ChatRequest, on_chunk: ChunkCallback | None, started: list[bool]
    ) -> ChatResponse:
        content: list[str] = []
        reasoning: list[str] = []
        assembler = ToolCallAssembler()
        finish: str | None = None
        usage = Usage()
        saw_usage = False
        stream = source.provider.chat_stream(request)
        try:
            async for chunk in stream:
                if chunk.has_output:
                    started[0] = True
                if chunk.content:
                    content.append(chunk.content)
                if chunk.reasoning:
                    reasoning.append(chunk.reasoning)
                for delta in chunk.tool_calls:
                    assembler.add(delta)
                if chunk.finish_reason:
                    finish = chunk.finish_reason
                if chunk.usage is not None:
                    saw_usage = True
                    _merge_usage(usage, chunk.usage)
                await self._emit(on_chunk, chunk)
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                await closer()
        calls = assembler.calls()
        if saw_usage:
            usage.total = max(usage.total, usage.prompt + usage.completion)
        return ChatResponse(
            content="".join(content),
            reasoning="".join(reasoning),
            tool_calls=calls,
            finish_reason=finish or ("tool_calls" if calls else "stop"),
            usage=usage,
            source=source.name,
            model=str(request.model or getattr(source.provider, "model", "") or ""),
        )

    # -------------------------------------------------------------- bookkeeping
    def _record_success(self, source: _Source) -> None:
        source.failures = 0
        source.cooldown_until = 0.0

    def _record_failure(self, source: _Source, exc: ProviderError) -> None:
        source.last_error = exc.describe()
        source.last_kind = f"{exc.kind}{f' HTTP {exc.status}' if exc.status else ''}"
        if exc.kind == "auth":
            source.disabled_reason = str(exc.status) if exc.status else "auth"
            self.log.error("LLM source %s disabled until its configuration changes: %s", source.name, exc.describe())
            return
        if exc.kind not in COOLDOWN_KINDS:
            return
        source.failures += 1
        backoff = min(self.cooldown_max, self.cooldown_base * (2 ** (source.failures - 1)))
        delay = max(backoff, exc.retry_after or 0.0)
        source.cooldown_until = self._clock() + delay
        self.log.info("LLM source %s cooling down for %.1fs (%s)", source.name, delay, source.last_kind)

    async def aclose(self) -> None:
        for source in self._all():
            closer = getattr(source.provider, "aclose", None)
            if closer is not None:
                try:
                    await closer()
                except Exception:  # closing is best effort
                    self.log.debug("closing %s failed", source.name, exc_info=True)


def _merge_usage(into: Usage, new: Usage) -> None:
    """Streams report usage piecemeal (Anthropic: input at start, output at the end): latest non-zero wins."""
    for field in ("prompt", "completion", "total", "cache_read", "reasoning"):
        value = getattr(new, field)
        if value:
            setattr(into, field, value)
