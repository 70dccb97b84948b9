"""The plugin SDK: what a plugin gets in ``start(sdk)`` and may rely on.

This module is the contract between plugins and the host. It imports nothing
from the daemon, so a plugin author can type-check against it (and the
subprocess runtime can implement it over RPC) without the daemon installed.

* Every ``register_*`` call returns a function that undoes exactly that
  registration; the host also records each registration per plugin, so when a
  plugin is stopped, reloaded or fails to start, everything it registered is
  removed without the plugin's help.
* Registration errors raise ``ValueError`` (a duplicate tool name, a bad JSON
  Schema, an unknown stage) at the call, so a broken plugin fails at start, not
  on first use.
* A subsystem that this build or this configuration does not have raises
  :class:`ServiceUnavailable` naming it, on first access — never a silent
  ``None``.
* The data APIs (memory, documents, knowledge, text log) are ``async``: they
  may touch disk.
"""

from __future__ import annotations

import abc
import builtins
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from homeagent.sdk.types import (
    ConfigDef,
    InjectOptions,
    MediaBlock,
    Origin,
    OutputCap,
    Stage,
    StageHandler,
    TextCleaner,
    ToolDef,
    ToolHandler,
)

__all__ = [
    "LLMAPI",
    "ChannelHandler",
    "DocMemoryAPI",
    "EventCallback",
    "KnowledgeAPI",
    "MemoryAPI",
    "Plugin",
    "PluginFactory",
    "PluginSDK",
    "ServiceUnavailable",
    "SettingsAPI",
    "TextMemoryAPI",
    "Unregister",
    "coerce_tool_def",
]

Unregister = Callable[[], None]
"""Returned by every ``register_*``: removes exactly that registration (idempotent)."""

ChannelHandler = Callable[[str, dict[str, Any], str], Awaitable[Any] | Any]
"""``handler(payload, meta, type)`` for an output channel; its return value goes back to the model."""

EventCallback = Callable[[Any], Awaitable[None] | None]
"""Receives an event object with ``id``, ``type``, ``data`` (a dict) and ``ts``."""


def coerce_tool_def(
    tool: ToolDef | str,
    *,
    description: str = "",
    parameters: dict[str, Any] | None = None,
    no_memory: bool = False,
    cleaner: TextCleaner | None = None,
    serial: bool = False,
    parallel_safe: bool = True,
) -> ToolDef:
    """The ToolDef that ``register_tool`` means: given whole, or built from a name plus keywords."""
    if isinstance(tool, str):
        return ToolDef(
            name=tool,
            description=description,
            parameters=parameters if parameters is not None else {"type": "object", "properties": {}},
            no_memory=no_memory,
            cleaner=cleaner,
            serial=serial,
            parallel_safe=parallel_safe,
        )
    if not isinstance(tool, ToolDef):
        raise TypeError(f"register_tool needs a ToolDef or a name, got {type(tool).__name__}")
    return tool


class ServiceUnavailable(RuntimeError):
    """A subsystem the plugin asked for is not part of this build or configuration."""

    def __init__(self, service: str, detail: str = "") -> None:
        self.service = service
        message = f"{service} is not available in this HomeAgent build"
        super().__init__(f"{message}: {detail}" if detail else message)


@runtime_checkable
class Plugin(Protocol):
    """A plugin: built-in, Python, Lua, skill or subprocess all look like this to the host.

    ``start`` registers what the plugin offers (tools, stage handlers,
    channels, …) and must return quickly; long-running work goes into tasks
    the plugin owns and cancels in ``stop``. Both may be ``async``. If
    ``start`` raises, the plugin is reported as failed and everything it had
    registered is removed; the other plugins load regardless.
    """

    name: str

    def start(self, sdk: PluginSDK) -> Awaitable[None] | None: ...

    def stop(self) -> Awaitable[None] | None: ...


PluginFactory = Callable[[str, Mapping[str, Any]], Plugin]
"""``factory(name, config) -> Plugin``: one signature for built-in and external Python plugins.

``config`` holds ``path`` (the plugin folder, absent for built-ins) and
``manifest`` (the plugin.json fields, absent for built-ins).
"""


