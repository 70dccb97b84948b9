"""Path settings are relative to the data directory, so a copied or moved data dir uses its own files.

Old data directories (config schema 1) stored absolute defaults; migration 2
rewrites the ones inside their data directory. The files here are real SQLite
databases written the way version 1 wrote them.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from homeagent.config import ConfigRegistry, core_defs
from homeagent.config.defaults import DATA_PATH_KEYS
from homeagent.paths import DataPaths

OLD_DEFAULTS = {
    "core.plugin.dir": "plugins",
    "core.memory.graph": "memory/graph.db",
    "core.memory.text": "memory/text",
    "core.memory.documents": "memory/documents",
    "core.knowledge.path": "knowledge",
    "core.log.path": "log",
}


def write_v1_config(data_dir: Path, extra: dict[str, str] | None = None) -> None:
    """config.db as schema 1 left it: every path absolute under ``data_dir``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(data_dir / "config.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT, applied_at TEXT)")
    db.execute("CREATE TABLE config (key TEXT PRIMARY KEY, value TEXT)")
    db.execute("CREATE TABLE disabled_plugins (name TEXT PRIMARY KEY, disabled_at TEXT, disabled_by TEXT)")
    db.execute("CREATE TABLE plugin_tables (plugin TEXT PRIMARY KEY, table_name TEXT NOT NULL UNIQUE)")
    db.execute("INSERT INTO schema_version VALUES (1, 'initial', '2026-01-01T00:00:00+00:00')")
    values = {"core.daemon.data_dir": str(data_dir), **{k: str(data_dir / v) for k, v in OLD_DEFAULTS.items()}}
    for key, value in {**values, **(extra or {})}.items():
        db.execute("INSERT INTO config VALUES (?, ?)", (key, json.dumps(value)))
    db.close()


def stored(config_db: Path, key: str) -> object:
    with sqlite3.connect(config_db) as db:
        row = db.execute("SELECT value FROM config WHERE key = ?", (key,)).fetchone()
    return json.loads(row[0]) if row else None


def test_a_fresh_data_dir_stores_its_paths_relative(tmp_path: Path) -> None:
    reg = ConfigRegistry(tmp_path / "config.db")
    for d in core_defs(tmp_path):
        reg.register_def(d)
    reg.close()
    for key, rel in OLD_DEFAULTS.items():
        assert stored(tmp_path / "config.db", key) == rel, key


def test_a_copied_old_data_dir_is_migrated_to_its_own_files_and_the_original_is_untouched(tmp_path: Path) -> None:
    original = tmp_path / "orig"
    elsewhere = tmp_path / "outside" / "graph.db"
    write_v1_config(original, {
        "core.memory.graph": str(elsewhere),  # a user pointed the graph outside: that stays
        "core.agent.persona_file": str(original / "persona.md"),  # not a data-dir path setting: left alone
    })
    before = (original / "config.db").read_bytes()
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)

    reg = ConfigRegistry(copy / "config.db")
    for d in core_defs(copy):
        reg.register_def(d)
    paths = DataPaths(copy)
    assert reg.schema_version == 2
    assert reg.get("core.knowledge.path") == "knowledge"
    assert paths.resolve(reg.get_str("core.knowledge.path"), paths.knowledge) == copy / "knowledge"
    assert paths.resolve(reg.get_str("core.memory.text"), Path("/unused")) == copy / "memory" / "text"
    assert paths.resolve(reg.get_str("core.log.path"), Path("/unused")) == copy / "log"
    assert paths.resolve(reg.get_str("core.plugin.dir"), Path("/unused")) == copy / "plugins"
    assert reg.get("core.memory.graph") == str(elsewhere)
    assert paths.resolve(reg.get_str("core.memory.graph"), paths.memory / "graph.db") == elsewhere
    assert reg.get("core.agent.persona_file") == str(original / "persona.md")
    reg.close()
    assert (original / "config.db").read_bytes() == before


def test_a_moved_data_dir_is_migrated_although_the_recorded_one_is_gone(tmp_path: Path) -> None:
    write_v1_config(tmp_path / "old")
    (tmp_path / "old").rename(tmp_path / "new")
    reg = ConfigRegistry(tmp_path / "new" / "config.db")
    assert {k: reg.get(k) for k in DATA_PATH_KEYS} == OLD_DEFAULTS
    reg.close()


def test_a_config_db_without_a_recorded_data_dir_uses_its_own_folder(tmp_path: Path) -> None:
    # the Go version wrote no core.daemon.data_dir; paths inside the folder of config.db still become relative
    write_v1_config(tmp_path / "d")
    with sqlite3.connect(tmp_path / "d" / "config.db") as db:
        db.execute("DELETE FROM config WHERE key = 'core.daemon.data_dir'")
    reg = ConfigRegistry(tmp_path / "d" / "config.db")
    assert reg.get("core.memory.graph") == "memory/graph.db"
    reg.close()


def test_relative_and_home_paths_resolve_and_absolute_ones_stay(tmp_path: Path) -> None:
    paths = DataPaths(tmp_path / "d")
    default = tmp_path / "default"
    assert paths.resolve("", default) == default
    assert paths.resolve("  ", default) == default
    assert paths.resolve("logs/daemon", default) == tmp_path / "d" / "logs" / "daemon"
    assert paths.resolve("/srv/graph.db", default) == Path("/srv/graph.db")
    assert paths.resolve("~/notes", default) == Path.home() / "notes"
