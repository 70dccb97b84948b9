"""Event bus: publishers never wait for subscribers.

Every subscriber owns a bounded queue. When a slow subscriber's queue is full
the oldest event is dropped and counted, so one stuck web client or plugin can
never stall the agent loop that publishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("homeagent.events")


@dataclass(frozen=True)
class Event:
    id: int
    type: str
    data: dict[str, Any]
    ts: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "ts": self.ts, "data": self.data}


class Subscription:
    """A bounded, drop-oldest stream of events for one subscriber.

    With ``max_dropped``, a subscriber that has lost more than that many events is
    not reading at all (a stalled network client): the subscription closes itself
    and lets go of its buffer at once, without waiting for the consumer to run
    again, and ``overflowed`` tells the consumer why it ended.
    """

    def __init__(
        self, bus: EventBus, types: frozenset[str] | None, maxsize: int, name: str, max_dropped: int | None = None
    ) -> None:
        self._bus = bus
        self.types = types
        self.name = name
        self._buffer: deque[Event] = deque(maxlen=maxsize)
        self._wakeup = asyncio.Event()
        self.dropped = 0
        self.max_dropped = max_dropped
        self.overflowed = False
        self.closed = False

    def wants(self, event_type: str) -> bool:
        return self.types is None or event_type in self.types

    def _offer(self, event: Event) -> None:
        if self.closed:
            return
        if len(self._buffer) == self._buffer.maxlen:
            self.dropped += 1
            if self.max_dropped is not None and self.dropped > self.max_dropped:
                self.overflowed = True
                self._buffer.clear()
                self.close()
                return
        self._buffer.append(event)
        self._wakeup.set()

    async def get(self) -> Event:
        while not self._buffer:
            if self.closed:
                raise EOFError("subscription closed")
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._buffer.popleft()

    def get_nowait(self) -> Event | None:
        return self._buffer.popleft() if self._buffer else None

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        while True:
            try:
                yield await self.get()
            except EOFError:
                return

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._wakeup.set()
            self._bus._remove(self)


class EventBus:
    def __init__(self, *, history: int = 200) -> None:
        self._subs: list[Subscription] = []
        self._ids = itertools.count(1)
        self._history: deque[Event] = deque(maxlen=history)
        self._tasks: set[asyncio.Task[None]] = set()

    def publish(self, event_type: str, data: dict[str, Any] | None = None) -> Event:
        event = Event(next(self._ids), event_type, data or {})
        self._history.append(event)
        for sub in list(self._subs):
            if sub.wants(event_type):
                sub._offer(event)
        return event

    def recent(self, after_id: int = 0, types: Iterable[str] | None = None) -> list[Event]:
        """Events still in the replay ring newer than ``after_id`` (for Last-Event-ID)."""
        wanted = frozenset(types) if types else None
        return [e for e in self._history if e.id > after_id and (wanted is None or e.type in wanted)]

    def subscribe(
        self, types: Iterable[str] | None = None, *, maxsize: int = 1000, name: str = "",
        max_dropped: int | None = None,
    ) -> Subscription:
        sub = Subscription(self, frozenset(types) if types else None, maxsize, name, max_dropped)
        self._subs.append(sub)
        return sub

    def listen(
        self,
        callback: Callable[[Event], Awaitable[None] | None],
        types: Iterable[str] | None = None,
        *,
        maxsize: int = 1000,
        name: str = "",
    ) -> Callable[[], None]:
        """Run ``callback`` for each event in its own task; returns the undo."""
        sub = self.subscribe(types, maxsize=maxsize, name=name)

        async def pump() -> None:
            async for event in sub:
                try:
                    result = callback(event)
                    if asyncio.iscoroutine(result):
                        await result
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("event listener %s failed on %s", name or callback, event.type)

        task = asyncio.get_running_loop().create_task(pump(), name=f"event-listener:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

        def undo() -> None:
            sub.close()
            task.cancel()

        return undo

    def stats(self) -> list[dict[str, Any]]:
        return [
            {"name": s.name, "types": sorted(s.types) if s.types else None, "queued": len(s._buffer), "dropped": s.dropped}
            for s in self._subs
        ]

    def _remove(self, sub: Subscription) -> None:
        with contextlib.suppress(ValueError):
            self._subs.remove(sub)

    async def close(self) -> None:
        for sub in list(self._subs):
            sub.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
