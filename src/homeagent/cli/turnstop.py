"""Stopping this client's turn, and never another client's.

The socket's ``cancel`` frame stops whatever turn the agent is running, and a
message sent from a terminal may still wait behind another client's turn (the
web UI's, another ``ask``). So a stop is sent at once only when the turn has
shown a frame on this connection, or when ``status`` says no input waits (then
the running turn is this one, or it has just ended); otherwise it is sent when
the turn's first frame arrives. Used by ``homeagent ask`` and ``homeagent chat``.
"""

from __future__ import annotations

from typing import Any

from homeagent.cli.client import Client

TURN_FRAMES = frozenset({"reasoning_delta", "content_delta", "tool_call", "tool_media", "approval_request"})
"""Frames only a running turn sends to its own connection."""


class TurnStopper:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.started = False
        self.pending = False  # asked to stop before the turn started

    async def request(self) -> None:
        """Stop the turn now if it is surely this one, else as soon as it starts."""
        if not self.started:
            status = await self.client.call("status", timeout=5)
            agent = status.get("agent", {}) if isinstance(status, dict) else {}
            if agent.get("queued", 1) != 0:
                self.pending = True
                return
        await self.client.send({"type": "cancel"})

    async def seen(self, frame: dict[str, Any]) -> None:
        """Call with each frame of the turn: the first sign of life sends a stop asked for earlier."""
        if frame.get("type") in TURN_FRAMES:
            self.started = True
            if self.pending:
                self.pending = False
                await self.client.send({"type": "cancel"})
