"""The daemon subsystems plugins reach, and the SDK object that hands them out.

:class:`PluginServices` is the one bundle the daemon builds for the plugin
host; optional subsystems (memory layers, knowledge base, cleaners) may be
``None`` and then raise :class:`ServiceUnavailable` when a plugin asks for
them. :class:`HostSDK` is the in-process implementation of the public
:class:`PluginSDK`: it stamps every registration with the plugin's name and
records it, so that :meth:`HostSDK.close` removes everything the plugin
registered even when the plugin itself is broken.

Each memory layer arrives here already wrapped in the SDK Protocol it
implements (``memory.graph_api``, ``memory.doc_api``, ``knowledge.api``,
``memory.textlog``), built in ``daemon.py``: the SDK hands that object out as
is, so mypy checks every call from a plugin to the store it ends in.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homeagent import __version__
from homeagent.agent.media_input import TOOL_BLOCKS
from homeagent.config.settings import PluginSettings
from homeagent.io.origin import current_origin
from homeagent.llm_control import LLMSources
from homeagent.memory.media.inputs import MAX_BLOCKS, check_blocks
from homeagent.paths import DataPaths
from homeagent.sdk.api import (
    LLMAPI,
    ChannelHandler,
    DocMemoryAPI,
    EventCallback,
    KnowledgeAPI,
    MemoryAPI,
    PluginSDK,
    ServiceUnavailable,
    SettingsAPI,
    SocialAPI,
    TextMemoryAPI,
    Unregister,
    coerce_tool_def,
)
from homeagent.sdk.types import (
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

if TYPE_CHECKING:
    from homeagent.agent.prompt import PromptBuilder
    from homeagent.agent.stages import StageHost
    from homeagent.agent.tools import ToolRegistry
    from homeagent.config.registry import ConfigRegistry
    from homeagent.events import EventBus
    from homeagent.io.channels import OutputChannels
    from homeagent.io.manager import IOManager
    from homeagent.llm_control import LLMControl
    from homeagent.memory.cleaners import CleanerChain
    from homeagent.memory.context import RelevanceContext

__all__ = ["HostSDK", "PluginServices", "Registration"]

log = logging.getLogger("homeagent.plugins")


@dataclass
class PluginServices:
    """Everything the plugin host needs from the daemon; built once in daemon.py (``Daemon.plugin_services``)."""

    tools: ToolRegistry
    stages: StageHost
    io: IOManager
    config: ConfigRegistry
    events: EventBus
    channels: OutputChannels
    prompt: PromptBuilder
    llm: LLMControl | None  # host-side (healthcheck: sources, self-test); plugins get LLMSources over it
    data_dir: Path
    cleaners: CleanerChain | None = None
    docs: DocMemoryAPI | None = None  # L2 document store, as plugins see it (memory.doc_api)
    memory: MemoryAPI | None = None  # L3 knowledge graph, as plugins see it (memory.graph_api)
    knowledge: KnowledgeAPI | None = None  # knowledge base, as plugins see it (knowledge.api)
    text_memory: TextMemoryAPI | None = None  # the text log, as plugins see it (memory.textlog)
    context: RelevanceContext | None = None  # L1 context (healthcheck reads its stats)
    social: SocialAPI | None = None  # persons, traits, relations (memory.social.Social)
    version: str = __version__

    def plugin_data_dir(self, plugin: str) -> Path:
        """Where plugin ``plugin`` keeps its own files (not its code)."""
        return DataPaths(Path(self.data_dir)).plugin_data(plugin)


@dataclass
class Registration:
    """One thing a plugin registered, and how to take it back."""

    kind: str  # tool | stage | channel | cleaner | subscription | prompt
    name: str
    undo: Callable[[], None]


# ---------------------------------------------------------------- the SDK


class HostSDK(PluginSDK):
    """The in-process SDK for one plugin instance; :meth:`close` removes all it registered."""

    def __init__(self, services: PluginServices, name: str, *, plugin_dir: Path | None = None) -> None:
        self._s = services
        self._name = name
        self._dir = plugin_dir
        self._log = logging.getLogger(f"homeagent.plugin.{name}")
        self._records: list[Registration] = []
        self._closed = False
        self._settings = PluginSettings(services.config, name, services.plugin_data_dir(name))

    # -- identity ---------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def log(self) -> logging.Logger:
        return self._log

    @property
    def plugin_dir(self) -> Path | None:
        return self._dir

    @property
    def services(self) -> PluginServices:
        """The daemon's subsystems (host-side code such as built-ins and loaders only)."""
        return self._s

    @property
    def closed(self) -> bool:
        return self._closed

    # -- bookkeeping ------------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(f"plugin {self._name!r} is unloaded; cannot register {what}")

    def _record(self, kind: str, name: str, undo: Callable[[], None]) -> Unregister:
        record = Registration(kind, name, undo)
        self._records.append(record)

        def unregister() -> None:
            if record in self._records:
                self._records.remove(record)
                undo()

        return unregister

    def add_registration(self, kind: str, name: str, undo: Callable[[], None]) -> Unregister:
        """Record something registered on the plugin's behalf (e.g. a prompt section) for removal on unload."""
        self._check_open(f"{kind} {name!r}")
        return self._record(kind, name, undo)

    def registrations(self, kind: str | None = None) -> list[str]:
        """Names of what is registered now, optionally of one kind."""
        return [r.name for r in self._records if kind is None or r.kind == kind]

    def close(self) -> None:
        """Remove everything this plugin registered (newest first); later registrations are refused."""
        self._closed = True
        records, self._records = self._records, []
        for record in reversed(records):
            try:
                record.undo()
            except Exception:
                log.exception("removing %s %r of plugin %s failed", record.kind, record.name, self._name)
        # safety net for anything registered around the SDK under this plugin's name
        try:
            self._s.channels.unregister_plugin(self._name)
            self._s.tools.unregister_plugin(self._name)
            self._s.stages.unregister_plugin(self._name)
            if self._s.cleaners is not None:
                self._s.cleaners.unregister_plugin(self._name)
        except Exception:
            log.exception("cleaning up after plugin %s failed", self._name)

    # -- tools and stages -------------------------------------------------------

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
        tool = coerce_tool_def(
            tool,
            description=description,
            parameters=parameters,
            no_memory=no_memory,
            cleaner=cleaner,
            serial=serial,
            parallel_safe=parallel_safe,
        )
        self._check_open(f"tool {tool.name!r}")
        tool = dataclasses.replace(tool, plugin=self._name)
        undo = self._s.tools.register(tool, handler)
        return self._record("tool", tool.name, undo)

    def _stage(self, stage: Stage | str, handler: StageHandler, own: bool, timeout: float | None) -> Unregister:
        label = stage.value if isinstance(stage, Stage) else str(stage)
        self._check_open(f"stage handler for {label}")
        undo = self._s.stages.register(stage, handler, plugin=self._name, own_tools=own, timeout=timeout)
        return self._record("stage", label, undo)

    def register_stage(self, stage: Stage | str, handler: StageHandler, *, timeout: float | None = None) -> Unregister:
        return self._stage(stage, handler, False, timeout)

    def register_stage_own_tools(
        self, stage: Stage | str, handler: StageHandler, *, timeout: float | None = None
    ) -> Unregister:
        return self._stage(stage, handler, True, timeout)

    # -- input ------------------------------------------------------------------

    def _input_channel(self, channel: str) -> str:
        """The channel an input of this plugin arrives on: its own name by default, never a channel another
        component serves. An account's owner link (approvals answered from a chat, the owner's identity) is
        trusted per channel, so a plugin must not speak on the QQ plugin's channel, nor on the CLI's."""
        name = channel or self._name
        served = self._s.channels.get(name)
        if served is not None and served.plugin != self._name:
            raise PermissionError(
                f"channel {name!r} belongs to {served.plugin or 'the core'}: a plugin injects input on its own "
                "channels only (its name, a channel nobody serves, or an output channel it registered)"
            )
        return name

    def inject_text(self, source: str, channel: str, text: str, *, options: InjectOptions | None = None) -> str:
        return self._s.io.inject_text(source or self._name, self._input_channel(channel), text, options=options)

    def inject_interrupt_text(
        self, source: str, channel: str, text: str, *, options: InjectOptions | None = None
    ) -> str:
        return self._s.io.inject_interrupt_text(source or self._name, self._input_channel(channel), text,
                                                options=options)

    def inject_text_no_memory(self, source: str, channel: str, text: str) -> str:
        return self._s.io.inject_text_no_memory(source or self._name, self._input_channel(channel), text)

    def _blocks(self, media: Sequence[MediaBlock]) -> list[MediaBlock]:
        return check_blocks(media, self._s.config.get_int("core.memory.media.max_bytes", 20 * 1024 * 1024))

    def inject_input_media(
        self, source: str, channel: str, text: str, media: Sequence[MediaBlock], *,
        options: InjectOptions | None = None,
    ) -> str:
        blocks = self._blocks(media)
        return self._s.io.inject_text(source or self._name, self._input_channel(channel), text, options=options,
                                      media=blocks)

    async def inject_input_media_sync(
        self, source: str, channel: str, text: str, media: Sequence[MediaBlock], *,
        options: InjectOptions | None = None, timeout: float = 300.0,
    ) -> dict[str, Any]:
        blocks = self._blocks(media)
        result = await self._s.io.inject_sync(source or self._name, self._input_channel(channel), text,
                                              options=options, timeout=timeout, media=blocks)
        return result.to_dict()

    def inject_interrupt_media(
        self, source: str, channel: str, text: str, media: Sequence[MediaBlock], *,
        options: InjectOptions | None = None,
    ) -> str:
        blocks = self._blocks(media)
        return self._s.io.inject_interrupt_text(source or self._name, self._input_channel(channel), text,
                                                options=options, media=blocks)

    def set_tool_blocks(self, blocks: Sequence[MediaBlock]) -> None:
        sink = TOOL_BLOCKS.get()
        if sink is None:
            raise RuntimeError("set_tool_blocks works only inside a tool handler, while its call runs")
        checked = self._blocks(blocks)
        if len(sink) + len(checked) > MAX_BLOCKS:
            raise ValueError(f"at most {MAX_BLOCKS} media blocks go with one tool result")
        sink.extend(checked)

    # -- output channels --------------------------------------------------------

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
        self._check_open(f"output channel {name!r}")
        undo = self._s.channels.register(
            name, handler, caps=caps, description=description, plugin=self._name, meta_help=meta_help, types=types
        )
        return self._record("channel", name, undo)

    # -- events -----------------------------------------------------------------

    def subscribe(self, event_types: str | Iterable[str] | None, callback: EventCallback) -> Unregister:
        types = [event_types] if isinstance(event_types, str) else event_types
        label = ",".join(types) if types is not None else "*"
        self._check_open(f"event subscription {label!r}")
        undo = self._s.events.listen(callback, types, name=f"plugin:{self._name}")
        return self._record("subscription", label, undo)

    def publish(self, event_type: str, data: dict[str, Any] | None = None) -> None:
        self._s.events.publish(event_type, {**(data or {}), "plugin": self._name})

    # -- cleaners ---------------------------------------------------------------

    def register_text_cleaner(self, name: str, cleaner: TextCleaner) -> Unregister:
        chain = self._s.cleaners
        if chain is None:
            raise ServiceUnavailable("text cleaner chain", "register_text_cleaner has nothing to register with")
        self._check_open(f"text cleaner {name!r}")
        undo = chain.register(name, cleaner, plugin=self._name)
        return self._record("cleaner", name, undo)

    # -- services ---------------------------------------------------------------

    @property
    def settings(self) -> SettingsAPI:
        return self._settings

    @property
    def memory(self) -> MemoryAPI:
        if self._s.memory is None:
            raise ServiceUnavailable("memory graph (L3)")
        return self._s.memory

    @property
    def text_memory(self) -> TextMemoryAPI:
        if self._s.text_memory is None:
            raise ServiceUnavailable("text memory (text log)")
        return self._s.text_memory

    @property
    def doc_memory(self) -> DocMemoryAPI:
        if self._s.docs is None:
            raise ServiceUnavailable("document memory (L2)")
        return self._s.docs

    def current_origin(self) -> Origin | None:
        return current_origin()

    @property
    def social(self) -> SocialAPI:
        if self._s.social is None:
            raise ServiceUnavailable("social graph")
        return self._s.social

    @property
    def knowledge(self) -> KnowledgeAPI:
        if self._s.knowledge is None:
            raise ServiceUnavailable("knowledge base")
        return self._s.knowledge

    @property
    def llm(self) -> LLMAPI:
        if self._s.llm is None:
            raise ServiceUnavailable("LLM source management")
        return LLMSources(self._s.llm)
