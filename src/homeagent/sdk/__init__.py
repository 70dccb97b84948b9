"""The public plugin SDK: ``from homeagent.sdk import Plugin, PluginSDK, ToolDef, Stage``.

Everything here is stable for plugin authors and imports none of the
daemon's internals. See docs/plugins.md for how to write each kind of plugin.
"""

from homeagent.sdk.api import (
    LLMAPI,
    ChannelHandler,
    DocMemoryAPI,
    EventCallback,
    KnowledgeAPI,
    MemoryAPI,
    Plugin,
    PluginFactory,
    PluginSDK,
    ServiceUnavailable,
    SettingsAPI,
    TextMemoryAPI,
    Unregister,
)
from homeagent.sdk.types import (
    STAGES,
    ConfigDef,
    InjectOptions,
    MediaBlock,
    MemItem,
    OutputCap,
    Stage,
    StageContext,
    StageHandler,
    TextCleaner,
    ToolCall,
    ToolDef,
    ToolHandler,
    ToolResult,
)

__all__ = [
    "LLMAPI",
    "STAGES",
    "ChannelHandler",
    "ConfigDef",
    "DocMemoryAPI",
    "EventCallback",
    "InjectOptions",
    "KnowledgeAPI",
    "MediaBlock",
    "MemItem",
    "MemoryAPI",
    "OutputCap",
    "Plugin",
    "PluginFactory",
    "PluginSDK",
    "ServiceUnavailable",
    "SettingsAPI",
    "Stage",
    "StageContext",
    "StageHandler",
    "TextCleaner",
    "TextMemoryAPI",
    "ToolCall",
    "ToolDef",
    "ToolHandler",
    "ToolResult",
    "Unregister",
]
