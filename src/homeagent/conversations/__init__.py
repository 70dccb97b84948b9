"""Conversations of the web UI and the OpenAI-compatible endpoint: their transcripts and their chat scope."""

from homeagent.conversations.scope import conversation_of, scope_of
from homeagent.conversations.store import Conversation, ConversationError, ConversationStore, Entry, NewEntry
from homeagent.conversations.transcript import TranscriptHistory, TurnRecorder

__all__ = [
    "Conversation",
    "ConversationError",
    "ConversationStore",
    "Entry",
    "NewEntry",
    "TranscriptHistory",
    "TurnRecorder",
    "conversation_of",
    "scope_of",
]
