"""One child's JSON-RPC endpoint on the host: frames in, frames out, calls matched by id.

Why it is built this way:

* Bytes are fed in by the subprocess protocol's ``pipe_data_received`` and a
  response resolves its caller's future right there: no reader task and no
  queue between the pipe and the waiting call, which is most of a round
  trip's cost in asyncio.
* Requests both ways are concurrent. A plugin request whose handler finishes
  synchronously (most: settings, registration) is answered inline; others run
  as tasks, at most ``max_inflight`` at a time. Past that, requests get a
  "busy" error and notifications are dropped and counted, so a flooding
  plugin cannot grow the host's memory.
* Fairness: one callback handles at most :data:`BATCH` frames; the rest wait
  in a backlog while reading from the pipe is paused, and other work on the
  loop runs in between. A frame over :data:`THREAD_DECODE` bytes is decoded
  in a worker thread so that a big payload does not stall other calls.
* Garbage never stops the connection: malformed, oversized and unsolicited
  frames are counted (and logged at a bounded rate); malformed requests that
  carry an id get a JSON-RPC error back.
* :meth:`call_blocking` serves the few synchronous host APIs (text cleaners)
  that must get an answer from the plugin while running *on* the event loop:
  it writes the request and reads the child's stdout directly until the
  answer arrives (bounded by a short timeout), parking any other frame it
  reads for normal processing afterwards.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import itertools
import logging
import os
import select
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

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
)

__all__ = ["BATCH", "CallTimeout", "Connection", "ConnectionStats", "MethodStats", "Pipes", "PluginGone"]

BATCH = 256
THREAD_DECODE = 1024 * 1024
EVENT_BACKLOG_LIMIT = 1024 * 1024
"""Bytes waiting in the pipe to the child above which droppable notifications (events) are dropped."""
WRITE_BACKLOG_LIMIT = 64 * 1024 * 1024
"""Bytes waiting in the pipe to the child above which the child is declared stuck."""
_LATENCY_SAMPLES = 1024
_ERROR_ECHO_BUDGET = 50  # malformed frames answered with an error response, per connection


class PluginGone(Exception):
    """The plugin's process is not there (any more) to answer."""


class CallTimeout(TimeoutError):
    """A call to the plugin got no answer in time."""

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(f"{method}: no answer within {timeout:g}s")
        self.method = method
        self.timeout = timeout


