"""Public data types shared by the daemon and plugin authors.

Everything a plugin needs to describe a tool, a stage handler or a setting
lives here, so that `homeagent.sdk` can be imported without pulling in the
daemon's internals.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


class Stage(enum.StrEnum):
    """The seven points of the message pipeline where plugins may hook in."""

    ON_INPUT = "on_input"
    PRE_ACTION = "pre_action"
    POST_ACTION = "post_action"
    BEFORE_TOOLCALL = "before_toolcall"
    AFTER_TOOLCALL = "after_toolcall"
    BEFORE_OUTPUT = "before_output"
    AFTER_OUTPUT = "after_output"


STAGES: tuple[Stage, ...] = tuple(Stage)


class OutputCap(enum.IntFlag):
    """What an output channel can carry (bit flags, as in the original)."""

    TEXT = 1
    FILE = 2
    IMAGE = 4
    AUDIO = 8
    STRUCTURED = 16


ToolHandler = Callable[[dict[str, Any]], Awaitable[Any] | Any]
"""A tool handler gets the validated arguments and returns a JSON-able value.

Returning ``{"isError": True, "content": "..."}`` reports a failure to the model
without raising; raising an exception is turned into the same shape.
"""

TextCleaner = Callable[[str], str]


@dataclass
class ToolDef:
    """A tool the model can call.

    ``no_memory`` keeps the tool's output out of every memory computation
    (embedding, keyword extraction, distillation) while the original text stays
    in the history. ``cleaner`` filters the output before it reaches those
    computations. ``serial`` tools of one LLM turn run one after another;
    ``parallel_safe`` tools run concurrently with each other.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    plugin: str = ""
    no_memory: bool = False
    cleaner: TextCleaner | None = None
    serial: bool = False
    parallel_safe: bool = True

    def to_openai(self) -> dict[str, Any]:
        """The tool in the OpenAI ``tools`` wire shape, which adapters translate from."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters or {"type": "object", "properties": {}},
            },
        }


@dataclass
class ToolCall:
    """One tool call requested by the model."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    plugin: str = ""
    raw_arguments: str = ""
    denied: bool = False
    deny_reason: str = ""


@dataclass
class ToolResult:
    """What a tool call produced; ``result`` is sent back to the model as JSON."""

    call_id: str
    name: str
    plugin: str = ""
    success: bool = True
    result: Any = None
    status: str = "ok"  # ok | denied | interrupted | error
    duration_ms: float = 0.0


@dataclass
class MemItem:
    role: str
    content: str
    score: float = 0.0


@dataclass
class StageContext:
    """The state one message carries through the pipeline.

    All handlers of a stage share one instance; mutate it while holding
    ``lock`` when a change depends on what is already there (appending to a
    list, read-modify-write). Which fields a stage may write is fixed by the
    permission matrix of the plugin SDK and enforced by the stage host.
    """

    raw_message: str = ""
    user_id: str = ""
    group_id: str = ""
    channel: str = ""
    source: str = ""
    speaker: str = ""  # the person speaking (``homeagent identity``): the owner's name, a linked person's, or a nickname
    context_msgs: list[dict[str, Any]] = field(default_factory=list)
    llm_text: str = ""
    reasoning_content: str = ""
    token_usage: dict[str, int] = field(default_factory=dict)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    tool_call: ToolCall | None = None
    tool_result: ToolResult | None = None
    final_text: str = ""
    response: str | None = None
    phase: Stage = Stage.ON_INPUT
    memory: list[MemItem] = field(default_factory=list)
    no_memory: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)


StageHandler = Callable[[StageContext], Awaitable[None] | None]


@dataclass
class ConfigDef:
    """A setting's definition: drives validation and the settings page.

    ``type`` is one of string, int, float, number, bool, boolean, duration,
    password, select, text, json. ``secret`` values are masked wherever they
    are shown and never logged (``password`` implies ``secret``).

    ``owner_only`` marks a setting that starts a process, loads code, moves a
    confinement root or widens what is exposed (MCP servers, program lists,
    folders, listen addresses, LLM endpoints and keys): the model's tools can
    read it but never change it, so a prompt-injected turn cannot widen its own
    powers. The owner changes it with ``homeagent config set`` or the web UI.
    """

    key: str
    default: Any = None
    type: str = "string"
    display_name: str = ""
    description: str = ""
    category: str = ""
    options: list[str] = field(default_factory=list)
    placeholder: str = ""
    min: float | None = None
    max: float | None = None
    step: float | None = None
    required: bool = False
    secret: bool = False
    hidden: bool = False
    owner_only: bool = False

    @property
    def is_secret(self) -> bool:
        return self.secret or self.type == "password"


