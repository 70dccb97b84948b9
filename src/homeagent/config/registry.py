"""The SQLite settings store shared by the daemon, its plugins and the CLI.

All values are read into memory when the registry opens, so a read is a dict
lookup and never waits on disk; a write goes to SQLite (WAL, synchronous=NORMAL,
so no fsync per write) and then to the cache. Every call is synchronous and
sub-millisecond, which is why the asyncio code calls it directly.

Core keys live in ``config``; each plugin has its own ``config_<name>`` table
(same shape) and is addressed from outside as ``plugin.<name>.<key>``. A value
is stored as JSON text; a row that is not JSON (hand-edited, or written by the
Go version) reads back as its raw text. Schema changes go through numbered
migrations recorded in ``schema_version``.
"""

from __future__ import annotations

import builtins
import contextlib
import difflib
import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from homeagent.config.defaults import DATA_PATH_KEYS, SOURCE_FIELDS, SOURCE_PREFIX, source_field_def
from homeagent.config.values import (
    MAX_KEY,
    ConfigError,
    _short,
    base_type,
    check_plain,
    coerce,
    coerce_lenient,
    decode,
    encode,
    key_problem,
    mask,
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
)
from homeagent.msg import Msg, message_of
from homeagent.sdk.types import ConfigDef
from homeagent.sqlite_tx import immediate

log = logging.getLogger(__name__)

ChangeListener = Callable[[str, Any], None]

PLUGIN_PREFIX = "plugin."
CORE_LLM_PREFIX = "core.llm."
SNAPSHOT_NAME = "core_llm_snapshot.json"
BUSY_TIMEOUT_MS = 2000

# Last segments that mark a key without a def as secret (so it is masked, never logged).
_SECRET_NAME = re.compile(r"(^|[._-])(api_?key|apikey|password|passwd|secret|token|access_key)$", re.IGNORECASE)


# ---------------------------------------------------------------- migrations


def _m001_initial(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS config (key TEXT PRIMARY KEY, value TEXT)")
    db.execute(
        "CREATE TABLE IF NOT EXISTS disabled_plugins (name TEXT PRIMARY KEY, disabled_at TEXT, disabled_by TEXT)"
    )
    db.execute("CREATE TABLE IF NOT EXISTS plugin_tables (plugin TEXT PRIMARY KEY, table_name TEXT NOT NULL UNIQUE)")


def _inside(path: str, base: str) -> str | None:
    """``path`` relative to ``base`` when it lies inside it (``"."`` for ``base`` itself), else None.

    Compared as written (normalised) first, then with symlinks resolved, because
    the original directory may be gone (moved) or reached through a link.
    """
    for p, b in ((os.path.normpath(path), os.path.normpath(base)),
                 (os.path.realpath(path), os.path.realpath(base))):
        if p == b:
            return "."
        if p.startswith(b.rstrip(os.sep) + os.sep):
            return os.path.relpath(p, b)
    return None


def _m002_relative_data_paths(db: sqlite3.Connection) -> None:
    """Rewrite absolute path settings that point inside their data directory as relative ones.

    Versions before this one stored absolute defaults (``<data>/memory/graph.db``),
    so a copied or restored data directory went on writing into the original.
    "Their data directory" is the one recorded in ``core.daemon.data_dir`` when the
    values were stored, and also the folder of this ``config.db`` now; a path that a
    user pointed elsewhere stays absolute.
    """
    bases: list[str] = []
    row = db.execute("SELECT value FROM config WHERE key = 'core.daemon.data_dir'").fetchone()
    recorded = decode(row[0]) if row else None
    if isinstance(recorded, str) and os.path.isabs(recorded):
        bases.append(recorded)
    file = next((r[2] for r in db.execute("PRAGMA database_list") if r[1] == "main"), "")
    if file:
        bases.append(os.path.dirname(file))
    marks = ",".join("?" * len(DATA_PATH_KEYS))
    for key, raw in db.execute(f"SELECT key, value FROM config WHERE key IN ({marks})", DATA_PATH_KEYS).fetchall():
        value = decode(raw)
        if not isinstance(value, str) or not os.path.isabs(value):
            continue
        relative = next((r for r in (_inside(value, b) for b in bases) if r is not None), None)
        if relative is not None:
            db.execute("UPDATE config SET value = ? WHERE key = ?", (encode(relative), key))


# Append only; never edit or reorder a migration that has shipped.
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("initial", _m001_initial),
    ("relative data paths", _m002_relative_data_paths),
]


