"""Turns one web client may have queued or running at once.

Each signed-in browser session, and the API token, gets at most
``plugin.webui.max_concurrent_turns`` unfinished turns; one more is refused
with 429 at once instead of joining the agent's queue, so a script in a loop
cannot queue thousands of turns ahead of everyone else. A slot is freed when
the turn's result is set (finished, failed or cancelled), not when the HTTP
request ends: a client that gives up waiting does not get its slot back
early.

Interrupts (each cancels the LLM call in flight, and becomes a turn when the
agent is idle) are limited to a human's rate per client: 5 a second, bursts
of 10, as on the local socket.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from homeagent.msg import Msg
from homeagent.ratelimit import TokenBucket
from homeagent.webui.common import ApiError

INTERRUPT_RATE = 5.0
INTERRUPT_BURST = 10.0
MAX_CLIENTS = 10_000  # interrupt buckets kept (the least recently used go first)


class TurnSlots:
    def __init__(self, limit: Callable[[], int]) -> None:
        self._limit = limit
        self._open: dict[str, int] = {}
        self._interrupts: OrderedDict[str, TokenBucket] = OrderedDict()

    def interrupt(self, client: str) -> None:
        """Let one interrupt of ``client`` through; ApiError 429 past its rate."""
        bucket = self._interrupts.pop(client, None) or TokenBucket(INTERRUPT_RATE, INTERRUPT_BURST)
        self._interrupts[client] = bucket
        while len(self._interrupts) > MAX_CLIENTS:
            self._interrupts.popitem(last=False)
        if not bucket.take():
            err = ApiError(
                429, Msg("busy: more than {rate:g} interrupts a second from this client; this one was dropped",
                         rate=INTERRUPT_RATE),
                code="busy",
            )
            err.headers["Retry-After"] = "1"
            raise err

    def open(self, client: str) -> int:
        return self._open.get(client, 0)

    def claim(self, client: str, future: asyncio.Future[Any]) -> None:
        """Hold a slot for ``client`` until ``future`` is done; ApiError 429 when all are taken."""
        limit = self._limit()
        taken = self._open.get(client, 0)
        if taken >= limit:
            err = ApiError(
                429,
                Msg("busy: {taken} turns of this client are still queued or running "
                    "(plugin.webui.max_concurrent_turns = {limit}); wait for one to finish", taken=taken, limit=limit),
                code="busy",
            )
            err.headers["Retry-After"] = "1"
            raise err
        self._open[client] = taken + 1

        def release(_: asyncio.Future[Any]) -> None:
            left = self._open.get(client, 1) - 1
            if left > 0:
                self._open[client] = left
            else:
                self._open.pop(client, None)

        future.add_done_callback(release)