@dataclass(frozen=True)
class MediaBlock:
    """One image (or other file) that goes with an input, a document or a tool result.

    Either the bytes (``data``, kept in the media store on arrival) or the
    ``digest`` of an item the store has already; plugins over RPC send bytes
    as a data URL (:meth:`from_data_url`), as the original protocol decided.
    ``mime`` is a claim only: the store reads the real type from the bytes.
    ``description`` is what memory keeps when the bytes are gone.
    """

    mime: str = ""
    data: bytes = b""
    digest: str = ""
    description: str = ""

    @classmethod
    def from_data_url(cls, url: str, *, description: str = "") -> MediaBlock:
        """``data:<mime>;base64,<data>``; anything else is a ``ValueError`` saying what is wrong."""
        head, sep, body = url.partition(",")
        if not sep or not head.startswith("data:") or not head.endswith(";base64"):
            raise ValueError("media must be a data URL: data:<mime>;base64,<data>")
        try:
            data = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the data URL's base64 is not valid") from None
        return cls(mime=head[5:-7].strip(), data=data, description=description)

    def data_url(self) -> str:
        return f"data:{self.mime or 'application/octet-stream'};base64,{base64.b64encode(self.data).decode()}"

    def to_json(self) -> dict[str, str]:
        """The wire form (RPC): ``{"data": <data URL>}`` or ``{"digest": ...}``, with ``description``."""
        out = {"data": self.data_url()} if self.data else {"digest": self.digest, "mime": self.mime}
        if self.description:
            out["description"] = self.description
        return out

    @classmethod
    def from_json(cls, value: Any) -> MediaBlock:
        """The wire form back; a ``ValueError`` says what is wrong."""
        if not isinstance(value, dict):
            raise ValueError("a media block is an object with 'data' (a data URL) or 'digest'")
        unknown = sorted(set(value) - {"data", "digest", "mime", "description"})
        if unknown:
            raise ValueError(f"unknown media block field(s): {', '.join(unknown)}")
        description = value.get("description") or ""
        if not isinstance(description, str):
            raise ValueError("a media block's 'description' must be a string")
        data, digest = value.get("data"), value.get("digest")
        if isinstance(data, str) and data:
            return cls.from_data_url(data, description=description)
        if isinstance(digest, str) and digest.strip():
            mime = value.get("mime") or ""
            return cls(mime=mime if isinstance(mime, str) else "", digest=digest.strip(), description=description)
        raise ValueError("a media block needs 'data' (a data URL) or 'digest'")


@dataclass
class InjectOptions:
    """How an injected input is handled: memory, priority, reply routing.

    ``deliver_to`` names the output channel that gets the reply when it is not
    the input's own (a timer fires on channel ``timer``, which no one reads;
    its reply goes to the channel it was set from, with ``user_id`` and
    ``group_id`` saying which chat there).

    ``user_id`` says who wrote it on a chat channel: memory's speaker is the
    person the owner linked that account to (``homeagent identity``), else
    ``channel:user_id``, so what two people in one group said is never
    remembered as said by the same "user". ``user_name`` is their display
    name there (a nickname): carried along, never used as a name (nicknames
    change, and are anyone's text).
    """

    no_memory: bool = False
    priority: int = 2  # 1 highest … 3 lowest; interrupts use their own queue
    user_id: str = ""
    group_id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    deliver_to: str = ""
    user_name: str = ""


@dataclass(frozen=True)
class Origin:
    """Where the input of the running turn came from: the channel, and which person or group there.

    A tool that arranges something for later (a timer) keeps it, so the later
    reply reaches the same place (``InjectOptions.deliver_to``). On the web UI
    (and the OpenAI-compatible endpoint) ``group_id`` is the conversation,
    ``conv:<id>``: passed back, the reply lands in that conversation.
    """

    channel: str
    user_id: str = ""
    group_id: str = ""