def plugin_table_name(plugin: str) -> str:
    """The SQLite table of a plugin: ``config_`` + a safe form of its name.

    Names that are not already lower-case ``[a-z0-9_]`` (SQLite table names
    are case-insensitive) get a short hash so that ``a-b`` and ``a_b`` differ.
    """
    safe = re.sub(r"[^a-z0-9_]", "_", plugin.lower())[:48]
    if safe != plugin:
        safe = f"{safe}_{hashlib.sha256(plugin.encode()).hexdigest()[:8]}"
    return f"config_{safe}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ConfigRegistry:
    """Settings for the core and every plugin, typed by their ``ConfigDef``s."""

    def __init__(self, db_path: Path) -> None:
        self.path = Path(db_path)
        self.snapshot_path = self.path.parent / SNAPSHOT_NAME
        self._lock = threading.RLock()
        self._core_defs: dict[str, ConfigDef] = {}
        self._plugin_defs: dict[str, dict[str, ConfigDef]] = {}
        self._core: dict[str, Any] = {}
        self._plugin_values: dict[str, dict[str, Any]] = {}
        self._tables: dict[str, str] = {}
        self._disabled: dict[str, tuple[str, str]] = {}
        self._listeners: list[ChangeListener] = []
        self._warned: set[str] = set()
        self._db: sqlite3.Connection | None = None
        self._open()

    # ------------------------------------------------------------ open / close

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError("", f"cannot create the folder of config database {self.path}: {e}") from e
        db: sqlite3.Connection | None = None
        try:
            db = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            check = db.execute("PRAGMA quick_check").fetchone()
            if check is None or check[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check[0] if check else 'no answer'}")
            self._db = db
            self._migrate()
            self._load()
        except sqlite3.Error as e:
            if db is not None:
                db.close()
            self._db = None
            raise ConfigError(
                "",
                f"config database {self.path} cannot be used ({e}). It has been left untouched: "
                "restore it from a backup, or move it aside to start with default settings.",
            ) from e

    def close(self) -> None:
        """Close the database; the registry must not be used afterwards."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> ConfigRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise ConfigError("", f"config database {self.path} is closed")
        return self._db

    def _tx(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return immediate(self.db)

    def _migrate(self) -> None:
        db = self.db
        db.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, name TEXT, applied_at TEXT)"
        )
        for number, (name, fn) in enumerate(MIGRATIONS, start=1):
            with self._tx():
                done = db.execute("SELECT 1 FROM schema_version WHERE version = ?", (number,)).fetchone()
                if done:
                    continue
                fn(db)
                db.execute("INSERT INTO schema_version VALUES (?, ?, ?)", (number, name, _now()))
                log.info("config database %s: applied migration %d (%s)", self.path, number, name)

    @property
    def schema_version(self) -> int:
        row = self.db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
        return int(row[0])

    def _load(self) -> None:
        db = self.db
        tables = {r[0]: r[1] for r in db.execute("SELECT plugin, table_name FROM plugin_tables")}
        known_tables = set(tables.values())
        # Tables of a database written by the Go version have no plugin_tables row.
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'config\\_%' "
                                  "ESCAPE '\\'"):
            if name not in known_tables:
                tables.setdefault(name[len("config_"):], name)
        core = {k: decode(v) for k, v in db.execute("SELECT key, value FROM config")}
        plugin_values: dict[str, dict[str, Any]] = {}
        for plugin, table in tables.items():
            rows = db.execute(f'SELECT key, value FROM "{table}"')
            plugin_values[plugin] = {k: decode(v) for k, v in rows}
        disabled = {
            r[0]: (str(r[1] or ""), str(r[2] or ""))
            for r in db.execute("SELECT name, disabled_at, disabled_by FROM disabled_plugins")
        }
        self._tables, self._core, self._plugin_values, self._disabled = tables, core, plugin_values, disabled

    def reload(self) -> None:
        """Re-read every value from disk (another process may have written); listeners hear what changed."""
        with self._lock:
            before = self._flat()
            try:
                self._load()
            except sqlite3.Error as e:
                raise ConfigError("", f"config database {self.path} cannot be read ({e})") from e
            after = self._flat()
        for key in sorted(before.keys() | after.keys()):
            if before.get(key, _MISSING) != after.get(key, _MISSING):
                self._notify(key, self.get(key))

    def _flat(self) -> dict[str, Any]:
        out = dict(self._core)
        for plugin, values in self._plugin_values.items():
            for k, v in values.items():
                out[f"{PLUGIN_PREFIX}{plugin}.{k}"] = v
        return out

    # ------------------------------------------------------------ keys

    @staticmethod
    def split_key(key: str) -> tuple[str | None, str]:
        """``plugin.<name>.<key>`` -> (name, key); any other key -> (None, key)."""
        if key.startswith(PLUGIN_PREFIX):
            rest = key[len(PLUGIN_PREFIX):]
            name, dot, sub = rest.partition(".")
            if not name or not dot or not sub:
                raise ConfigError(key, Msg("a plugin setting is written plugin.<plugin name>.<key>"))
            return name, sub
        return None, key

    @staticmethod
    def qualify(plugin: str | None, key: str) -> str:
        return f"{PLUGIN_PREFIX}{plugin}.{key}" if plugin is not None else key

    @staticmethod
    def _check_key(key: str) -> None:
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(str(key), Msg("a setting needs a non-empty name"))

    def _lookup_def(self, plugin: str | None, key: str) -> ConfigDef | None:
        if plugin is not None:
            return self._plugin_defs.get(plugin, {}).get(key)
        d = self._core_defs.get(key)
        if d is None and key.startswith(SOURCE_PREFIX):
            source, _, field = key[len(SOURCE_PREFIX):].partition(".")
            d = source_field_def(source, field)
        return d

    def _all_keys(self) -> builtins.list[str]:
        keys = set(self._core_defs) | set(self._core)
        for plugin, defs in self._plugin_defs.items():
            keys.update(self.qualify(plugin, k) for k in defs)
        for plugin, values in self._plugin_values.items():
            keys.update(self.qualify(plugin, k) for k in values)
        return sorted(keys)

    def unknown_key_error(self, key: str) -> ConfigError:
        """The error for an unknown key, suggesting the closest known one."""
        return self._unknown(key)

    def _unknown(self, key: str) -> ConfigError:
        if key.startswith(SOURCE_PREFIX):
            source, _, field = key[len(SOURCE_PREFIX):].partition(".")
            if not source or not field or "." in field:
                return ConfigError(key, Msg("an LLM source setting is written core.llm.sources.<name>.<field>"))
            close = difflib.get_close_matches(field, list(SOURCE_FIELDS), n=1)
            known = ", ".join(SOURCE_FIELDS)
            if close:
                return ConfigError(key, Msg('unknown LLM source field {field!r} (known: {known}); did you mean "{close}"?',
                                            field=field, known=known, close=f"{SOURCE_PREFIX}{source}.{close[0]}"))
            return ConfigError(key, Msg("unknown LLM source field {field!r} (known: {known})", field=field, known=known))
        close = difflib.get_close_matches(key, self._all_keys(), n=1, cutoff=0.6) if len(key) <= MAX_KEY else []
        if close:
            return ConfigError(_short(key), Msg('unknown setting; did you mean "{close}"?', close=close[0]))
        return ConfigError(_short(key), Msg("unknown setting; `homeagent config list` shows every setting"))

    # ------------------------------------------------------------ definitions

    def register_def(self, d: ConfigDef, plugin: str | None = None) -> None:
        """Record a setting's definition and store its default unless a value exists.

        With ``plugin`` the def belongs to that plugin (its key may be given bare or
        qualified); a ``plugin.<name>.<key>`` key without ``plugin`` works too.
        """
        self._check_key(d.key)
        key = d.key
        if plugin is None:
            plugin, key = self.split_key(key)
        else:
            self._check_plugin(plugin)
            key = key.removeprefix(f"{PLUGIN_PREFIX}{plugin}.")
        qkey = self.qualify(plugin, key)
        try:
            base_type(d.type)
            default = coerce(d, d.default) if d.default is not None else None
        except ValueError as e:
            raise ConfigError(qkey, f"invalid definition: {e}") from None
        stored = replace(d, key=qkey, options=list(d.options))
        with self._lock:
            if plugin is None:
                self._core_defs[key] = stored
            else:
                self._plugin_defs.setdefault(plugin, {})[key] = stored
            if default is not None:
                self._insert_default(plugin, key, default)

    def register_default(self, key: str, value: Any) -> None:
        """Store ``value`` for ``key`` unless it already has one (INSERT OR IGNORE)."""
        self._check_key(key)
        plugin, sub = self.split_key(key)
        with self._lock:
            self._insert_default(plugin, sub, value)

    def _insert_default(self, plugin: str | None, key: str, value: Any) -> None:
        values = self._values(plugin)
        if key in values:
            return
        table = self._table(plugin, create=True)
        try:
            cur = self.db.execute(f'INSERT OR IGNORE INTO "{table}" (key, value) VALUES (?, ?)', (key, encode(value)))
            if cur.rowcount:
                values[key] = value
            else:  # another process seeded it first
                row = self.db.execute(f'SELECT value FROM "{table}" WHERE key = ?', (key,)).fetchone()
                values[key] = decode(row[0]) if row else value
        except sqlite3.Error as e:
            raise ConfigError(self.qualify(plugin, key), f"cannot store default in {self.path}: {e}") from e

    def defs(self, prefix: str = "", plugin: str | None = None) -> builtins.list[ConfigDef]:
        """Definitions, keys qualified (``plugin.<name>.<key>`` for plugin defs), sorted by key.

        Without ``plugin``: every def whose qualified key starts with ``prefix``
        (including the fields of each LLM source that has a stored value).
        With ``plugin``: that plugin's defs whose own key starts with ``prefix``.
        """
        with self._lock:
            if plugin is not None:
                own = self._plugin_defs.get(plugin, {})
                return [d for k, d in sorted(own.items()) if k.startswith(prefix)]
            out = dict(self._core_defs)
            for source in self.sources():
                for field in SOURCE_FIELDS:
                    sd = source_field_def(source, field)
                    if sd is not None:
                        out.setdefault(sd.key, sd)
            for defs in self._plugin_defs.values():
                out.update({d.key: d for d in defs.values()})
        return [d for k, d in sorted(out.items()) if k.startswith(prefix)]

    def get_def(self, key: str) -> ConfigDef | None:
        """The def of a (qualified) key; LLM source fields get their field's def."""
        plugin, sub = self.split_key(key)
        return self._lookup_def(plugin, sub)

    # ------------------------------------------------------------ reading

    def _values(self, plugin: str | None) -> dict[str, Any]:
        if plugin is None:
            return self._core
        return self._plugin_values.setdefault(plugin, {})

    def _typed(self, d: ConfigDef | None, key: str, value: Any) -> Any:
        if d is None:
            return value
        try:
            return coerce_lenient(d, value)
        except ValueError as e:
            if key not in self._warned:
                self._warned.add(key)
                log.warning("config %s: stored value does not fit its type (%s); using the default", key,
                            "secret value" if d.is_secret else e)
            return d.default

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` typed per its def; unset -> the def's default, else ``default``.

        Durations come back as their string (use ``get_duration`` for seconds).
        """
        plugin, sub = self.split_key(key)
        return self._get(plugin, sub, default)

    def _get(self, plugin: str | None, key: str, default: Any) -> Any:
        d = self._lookup_def(plugin, key)
        values = self._core if plugin is None else self._plugin_values.get(plugin, {})
        if key in values:
            return self._typed(d, self.qualify(plugin, key), values[key])
        if d is not None and d.default is not None:
            return d.default
        return default

    def has(self, key: str) -> bool:
        """Whether ``key`` has a stored value."""
        plugin, sub = self.split_key(key)
        values = self._core if plugin is None else self._plugin_values.get(plugin, {})
        return sub in values

    def _required(self, key: str, default: Any) -> Any:
        value = self.get(key, None)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise ConfigError(key, "is not set")
            return default
        return value

    def get_int(self, key: str, default: int | None = None) -> int:
        value = self._required(key, default)
        try:
            return parse_int(value)
        except ValueError as e:
            raise ConfigError(key, message_of(e)) from None

    def get_float(self, key: str, default: float | None = None) -> float:
        value = self._required(key, default)
        try:
            return parse_float(value)
        except ValueError as e:
            raise ConfigError(key, message_of(e)) from None

    def get_bool(self, key: str, default: bool | None = None) -> bool:
        value = self._required(key, default)
        try:
            return parse_bool(value)
        except ValueError as e:
            raise ConfigError(key, message_of(e)) from None

    def get_str(self, key: str, default: str | None = None) -> str:
        value = self.get(key, default)
        if value is None:
            raise ConfigError(key, "is not set")
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return str(value)
        return json.dumps(value, ensure_ascii=False)

    def get_duration(self, key: str, default: float | str | None = None) -> float:
        """Seconds of a duration setting ("1h30m" -> 5400.0); a bare number is seconds."""
        value = self._required(key, default)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as e:
            raise ConfigError(key, message_of(e)) from None

    def list(self, prefix: str = "", mask_secrets: bool = False) -> dict[str, Any]:
        """Stored values (typed) of every key, qualified, that starts with ``prefix``, sorted."""
        with self._lock:
            flat = self._flat()
        out: dict[str, Any] = {}
        for key in sorted(flat):
            if key.startswith(prefix):
                plugin, sub = self.split_key(key)
                value = self._typed(self._lookup_def(plugin, sub), key, flat[key])
                out[key] = self.masked(key, value) if mask_secrets else value
        return out

    def dump(self, mask_secrets: bool = True) -> dict[str, Any]:
        """Everything: core keys and ``plugin.<name>.<key>``, including defaults not stored."""
        out = self.list("", mask_secrets=mask_secrets)
        for d in self.defs():
            if d.key not in out and d.default is not None and not d.key.startswith(SOURCE_PREFIX):
                out[d.key] = self.masked(d.key, d.default) if mask_secrets else d.default
        return dict(sorted(out.items()))

    # ------------------------------------------------------------ secrets

    def is_secret(self, key: str) -> bool:
        """Secret per its def; a key without a def is secret if its name says so (api_key, token, …)."""
        try:
            d = self.get_def(key)
        except ConfigError:
            d = None
        if d is not None:
            return d.is_secret
        return bool(_SECRET_NAME.search(key))

    def masked(self, key: str, value: Any) -> Any:
        """``value`` as it may be shown for ``key``: secrets become ``****abcd``; others unchanged."""
        return mask(value) if self.is_secret(key) else value

    # ------------------------------------------------------------ writing

    def set(self, key: str, value: Any) -> Any:
        """Validate and store ``value``; returns the value as stored. Raises ConfigError, writing nothing."""
        self._check_key(key)
        problem = key_problem(key)
        if problem:
            raise ConfigError(_short(key), problem)
        plugin, sub = self.split_key(key)
        return self._set(plugin, sub, value)

    def _validate(self, plugin: str | None, key: str, value: Any) -> Any:
        qkey = self.qualify(plugin, key)
        d = self._lookup_def(plugin, key)
        if d is None:
            if plugin is None:
                raise self._unknown(key)
            try:
                check_plain(value)
            except ValueError as e:
                raise ConfigError(qkey, message_of(e)) from None
            return value
        try:
            return coerce(d, value)
        except ValueError as e:
            raise ConfigError(qkey, message_of(e)) from None

    def _set(self, plugin: str | None, key: str, value: Any) -> Any:
        qkey = self.qualify(plugin, key)
        if plugin is not None:
            self._check_plugin(plugin)
        value = self._validate(plugin, key, value)
        with self._lock:
            # A write that changes nothing must not move the restore point.
            if plugin is None and key.startswith(CORE_LLM_PREFIX) and self._core.get(key, _MISSING) != value:
                self.snapshot_core_llm()
            table = self._table(plugin, create=True)
            try:
                self.db.execute(f'INSERT OR REPLACE INTO "{table}" (key, value) VALUES (?, ?)', (key, encode(value)))
            except sqlite3.Error as e:
                raise ConfigError(qkey, Msg("cannot write to {path}: {reason}", path=self.path, reason=e)) from e
            self._values(plugin)[key] = value
            self._warned.discard(qkey)
        if isinstance(value, dict | list):  # structured values carry secrets of their own (an MCP server's env)
            log.debug("config set %s (%s, %d items)", qkey, type(value).__name__, len(value))
        else:
            log.debug("config set %s = %r", qkey, self.masked(qkey, value))
        self._notify(qkey, value)
        return value

    def delete(self, key: str) -> bool:
        """Remove the stored value (the def's default applies again); True if there was one."""
        self._check_key(key)
        plugin, sub = self.split_key(key)
        with self._lock:
            values = self._core if plugin is None else self._plugin_values.get(plugin, {})
            table = self._tables.get(plugin) if plugin is not None else "config"
            if table is None:
                return False
            if plugin is None and sub.startswith(CORE_LLM_PREFIX) and sub in values:
                self.snapshot_core_llm()
            try:
                cur = self.db.execute(f'DELETE FROM "{table}" WHERE key = ?', (sub,))
            except sqlite3.Error as e:
                raise ConfigError(key, Msg("cannot write to {path}: {reason}", path=self.path, reason=e)) from e
            existed = values.pop(sub, _MISSING) is not _MISSING or cur.rowcount > 0
        if existed:
            log.debug("config delete %s", key)
            self._notify(key, self.get(key))
        return existed

    # ------------------------------------------------------------ plugins

    @staticmethod
    def _check_plugin(plugin: str) -> None:
        if not isinstance(plugin, str) or not plugin or "." in plugin:
            raise ConfigError(f"{PLUGIN_PREFIX}{plugin}", Msg("a plugin name must be non-empty and contain no '.'"))

    def _table(self, plugin: str | None, create: bool) -> str:
        if plugin is None:
            return "config"
        table = self._tables.get(plugin)
        if table is None:
            self._check_plugin(plugin)
            table = plugin_table_name(plugin)
            if create:
                try:
                    with self._tx() as db:
                        db.execute(f'CREATE TABLE IF NOT EXISTS "{table}" (key TEXT PRIMARY KEY, value TEXT)')
                        db.execute("INSERT OR IGNORE INTO plugin_tables (plugin, table_name) VALUES (?, ?)",
                                   (plugin, table))
                except sqlite3.Error as e:
                    raise ConfigError(f"{PLUGIN_PREFIX}{plugin}", f"cannot create its table in {self.path}: {e}") from e
                self._tables[plugin] = table
                self._plugin_values.setdefault(plugin, {})
        return table

    def get_plugin(self, plugin: str, key: str, default: Any = None) -> Any:
        return self._get(plugin, key, default)

    def set_plugin(self, plugin: str, key: str, value: Any) -> Any:
        self._check_key(key)
        return self._set(plugin, key, value)

    def delete_plugin_key(self, plugin: str, key: str) -> bool:
        return self.delete(self.qualify(plugin, key))

    def list_plugin(self, plugin: str, prefix: str = "") -> dict[str, Any]:
        """``plugin``'s stored values by its own (unqualified) keys."""
        qp = self.qualify(plugin, "")
        return {k[len(qp):]: v for k, v in self.list(qp + prefix).items()}

    def plugins(self) -> builtins.list[str]:
        """Plugins that have a settings table or registered defs."""
        with self._lock:
            return sorted(set(self._tables) | set(self._plugin_defs))

    # ------------------------------------------------------------ LLM sources

    def sources(self) -> builtins.list[str]:
        """Names of LLM sources with at least one stored field."""
        names = {k[len(SOURCE_PREFIX):].partition(".")[0] for k in self._core if k.startswith(SOURCE_PREFIX)}
        return sorted(n for n in names if n)

    def source(self, name: str) -> dict[str, Any]:
        """Every field of LLM source ``name`` (stored value or the field's default)."""
        return {f: self.get(f"{SOURCE_PREFIX}{name}.{f}") for f in SOURCE_FIELDS}

    # ------------------------------------------------------------ core.llm snapshot

    def snapshot_core_llm(self) -> Path:
        """Write every current ``core.llm.*`` value to ``core_llm_snapshot.json`` (atomically)."""
        with self._lock:
            data = {k: v for k, v in self._core.items() if k.startswith(CORE_LLM_PREFIX)}
        tmp = self.snapshot_path.with_name(f".{SNAPSHOT_NAME}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"taken_at": time.time(), "values": data}, f, ensure_ascii=False, sort_keys=True)
            os.replace(tmp, self.snapshot_path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise ConfigError("core.llm", f"cannot write the snapshot {self.snapshot_path}: {e}") from e
        return self.snapshot_path

    def restore_core_llm(self) -> int:
        """Put ``core.llm.*`` back as in the last snapshot; returns how many keys changed (0 if no snapshot)."""
        try:
            raw = json.loads(self.snapshot_path.read_text(encoding="utf-8"))
            saved = raw["values"]
            if not isinstance(saved, dict):
                raise TypeError("values is not an object")
        except FileNotFoundError:
            log.warning("no core.llm snapshot at %s; nothing restored", self.snapshot_path)
            return 0
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError("core.llm", f"snapshot {self.snapshot_path} is unreadable: {e}") from e
        changed: builtins.list[tuple[str, Any]] = []
        with self._lock:
            current = {k: v for k, v in self._core.items() if k.startswith(CORE_LLM_PREFIX)}
            try:
                with self._tx() as db:
                    for k in current.keys() - saved.keys():
                        db.execute("DELETE FROM config WHERE key = ?", (k,))
                    for k, v in saved.items():
                        if not k.startswith(CORE_LLM_PREFIX):
                            continue
                        if current.get(k, _MISSING) != v:
                            db.execute("INSERT OR REPLACE INTO config (key, value) VALUES (?, ?)", (k, encode(v)))
            except sqlite3.Error as e:
                raise ConfigError("core.llm", f"cannot restore into {self.path}: {e}") from e
            for k in current.keys() - saved.keys():
                del self._core[k]
                changed.append((k, None))
            for k, v in saved.items():
                if k.startswith(CORE_LLM_PREFIX) and current.get(k, _MISSING) != v:
                    self._core[k] = v
                    changed.append((k, v))
        log.info("restored %d core.llm setting(s) from %s", len(changed), self.snapshot_path)
        for k, _ in changed:
            self._notify(k, self.get(k))
        return len(changed)

    # ------------------------------------------------------------ listeners

    def on_change(self, callback: ChangeListener) -> Callable[[], None]:
        """Call ``callback(qualified_key, new_value)`` after every change; returns a function that unsubscribes."""
        self._listeners.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return remove

    def _notify(self, key: str, value: Any) -> None:
        for cb in builtins.list(self._listeners):
            try:
                cb(key, value)
            except Exception:
                log.exception("config change listener %r failed for %s", cb, key)

    # ------------------------------------------------------------ disabled plugins

    def disable_plugin(self, name: str, by: str = "") -> None:
        with self._lock:
            at = _now()
            try:
                self.db.execute("INSERT OR REPLACE INTO disabled_plugins (name, disabled_at, disabled_by) "
                                "VALUES (?, ?, ?)", (name, at, by))
            except sqlite3.Error as e:
                raise ConfigError(f"{PLUGIN_PREFIX}{name}", f"cannot write to {self.path}: {e}") from e
            self._disabled[name] = (at, by)

    def enable_plugin(self, name: str) -> bool:
        """Remove ``name`` from the disabled list; True if it was disabled."""
        with self._lock:
            try:
                self.db.execute("DELETE FROM disabled_plugins WHERE name = ?", (name,))
            except sqlite3.Error as e:
                raise ConfigError(f"{PLUGIN_PREFIX}{name}", f"cannot write to {self.path}: {e}") from e
            return self._disabled.pop(name, None) is not None

    def is_disabled(self, name: str) -> bool:
        return name in self._disabled

    def disabled_plugins(self) -> builtins.list[str]:
        return sorted(self._disabled)

    def disabled_info(self, name: str) -> tuple[str, str] | None:
        """(disabled_at ISO time, disabled_by) of a disabled plugin, else None."""
        return self._disabled.get(name)


_MISSING: Any = object()
