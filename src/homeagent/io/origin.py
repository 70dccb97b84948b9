"""Where the running turn's input came from, for tools that arrange a reply for later.

A ``ContextVar`` rather than an argument: tool handlers take one argument
(their arguments, as in the original), and every task a turn starts
inherits its context, so a handler reads the origin of the turn it runs in,
while concurrent turns (sub-agents, a turn on another channel) never see each
other's.
"""

from __future__ import annotations

from contextvars import ContextVar

from homeagent.sdk.types import Origin

TURN_ORIGIN: ContextVar[Origin | None] = ContextVar("homeagent_turn_origin", default=None)


def current_origin() -> Origin | None:
    """The origin of the turn the calling task belongs to (None outside a turn)."""
    return TURN_ORIGIN.get()
