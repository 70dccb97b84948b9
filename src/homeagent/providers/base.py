"""The provider contract: what the agent loop asks of any LLM backend.

Messages and tools travel in the OpenAI chat shape (the original's "unified
request"); each adapter translates them to and from its own API.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class Usage:
    """Token usage normalised across providers (by the adapter harness: adapter_harness.py)."""

    prompt: int = 0
    completion: int = 0
    total: int = 0
    cache_read: int = 0
    reasoning: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt": self.prompt,
            "completion": self.completion,
            "total": self.total,
            "cache_read": self.cache_read,
            "reasoning": self.reasoning,
        }


@dataclass
class ToolCallOut:
    """A tool call as the model produced it (arguments already parsed when valid JSON)."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str = ""
    parse_error: str = ""


@dataclass
class ToolCallDelta:
    """A fragment of a streamed tool call; fragments with one ``index`` are joined."""

    index: int = 0
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class StreamChunk:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None

    @property
    def has_output(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls)


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    temperature: float | None = None
    max_tokens: int | None = None
    model: str | None = None
    tool_choice: str | None = None
    thinking: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ChatResponse:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallOut] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    source: str = ""
    model: str = ""
    # the source that was first in line when another one answered (the chat shows "answered by the fallback")
    fallback_from: str = ""


class ProviderError(Exception):
    """A provider failed in a way the manager can classify.

    ``kind`` is one of auth, rate_limit, server, timeout, network,
    bad_response, client, adapter, cancelled.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str = "server",
        status: int | None = None,
        retry_after: float | None = None,
        source: str = "",
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
        self.source = source

    def describe(self) -> str:
        status = f" HTTP {self.status}" if self.status else ""
        return f"{self.source or 'provider'}: {self.kind}{status}: {self}"


class AllProvidersFailed(ProviderError):
    """Every source was tried (or skipped); ``attempts`` names each one."""

    def __init__(self, attempts: list[str]) -> None:
        text = "; ".join(attempts) if attempts else "no LLM source is available"
        super().__init__(f"all LLM sources failed: {text}", kind="all_failed")
        self.attempts = attempts


@runtime_checkable
class Provider(Protocol):
    name: str

    async def chat(self, request: ChatRequest) -> ChatResponse: ...

    def chat_stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]: ...


class ToolCallAssembler:
    """Joins streamed tool-call fragments by index into complete calls."""

    def __init__(self) -> None:
        self._parts: dict[int, dict[str, str]] = {}

    def add(self, delta: ToolCallDelta) -> None:
        part = self._parts.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
        if delta.id:
            part["id"] = delta.id
        if delta.name and not part["name"]:
            part["name"] = delta.name
        part["arguments"] += delta.arguments

    def calls(self) -> list[ToolCallOut]:
        out: list[ToolCallOut] = []
        for index in sorted(self._parts):
            part = self._parts[index]
            out.append(parse_tool_call(part["id"] or f"call_{index}", part["name"], part["arguments"]))
        return out


def parse_tool_call(call_id: str, name: str, raw: str | dict[str, Any] | None) -> ToolCallOut:
    """Parse tool arguments, keeping the raw text and the parse error for the model."""
    if isinstance(raw, dict):
        return ToolCallOut(id=call_id, name=name, arguments=raw, raw_arguments=json.dumps(raw, ensure_ascii=False))
    text = raw or ""
    if not text.strip():
        return ToolCallOut(id=call_id, name=name, arguments={}, raw_arguments=text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return ToolCallOut(id=call_id, name=name, raw_arguments=text, parse_error=f"arguments are not valid JSON: {exc}")
    if not isinstance(value, dict):
        return ToolCallOut(id=call_id, name=name, raw_arguments=text, parse_error="arguments must be a JSON object")
    return ToolCallOut(id=call_id, name=name, arguments=value, raw_arguments=text)


IMAGE_NOT_SEEN = "[image not shown: this model cannot see images]"


def without_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The messages with every ``image_url`` content part replaced by a short text, or None when there is none.

    For a source without vision that a call fell back to (or the offline one):
    the image parts would be refused or billed as text; the marker lines in the
    text part already say what the image was.
    """
    changed = False
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            changed = True
            parts = [p if not (isinstance(p, dict) and p.get("type") == "image_url")
                     else {"type": "text", "text": IMAGE_NOT_SEEN} for p in content]
            if all(isinstance(p, dict) and p.get("type") == "text" for p in parts):  # plain text: any API takes it
                message = {**message, "content": "\n".join(str(p.get("text", "")) for p in parts)}
            else:
                message = {**message, "content": parts}
        out.append(message)
    return out if changed else None
