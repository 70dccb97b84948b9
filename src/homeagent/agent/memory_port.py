"""What the agent loop needs from memory, and the smallest memory that provides it.

The agent asks for the conversation history before a turn and records the
turn afterwards. ``RecentTurns`` keeps the last turns in memory; the daemon
replaces it with the layered memory (relevance-pruned context window sinking
into documents) and sub-agents use it for their own short-lived context.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class ToolOutput:
    tool: str
    text: str
    memory_text: str | None  # None: the tool is no_memory, keep it out of memory computations


@dataclass
class TurnRecord:
    user_text: str
    reply: str
    channel: str = ""
    source: str = ""
    user_id: str = ""
    group_id: str = ""  # a group chat on a channel (QQ): its turns are shown only to that group's turns
    speaker: str = ""  # the person who spoke (memory/identity.py): the remembered turn's speaker
    no_memory: bool = False
    tool_outputs: list[ToolOutput] = field(default_factory=list)
    ts: float = field(default_factory=time.time)
    input_id: str = ""
    media_digests: list[str] = field(default_factory=list)  # media of the input: referenced while in the window
    tool_media_digests: list[str] = field(default_factory=list)  # media tools handed over (set_tool_blocks, MCP)
    tool_media_text: str = ""  # their marker lines, one "[media from the tool NAME]" line before each tool's


class Speakers(Protocol):
    """Who is speaking, by channel and account (the daemon's ``memory.identity.Identities``)."""

    def speaker(self, channel: str, user_id: str, user_name: str = "") -> str: ...


class TurnMemory(Protocol):
    async def history(
        self, user_text: str, channel: str, *, group_id: str = "", speaker: str = ""
    ) -> list[dict[str, Any]]:
        """Chat messages (OpenAI shape) that precede the current input, in its conversation scope.

        A turn in a group chat (``group_id``) sees that group's recent turns
        only; a turn outside any group sees none of a group's: two groups, or a
        group and the owner's own chats, never see each other's recent turns.
        Outside groups, a turn of a known ``speaker`` sees that person's private
        turns only (Ada's private QQ chat never shows the owner's terminal
        conversation, nor the other way round).
        """
        ...

    async def record(self, turn: TurnRecord) -> None: ...


class RecentTurns:
    """Keeps the newest ``max_turns`` exchanges; nothing is persisted."""

    def __init__(self, max_turns: int = 15) -> None:
        self._turns: deque[TurnRecord] = deque(maxlen=max_turns)

    async def history(
        self, user_text: str, channel: str, *, group_id: str = "", speaker: str = ""
    ) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        for turn in self._turns:
            if turn.group_id != group_id:
                continue
            if not group_id and speaker and turn.speaker and turn.speaker != speaker:
                continue
            if turn.user_text:
                messages.append({"role": "user", "content": turn.user_text})
            if turn.reply:
                messages.append({"role": "assistant", "content": turn.reply})
        return messages

    async def record(self, turn: TurnRecord) -> None:
        if not turn.no_memory:
            self._turns.append(turn)

    def clear(self) -> None:
        self._turns.clear()
