"""One plugin's view of the settings store: the SDK's SettingsAPI.

A plugin reads and writes its own keys unqualified (``get("max_duration")``),
the core's by their full names, and another plugin's by name. Definitions it
registers belong to it, so they land in its table and show up under
``plugin.<name>.`` on the settings page. Everything is synchronous: the
registry answers from memory.
"""

from __future__ import annotations

import builtins
from dataclasses import replace
from pathlib import Path
from typing import Any

from homeagent.config.registry import PLUGIN_PREFIX, ConfigRegistry
from homeagent.config.values import ConfigError
from homeagent.sdk.types import ConfigDef


class PluginSettings:
    """The SettingsAPI handed to plugin ``plugin``; ``data_dir`` is that plugin's own folder."""

    def __init__(self, registry: ConfigRegistry, plugin: str, data_dir: Path) -> None:
        ConfigRegistry._check_plugin(plugin)
        self._reg = registry
        self.plugin = plugin
        self._data_dir = Path(data_dir)

    # ---- own table (config_<plugin>)

    def get(self, key: str, default: Any = None) -> Any:
        return self._reg.get_plugin(self.plugin, key, default)

    def set(self, key: str, value: Any) -> Any:
        return self._reg.set_plugin(self.plugin, key, value)

    def delete(self, key: str) -> bool:
        return self._reg.delete_plugin_key(self.plugin, key)

    def list(self, prefix: str = "") -> dict[str, Any]:
        """Own stored values by unqualified key."""
        return self._reg.list_plugin(self.plugin, prefix)

    # ---- core table

    @staticmethod
    def _core_key(key: str) -> str:
        if key.startswith(PLUGIN_PREFIX):
            raise ConfigError(key, "this is a plugin setting; use get_plugin/set_plugin")
        return key

    def get_core(self, key: str, default: Any = None) -> Any:
        return self._reg.get(self._core_key(key), default)

    def set_core(self, key: str, value: Any) -> Any:
        return self._reg.set(self._core_key(key), value)

    def list_core(self, prefix: str = "") -> dict[str, Any]:
        """Core stored values (secrets included: the caller is trusted in-process code)."""
        return {k: v for k, v in self._reg.list(prefix).items() if not k.startswith(PLUGIN_PREFIX)}

    # ---- other plugins

    def get_plugin(self, plugin: str, key: str, default: Any = None) -> Any:
        return self._reg.get_plugin(plugin, key, default)

    def set_plugin(self, plugin: str, key: str, value: Any) -> Any:
        return self._reg.set_plugin(plugin, key, value)

    def list_plugin(self, plugin: str, prefix: str = "") -> dict[str, Any]:
        return self._reg.list_plugin(plugin, prefix)

    # ---- definitions

    def register_def(self, d: ConfigDef) -> None:
        """Define one of this plugin's settings (key unqualified) and seed its default."""
        self._reg.register_def(d, plugin=self.plugin)

    def defs(self, prefix: str = "") -> builtins.list[ConfigDef]:
        """This plugin's defs, keys unqualified as the plugin registered them."""
        qp = self._reg.qualify(self.plugin, "")
        return [replace(d, key=d.key.removeprefix(qp)) for d in self._reg.defs(prefix, plugin=self.plugin)]

    # ---- global

    def dump(self, mask_secrets: bool = True) -> dict[str, Any]:
        return self._reg.dump(mask_secrets=mask_secrets)

    def plugins(self) -> builtins.list[str]:
        return self._reg.plugins()

    def data_dir(self) -> Path:
        """This plugin's data folder, created on first use."""
        self._data_dir.mkdir(parents=True, exist_ok=True)
        return self._data_dir
