"""IOManager: every way text reaches the agent.

Two inlets feed the agent loop: the input queue (ordinary messages, ordered
by priority then arrival) and the interrupt queue (read by the intercept task,
which may cancel the LLM call in flight). The memory loops do not come this
way: their LLM decisions are calls of their own (see daemon.py ``memory_llm``).

Every input's text is scrubbed of lone surrogates on the way in: the socket,
HTTP and plugin RPC boundaries already do it, and this catches the in-process
sources (Python plugins, channels) so no turn can carry text the text log,
the stores or the LLM request would fail to encode.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from homeagent.sdk.types import InjectOptions, MediaBlock
from homeagent.text import scrub_text

FrameSink = Callable[[dict[str, Any]], Awaitable[None] | None]
"""Receives the stream frames of one turn (reasoning_delta, content_delta, tool_call, response, error)."""

@dataclass
class TurnResult:
    """What one processed input produced."""

    ok: bool
    text: str = ""
    error: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    source: str = ""
    interrupted: bool = False
    input_id: str = ""
    fallback_from: str = ""  # set when a fallback LLM source answered instead of the first in line
    partial: str = ""  # a stopped turn: the reply text streamed before the stop (``text`` stays empty)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "text": self.text,
            "error": self.error,
            "reasoning": self.reasoning,
            "tool_calls": self.tool_calls,
            "usage": self.usage,
            "source": self.source,
            "interrupted": self.interrupted,
            "id": self.input_id,
            "fallback_from": self.fallback_from,
            **({"partial": self.partial} if self.partial else {}),
        }


@dataclass
class InputMessage:
    text: str
    source: str
    channel: str
    options: InjectOptions = field(default_factory=InjectOptions)
    # 48 random bits are plenty to tell inputs apart; uuid4 read /dev/urandom on every message
    id: str = field(default_factory=lambda: f"{random.getrandbits(48):012x}")
    ts: float = field(default_factory=time.time)
    sink: FrameSink | None = None
    reply: asyncio.Future[TurnResult] | None = None
    interrupt: bool = False
    media: list[MediaBlock] = field(default_factory=list)  # images and files that go with the text this turn

    @property
    def no_memory(self) -> bool:
        return self.options.no_memory


Intake = Callable[[InputMessage], bool]
"""Looks at an input before it is queued; True takes it (it never becomes a turn). Must be quick: no I/O."""


class IOManager:
    def __init__(self) -> None:
        self._seq = itertools.count()
        self._inputs: asyncio.PriorityQueue[tuple[int, int, InputMessage]] = asyncio.PriorityQueue()
        self.interrupts: asyncio.Queue[InputMessage] = asyncio.Queue()
        self._intakes: list[Intake] = []

    def add_intake(self, intake: Intake) -> Callable[[], None]:
        """Let ``intake`` take inputs before they queue: an answer to a turn that is waiting (the owner's
        "approve 3f9a2c" from a chat) must not queue behind that very turn."""
        self._intakes.append(intake)

        def undo() -> None:
            if intake in self._intakes:
                self._intakes.remove(intake)

        return undo

    def _taken(self, message: InputMessage) -> bool:
        return any(intake(message) for intake in self._intakes) if self._intakes else False

    # -- ordinary input ---------------------------------------------------
    def inject(self, message: InputMessage) -> str:
        message.text = scrub_text(message.text)
        if self._taken(message):
            if message.reply is not None and not message.reply.done():  # a synchronous caller is not left waiting
                message.reply.set_result(TurnResult(ok=True, text="", input_id=message.id))
            return message.id
        self._inputs.put_nowait((message.options.priority, next(self._seq), message))
        return message.id

    def inject_text(
        self,
        source: str,
        channel: str,
        text: str,
        *,
        options: InjectOptions | None = None,
        sink: FrameSink | None = None,
        media: list[MediaBlock] | None = None,
    ) -> str:
        return self.inject(InputMessage(text, source, channel, options or InjectOptions(), sink=sink,
                                        media=list(media or [])))

    def inject_text_no_memory(self, source: str, channel: str, text: str) -> str:
        return self.inject_text(source, channel, text, options=InjectOptions(no_memory=True))

    async def inject_sync(
        self,
        source: str,
        channel: str,
        text: str,
        *,
        options: InjectOptions | None = None,
        sink: FrameSink | None = None,
        timeout: float | None = None,
        media: list[MediaBlock] | None = None,
    ) -> TurnResult:
        """Queue an input and wait for the turn it starts to finish."""
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        message = InputMessage(text, source, channel, options or InjectOptions(), sink=sink, reply=future,
                               media=list(media or []))
        self.inject(message)
        return await asyncio.wait_for(asyncio.shield(future), timeout)

    async def next_input(self) -> InputMessage:
        _, _, message = await self._inputs.get()
        return message

    def pending_inputs(self) -> int:
        return self._inputs.qsize()

    # -- interrupts -------------------------------------------------------
    def inject_interrupt_text(
        self, source: str, channel: str, text: str, *, options: InjectOptions | None = None,
        sink: FrameSink | None = None, media: list[MediaBlock] | None = None,
    ) -> str:
        message = InputMessage(scrub_text(text), source, channel, options or InjectOptions(), sink=sink, interrupt=True,
                               media=list(media or []))
        if not self._taken(message):
            self.interrupts.put_nowait(message)
        return message.id
