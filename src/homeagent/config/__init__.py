"""Settings: the SQLite registry, the core defaults, value types and the plugin SettingsAPI."""

from homeagent.config.defaults import (
    LOG_LEVELS,
    SOURCE_FIELDS,
    SOURCE_PREFIX,
    core_defs,
    render_markdown_table,
    source_field_def,
)
from homeagent.config.registry import (
    CORE_LLM_PREFIX,
    MIGRATIONS,
    PLUGIN_PREFIX,
    ChangeListener,
    ConfigRegistry,
    plugin_table_name,
)
from homeagent.config.settings import PluginSettings
from homeagent.config.values import (
    ConfigError,
    coerce,
    format_duration,
    mask,
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
)
from homeagent.sdk.types import ConfigDef

__all__ = [
    "CORE_LLM_PREFIX",
    "LOG_LEVELS",
    "MIGRATIONS",
    "PLUGIN_PREFIX",
    "SOURCE_FIELDS",
    "SOURCE_PREFIX",
    "ChangeListener",
    "ConfigDef",
    "ConfigError",
    "ConfigRegistry",
    "PluginSettings",
    "coerce",
    "core_defs",
    "format_duration",
    "mask",
    "parse_bool",
    "parse_duration",
    "parse_float",
    "parse_int",
    "plugin_table_name",
    "render_markdown_table",
    "source_field_def",
]