@runtime_checkable
class SettingsAPI(Protocol):
    """Settings: the plugin's own ``config_<name>`` table, the core's, other plugins'."""

    def get(self, key: str, default: Any = None) -> Any: ...
    def set(self, key: str, value: Any) -> Any: ...
    def delete(self, key: str) -> bool: ...
    def list(self, prefix: str = "") -> dict[str, Any]: ...
    def get_core(self, key: str, default: Any = None) -> Any: ...
    def set_core(self, key: str, value: Any) -> Any: ...
    def list_core(self, prefix: str = "") -> dict[str, Any]: ...
    def get_plugin(self, plugin: str, key: str, default: Any = None) -> Any: ...
    def set_plugin(self, plugin: str, key: str, value: Any) -> Any: ...
    def list_plugin(self, plugin: str, prefix: str = "") -> dict[str, Any]: ...
    def register_def(self, d: ConfigDef) -> None: ...
    def defs(self, prefix: str = "") -> builtins.list[ConfigDef]: ...
    def dump(self, mask_secrets: bool = True) -> dict[str, Any]: ...
    def plugins(self) -> builtins.list[str]: ...
    def data_dir(self) -> Path: ...


@runtime_checkable
class MemoryAPI(Protocol):
    """The knowledge graph (L3): entities, relations and the sentences they came from."""

    async def recall(self, keywords: list[str], depth: int = 2) -> Any:
        """Entities matching ``keywords`` and what is reachable within ``depth`` hops."""
        ...

    async def commit(self, triples: list[Any]) -> Any:
        """Upsert triples (objects or dicts with subject, relation, object, optional sentence_text)."""
        ...

    async def introspect(self) -> dict[str, Any]:
        """Counts and hot entities."""
        ...

    async def merge_entities(self, source: str, target: str) -> Any:
        """Merge ``source`` into ``target``."""
        ...

    async def purge(self, criteria: Mapping[str, str], mode: str = "soft") -> Any:
        """Retire (``soft``) or delete (``hard``) relations matching ``criteria``."""
        ...


@runtime_checkable
class TextMemoryAPI(Protocol):
    """The raw conversation log (JSONL, rotated)."""

    async def append(self, role: str, content: str, *, channel: str = "", **extra: Any) -> None: ...


@runtime_checkable
class DocMemoryAPI(Protocol):
    """The document store (L2)."""

    async def query(self, text: str, top_k: int = 3) -> list[Any]: ...
    async def insert(self, doc: Any) -> Any: ...
    async def remove(self, doc_id: str) -> Any: ...
    async def stats(self) -> dict[str, Any]: ...

    async def insert_with_media(self, doc: Any, attachments: Sequence[MediaBlock]) -> Any:
        """Insert ``doc`` with media: blocks with bytes are kept in the media store, blocks with a digest refer to
        stored ones; the core appends their markers to the content and references them from the document."""
        ...


@runtime_checkable
class SocialReadAPI(Protocol):
    """The people in memory, read-only: what every plugin may ask (external ones through ``social.*``)."""

    async def get_person(self, name: str) -> dict[str, Any]:
        """The person's traits, relations to other people, other facts and aliases."""
        ...

    async def get_network(self, name: str, depth: int = 1) -> dict[str, Any]:
        """People reachable from ``name`` through person-to-person relations."""
        ...

    async def get_trait(self, person: str, trait: str) -> dict[str, Any]:
        """``{"person", "trait", "value"}``; ``value`` is None when the trait is not known."""
        ...

    async def get_relations(self, person: str) -> builtins.list[dict[str, Any]]:
        """The person's relations to other people (``relation``, ``person``, ``direction``)."""
        ...

    async def list_persons(self) -> builtins.list[dict[str, Any]]:
        """Every person in memory (``name``, ``mention_count``), most mentioned first."""
        ...


