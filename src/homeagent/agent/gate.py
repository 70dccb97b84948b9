"""The seam between the tool loop and whatever decides whether a tool call may run.

The turn runner knows nothing about policies or owners: it asks its gate
before each call and gets back ``None`` (run it) or the reason it may not run,
which becomes an ordinary ``denied`` result that ``before_toolcall`` handlers
see like any other denial. The daemon passes the approvals broker in; a runner
built without a gate (the health self-test's, which offers read-only tools
only) runs calls as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from homeagent.sdk.types import StageContext, ToolCall

Frame = Callable[[dict[str, Any]], Awaitable[None]]
"""Sends one frame to the client whose input started the turn (a no-op when there is none)."""


class ToolGate(Protocol):
    async def admit(self, call: ToolCall, ctx: StageContext, frame: Frame | None) -> str | None:
        """None when ``call`` may run now; otherwise why not, phrased for the model. May wait for the owner."""
        ...
