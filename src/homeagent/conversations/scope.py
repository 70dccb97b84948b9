"""A conversation is a chat scope: its id rides in the input's ``group_id``.

Why no field of its own: a turn's ``group_id`` already says which chat on a
channel it belongs to (a QQ group), and everything that keeps chats apart
reads it: the context window shows a turn only its own scope's recent turns
(``RelevanceContext.to_messages(group_id=…)``), the turn's ``Origin`` carries
it, so a reminder set in a conversation (a timer, a plugin that keeps the
origin) answers in that conversation, and the agent keeps an interrupt meant
for another chat out of the running turn. A web or OpenAI-compatible
conversation is such a chat, its scope key ``conv:<id>``: one mechanism for
scoped recent history, whatever the channel.
"""

from __future__ import annotations

PREFIX = "conv:"


def scope_of(conversation: int) -> str:
    """The ``group_id`` of a conversation's turns."""
    return f"{PREFIX}{conversation}"


def conversation_of(group_id: str) -> int | None:
    """The conversation a ``group_id`` names, or None (another kind of chat, or none)."""
    if not group_id.startswith(PREFIX):
        return None
    digits = group_id[len(PREFIX):]
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
        return None
    return int(digits)