@dataclass
class MethodStats:
    """Counts and recent latencies (ms) of one method."""

    count: int = 0
    errors: int = 0
    timeouts: int = 0
    samples: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=_LATENCY_SAMPLES))

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count, "errors": self.errors, "timeouts": self.timeouts}
        if self.samples:
            ordered = sorted(self.samples)
            out["p50_ms"] = round(ordered[len(ordered) // 2], 3)
            out["p95_ms"] = round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 3)
            out["max_ms"] = round(ordered[-1], 3)
        return out


@dataclass
class ConnectionStats:
    """What went over one connection, for health pages."""

    frames_in: int = 0
    frames_out: int = 0
    malformed: int = 0
    oversized: int = 0
    unknown_responses: int = 0
    busy_rejected: int = 0
    dropped_notifications: int = 0
    dropped_events: int = 0
    calls: dict[str, MethodStats] = field(default_factory=dict)
    served: collections.Counter[str] = field(default_factory=collections.Counter)

    def to_dict(self) -> dict[str, Any]:
        return {
            "frames_in": self.frames_in,
            "frames_out": self.frames_out,
            "malformed_frames": self.malformed,
            "oversized_frames": self.oversized,
            "unknown_responses": self.unknown_responses,
            "busy_rejected": self.busy_rejected,
            "dropped_notifications": self.dropped_notifications,
            "dropped_events": self.dropped_events,
        }


@dataclass
class Pipes:
    """How a connection reaches its child: the write side, and the raw fds for :meth:`Connection.call_blocking`."""

    write: Callable[[bytes], None]
    backlog: Callable[[], int] = lambda: 0
    pause_reading: Callable[[bool], None] | None = None
    read_fd: int | None = None
    write_fd: int | None = None


Dispatch = Callable[[Request], Any]
"""Handles one plugin request: returns the result (or an awaitable of it), raises RPCError."""


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[Any]
    method: str
    started: float
    deadline: float | None = None
    timeout: float = 0.0


class _RateLog:
    """Logs the first few occurrences of a problem, then one in a thousand."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._seen: collections.Counter[str] = collections.Counter()

    def warn(self, kind: str, msg: str, *args: Any) -> None:
        self._seen[kind] += 1
        n = self._seen[kind]
        if n <= 5 or n % 1000 == 0:
            self._log.warning(msg + (f" (#{n})" if n > 5 else ""), *args)


class Connection:
    """The host's end of one plugin's stdin/stdout."""

    def __init__(
        self,
        label: str,
        pipes: Pipes,
        dispatch: Dispatch,
        *,
        max_frame: int = MAX_FRAME,
        max_inflight: int = 64,
        on_fatal: Callable[[str], None] | None = None,
        log: logging.Logger | None = None,
        stats: ConnectionStats | None = None,
    ) -> None:
        self.label = label
        self.stats = stats if stats is not None else ConnectionStats()
        self._pipes = pipes
        self._dispatch = dispatch
        self._buffer = FrameBuffer(max_frame)
        self._max_inflight = max_inflight
        self._on_fatal = on_fatal
        self._log = log or logging.getLogger("homeagent.plugins.proc")
        self._rate = _RateLog(self._log)
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._inflight: set[asyncio.Task[None]] = set()
        self._backlog: collections.deque[bytes | Oversized] = collections.deque()
        self._draining = False
        self._closed: PluginGone | None = None
        self._echoed = 0
        self._sweeper: asyncio.TimerHandle | None = None
        self._abandoned: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    # ------------------------------------------------------------- input side

    def feed(self, data: bytes) -> None:
        """Bytes from the child's stdout (called by the pipe protocol)."""
        frames = self._buffer.feed(data)
        if not frames:
            return
        if not self._backlog and len(frames) <= BATCH:
            for frame in frames:
                self._handle(frame)
            return
        self._backlog.extend(frames)
        self._drain()

    def _drain(self) -> None:
        for _ in range(BATCH):
            if not self._backlog:
                break
            self._handle(self._backlog.popleft())
        busy = bool(self._backlog)
        if busy != self._draining:
            self._draining = busy
            if self._pipes.pause_reading is not None:
                self._pipes.pause_reading(busy)
        if busy:
            self._loop.call_soon(self._drain)

    def _handle(self, frame: bytes | Oversized) -> None:
        self.stats.frames_in += 1
        if isinstance(frame, Oversized):
            self._oversized(frame)
            return
        if len(frame) > THREAD_DECODE:
            task = self._loop.create_task(self._decode_in_thread(frame))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            return
        try:
            message = parse(frame)
        except ProtocolError as e:
            self._malformed(e, frame)
            return
        self._route(message)

    async def _decode_in_thread(self, frame: bytes) -> None:
        try:
            message = await asyncio.to_thread(parse, frame)
        except ProtocolError as e:
            self._malformed(e, frame)
            return
        self._route(message)

    def _route(self, message: Request | Response) -> None:
        if isinstance(message, Response):
            self._on_response(message)
        else:
            self._on_request(message)

    def _malformed(self, e: ProtocolError, frame: bytes) -> None:
        self.stats.malformed += 1
        shown = frame[:120].decode("utf-8", "replace")
        self._rate.warn("malformed", "plugin %s sent a malformed frame: %s: %r", self.label, e.message, shown)
        if e.id is not None or self._echoed < _ERROR_ECHO_BUDGET:
            self._echoed += 1
            self._send(encode_error(e.id, RPCError(e.code, e.message)))

    def _oversized(self, frame: Oversized) -> None:
        self.stats.oversized += 1
        ident, method = frame.guess()
        limit = self._buffer.max_frame
        self._rate.warn(
            "oversized", "plugin %s sent a frame of %d bytes (limit %d); skipped", self.label, frame.size, limit
        )
        message = f"frame of {frame.size} bytes is larger than the limit of {limit} bytes"
        if method is None and isinstance(ident, int) and ident in self._pending:
            pending = self._pending.pop(ident)
            if not pending.future.done():
                pending.future.set_exception(RPCError(ErrorCode.FRAME_TOO_LARGE, f"answer to {pending.method}: {message}"))
        elif method is not None and ident is not None:
            self._send(encode_error(ident, RPCError(ErrorCode.FRAME_TOO_LARGE, f"{method}: {message}")))

    def _on_response(self, message: Response) -> None:
        ident = message.id
        pending = self._pending.pop(ident, None) if isinstance(ident, int) else None
        if pending is None:
            if isinstance(ident, int) and ident in self._abandoned:
                del self._abandoned[ident]
                return  # the late answer to a call we gave up on (timed out or cancelled)
            self.stats.unknown_responses += 1
            self._rate.warn("unknown", "plugin %s answered a call it never received (id %r); ignored", self.label, ident)
            return
        if pending.future.done():
            return
        if message.error is not None:
            pending.future.set_exception(message.error)
        else:
            pending.future.set_result(message.result)

    def _on_request(self, request: Request) -> None:
        ident = request.id
        if self._closed is not None:
            if ident is not None:
                self._send(encode_error(ident, RPCError(ErrorCode.UNAVAILABLE, str(self._closed))))
            return
        if len(self._inflight) >= self._max_inflight:
            if ident is None:
                self.stats.dropped_notifications += 1
                self._rate.warn("drop", "plugin %s: too many requests in flight; notification dropped", self.label)
            else:
                self.stats.busy_rejected += 1
                self._send(
                    encode_error(
                        ident,
                        RPCError(ErrorCode.BUSY, f"host busy: {self._max_inflight} requests from this plugin in flight"),
                    )
                )
            return
        self.stats.served[request.method] += 1
        try:
            result = self._dispatch(request)
        except RPCError as e:
            self._reply_error(ident, e)
            return
        except Exception as e:  # a bug in a host method: tell the plugin, keep going
            self._log.exception("plugin %s: host method %s failed", self.label, request.method)
            self._reply_error(ident, RPCError(ErrorCode.INTERNAL_ERROR, f"{type(e).__name__}: {e}"))
            return
        if inspect.isawaitable(result):
            task = self._loop.create_task(self._finish(request, result))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        elif ident is not None:
            self._send(encode_response(ident, result))

    async def _finish(self, request: Request, pending: Awaitable[Any]) -> None:
        try:
            result = await pending
        except RPCError as e:
            self._reply_error(request.id, e)
        except asyncio.CancelledError:
            self._reply_error(request.id, RPCError(ErrorCode.CANCELLED, f"{request.method} was cancelled"))
            raise
        except Exception as e:
            self._log.exception("plugin %s: host method %s failed", self.label, request.method)
            self._reply_error(request.id, RPCError(ErrorCode.INTERNAL_ERROR, f"{type(e).__name__}: {e}"))
        else:
            if request.id is not None:
                self._send(encode_response(request.id, result))

    def _reply_error(self, ident: Any, error: RPCError) -> None:
        if ident is not None and self._closed is None:
            self._send(encode_error(ident, error))

    # ------------------------------------------------------------- output side

    def _send(self, data: bytes) -> None:
        if self._closed is not None:
            return
        backlog = self._pipes.backlog()
        if backlog > WRITE_BACKLOG_LIMIT and self._on_fatal is not None:
            self._on_fatal(f"it does not read its stdin ({backlog} bytes waiting)")
            return
        self.stats.frames_out += 1
        self._pipes.write(data)

    def notify(self, method: str, params: dict[str, Any] | None = None, *, droppable: bool = False) -> bool:
        """Send a notification; a droppable one (an event) is dropped when the child is behind. True if sent."""
        if self._closed is not None:
            return False
        if droppable and self._pipes.backlog() > EVENT_BACKLOG_LIMIT:
            self.stats.dropped_events += 1
            return False
        self._send(encode_notification(method, params))
        return True

    def _method_stats(self, method: str) -> MethodStats:
        stats = self.stats.calls.get(method)
        if stats is None:
            stats = self.stats.calls[method] = MethodStats()
        return stats

    async def call(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        """Call ``method`` in the plugin; RPCError, CallTimeout or PluginGone when it does not work."""
        if self._closed is not None:
            raise self._closed
        ident = next(self._ids)
        future: asyncio.Future[Any] = self._loop.create_future()
        started = time.perf_counter()
        pending = self._pending[ident] = _Pending(future, method, started)
        if timeout is not None:
            self._arm(pending, timeout)
        stats = self._method_stats(method)
        stats.count += 1
        ok = False
        try:
            self._send(encode_request(ident, method, params))
            result = await future
            ok = True
            return result
        except CallTimeout:
            stats.timeouts += 1
            self._abandon(ident)
            raise
        except asyncio.CancelledError:
            if not future.done():
                self._abandon(ident)
            raise
        finally:
            self._pending.pop(ident, None)
            if ok:
                stats.samples.append((time.perf_counter() - started) * 1000)
            else:
                stats.errors += 1

    def _abandon(self, ident: int) -> None:
        """Tell the plugin to stop working on a call, and expect (and drop) a late answer."""
        self._abandoned[ident] = None
        while len(self._abandoned) > 1024:
            self._abandoned.popitem(last=False)
        self.notify("cancel", {"id": ident})

    # Timeouts: one timer per connection, armed for the earliest deadline in flight,
    # instead of a timer per call (which costs more than the rest of a round trip).

    def _arm(self, pending: _Pending, timeout: float) -> None:
        pending.timeout = timeout
        pending.deadline = deadline = self._loop.time() + timeout
        sweeper = self._sweeper
        if sweeper is None or deadline < sweeper.when():
            if sweeper is not None:
                sweeper.cancel()
            self._sweeper = self._loop.call_at(deadline, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now = self._loop.time()
        earliest: float | None = None
        for p in list(self._pending.values()):
            if p.deadline is None or p.future.done():
                continue
            if p.deadline <= now:
                p.future.set_exception(CallTimeout(p.method, p.timeout))
            elif earliest is None or p.deadline < earliest:
                earliest = p.deadline
        if earliest is not None and self._closed is None:
            self._sweeper = self._loop.call_at(earliest, self._sweep)

    def call_blocking(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 0.5) -> Any:
        """A synchronous call for host code that cannot await; from the loop thread it reads the pipe itself."""
        if self._closed is not None:
            raise self._closed
        if threading.get_ident() != self._loop_thread:
            cf = asyncio.run_coroutine_threadsafe(self.call(method, params, timeout=timeout), self._loop)
            try:
                return cf.result(timeout + 1.0)
            except concurrent.futures.TimeoutError:
                cf.cancel()
                raise CallTimeout(method, timeout) from None
        return self._call_on_loop(method, params, timeout)

    def _call_on_loop(self, method: str, params: dict[str, Any] | None, timeout: float) -> Any:
        rfd, wfd = self._pipes.read_fd, self._pipes.write_fd
        if rfd is None or wfd is None or self._pipes.backlog() > 0 or self._backlog:
            raise PluginGone("the pipe to the plugin is busy; cannot call it synchronously now")
        ident = next(self._ids)
        stats = self._method_stats(method)
        stats.count += 1
        started = time.perf_counter()
        deadline = time.monotonic() + timeout
        data = memoryview(encode_request(ident, method, params))
        parked: list[bytes | Oversized] = []
        try:
            while data:
                _, writable, _ = select.select([], [wfd], [], max(0.0, deadline - time.monotonic()))
                if not writable:
                    raise CallTimeout(method, timeout)
                data = data[os.write(wfd, data) :]
            self.stats.frames_out += 1
            while True:
                remaining = deadline - time.monotonic()
                readable, _, _ = select.select([rfd], [], [], max(0.0, remaining))
                if not readable:
                    stats.timeouts += 1
                    raise CallTimeout(method, timeout)
                try:
                    chunk = os.read(rfd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    raise PluginGone("the plugin closed its stdout")
                for frame in self._buffer.feed(chunk):
                    answer = self._match(frame, ident)
                    if answer is None:
                        parked.append(frame)
                        continue
                    stats.samples.append((time.perf_counter() - started) * 1000)
                    if answer.error is not None:
                        raise answer.error
                    return answer.result
        except CallTimeout:  # (a TimeoutError, hence an OSError: caught first)
            stats.errors += 1
            self._abandon(ident)
            raise
        except (OSError, ValueError) as e:
            stats.errors += 1
            raise PluginGone(f"cannot reach the plugin: {e}") from None
        except BaseException:
            stats.errors += 1
            raise
        finally:
            if parked:
                self._backlog.extend(parked)
                self._loop.call_soon(self._drain)

    @staticmethod
    def _match(frame: bytes | Oversized, ident: int) -> Response | None:
        if isinstance(frame, Oversized) or len(frame) > THREAD_DECODE:
            return None
        try:
            message = parse(frame)
        except ProtocolError:
            return None
        if isinstance(message, Response) and message.id == ident:
            return message
        return None

    # ------------------------------------------------------------- teardown

    def close(self, reason: PluginGone) -> None:
        """Fail every call in flight with ``reason``; later calls fail at once. Idempotent."""
        if self._closed is not None:
            return
        self._closed = reason
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(reason)
                p.future.exception()  # mark retrieved: a caller may already be gone
        for task in list(self._inflight):
            task.cancel()
        self._backlog.clear()
