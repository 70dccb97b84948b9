"""What the web UI needs from the daemon, as one typed value built in ``daemon.py``.

The web server used to receive the whole daemon and look its parts up by
trying attribute and method names, so a renamed method became a 501 at run
time and mypy saw none of the calls. :class:`WebHost` names every part the
web UI uses, each typed by a Protocol of exactly the calls made on it; the
daemon fills it once (:meth:`homeagent.daemon.Daemon.web_host`), so a
mismatch between a subsystem and the web UI is a type error in the daemon.

A field is ``X | None`` only where the daemon really may run without that
part (the media store: ``core.memory.media.enabled``, or a store that would
not open); the routes answer 501 from that ``None``, never from a guess.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from homeagent.approvals import ApprovalBroker
    from homeagent.config import ConfigRegistry
    from homeagent.conversations import Conversation, Entry, TurnRecorder
    from homeagent.events import EventBus
    from homeagent.io.manager import InputMessage
    from homeagent.knowledge.base import KnowledgeHit, KnowledgeInfo
    from homeagent.memory.context import ContextEvent
    from homeagent.memory.documents import Doc
    from homeagent.memory.graph import Entity, Recall
    from homeagent.paths import DataPaths
    from homeagent.providers.adapter import Adapter
    from homeagent.providers.adapter_loader import AdapterInfo
    from homeagent.sdk.types import InjectOptions, OutputCap, ToolDef
    from homeagent.webui.common import MediaLibrary

RPCMethod = Callable[[dict[str, Any]], Any]
ChannelHandler = Callable[[str, dict[str, Any], str], Awaitable[Any]]


class InputQueue(Protocol):
    """The daemon's input side: chat messages and interrupts from the browser and OpenAI clients."""

    def inject(self, message: InputMessage) -> str: ...

    def inject_interrupt_text(
        self, source: str, channel: str, text: str, *, options: InjectOptions | None = None
    ) -> str: ...


class AgentControl(Protocol):
    """The running agent, as the stop button and the interrupt route see it."""

    @property
    def busy(self) -> bool: ...

    def cancel_turn(self) -> bool: ...


class TranscriptLog(Protocol):
    """The text log the chat page's history is read from."""

    async def flush(self) -> None: ...

    def read_recent(self, limit: int = 50) -> list[dict[str, Any]]: ...


class ConversationLog(Protocol):
    """The conversations (``conversations.db``): what the chat showed, and the recording of each turn."""

    async def create(self, title: str = "") -> Conversation: ...

    async def get(self, conversation: int) -> Conversation | None: ...

    async def for_external(self, key: str, title: str) -> tuple[Conversation, bool]: ...

    async def list(self, query: str = "", limit: int = 100) -> builtins.list[Conversation]: ...

    async def rename(self, conversation: int, title: str) -> Conversation | None: ...

    async def delete(self, conversation: int) -> bool: ...

    async def page(
        self, conversation: int, *, before: int | None = None, limit: int = 50
    ) -> tuple[builtins.list[Entry], bool]: ...

    async def entries(self, conversation: int) -> builtins.list[Entry]: ...

    async def entry(self, conversation: int, entry_id: int) -> Entry | None: ...

    async def last_of(self, conversation: int, kind: str) -> Entry | None: ...

    def running(self, conversation: int) -> bool: ...

    async def begin(self, conversation: int, message: InputMessage) -> TurnRecorder: ...

    async def interrupt(self, conversation: int, text: str, input_id: str) -> Entry: ...

    async def proactive(self, conversation: int | None, text: str, data: dict[str, Any]) -> Entry: ...

    async def truncate(self, conversation: int, from_entry: int) -> tuple[builtins.list[Entry], int]: ...


class ToolList(Protocol):
    def tools(self) -> list[ToolDef]: ...


class ChannelDesk(Protocol):
    """Output channels: the web UI lists them and registers its own (``webui``)."""

    def list(self) -> builtins.list[dict[str, Any]]: ...

    def register(
        self,
        name: str,
        handler: ChannelHandler,
        *,
        caps: OutputCap | int = ...,
        description: str = "",
        plugin: str = "",
        meta_help: str = "",
        types: builtins.list[str] | None = None,
    ) -> Callable[[], None]: ...


