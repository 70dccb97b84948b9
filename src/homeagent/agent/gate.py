"""The seam between the tool loop and whatever decides whether a tool call may run.

The turn runner knows nothing about policies or owners: it asks its gate
before each call and gets back ``None`` (run it) or the reason it may not run,
which becomes an ordinary ``denied`` result that ``before_toolcall`` handlers
see like any other denial. The daemon passes the approvals broker in; a runner
built without a gate (the health self-test's, which offers read-only tools
only) runs calls as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from homeagent.sdk.types import StageContext, ToolCall

Frame = Callable[[dict[str, Any]], Awaitable[None]]
"""Sends one frame to the client whose input started the turn (a no-op when there is none)."""


class ToolGate(Protocol):
    async def admit(self, call: ToolCall, ctx: StageContext, frame: Frame | None) -> str | None:
        """None when ``call`` may run now; otherwise why not, phrased for the model. May wait for the owner."""
        ...


@dataclass(frozen=True)
class OwnerApproval:
    """The owner said yes to this exact call (tool and arguments), through approval request ``request``."""

    tool: str
    arguments: Mapping[str, Any]
    request: str


# A ContextVar, like the turn's origin: the gate runs in the task that then runs the tool's handler, so the
# handler sees what the owner approved for *its* call, and concurrent calls never see each other's.
_OWNER_APPROVAL: ContextVar[OwnerApproval | None] = ContextVar("homeagent_owner_approval", default=None)


def note_owner_approval(approval: OwnerApproval | None) -> None:
    """The gate records the owner's answer for the call about to run (None: not approved by the owner)."""
    _OWNER_APPROVAL.set(approval)


def owner_approved(tool: str, arguments: Mapping[str, Any], keys: tuple[str, ...]) -> OwnerApproval | None:
    """The owner's approval of this call, or None.

    Why: some tools (installing, removing, enabling plugins) must run only when the owner said yes to that
    very call, not merely when no policy stopped it (a runner without a gate, a policy the owner loosened).
    ``keys`` are the arguments that must be what the owner saw.
    """
    approval = _OWNER_APPROVAL.get()
    if approval is None or approval.tool != tool:
        return None
    if any(approval.arguments.get(k) != arguments.get(k) for k in keys):
        return None
    return approval
