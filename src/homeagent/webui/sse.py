"""Server-sent events: the event bus and a turn's frames as ``text/event-stream``.

A client that stops reading must cost a bounded amount of memory and must
never slow the publisher. uvicorn stops running a stream's generator while the
client's socket buffer is full, so what a stalled client can hold is: the bytes
of one chunk (at most ``MAX_CHUNK_BYTES`` plus one message) in the transport,
and for the event bus the subscription's own drop-oldest buffer, which lets go
of its events once the client has lost more than ``max_lag`` of them (the
stream then ends with an ``overflow`` event, whenever the client reads again);
for a turn's frames it is :class:`FrameQueue`, which never blocks the turn and,
past its bound in frames or text bytes, drops text deltas (the final
``response`` frame still carries the whole text, so nothing is lost).

Every open stream registers a closer with :class:`StreamRegistry`, so the
server can end them all when it shuts down instead of waiting for clients
that never hang up.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from homeagent.events import Event, EventBus, Subscription

KEEPALIVE_SECONDS = 15.0
# One chunk written to the client at most (a single larger message still goes alone): what a client that stops
# reading can hold in the transport's buffer, on top of uvicorn's 64 KiB high-water mark
MAX_CHUNK_BYTES = 64 * 1024
SSE_HEADERS = {
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


def sse(data: Any, *, event: str | None = None, id: int | str | None = None, retry_ms: int | None = None) -> bytes:
    """One SSE message; ``data`` is sent as JSON unless it is already a string."""
    lines: list[str] = []
    if id is not None:
        lines.append(f"id: {id}")
    if event:
        lines.append(f"event: {event}")
    if retry_ms is not None:
        lines.append(f"retry: {retry_ms}")
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    lines.extend(f"data: {line}" for line in text.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


def comment(text: str = "") -> bytes:
    return f": {text}\n\n".encode()


def parse_last_event_id(value: str | None) -> int:
    if not value:
        return 0
    try:
        return max(0, int(value.strip()))
    except ValueError:
        return 0


class StreamRegistry:
    """Open streams and how to end each; bounded so a flood of clients is refused, not queued.

    It also keeps the encoded form of recent events, so an event sent to a hundred clients is
    serialised once.
    """

    def __init__(self, max_streams: int = 512, *, encoded_cache: int = 1024, encoded_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_streams = max_streams
        self._closers: dict[int, Callable[[], None]] = {}
        self._ids = 0
        self.closed = False
        self._encoded: OrderedDict[int, bytes] = OrderedDict()
        self._encoded_max = encoded_cache
        self._encoded_bytes_max = encoded_bytes  # events carry turn text: a count alone does not bound it
        self._encoded_bytes = 0

    def __len__(self) -> int:
        return len(self._closers)

    def full(self) -> bool:
        return self.closed or len(self._closers) >= self.max_streams

    def add(self, closer: Callable[[], None]) -> int:
        self._ids += 1
        self._closers[self._ids] = closer
        return self._ids

    def remove(self, key: int) -> None:
        self._closers.pop(key, None)

    def close_all(self) -> None:
        self.closed = True
        for closer in list(self._closers.values()):
            closer()
        self._closers.clear()

    def encode(self, event: Event) -> bytes:
        data = self._encoded.get(event.id)
        if data is None:
            data = sse(event.to_dict(), event=event.type, id=event.id)
            self._encoded[event.id] = data
            self._encoded_bytes += len(data)
            while len(self._encoded) > 1 and (
                len(self._encoded) > self._encoded_max or self._encoded_bytes > self._encoded_bytes_max
            ):
                self._encoded_bytes -= len(self._encoded.popitem(last=False)[1])
        return data


def _chunks(parts: list[bytes], limit: int = MAX_CHUNK_BYTES) -> Iterator[bytes]:
    """``parts`` joined into chunks of at most ``limit`` bytes (a larger part goes alone)."""
    chunk: list[bytes] = []
    size = 0
    for part in parts:
        if chunk and size + len(part) > limit:
            yield b"".join(chunk)
            chunk, size = [], 0
        chunk.append(part)
        size += len(part)
    if chunk:
        yield b"".join(chunk)


def overflow_message(sub: Subscription, reported: int) -> bytes:
    return sse({
        "dropped": sub.dropped - reported,
        "message": f"this stream was closed: the client read nothing while more than {sub.max_dropped} events "
        "went by; reconnect (with Last-Event-ID) to follow again",
    }, event="overflow")


async def event_stream(
    bus: EventBus,
    registry: StreamRegistry,
    *,
    last_id: int,
    types: list[str] | None,
    maxsize: int = 256,
    keepalive: float = KEEPALIVE_SECONDS,
    batch: int = 64,
    max_lag: int = 1024,
) -> AsyncIterator[bytes]:
    """Replay the ring after ``last_id``, then follow the bus until the client or the server leaves.

    Events that queued up while the client was being written to go out together, in chunks of at
    most ``MAX_CHUNK_BYTES``. A client that lost more than ``max_lag`` events is not reading: its
    subscription has closed itself, and the stream ends with an ``overflow`` event.
    """
    sub = bus.subscribe(types, maxsize=maxsize, name="webui-sse", max_dropped=max_lag)
    key = registry.add(sub.close)
    try:
        ring = bus.recent(0)
        if (ring and last_id > ring[-1].id) or (not ring and last_id):
            last_id = ring[-1].id if ring else 0  # ids from before a daemon restart: follow from now
        yield sse({"last_id": last_id}, event="hello", retry_ms=2000)
        newest = last_id
        replay = [e for e in ring if e.id > last_id and (types is None or e.type in types)]
        if replay:
            newest = replay[-1].id
            for chunk in _chunks([registry.encode(e) for e in replay]):
                yield chunk
        reported = 0
        while True:
            event = sub.get_nowait()
            if event is None:
                try:
                    async with asyncio.timeout(keepalive):  # no extra task, unlike wait_for
                        event = await sub.get()
                except TimeoutError:
                    yield comment("keepalive")
                    continue
                except EOFError:
                    if sub.overflowed:
                        yield overflow_message(sub, reported)
                    return
            events = [event]
            while len(events) < batch and (more := sub.get_nowait()) is not None:
                events.append(more)
            parts: list[bytes] = []
            if sub.dropped != reported:
                parts.append(sse({"dropped": sub.dropped - reported}, event="dropped"))
                reported = sub.dropped
            for item in events:
                if item.id > newest:  # older ones were subscribed before the replay: already sent
                    newest = item.id
                    parts.append(registry.encode(item))
            for chunk in _chunks(parts):
                yield chunk
    finally:
        registry.remove(key)
        sub.close()


class FrameQueue:
    """The frames of one turn for one HTTP client; ``put`` never blocks the turn."""

    def __init__(self, *, max_frames: int = 10_000, max_text_bytes: int = 1024 * 1024) -> None:
        self.max_frames = max_frames
        self.max_text_bytes = max_text_bytes
        self._text_bytes = 0  # characters of the queued deltas' text: what a non-reading client holds
        self._frames: deque[dict[str, Any]] = deque()
        self._wakeup = asyncio.Event()
        self.dropped = 0
        self.finished = False
        self.closed = False

    def put(self, frame: dict[str, Any]) -> None:
        if self.finished or self.closed:
            return
        kind = frame.get("type")
        delta = kind in ("content_delta", "reasoning_delta")
        size = len(str(frame.get("text") or "")) if delta else 0
        if (
            delta
            and (len(self._frames) >= self.max_frames or self._text_bytes + size > self.max_text_bytes)
            and not frame.get("reset")
        ):
            self.dropped += 1
            return
        self._text_bytes += size
        self._frames.append(frame)
        if kind == "response":
            self.finished = True
        self._wakeup.set()

    async def sink(self, frame: dict[str, Any]) -> None:
        """The turn's frame sink: queue the frame, then yield once so the stream writes it out now.

        Without the yield a turn that does not await between frames (the offline provider, a
        CPU-bound step) would deliver its whole stream at the end.
        """
        self.put(frame)
        await asyncio.sleep(0)

    def close(self) -> None:
        """End the stream early (the server is shutting down)."""
        self.closed = True
        self._wakeup.set()

    async def get(self) -> dict[str, Any]:
        """The next frame; EOFError once closed and drained."""
        while not self._frames:
            if self.closed:
                raise EOFError("stream closed")
            self._wakeup.clear()
            await self._wakeup.wait()
        frame = self._frames.popleft()
        self._forget(frame)
        return frame

    def _forget(self, frame: dict[str, Any]) -> None:
        if frame.get("type") in ("content_delta", "reasoning_delta"):
            self._text_bytes -= len(str(frame.get("text") or ""))

    def take_all(self) -> list[dict[str, Any]]:
        """Every frame waiting now (none: an empty list), without waiting."""
        frames = list(self._frames)
        self._frames.clear()
        self._text_bytes = 0
        return frames

    def __len__(self) -> int:
        return len(self._frames)


async def frame_stream(
    queue: FrameQueue, registry: StreamRegistry, *, keepalive: float = KEEPALIVE_SECONDS
) -> AsyncIterator[bytes]:
    """A turn's frames as SSE (``event:`` is the frame type), ending after ``response``."""
    key = registry.add(queue.close)
    try:
        while True:
            frames = queue.take_all()
            if not frames:
                try:
                    async with asyncio.timeout(keepalive):
                        frames = [await queue.get()]
                except TimeoutError:
                    yield comment("keepalive")
                    continue
                except EOFError:
                    yield sse({"type": "error", "message": "the server is shutting down"}, event="error")
                    return
                frames.extend(queue.take_all())
            for chunk in _chunks([sse(f, event=str(f.get("type", "message"))) for f in frames]):
                yield chunk
            if any(f.get("type") == "response" for f in frames):
                return
    finally:
        registry.remove(key)
        queue.close()
