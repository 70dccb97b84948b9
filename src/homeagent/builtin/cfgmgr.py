"""Built-in ``cfgmgr``: lets the agent read and change settings, the way the CLI and web UI do.

* Keys are addressed by ``scope`` (``core`` or ``plugin``) and ``key``:
  ``core.agent.max_tool_turns``; ``timer.max_duration`` (or the qualified
  ``plugin.timer.max_duration``).
* Secrets (``password`` defs, ``secret`` defs, keys named like ``api_key``)
  are masked in everything read; a write echoes the masked value.
* A write is validated against the key's ConfigDef (type, options, limits)
  before anything is stored; a key without a def is refused (with the closest
  known key suggested) unless it already has a stored value.
* ``config_batch_set`` validates every item first and writes only when all of
  them pass; if storing fails half-way, what was written is put back.
* The model never widens its own powers: a setting whose ConfigDef is
  ``owner_only`` (it starts a process, loads code, moves a confined folder,
  widens exposure or redirects the LLM and its key) is refused, whichever way
  it is named (full key, ``core.``-less alias, ``plugin.``-qualified or not,
  alone or in a batch). So is a key with no definition loaded (a stopped
  plugin's), because nothing says whether it is safe, and any key matching the
  owner's extra ``protected_keys`` patterns or cfgmgr's own settings. The
  owner changes them in the web UI or with ``homeagent config set``; those
  paths do not go through this plugin.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from homeagent.config.registry import PLUGIN_PREFIX, ConfigRegistry
from homeagent.config.values import ConfigError, coerce
from homeagent.sdk.api import PluginSDK
from homeagent.sdk.types import ConfigDef, ToolDef

if TYPE_CHECKING:
    from homeagent.plugins.registry import PluginRegistry

__all__ = ["DEFAULT_PROTECTED", "ConfigManager", "create_plugin", "owner_only_message"]

DEFAULT_PROTECTED = "plugin.webui.*"
"""Extra patterns on top of the owner-only defs (the list of what widens powers lives in the ConfigDefs)."""
SCOPES = ("core", "plugin")

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


def _err(message: str) -> dict[str, Any]:
    return {"isError": True, "content": message}


class _Refused(Exception):
    """A request that cannot be done; the message is for the model."""


_SCOPE = {"type": "string", "enum": list(SCOPES), "description": "core or plugin"}


class ConfigManager:
    def __init__(self, name: str, config: ConfigRegistry, plugins: PluginRegistry | None = None) -> None:
        self.name = name
        self._cfg = config
        self._plugins = plugins
        self._sdk: PluginSDK | None = None

    # -- lifecycle ------------------------------------------------------------

    def start(self, sdk: PluginSDK) -> None:
        self._sdk = sdk
        sdk.settings.register_def(ConfigDef(
            key="protected_keys", default=DEFAULT_PROTECTED, type="text", category="cfgmgr",
            display_name="More keys the agent may not change",
            description="Comma-separated keys or patterns (fnmatch, e.g. plugin.cmd.*) that config_set refuses "
                        "on top of every owner-only setting, which it always refuses.", owner_only=True,
        ))
        key_args = {"scope": _SCOPE, "key": {"type": "string", "description": "e.g. core.agent.max_tool_turns or "
                                                                                 "timer.max_duration"}}
        prefix_args = {"scope": _SCOPE, "prefix": {"type": "string", "description": "key prefix (optional)"}}
        tools: list[tuple[ToolDef, Handler]] = [
            (ToolDef(name="config_list_plugins", description="Plugins that have settings, with their state.",
                     no_memory=True), self._list_plugins),
            (ToolDef(name="config_get", description="Read one setting (secrets masked) with its type and default.",
                     parameters=_obj(key_args, ["scope", "key"]), no_memory=True), self._get),
            (ToolDef(name="config_set", description="Change one setting; the value is checked against its type. "
                     "Owner-only settings (config_get shows owner_only) are refused: ask the owner.",
                     parameters=_obj({**key_args, "value": {"description": "the new value (text or JSON value)"}},
                                     ["scope", "key", "value"]),
                     serial=True, parallel_safe=False), self._set),
            (ToolDef(name="config_list_keys", description="Settings and their values (secrets masked) under a prefix.",
                     parameters=_obj(prefix_args, ["scope"]), no_memory=True), self._list_keys),
            (ToolDef(name="config_get_defs", description="Definitions (type, default, options, limits, description) "
                     "of settings under a prefix.", parameters=_obj(prefix_args, ["scope"]), no_memory=True),
             self._get_defs),
            (ToolDef(name="config_dump", description="Every setting, core and plugins (secrets masked).",
                     no_memory=True), self._dump),
            (ToolDef(name="config_batch_set", description="Change several settings at once: all are checked first; "
                     "if any is invalid, none is written.",
                     parameters=_obj({"items": {"type": "array", "minItems": 1, "items": _obj(
                         {**key_args, "value": {}}, ["scope", "key", "value"])}}, ["items"]),
                     serial=True, parallel_safe=False), self._batch_set),
        ]
        for tool, handler in tools:
            sdk.register_tool(tool, _guard(handler))

    def stop(self) -> None:
        self._sdk = None

    # -- keys -----------------------------------------------------------------

    def qualify(self, scope: str, key: str) -> str:
        """The registry key for ``key`` in ``scope``; raises _Refused with a usable message."""
        key = str(key).strip()
        if not key:
            raise _Refused("key is empty")
        if scope == "core":
            if key.startswith(PLUGIN_PREFIX):
                raise _Refused(f"{key!r} is a plugin setting; use scope plugin")
            if not self._known(key) and self._known(f"core.{key}"):
                return f"core.{key}"
            return key
        if scope == "plugin":
            if key.startswith(PLUGIN_PREFIX):
                return key
            plugin, dot, sub = key.partition(".")
            if not dot or not plugin or not sub:
                raise _Refused(f"a plugin setting is written <plugin>.<key>, e.g. timer.max_duration (got {key!r})")
            return f"{PLUGIN_PREFIX}{plugin}.{sub}"
        raise _Refused(f"scope must be core or plugin, not {scope!r}")

    def _known(self, qkey: str) -> bool:
        try:
            return self._cfg.get_def(qkey) is not None or self._cfg.has(qkey)
        except ConfigError:
            return False

    def _prefix(self, scope: str, prefix: str) -> str:
        prefix = str(prefix or "").strip()
        if scope == "core":
            if prefix.startswith(PLUGIN_PREFIX):
                raise _Refused(f"{prefix!r} is a plugin prefix; use scope plugin")
            return prefix
        if scope == "plugin":
            return prefix if prefix.startswith(PLUGIN_PREFIX) else PLUGIN_PREFIX + prefix
        raise _Refused(f"scope must be core or plugin, not {scope!r}")

    @staticmethod
    def _in_scope(scope: str, qkey: str) -> bool:
        return qkey.startswith(PLUGIN_PREFIX) == (scope == "plugin")

    def protected(self, qkey: str) -> bool:
        raw = self._cfg.get_plugin(self.name, "protected_keys", DEFAULT_PROTECTED)
        patterns = [p.strip() for p in re.split(r"[,\n]+", str(raw or "")) if p.strip()]
        own = f"{PLUGIN_PREFIX}{self.name}.*"
        return any(fnmatch.fnmatchcase(qkey, p) for p in [*patterns, own])

    def _def_dict(self, d: ConfigDef) -> dict[str, Any]:
        out: dict[str, Any] = {"key": d.key, "type": d.type, "default": self._cfg.masked(d.key, d.default)}
        for attr in ("display_name", "description", "category", "placeholder"):
            value = getattr(d, attr)
            if value:
                out[attr] = value
        if d.options:
            out["options"] = list(d.options)
        for attr in ("min", "max"):
            if getattr(d, attr) is not None:
                out[attr] = getattr(d, attr)
        if d.is_secret:
            out["secret"] = True
        if d.hidden:
            out["hidden"] = True
        if d.owner_only:
            out["owner_only"] = True
        return out

    def validate(self, qkey: str, value: Any) -> Any:
        """The value as it would be stored; raises _Refused (nothing is written)."""
        try:
            d = self._cfg.get_def(qkey)
        except ConfigError as e:
            raise _Refused(str(e)) from None
        if d is not None and d.owner_only:
            raise _Refused(owner_only_message(qkey))
        if self.protected(qkey):
            raise _Refused(f"{qkey} is protected (setting plugin.{self.name}.protected_keys), so the model may not "
                           f"change it; the owner can, with `homeagent config set {qkey} <value>` or in the web UI")
        if d is None:
            if not self._cfg.has(qkey):
                raise _Refused(str(self._cfg.unknown_key_error(qkey)))
            raise _Refused(f"{qkey} has no definition loaded (a stopped plugin's key, or one this version does "
                           "not define), so nothing says whether "
                           "changing it is safe and the model may not; the owner can, with "
                           f"`homeagent config set {qkey} <value>` or in the web UI")
        try:
            return coerce(d, value)
        except ValueError as e:
            raise _Refused(f"{qkey}: {e}") from None

    # -- tools ----------------------------------------------------------------

    async def _list_plugins(self, _: dict[str, Any]) -> Any:
        states: dict[str, str] = {}
        if self._plugins is not None:
            states = {str(p["name"]): str(p.get("state", "")) for p in self._plugins.list()}
        names = sorted(set(self._cfg.plugins()) | set(states))
        out = []
        for name in names:
            item: dict[str, Any] = {"name": name, "settings": len(self._cfg.defs(plugin=name)),
                                    "stored": len(self._cfg.list_plugin(name))}
            if name in states:
                item["state"] = states[name]
            out.append(item)
        return {"plugins": out}

    async def _get(self, args: dict[str, Any]) -> Any:
        qkey = self.qualify(str(args["scope"]), str(args["key"]))
        d = self._cfg.get_def(qkey)
        if d is None and not self._cfg.has(qkey):
            raise _Refused(str(self._cfg.unknown_key_error(qkey)))
        out: dict[str, Any] = {"key": qkey, "value": self._cfg.masked(qkey, self._cfg.get(qkey)),
                               "stored": self._cfg.has(qkey)}
        if d is not None:
            out["def"] = self._def_dict(d)
        return out

    async def _set(self, args: dict[str, Any]) -> Any:
        qkey = self.qualify(str(args["scope"]), str(args["key"]))
        value = self.validate(qkey, args.get("value"))
        before = self._cfg.get(qkey)
        try:
            stored = self._cfg.set(qkey, value)
        except ConfigError as e:
            raise _Refused(str(e)) from None
        return {"status": "set", "key": qkey, "value": self._cfg.masked(qkey, stored),
                "previous": self._cfg.masked(qkey, before)}

    async def _list_keys(self, args: dict[str, Any]) -> Any:
        scope = str(args["scope"])
        prefix = self._prefix(scope, str(args.get("prefix") or ""))
        values = {k: v for k, v in self._cfg.dump(mask_secrets=True).items()
                  if k.startswith(prefix) and self._in_scope(scope, k)}
        return {"scope": scope, "prefix": prefix, "count": len(values), "values": values}

    async def _get_defs(self, args: dict[str, Any]) -> Any:
        scope = str(args["scope"])
        prefix = self._prefix(scope, str(args.get("prefix") or ""))
        defs = [self._def_dict(d) for d in self._cfg.defs(prefix) if self._in_scope(scope, d.key)]
        return {"scope": scope, "prefix": prefix, "count": len(defs), "defs": defs}

    async def _dump(self, _: dict[str, Any]) -> Any:
        core: dict[str, Any] = {}
        plugins: dict[str, dict[str, Any]] = {}
        for key, value in self._cfg.dump(mask_secrets=True).items():
            if key.startswith(PLUGIN_PREFIX):
                plugin, _dot, sub = key[len(PLUGIN_PREFIX):].partition(".")
                plugins.setdefault(plugin, {})[sub] = value
            else:
                core[key] = value
        return {"core": core, "plugins": plugins}

    async def _batch_set(self, args: dict[str, Any]) -> Any:
        items = list(args["items"])
        planned: list[tuple[str, Any]] = []
        problems: list[str] = []
        seen: set[str] = set()
        for i, item in enumerate(items, start=1):
            try:
                qkey = self.qualify(str(item.get("scope", "")), str(item.get("key", "")))
                if qkey in seen:
                    raise _Refused(f"{qkey} appears more than once")
                seen.add(qkey)
                planned.append((qkey, self.validate(qkey, item.get("value"))))
            except _Refused as e:
                problems.append(f"item {i}: {e}")
        if problems:
            return _err("nothing was written: " + "; ".join(problems))
        undo: list[tuple[str, bool, Any]] = []
        try:
            for qkey, value in planned:
                undo.append((qkey, self._cfg.has(qkey), self._cfg.get(qkey)))
                self._cfg.set(qkey, value)
        except ConfigError as e:
            for qkey, had, old in reversed(undo):
                try:
                    if had:
                        self._cfg.set(qkey, old)
                    else:
                        self._cfg.delete(qkey)
                except ConfigError:
                    pass
            return _err(f"storing failed ({e}); the settings written before it were restored")
        return {"status": "set", "count": len(planned),
                "values": {k: self._cfg.masked(k, self._cfg.get(k)) for k, _ in planned}}


def owner_only_message(qkey: str) -> str:
    """What the model is told when it tries to change an owner-only setting."""
    return (f"{qkey} is an owner-only setting (it starts processes, loads code, moves a confined folder, widens "
            "access or redirects the LLM and its key), so the model's tools may not change it. Ask the owner: they "
            f"can change it with `homeagent config set {qkey} <value>` or in the web UI's settings.")


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


def _guard(fn: Handler) -> Handler:
    async def call(args: dict[str, Any]) -> Any:
        try:
            return await fn(args)
        except _Refused as e:
            return _err(str(e))
        except ConfigError as e:
            return _err(str(e))

    return call


def create_plugin(name: str, config: Mapping[str, Any]) -> ConfigManager:
    services = config.get("services")
    registry = getattr(services, "config", None)
    if registry is None:
        raise ValueError("cfgmgr needs the daemon's settings registry (config['services'].config)")
    return ConfigManager(name, registry, config.get("registry"))
