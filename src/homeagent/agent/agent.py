"""The agent: one event loop that gives HomeAgent a continuous identity.

The loop takes one input at a time, in the input queue's order. The intercept task runs beside it: an interrupt cancels
the LLM call in flight and waits in the slot for the next LLM call of the
running turn; when the agent is idle the interrupt becomes an ordinary input
at the highest priority.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Any

from homeagent.agent.process import TurnRunner
from homeagent.io.manager import InputMessage, IOManager, TurnResult

log = logging.getLogger("homeagent.agent")


class Agent:
    def __init__(self, io: IOManager, runner: TurnRunner) -> None:
        self.io = io
        self.runner = runner
        self._tasks: list[asyncio.Task[None]] = []
        self._turn: asyncio.Task[TurnResult] | None = None
        self.current: InputMessage | None = None
        self.turns = 0
        self.interrupts = 0

    @property
    def busy(self) -> bool:
        return self._turn is not None and not self._turn.done()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._event_loop(), name="agent-event-loop"),
            loop.create_task(self._intercept_loop(), name="agent-intercept"),
        ]

    async def stop(self) -> None:
        """Cancel the running turn (it ends as interrupted) and stop both loops."""
        if self._turn is not None and not self._turn.done():
            self._turn.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(self._turn), 5)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def cancel_turn(self) -> bool:
        """Stop the running turn (user pressed stop / Ctrl-C). True if one was running."""
        if self._turn is not None and not self._turn.done():
            self._turn.cancel()
            return True
        return False

    def status(self) -> dict[str, Any]:
        return {
            "busy": self.busy,
            "current": self.current.id if self.current and self.busy else None,
            "turns": self.turns,
            "interrupts": self.interrupts,
            "queued": self.io.pending_inputs(),
        }

    async def _event_loop(self) -> None:
        while True:
            await self._process(await self.io.next_input())

    async def _process(self, message: InputMessage) -> None:
        self.current = message
        self._turn = asyncio.get_running_loop().create_task(self.runner.run(message), name=f"turn-{message.id}")
        try:
            await asyncio.shield(self._turn)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                # the event loop itself is being stopped: let the turn wind down, then leave
                self._turn.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(self._turn, 5)
                raise
            # the turn was cancelled before it could start: report it as interrupted
            if message.reply is not None and not message.reply.done():
                message.reply.set_result(TurnResult(ok=False, interrupted=True, error="turn interrupted", input_id=message.id))
        except Exception:
            log.exception("turn %s crashed", message.id)
            if message.reply is not None and not message.reply.done():
                message.reply.set_result(TurnResult(ok=False, error="internal error", input_id=message.id))
        finally:
            self.turns += 1
            # interrupts that arrived after the last LLM call of the turn become ordinary inputs
            for left in self.runner.slot.drain():
                self.io.inject(dataclasses.replace(left, options=dataclasses.replace(left.options, priority=0), interrupt=False))

    def _elsewhere(self, message: InputMessage) -> bool:
        """Whether an interrupt names a chat (``deliver_to``: a timer's origin) other than the running turn's.

        Joining the running turn would answer it in the wrong chat: Ada's QQ
        reminder inside the owner's terminal conversation. Interrupts that name
        no chat (a notification, the user adding something) join the turn.
        """
        wanted = message.options.deliver_to
        current = self.current
        if not wanted or current is None:
            return False

        def chat(channel: str, user_id: str, group_id: str) -> tuple[str, str]:
            return (channel, f"group:{group_id}") if group_id else (channel, user_id)

        here = chat(current.options.deliver_to or current.channel, current.options.user_id, current.options.group_id)
        return chat(wanted, message.options.user_id, message.options.group_id) != here

    async def _intercept_loop(self) -> None:
        while True:
            message = await self.io.interrupts.get()
            self.interrupts += 1
            if self.busy and self._elsewhere(message):
                # a reminder set in another chat: answered there after this turn, never inside this chat's turn
                log.info("interrupt from %s is for another chat; it waits for the running turn",
                         message.source or message.channel)
                options = dataclasses.replace(message.options, priority=0)
                self.io.inject(dataclasses.replace(message, options=options, interrupt=False))
            elif self.busy:
                cancelled = self.runner.slot.interrupt(message)
                log.info(
                    "interrupt from %s%s", message.source or message.channel, " cancelled the LLM call" if cancelled else ""
                )
                self.runner.events.publish(
                    "interrupt", {"id": message.id, "text": message.text, "source": message.source, "cancelled": cancelled}
                )
            else:
                options = dataclasses.replace(message.options, priority=0)
                self.io.inject(dataclasses.replace(message, options=options, interrupt=False))
