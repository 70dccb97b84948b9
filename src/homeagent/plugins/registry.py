"""The plugin registry: finds, loads, starts, stops and reloads every plugin.

How it is organised, and why:

* Built-in plugins are factories registered exactly like external Python
  plugins (``factory(name, config) -> Plugin``), in the spirit of simonw/llm:
  the host's own plugins use the public path. Packages installed with pip can
  add theirs under the ``homeagent.plugins`` entry-point group.
* ``plugins/<name>/plugin.json`` is dispatched on its ``entry``: ``main.lua``
  → Lua, ``SKILL.md`` → skill, ``module:factory`` or ``*.py`` → in-process
  Python, anything else → subprocess. Each kind has a loader; another kind (or
  a better subprocess host) is added with :meth:`register_kind`. A folder with
  only a ``SKILL.md`` is a skill too (skills from ClawHub have no plugin.json).
* Loading is two steps: *prepare* (parse, import, run main.lua — concurrent,
  off the loop) and *start* (register tools, stages, … — one plugin at a
  time, in name order, so that which of two plugins wins a contested tool
  name is deterministic). A plugin that fails either step is reported with
  its error and skipped; the others load.
* Everything a plugin registers goes through its own :class:`HostSDK`, which
  records it; unloading closes that SDK first (tools, stage handlers,
  channels, cleaners disappear), then calls ``stop``.
* Enable/disable is persisted in ``disabled_plugins`` and applied at once.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
import difflib
import importlib
import importlib.metadata
import importlib.util
import inspect
import itertools
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from homeagent.config.settings import PluginSettings
from homeagent.msg import Msg, message_of
from homeagent.plugins.discovery import Found, discover, inspect_folder
from homeagent.plugins.errors import PluginError
from homeagent.plugins.manifest import NAME_RE, Manifest, ManifestError
from homeagent.plugins.package import (
    INSTALL_RECORD,
    PackageError,
    download_package,
    extract_package,
    inspect_package,
    pack_folder,
    remove_plugin_dir,
)
from homeagent.plugins.pyimport import drop_modules, import_entry, resolve_ref
from homeagent.plugins.services import HostSDK, PluginServices
from homeagent.plugins.shipped import available_entries, link_shipped, shipped_plugins
from homeagent.plugins.skills import DEFAULT_BUDGET, SkillCatalog, SkillPlugin, parse_skill
from homeagent.plugins.skills import OWNER as SKILLS_OWNER
from homeagent.sdk.api import Plugin, PluginFactory
from homeagent.sdk.types import ConfigDef

if TYPE_CHECKING:
    from homeagent.plugins.lua_plugin import LuaLimits

__all__ = [
    "BUILTIN_PLUGINS",
    "RESERVED_NAMES",
    "KindLoader",
    "PluginError",
    "PluginRecord",
    "PluginRegistry",
    "PluginSource",
]

log = logging.getLogger("homeagent.plugins")

BUILTIN_PLUGINS: Mapping[str, str] = MappingProxyType(
    {
        "pluginmgr": "homeagent.builtin.pluginmgr:create_plugin",
    }
)
"""Built-in plugins by name → ``module:factory``. Add a line here for each new built-in."""

ENTRY_POINT_GROUP = "homeagent.plugins"
RESERVED_NAMES = frozenset({"core", "cli", "skills", "memory", "offline"})
"""Names the core itself uses as tool owners; a plugin folder may not take them."""

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
PREPARE_CONCURRENCY = 8


@dataclass
class PluginSource:
    """What a kind loader gets: where the plugin is and what it declared."""

    name: str
    kind: str
    folder: Path | None
    manifest: Manifest | None
    services: PluginServices
    settings: Any  # PluginSettings of this plugin
    config: dict[str, Any] = field(default_factory=dict)
    generation: int = 0


KindLoader = Callable[[PluginSource], Awaitable[Plugin] | Plugin]
"""Turns a source into a Plugin ready for ``start`` (may be async; runs before start)."""


@dataclass
class PluginRecord:
    """What the registry knows about one plugin, loaded or not."""

    name: str
    kind: str
    builtin: bool = False
    folder: Path | None = None
    manifest: Manifest | None = None
    factory: PluginFactory | str | None = None
    state: str = "stopped"  # running | failed | disabled | stopped | ineligible
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    plugin: Plugin | None = None
    sdk: HostSDK | None = None
    load_ms: float = 0.0
    started_at: float = 0.0
    modules: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        m = self.manifest
        sdk = self.sdk
        plugin = self.plugin
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "builtin": self.builtin,
            "version": m.version if m else "",
            "description": m.description if m else "",
            "author": m.author if m else "",
            "license": m.license if m else "",
            "entry": m.entry if m else "",
            "capabilities": list(m.capabilities) if m else [],
            "env": list(m.env) if m else [],
            "tags": list(m.tags) if m else [],
            "path": str(self.folder) if self.folder else "",
            "state": self.state,
            "error": self.error,
            "warnings": list(self.warnings),
            "tools": sdk.registrations("tool") if sdk else [],
            "stages": sdk.registrations("stage") if sdk else [],
            "channels": sdk.registrations("channel") if sdk else [],
            "cleaners": sdk.registrations("cleaner") if sdk else [],
            "load_ms": round(self.load_ms, 2),
        }
        if isinstance(plugin, SkillPlugin):
            skill = plugin.skill
            out["tools"] = ["skill_read", "skill_file"] if skill.eligible else []
            out["skill"] = skill.summary()
            if not out["description"]:
                out["description"] = skill.description
        health = getattr(plugin, "health", None)
        if callable(health):  # e.g. subprocess plugins: pid, restarts, and a state of their own
            try:
                details = health()
            except Exception as e:
                details = {"error": f"health() failed: {e}"}
            if isinstance(details, dict):
                out["health"] = details
                live = details.get("state")
                if self.state == "running" and live in ("restarting", "failed", "stopped"):
                    out["state"] = str(live)
                    out["error"] = str(details.get("error") or "")
        if getattr(plugin, "kind", "") == "lua":
            out["lua"] = {"calls": getattr(plugin, "calls", 0), "errors": getattr(plugin, "errors", 0)}
        return out


@dataclass
class _Src:
    name: str
    builtin: bool
    factory: PluginFactory | str | None = None
    found: Found | None = None


# ---------------------------------------------------------------- the registry


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        return text if str(exc) else "timed out"
    if isinstance(exc, ValueError | PluginError | ManifestError | PackageError):
        return text
    return f"{type(exc).__name__}: {text}"


class PluginRegistry:
    """Every plugin of the daemon; the only object daemon.py talks to about plugins."""

    def __init__(
        self,
        services: PluginServices,
        plugins_dir: Path,
        *,
        builtins: Mapping[str, PluginFactory | str] | None = None,
        entry_points: bool = True,
        lua_limits: LuaLimits | None = None,
        start_timeout: float = START_TIMEOUT,
        lua_workers: int = 4,
        shipped: Path | None = None,
    ) -> None:
        self.services = services
        self.plugins_dir = Path(plugins_dir)
        self.shipped = shipped
        """Folder of the plugins that ship with HomeAgent (plugins/bundled); None: none are offered."""
        self.start_timeout = start_timeout
        self.lua_limits = lua_limits
        self._factories: dict[str, PluginFactory | str] = dict(BUILTIN_PLUGINS if builtins is None else builtins)
        self._use_entry_points = entry_points
        self._kinds: dict[str, KindLoader] = {
            "lua": self._load_lua,
            "skill": self._load_skill,
            "python": self._load_python,
            "process": self._no_process_host,
        }
        self._records: dict[str, PluginRecord] = {}
        self._conflicts: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._generation = itertools.count(1)
        self._lua_pool = concurrent.futures.ThreadPoolExecutor(max_workers=lua_workers, thread_name_prefix="lua-plugin")
        self.skills = SkillCatalog(
            services.tools, services.prompt, base_dir=services.data_dir, budget=self._skills_budget
        )
        try:
            services.config.register_def(
                ConfigDef(
                    key="prompt_budget",
                    default=DEFAULT_BUDGET,
                    type="int",
                    display_name="Skills prompt budget",
                    description="Most characters the skills list may take in the system prompt.",
                    category="plugins",
                    min=500,
                    max=200_000,
                ),
                plugin=SKILLS_OWNER,
            )
        except Exception:
            log.exception("cannot register the skills settings")

    # -- extension points -------------------------------------------------------

    def register_factory(self, name: str, factory: PluginFactory | str) -> None:
        """Add a built-in plugin (``factory`` or ``"module:factory"``); takes effect at the next load."""
        if not NAME_RE.match(name):
            raise ValueError(f"invalid plugin name {name!r}")
        self._factories[name] = factory

    def register_kind(self, kind: str, loader: KindLoader) -> None:
        """Load plugins of ``kind`` (lua, skill, python, process, …) with ``loader``.

        The subprocess host registers itself here as ``"process"``.
        """
        self._kinds[kind] = loader

    def _skills_budget(self) -> int:
        try:
            return int(self.services.config.get_plugin(SKILLS_OWNER, "prompt_budget", DEFAULT_BUDGET))
        except (TypeError, ValueError):
            return DEFAULT_BUDGET

    # -- queries ----------------------------------------------------------------

    def list(self) -> list[dict[str, Any]]:
        out = [r.to_dict() for r in sorted(self._records.values(), key=lambda r: (not r.builtin, r.name))]
        for name, error in sorted(self._conflicts.items()):
            out.append(
                {
                    "name": f"{name} (folder)",
                    "kind": "unknown",
                    "builtin": False,
                    "state": "failed",
                    "error": error,
                    "version": "",
                    "tools": [],
                    "stages": [],
                    "channels": [],
                    "warnings": [],
                }
            )
        out.extend(available_entries(set(self._records) | set(self._conflicts), self.shipped))
        return out

    def info(self, name: str) -> dict[str, Any]:
        record = self._records.get(name)
        if record is None:
            for item in available_entries(set(self._records), self.shipped):
                if item["name"] == name:
                    return item
            raise PluginError(self._unknown(name))
        out = record.to_dict()
        out["disabled"] = self.services.config.is_disabled(name)
        if record.folder is not None and (record.folder / INSTALL_RECORD).is_file():
            try:
                out["install"] = json.loads((record.folder / INSTALL_RECORD).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass
        return out

    def get(self, name: str) -> PluginRecord | None:
        return self._records.get(name)

    def running(self) -> builtins.list[str]:
        return sorted(n for n, r in self._records.items() if r.state in ("running", "ineligible"))

    def is_disabled(self, name: str) -> bool:
        """Whether the owner switched ``name`` off (it stays off across restarts)."""
        return bool(self.services.config.is_disabled(name))

    def _unknown(self, name: str) -> str:
        known = [*self._records, *shipped_plugins(self.shipped)]
        close = difflib.get_close_matches(name, known, n=3)
        if close:
            return Msg("no plugin named {name!r}; did you mean {close}?", name=name, close=", ".join(close))
        return Msg("no plugin named {name!r}", name=name)

    # -- lifecycle ----------------------------------------------------------------

    async def load_all(self) -> dict[str, Any]:
        """Discover and start every enabled plugin; returns counts by state."""
        async with self._lock:
            sources = await self._collect()
            await self._load_many(sources)
            return self._summary()

    async def reload_all(self) -> dict[str, Any]:
        """Reload every plugin from the plugins folder (new ones start, removed ones stop); built-ins stay."""
        async with self._lock:
            for record in [r for r in self._records.values() if not r.builtin]:
                await self._unload(record)
                del self._records[record.name]
            sources = [s for s in await self._collect() if not s.builtin]
            await self._load_many(sources)
            return self._summary()

    async def reload_one(self, name: str) -> dict[str, Any]:
        """Stop ``name`` (everything it registered is removed first), read it again from disk, start it."""
        async with self._lock:
            record = self._records.get(name)
            if record is None and not (self.plugins_dir / name).is_dir():
                raise PluginError(self._unknown(name))
            if record is not None:
                await self._unload(record)
                del self._records[name]
            source = await self._source_for(name)
            if source is None:
                raise PluginError(Msg("plugin {name!r} is no longer installed", name=name))
            await self._load_many([source])
            return self._records[name].to_dict()

    async def stop_all(self) -> None:
        """Stop every plugin, newest first; then release the Lua workers."""
        async with self._lock:
            for record in sorted(self._records.values(), key=lambda r: r.started_at, reverse=True):
                await self._unload(record)
            self.skills.close()
        self._lua_pool.shutdown(wait=False, cancel_futures=True)

    async def enable(self, name: str) -> dict[str, Any]:
        """Start a disabled or stopped plugin; a shipped one that is not installed yet is linked in first."""
        self.services.config.enable_plugin(name)
        async with self._lock:
            record = self._records.get(name)
            if record is None and name not in self._factories and name in shipped_plugins(self.shipped):
                try:
                    await asyncio.to_thread(link_shipped, self.plugins_dir, name, self.shipped)
                except PackageError as e:
                    raise PluginError(message_of(e)) from None
            if record is not None and record.state in ("running", "ineligible"):
                return record.to_dict()
            if record is not None:
                del self._records[name]
            source = await self._source_for(name)
            if source is None:
                raise PluginError(self._unknown(name))
            await self._load_many([source])
            return self._records[name].to_dict()

    async def disable(self, name: str, *, by: str = "") -> dict[str, Any]:
        async with self._lock:
            record = self._records.get(name)
            if record is None and await self._source_for(name) is None:
                raise PluginError(self._unknown(name))
            self.services.config.disable_plugin(name, by)
            if record is not None:
                await self._unload(record)
                record.state, record.error = "disabled", ""
                return record.to_dict()
            return {"name": name, "state": "disabled"}

    # -- install / remove -----------------------------------------------------------

    async def install(self, source: str, *, upgrade: bool = False) -> dict[str, Any]:
        """Install a ``.hmap`` (or .zip) from a path or http(s) URL, or a plugin folder, and start it.

        See package.py for the checks; a folder holding only a SKILL.md is a skill plugin.
        """
        downloaded: Path | None = None
        try:
            if source.startswith(("http://", "https://")):
                downloaded = await download_package(source, self.plugins_dir / ".downloads")
                path = downloaded
            else:
                path = _user_path(source)
                if await asyncio.to_thread(path.is_dir):  # a plugin or SKILL.md folder: packed, then checked alike
                    downloaded = await asyncio.to_thread(pack_folder, path, self.plugins_dir / ".downloads")
                    path = downloaded
            info = await asyncio.to_thread(inspect_package, path, host_version=self.services.version)
            name = info.manifest.name
            if name in self._factories or name in RESERVED_NAMES:
                raise PackageError(Msg("{name!r} is the name of a built-in plugin; choose another name", name=name))
            async with self._lock:
                target = self.plugins_dir / name
                existed = target.exists()
                if existed and not upgrade:
                    raise PackageError(Msg("plugin {name!r} is already installed; use --upgrade to replace it", name=name))
                old = self._records.pop(name, None)
                if old is not None:
                    await self._unload(old)
                try:
                    await asyncio.to_thread(extract_package, info, self.plugins_dir, upgrade=upgrade, source=source)
                finally:
                    loaded = await self._source_for(name)
                    if loaded is not None:
                        await self._load_many([loaded])
                record = self._records.get(name)
        finally:
            if downloaded is not None:
                with contextlib.suppress(OSError):
                    os.unlink(downloaded)
        result: dict[str, Any] = {
            "status": "upgraded" if existed else "installed",
            **info.to_dict(),
            "path": str(self.plugins_dir / name),
        }
        if record is not None:
            result["state"] = record.state
            result["error"] = record.error
        return result

    async def remove(self, name: str) -> dict[str, Any]:
        async with self._lock:
            record = self._records.get(name)
            if name in self._factories or (record is not None and record.builtin):
                raise PluginError(Msg("{name!r} is a built-in plugin and cannot be removed; disable it instead", name=name))
            if record is not None:
                await self._unload(record)
                del self._records[name]
            try:
                path = await asyncio.to_thread(remove_plugin_dir, self.plugins_dir, name)
            except PackageError as e:
                raise PluginError(message_of(e)) from None
            if self.services.config.is_disabled(name):
                self.services.config.enable_plugin(name)
            return {"status": "removed", "name": name, "path": str(path)}

    # -- internals: sources ----------------------------------------------------------

    async def _collect(self) -> builtins.list[_Src]:
        self._conflicts.clear()
        sources: builtins.list[_Src] = [_Src(n, True, f) for n, f in sorted(self._factories.items())]
        if self._use_entry_points:
            for ep in self._entry_points():
                if ep.name in self._factories:
                    continue
                sources.append(_Src(ep.name, True, ep.value))
        names = {s.name for s in sources}
        for found in await asyncio.to_thread(discover, self.plugins_dir):
            if found.name in names:
                self._conflicts[found.name] = (
                    f"folder {found.folder} is ignored: a built-in plugin is already called {found.name!r}"
                )
                log.error("plugin folder %s", self._conflicts[found.name])
                continue
            sources.append(_Src(found.name, False, found=found))
        return sources

    @staticmethod
    def _entry_points() -> builtins.list[importlib.metadata.EntryPoint]:
        try:
            return builtins.list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        except Exception:
            log.exception("reading %s entry points failed", ENTRY_POINT_GROUP)
            return []

    async def _source_for(self, name: str) -> _Src | None:
        if name in self._factories:
            return _Src(name, True, self._factories[name])
        folder = self.plugins_dir / name
        if folder.is_dir():
            return _Src(name, False, found=await asyncio.to_thread(inspect_folder, folder))
        if self._use_entry_points:
            for ep in self._entry_points():
                if ep.name == name:
                    return _Src(name, True, ep.value)
        return None

    # -- internals: loading ------------------------------------------------------------

    async def _load_many(self, sources: builtins.list[_Src]) -> None:
        records = [self._record_for(s) for s in sources]
        for r in records:
            self._records[r.name] = r
        pending = [r for r in records if r.state == "stopped"]
        gate = asyncio.Semaphore(PREPARE_CONCURRENCY)

        async def prepare(record: PluginRecord) -> None:
            async with gate:
                await self._prepare(record)

        await asyncio.gather(*(prepare(r) for r in pending))
        for record in sorted(pending, key=lambda r: (not r.builtin, r.name)):
            if record.plugin is not None:
                await self._start(record)
        for record in records:
            if record.state == "failed":
                log.error("plugin %s (%s) failed: %s", record.name, record.kind, record.error)
            for warning in record.warnings:
                log.warning("plugin %s: %s", record.name, warning)
            self.services.events.publish("plugin", {"name": record.name, "state": record.state, "error": record.error})

    def _record_for(self, src: _Src) -> PluginRecord:
        if src.builtin:
            record = PluginRecord(src.name, "builtin", builtin=True, factory=src.factory)
        else:
            found = src.found
            assert found is not None
            record = PluginRecord(
                src.name, found.kind, folder=found.folder, manifest=found.manifest, warnings=list(found.warnings)
            )
            if found.error:
                record.state, record.error = "failed", found.error
                return record
            if src.name in RESERVED_NAMES:
                record.state, record.error = "failed", f"{src.name!r} is reserved for the core; rename the folder"
                return record
            if not NAME_RE.match(src.name):
                record.state, record.error = (
                    "failed",
                    (f"folder name {src.name!r} is not a valid plugin name (letters, digits, '_' or '-')"),
                )
                return record
            assert found.manifest is not None
            problems = found.manifest.compatibility_problems(self.services.version)
            if problems:
                record.state, record.error = "failed", "; ".join(problems)
                return record
        if self.services.config.is_disabled(src.name):
            record.state = "disabled"
        return record

    async def _prepare(self, record: PluginRecord) -> None:
        started = time.perf_counter()
        settings = PluginSettings(self.services.config, record.name, self.services.plugin_data_dir(record.name))
        try:
            if record.builtin:
                plugin = await self._from_factory(record, settings)
            else:
                loader = self._kinds.get(record.kind)
                if loader is None:
                    raise PluginError(f"no loader for plugins of kind {record.kind!r}")
                source = PluginSource(
                    name=record.name,
                    kind=record.kind,
                    folder=record.folder,
                    manifest=record.manifest,
                    services=self.services,
                    settings=settings,
                    config={
                        "path": str(record.folder),
                        "manifest": record.manifest.to_dict() if record.manifest else {},
                    },
                    generation=next(self._generation),
                )
                plugin = await asyncio.wait_for(_maybe_await(loader(source)), self.start_timeout)
                record.modules = builtins.list(getattr(plugin, "_homeagent_modules", []))
            self._check_plugin(record, plugin)
            record.plugin = plugin
        except Exception as e:
            record.state, record.error = "failed", _describe(e)
            log.debug("preparing plugin %s failed", record.name, exc_info=True)
        finally:
            record.load_ms = (time.perf_counter() - started) * 1000

    async def _from_factory(self, record: PluginRecord, settings: Any) -> Plugin:
        factory = record.factory
        if isinstance(factory, str):
            factory = await asyncio.to_thread(resolve_ref, factory)
        if not callable(factory):
            raise PluginError(f"built-in {record.name!r}: factory is not callable")
        return await _maybe_await(factory(record.name, {"registry": self, "services": self.services}))

    @staticmethod
    def _check_plugin(record: PluginRecord, plugin: Any) -> None:
        missing = [m for m in ("start", "stop") if not callable(getattr(plugin, m, None))]
        if missing:
            raise PluginError(f"the factory returned {type(plugin).__name__}, which has no {'/'.join(missing)}()")
        pname = getattr(plugin, "name", None)
        if pname != record.name:
            record.warnings.append(f"the plugin calls itself {pname!r}; registered as {record.name!r}")
        for warning in getattr(plugin, "warnings", []) or []:
            if warning not in record.warnings:
                record.warnings.append(str(warning))

    async def _start(self, record: PluginRecord) -> None:
        plugin = record.plugin
        assert plugin is not None
        sdk = HostSDK(self.services, record.name, plugin_dir=record.folder)
        record.sdk = sdk
        started = time.perf_counter()
        try:
            await asyncio.wait_for(_maybe_await(plugin.start(sdk)), self.start_timeout)
        except Exception as e:
            record.state = "failed"
            record.error = (
                f"start failed: {_describe(e)}"
                if not isinstance(e, TimeoutError)
                else (f"start did not finish within {self.start_timeout:g}s")
            )
            log.debug("starting plugin %s failed", record.name, exc_info=True)
            sdk.close()
            try:
                await asyncio.wait_for(_maybe_await(plugin.stop()), STOP_TIMEOUT)
            except Exception:
                log.debug("stop after failed start of %s failed", record.name, exc_info=True)
            record.plugin = None
            _forget_modules(record)
            return
        finally:
            record.load_ms += (time.perf_counter() - started) * 1000
        record.started_at = time.time()
        reason = getattr(plugin, "ineligible_reason", "")
        record.state, record.error = ("ineligible", f"requirements not met: {reason}") if reason else ("running", "")

    async def _unload(self, record: PluginRecord) -> None:
        """Remove what the plugin registered, then stop it; never raises."""
        if record.sdk is not None:
            record.sdk.close()
        plugin, record.plugin = record.plugin, None
        if plugin is not None:
            try:
                await asyncio.wait_for(_maybe_await(plugin.stop()), STOP_TIMEOUT)
            except Exception as e:
                log.warning("plugin %s did not stop cleanly: %s", record.name, _describe(e))
        _forget_modules(record)
        if record.state in ("running", "ineligible"):
            record.state = "stopped"

    def _summary(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for r in self._records.values():
            counts[r.state] = counts.get(r.state, 0) + 1
        failed = {r.name: r.error for r in self._records.values() if r.state == "failed"}
        return {"plugins": len(self._records), "states": counts, "failed": failed}

    # -- kind loaders -------------------------------------------------------------------

    async def _load_lua(self, source: PluginSource) -> Plugin:
        from homeagent.plugins.lua_plugin import LuaPlugin  # lupa is imported only when a Lua plugin exists

        assert source.folder is not None and source.manifest is not None
        plugin = LuaPlugin(
            source.name,
            source.folder,
            entry=source.manifest.entry,
            executor=self._lua_pool,
            limits=self.lua_limits,
            settings=source.settings,
        )
        try:
            await plugin.load()
        except BaseException:
            await plugin.stop()
            raise
        return plugin

    async def _load_skill(self, source: PluginSource) -> Plugin:
        assert source.folder is not None
        config_get = self.services.config.get
        skill = await asyncio.to_thread(parse_skill, source.folder, config_get=config_get)
        return SkillPlugin(source.name, skill, self.skills)

    async def _load_python(self, source: PluginSource) -> Plugin:
        assert source.folder is not None and source.manifest is not None
        factory, modules = await asyncio.to_thread(
            import_entry, source.folder, source.manifest.entry, source.name, source.generation
        )
        try:
            plugin = await _maybe_await(factory(source.name, dict(source.config)))
        except BaseException:
            drop_modules(modules)
            raise
        with contextlib.suppress(AttributeError):
            plugin._homeagent_modules = modules
        return plugin

    @staticmethod
    def _no_process_host(source: PluginSource) -> Plugin:
        entry = source.manifest.entry if source.manifest else "?"
        raise PluginError(f"entry {entry!r} is a subprocess plugin, and this build has no subprocess plugin host yet")


def _user_path(source: str) -> Path:
    return Path(source).expanduser()  # no I/O: expands ~ from $HOME


def _forget_modules(record: PluginRecord) -> None:
    drop_modules(record.modules)
    record.modules = []