@runtime_checkable
class SocialAPI(SocialReadAPI, Protocol):
    """The people in memory with the writes the agent's ``person_*`` tools make (in-process plugins)."""

    async def set_trait(self, name: str, trait: str, value: str) -> dict[str, Any]: ...
    async def relate(self, person_a: str, relation: str, person_b: str) -> dict[str, Any]: ...


@runtime_checkable
class KnowledgeAPI(Protocol):
    """The curated knowledge base (``knowledge/<name>/content.md``)."""

    async def search(self, query: str, top_k: int = 5) -> builtins.list[Any]: ...
    async def add(self, name: str, content: str) -> Any: ...
    async def list(self) -> builtins.list[str]: ...


@runtime_checkable
class LLMAPI(Protocol):
    """The LLM sources in fallback order."""

    def list_sources(self) -> list[str]: ...
    def set_source(self, name: str) -> None: ...
    def current_source(self) -> str: ...


class PluginSDK(abc.ABC):
    """What the host gives a plugin in ``start(sdk)``.

    One instance per plugin instance; everything registered through it is
    owned by ``name`` and removed when the plugin is unloaded.
    """

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The plugin's name: its folder name and its settings namespace."""

    @property
    @abc.abstractmethod
    def log(self) -> logging.Logger:
        """A logger named ``homeagent.plugin.<name>``."""

    @property
    @abc.abstractmethod
    def plugin_dir(self) -> Path | None:
        """The plugin's folder (None for built-ins)."""

    # -- tools and stages ----------------------------------------------------------

    @abc.abstractmethod
    def register_tool(
        self,
        tool: ToolDef | str,
        handler: ToolHandler,
        *,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        no_memory: bool = False,
        cleaner: TextCleaner | None = None,
        serial: bool = False,
        parallel_safe: bool = True,
    ) -> Unregister:
        """Offer a tool to the model.

        Give either a full :class:`ToolDef` or a name plus keywords. The name
        must be unique across all plugins (prefix it with your plugin's
        name); a duplicate raises ``ValueError`` naming the current owner.
        ``handler(args)`` gets arguments already validated against
        ``parameters`` (a JSON Schema object) and returns something JSON-able;
        return ``{"isError": True, "content": "..."}`` to report a failure the
        model can act on. Sync handlers run in a worker thread.
        """

    @abc.abstractmethod
    def register_stage(self, stage: Stage | str, handler: StageHandler, *, timeout: float | None = None) -> Unregister:
        """Run ``handler(ctx)`` at ``stage`` of every turn (concurrently with other handlers).

        Writes are checked against the stage's permission matrix; a forbidden
        write raises ``PermissionError`` inside the handler.
        """

    @abc.abstractmethod
    def register_stage_own_tools(
        self, stage: Stage | str, handler: StageHandler, *, timeout: float | None = None
    ) -> Unregister:
        """Like :meth:`register_stage`, but in ``before_toolcall``/``after_toolcall`` only for this plugin's tools."""

    # -- input ---------------------------------------------------------------------

    @abc.abstractmethod
    def inject_text(self, source: str, channel: str, text: str, *, options: InjectOptions | None = None) -> str:
        """Queue ``text`` as an input to the agent; returns the input's id."""

    @abc.abstractmethod
    def inject_interrupt_text(
        self, source: str, channel: str, text: str, *, options: InjectOptions | None = None
    ) -> str:
        """Deliver ``text`` now: it cancels the LLM call in flight and is shown to the model before its next call."""

    @abc.abstractmethod
    def inject_text_no_memory(self, source: str, channel: str, text: str) -> str:
        """Queue ``text`` as an input that is kept out of memory."""

    # -- media (PluginSDK v1.1.1) -------------------------------------------------

    def inject_input_media(
        self, source: str, channel: str, text: str, media: Sequence[MediaBlock], *,
        options: InjectOptions | None = None,
    ) -> str:
        """Queue ``text`` with media (at most 10 blocks, each within ``core.memory.media.max_bytes``): the
        images go to the model with this turn, are kept in the media store and referenced from the
        conversation. Returns the input's id; bad blocks raise ``ValueError`` and nothing is queued."""
        raise ServiceUnavailable("media input")

    async def inject_input_media_sync(
        self, source: str, channel: str, text: str, media: Sequence[MediaBlock], *,
        options: InjectOptions | None = None, timeout: float = 300.0,
    ) -> dict[str, Any]:
        """Like :meth:`inject_input_media`, and wait for the turn: its result (ok, text, error, …)."""
        raise ServiceUnavailable("media input")

    def inject_interrupt_media(
        self, source: str, channel: str, text: str, media: Sequence[MediaBlock], *,
        options: InjectOptions | None = None,
    ) -> str:
        """An interrupt with media: cancels the LLM call in flight; the text and images reach its next call
        (or start a turn when the agent is idle)."""
        raise ServiceUnavailable("media input")

    def set_tool_blocks(self, blocks: Sequence[MediaBlock]) -> None:
        """From inside a tool handler only: media that reach the model with the next LLM call, after this
        tool's result (a screenshot, a chart). Outside a tool call it raises ``RuntimeError``."""
        raise ServiceUnavailable("tool media")

    # -- output channels -----------------------------------------------------------

    @abc.abstractmethod
    def register_output_channel(
        self,
        name: str,
        caps: OutputCap | int,
        description: str,
        handler: ChannelHandler,
        *,
        meta_help: str = "",
        types: list[str] | None = None,
    ) -> Unregister:
        """Create output channel ``name``: tools ``output_send__<name>`` and ``output_send__<name>_help``."""

    # -- events --------------------------------------------------------------------

    @abc.abstractmethod
    def subscribe(self, event_types: str | Iterable[str] | None, callback: EventCallback) -> Unregister:
        """Call ``callback(event)`` for each event of ``event_types`` (None: all), in its own task.

        A slow callback never slows the publisher: its queue drops the oldest events.
        """

    @abc.abstractmethod
    def publish(self, event_type: str, data: dict[str, Any] | None = None) -> None:
        """Publish an event to every subscriber."""

    # -- text cleaners -------------------------------------------------------------

    @abc.abstractmethod
    def register_text_cleaner(self, name: str, cleaner: TextCleaner) -> Unregister:
        """Add a cleaner to the chain applied to text before it is embedded or indexed (never to what is stored)."""

    # -- services ------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def settings(self) -> SettingsAPI:
        """This plugin's settings (own table unqualified; ``get_core``/``get_plugin`` for others)."""

    @property
    @abc.abstractmethod
    def memory(self) -> MemoryAPI:
        """The knowledge graph. Raises ServiceUnavailable when there is none."""

    @property
    @abc.abstractmethod
    def text_memory(self) -> TextMemoryAPI:
        """The conversation text log. Raises ServiceUnavailable when there is none."""

    @property
    @abc.abstractmethod
    def doc_memory(self) -> DocMemoryAPI:
        """The document store. Raises ServiceUnavailable when there is none."""

    @property
    @abc.abstractmethod
    def knowledge(self) -> KnowledgeAPI:
        """The knowledge base. Raises ServiceUnavailable when there is none."""

    @property
    @abc.abstractmethod
    def llm(self) -> LLMAPI:
        """LLM source management. Raises ServiceUnavailable when there is none."""

    def current_origin(self) -> Origin | None:
        """Where the input of the turn calling this came from (channel, user, group), or None outside a turn.

        A tool that arranges a reply for later keeps it and passes it back as
        ``InjectOptions(deliver_to=origin.channel, user_id=..., group_id=...)``,
        so the later reply reaches the chat it was asked from. Subprocess
        plugins get it while they handle a tool call (the host sends it along).
        """
        return None

    @property
    def social(self) -> SocialReadAPI:
        """The people in memory. In-process plugins get the full ``SocialAPI`` (writes too); external
        plugins a read-only view. Raises ServiceUnavailable when there is none."""
        raise ServiceUnavailable("social graph")