class RPCRegistry(Protocol):
    """The local socket's method table: the web UI adds ``webui.token`` and ``webui.info`` while it runs."""

    @property
    def methods(self) -> Mapping[str, RPCMethod]: ...

    def add_method(self, name: str, fn: RPCMethod) -> None: ...

    def remove_method(self, name: str, fn: RPCMethod) -> bool: ...


class LLMSettings(Protocol):
    """The LLM sources page: list, choose, test, add, remove and order sources."""

    def sources(self) -> dict[str, Any]: ...

    def use(self, params: dict[str, Any]) -> dict[str, Any]: ...

    async def test(self, params: dict[str, Any]) -> dict[str, Any]: ...

    async def test_spec(self, params: dict[str, Any]) -> dict[str, Any]: ...

    def presets(self) -> dict[str, Any]: ...

    def save_source(self, params: dict[str, Any]) -> dict[str, Any]: ...

    def remove_source(self, params: dict[str, Any]) -> dict[str, Any]: ...

    def reorder(self, params: dict[str, Any]) -> dict[str, Any]: ...


class AdapterFiles(Protocol):
    """The adapter loader, for the adapter editor: list, check before saving, and drop what it cached."""

    @property
    def user_dir(self) -> Path | None: ...

    @property
    def builtin_dir(self) -> Path: ...

    def info(self) -> list[AdapterInfo]: ...

    def check_file(self, path: Path | str) -> Adapter: ...

    def forget(self) -> None: ...


class PluginManager(Protocol):
    """The plugin registry's owner operations (each raises ``PluginError`` with the reason it cannot)."""

    def list(self) -> builtins.list[dict[str, Any]]: ...

    def info(self, name: str) -> dict[str, Any]: ...

    async def enable(self, name: str) -> dict[str, Any]: ...

    async def disable(self, name: str, *, by: str = "") -> dict[str, Any]: ...

    async def reload_one(self, name: str) -> dict[str, Any]: ...

    async def remove(self, name: str) -> dict[str, Any]: ...

    async def install(self, source: str, *, upgrade: bool = False) -> dict[str, Any]: ...


class ContextWindow(Protocol):
    """The conversation window (L1): its timeline and counts."""

    def __len__(self) -> int: ...

    def timeline(self) -> list[ContextEvent]: ...

    def stats(self) -> dict[str, Any]: ...


class DocumentLibrary(Protocol):
    """The document store (L2), read without counting as a use (browsing is not recall)."""

    async def aquery(self, text: str, k: int = 3, *, touch: bool = True, min_score: float | None = None) -> list[Doc]: ...

    async def arecent(self, limit: int) -> list[Doc]: ...

    async def astats(self) -> dict[str, Any]: ...


class GraphView(Protocol):
    """The memory graph (L3) as the graph page draws it."""

    async def recall(self, query: Sequence[str] | str, depth: int = 2) -> Recall: ...

    async def hot_entities(self, limit: int = 10) -> list[Entity]: ...

    async def introspect(self, *, hot: int = 10) -> dict[str, Any]: ...


class KnowledgeLibrary(Protocol):
    """The knowledge base editor's operations."""

    async def entries(self) -> list[KnowledgeInfo]: ...

    async def get(self, name: str) -> str | None: ...

    async def add(self, name: str, content: str, *, overwrite: bool = True) -> tuple[KnowledgeInfo, bool]: ...

    async def delete(self, name: str) -> bool: ...

    async def search(self, query: str, top_k: int = 5) -> list[KnowledgeHit]: ...


@dataclass(frozen=True)
class WebHost:
    """Every part of the daemon the web UI uses; ``media`` is None when the media store is off."""

    config: ConfigRegistry
    paths: DataPaths
    events: EventBus
    status: Callable[[], dict[str, Any]]
    io: InputQueue
    agent: AgentControl
    tools: ToolList
    channels: ChannelDesk
    socket: RPCRegistry
    llm: LLMSettings
    adapters: AdapterFiles
    approvals: ApprovalBroker
    textlog: TranscriptLog
    conversations: ConversationLog
    plugins: PluginManager
    context: ContextWindow
    documents: DocumentLibrary
    graph: GraphView
    knowledge: KnowledgeLibrary
    media: MediaLibrary | None

    def features(self) -> dict[str, bool]:
        """Which parts this daemon has (the UI hides what is missing); only the media store can be off."""
        return {
            "plugins": True,
            "context": True,
            "documents": True,
            "graph": True,
            "knowledge": True,
            "adapters": True,
            "approvals": True,
            "media": self.media is not None,
        }
