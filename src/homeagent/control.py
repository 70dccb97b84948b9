"""Config operations shared by the socket RPC and the CLI's offline mode.

``homeagent config …`` talks to the daemon when one runs (so its listeners
see the change at once) and falls back to opening the registry directly;
both paths go through this one class so they behave the same.
"""

from __future__ import annotations

from typing import Any

from homeagent.config import ConfigError, ConfigRegistry


class ConfigControl:
    def __init__(self, registry: ConfigRegistry) -> None:
        self.registry = registry

    def get(self, params: dict[str, Any]) -> dict[str, Any]:
        key = str(params.get("key", ""))
        if not key:
            raise ConfigError(key, "a key is required")
        value = self.registry.get(key)
        if value is None and not self._known(key):
            raise self.registry.unknown_key_error(key)
        secret = self.registry.is_secret(key)
        shown = self.registry.masked(key, value) if secret and not params.get("reveal") else value
        return {"key": key, "value": shown, "secret": secret}

    def set(self, params: dict[str, Any]) -> dict[str, Any]:
        key = str(params.get("key", ""))
        if "value" not in params:
            raise ConfigError(key, "a value is required")
        self.registry.set(key, params["value"])
        value = self.registry.get(key)
        secret = self.registry.is_secret(key)
        return {"key": key, "value": self.registry.masked(key, value) if secret else value, "secret": secret}

    def list(self, params: dict[str, Any]) -> dict[str, Any]:
        prefix = str(params.get("prefix", ""))
        everything = self.registry.dump(mask_secrets=True)
        return {k: v for k, v in sorted(everything.items()) if k.startswith(prefix)}

    def _known(self, key: str) -> bool:
        return self.registry.get_def(key) is not None or key in self.registry.dump(mask_secrets=True)
