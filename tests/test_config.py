"""The config registry against real SQLite files: what a user of `homeagent config` would notice."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from homeagent.config import (
    SOURCE_FIELDS,
    ConfigDef,
    ConfigError,
    ConfigRegistry,
    PluginSettings,
    core_defs,
    format_duration,
    parse_duration,
    plugin_table_name,
    render_markdown_table,
)

DOCKER_PREFIXES = (
    "core.defaults.image",
    "core.defaults.snapshot.",
    "core.defaults.rollback.",
    "core.defaults.resource.",
)


def open_registry(data_dir: Path) -> ConfigRegistry:
    reg = ConfigRegistry(data_dir / "config.db")
    for d in core_defs(data_dir):
        reg.register_def(d)
    return reg


@pytest.fixture
def reg(tmp_path: Path):
    r = open_registry(tmp_path)
    yield r
    r.close()


def raw_row(db_path: Path, table: str, key: str) -> str | None:
    with sqlite3.connect(db_path) as db:
        row = db.execute(f'SELECT value FROM "{table}" WHERE key = ?', (key,)).fetchone()
    return row[0] if row else None


# ---------------------------------------------------------------- opening, seeding, persistence


def test_sqlite_pragmas_and_schema(reg: ConfigRegistry) -> None:
    assert reg.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert reg.db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert reg.db.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    tables = {r[0] for r in reg.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"config", "disabled_plugins", "schema_version"} <= tables
    assert reg.schema_version >= 1


def test_defaults_seeded_once_and_not_overwritten_on_reopen(tmp_path: Path) -> None:
    reg = open_registry(tmp_path)
    assert reg.get("core.agent.max_tool_turns") == 10
    assert raw_row(tmp_path / "config.db", "config", "core.agent.max_tool_turns") == "10"
    reg.set("core.agent.max_tool_turns", 25)
    reg.close()

    reg = open_registry(tmp_path)  # registers the defaults again, as every daemon start does
    assert reg.get("core.agent.max_tool_turns") == 25
    count = reg.db.execute("SELECT COUNT(*) FROM config WHERE key = 'core.agent.max_tool_turns'").fetchone()[0]
    assert count == 1
    versions = reg.db.execute("SELECT version FROM schema_version").fetchall()
    assert len(versions) == len({v for (v,) in versions})  # migrations not re-applied
    reg.close()


def test_values_persist_across_reopen(tmp_path: Path) -> None:
    reg = open_registry(tmp_path)
    reg.set("core.llm.temperature", "0.2")
    reg.set("plugin.timer.max_duration", "2h")
    reg.set("core.llm.sources.home.base_url", "http://127.0.0.1:11434/v1")
    reg.disable_plugin("qq", by="alice")
    reg.close()

    reg = ConfigRegistry(tmp_path / "config.db")  # no defs registered: raw stored values still there
    assert reg.get("core.llm.temperature") == 0.2
    assert reg.get("plugin.timer.max_duration") == "2h"
    assert reg.get("core.llm.sources.home.base_url") == "http://127.0.0.1:11434/v1"
    assert reg.is_disabled("qq") and reg.disabled_plugins() == ["qq"]
    assert reg.disabled_info("qq") is not None and reg.disabled_info("qq")[1] == "alice"  # type: ignore[index]
    assert reg.enable_plugin("qq") is True
    assert not reg.is_disabled("qq")
    reg.close()
    reg = ConfigRegistry(tmp_path / "config.db")
    assert reg.disabled_plugins() == []
    reg.close()


def test_core_defs_cover_the_original_keys_minus_docker(tmp_path: Path) -> None:
    defs = core_defs(tmp_path)
    keys = [d.key for d in defs]
    assert len(keys) == len(set(keys))
    assert not [k for k in keys if k.startswith(DOCKER_PREFIXES)]
    for k in (
        "webui.listen_addr",
        "core.daemon.data_dir",
        "core.daemon.heartbeat_interval",
        "core.daemon.check_interval",
        "core.defaults.llm_endpoints",
        "core.defaults.openclaw_enabled",
        "core.llm.provider",
        "core.llm.temperature",
        "core.llm.max_tokens",
        "core.plugin.dir",
        "core.memory.graph",
        "core.agent.merge_interval",
        "core.agent.onnx_model_path",
        "core.input_processing.image.ocr_prompt",
        "core.input_processing.audio.describe_prompt",
        "webui.allow_remote",
        "core.agent.stage_timeout",
        "core.agent.tool_timeout",
        "core.agent.context_top_k",
        "core.agent.persona_file",
        "core.log.max_bytes",
        "core.log.backups",
    ):
        assert k in keys, k
    by_key = {d.key: d for d in defs}
    assert by_key["webui.listen_addr"].default == "127.0.0.1:8780"
    assert by_key["core.llm.provider"].default == ""
    assert by_key["core.llm.api_key"].is_secret
    assert by_key["core.daemon.log_level"].options == ["debug", "info", "warn", "error"]
    assert by_key["core.memory.graph"].default == "memory/graph.db"  # relative: a copied data dir uses its own
    assert by_key["core.daemon.data_dir"].default == str(tmp_path)
    for d in defs:
        assert d.category in {"daemon", "llm", "agent", "memory", "paths", "input", "webui", "approvals", "sandbox"}, d.key
        assert d.display_name and d.description, d.key


def test_no_llm_source_is_seeded(reg: ConfigRegistry) -> None:
    assert reg.sources() == []
    assert reg.list("core.llm.sources.") == {}


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("core.agent.max_tool_turns", "ten", ["whole number"]),
        ("core.agent.max_tool_turns", 0, ["minimum", "1"]),
        ("core.agent.max_tool_turns", "101", ["maximum", "100"]),
        ("webui.allow_remote", "maybe", ["true", "false"]),
        ("core.agent.distill_interval", "30", ["unit", "30s"]),
        ("core.agent.distill_interval", "soon", ["duration", "1h30m"]),
        ("core.agent.distill_interval", "-5m", ["negative"]),
        ("core.daemon.log_level", "verbose", ["debug", "info", "warn", "error"]),
        ("core.llm.temperature", "hot", ["number"]),
        ("core.llm.temperature", 3, ["maximum"]),
        ("core.llm.sources.home.max_concurrent", "many", ["whole number"]),
        ("core.llm.sources.home.thinking_enabled", "perhaps", ["true"]),
    ],
)
def test_bad_values_are_refused_and_nothing_is_written(
    tmp_path: Path, reg: ConfigRegistry, key: str, value: Any, words: list[str]
) -> None:
    before = reg.get(key)
    row_before = raw_row(tmp_path / "config.db", "config", key)
    with pytest.raises(ConfigError) as info:
        reg.set(key, value)
    assert info.value.key == key
    assert str(info.value).startswith(key)
    for w in words:
        assert w in info.value.message, info.value.message
    assert reg.get(key) == before
    assert raw_row(tmp_path / "config.db", "config", key) == row_before
    assert not (tmp_path / "core_llm_snapshot.json").exists() or key.startswith("core.llm.")


def test_unknown_core_key_suggests_the_closest(reg: ConfigRegistry, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        reg.set("core.llm.modle", "gpt")
    assert 'did you mean "core.llm.model"' in str(info.value)
    with pytest.raises(ConfigError) as info:
        reg.set("core.agent.max_tool_turn", 3)
    assert "core.agent.max_tool_turns" in str(info.value)
    with pytest.raises(ConfigError) as info:
        reg.set("core.llm.sources.home.max_concurent", 3)
    assert "core.llm.sources.home.max_concurrent" in str(info.value)
    assert raw_row(tmp_path / "config.db", "config", "core.llm.modle") is None
    assert not reg.has("core.llm.sources.home.max_concurent")


def test_cli_strings_are_coerced_to_the_def_type(reg: ConfigRegistry) -> None:
    assert reg.set("core.agent.max_tool_turns", "30") == 30
    assert reg.get("core.agent.max_tool_turns") == 30 and isinstance(reg.get("core.agent.max_tool_turns"), int)
    for text, expected in (("true", True), ("0", False), ("yes", True), ("NO", False), ("1", True)):
        reg.set("webui.allow_remote", text)
        assert reg.get("webui.allow_remote") is expected
    assert reg.set("core.llm.temperature", "0.5") == 0.5
    assert reg.set("core.daemon.log_level", "WARN") == "warn"
    assert reg.set("core.agent.tool_timeout", "1h30m") == "1h30m"
    assert reg.get("core.agent.tool_timeout") == "1h30m"
    assert reg.get_duration("core.agent.tool_timeout") == 5400.0
    assert reg.set("core.agent.stage_timeout", 2.5) == "2.5s"
    assert reg.get_duration("core.agent.stage_timeout") == 2.5
    assert reg.set("core.llm.sources.home.priority", "5") == 5
    assert reg.get_int("core.llm.sources.home.priority") == 5


def test_typed_getters(reg: ConfigRegistry) -> None:
    assert reg.get_int("core.agent.max_context_size") == 30
    assert reg.get_float("core.llm.temperature") == 0.7
    assert reg.get_bool("core.defaults.openclaw_enabled") is True
    assert reg.get_str("core.daemon.log_level") == "info"
    assert reg.get_duration("core.daemon.heartbeat_interval") == 15.0
    assert reg.get_duration("core.agent.merge_interval") == 7200.0
    assert reg.get_int("core.llm.sources.nowhere.max_concurrent") == 8  # field default, not stored
    assert reg.get("plugin.nobody.thing", "fallback") == "fallback"
    assert reg.get_int("plugin.nobody.count", 4) == 4
    with pytest.raises(ConfigError, match="not set"):
        reg.get_int("plugin.nobody.count")


def test_delete_returns_to_the_default(reg: ConfigRegistry) -> None:
    reg.set("core.agent.max_tool_turns", 50)
    assert reg.delete("core.agent.max_tool_turns") is True
    assert reg.get("core.agent.max_tool_turns") == 10
    assert reg.delete("core.agent.max_tool_turns") is False
    assert reg.delete("plugin.ghost.key") is False


def test_value_row_that_is_not_json_reads_as_raw_text(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "config.db")
    db.execute("CREATE TABLE config (key TEXT PRIMARY KEY, value TEXT)")  # as the Go version left it
    db.execute("INSERT INTO config VALUES ('core.llm.model', 'deepseek-chat')")
    db.execute("INSERT INTO config VALUES ('core.agent.max_tool_turns', 'lots')")
    db.execute("CREATE TABLE config_timer (key TEXT PRIMARY KEY, value TEXT)")
    db.execute("INSERT INTO config_timer VALUES ('max_duration', '24h')")
    db.commit()
    db.close()
    reg = open_registry(tmp_path)
    assert reg.get("core.llm.model") == "deepseek-chat"
    assert reg.get("core.agent.max_tool_turns") == 10  # unusable stored value: the def's default
    assert reg.get("plugin.timer.max_duration") == "24h"
    assert "timer" in reg.plugins()
    reg.close()


# ---------------------------------------------------------------- plugins


def test_plugin_tables_and_qualified_keys(tmp_path: Path, reg: ConfigRegistry) -> None:
    reg.register_def(ConfigDef("max_duration", "24h", "duration", "Max duration"), plugin="timer")
    reg.register_def(ConfigDef("plugin.cmd.max_output_bytes", 32000, "int", min=1))
    assert reg.get("plugin.timer.max_duration") == "24h"
    assert reg.get_plugin("timer", "max_duration") == "24h"
    assert reg.get_duration("plugin.timer.max_duration") == 86400.0
    assert reg.get_plugin("cmd", "max_output_bytes") == 32000

    reg.set("plugin.timer.max_duration", "12h")
    assert reg.get_plugin("timer", "max_duration") == "12h"
    assert raw_row(tmp_path / "config.db", "config_timer", "max_duration") == '"12h"'
    with pytest.raises(ConfigError) as info:
        reg.set_plugin("cmd", "max_output_bytes", "-1")
    assert info.value.key == "plugin.cmd.max_output_bytes"

    reg.set_plugin("timer", "free_form", {"any": ["json", 1]})  # plugin keys without defs are allowed
    assert reg.get("plugin.timer.free_form") == {"any": ["json", 1]}
    assert reg.list_plugin("timer") == {"free_form": {"any": ["json", 1]}, "max_duration": "12h"}
    assert reg.list("plugin.timer.") == {
        "plugin.timer.free_form": {"any": ["json", 1]},
        "plugin.timer.max_duration": "12h",
    }
    assert "plugin.timer.max_duration" not in reg.list("core.")
    assert reg.plugins() == ["cmd", "timer"]
    assert [d.key for d in reg.defs(plugin="timer")] == ["plugin.timer.max_duration"]
    assert reg.get_def("plugin.timer.max_duration") is not None
    with pytest.raises(ConfigError):
        reg.get("plugin.timer")  # no key part


def test_hostile_plugin_name_is_sanitized(tmp_path: Path, reg: ConfigRegistry) -> None:
    evil = 'x"; DROP TABLE config; --'
    reg.set_plugin(evil, "k", "v")
    reg.set_plugin("a b", "k", 1)
    reg.set_plugin("a_b", "k", 2)
    reg.set_plugin("Timer", "k", 3)
    reg.set_plugin("timer", "k", 4)
    names = {r[0] for r in reg.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "config" in names
    for plugin in (evil, "a b", "a_b", "Timer", "timer"):
        table = plugin_table_name(plugin)
        assert table in names
        assert all(c.isalnum() or c == "_" for c in table)
    assert len({plugin_table_name(p) for p in ("a b", "a_b", "Timer", "timer")}) == 4
    assert reg.get_plugin(evil, "k") == "v"
    assert (reg.get_plugin("a b", "k"), reg.get_plugin("a_b", "k")) == (1, 2)
    assert reg.get(f"plugin.{evil}.k") == "v"
    assert reg.get("core.agent.max_tool_turns") == 10  # config table intact
    reg.close()
    reopened = ConfigRegistry(tmp_path / "config.db")
    assert reopened.get_plugin(evil, "k") == "v"
    assert reopened.get_plugin("Timer", "k") == 3 and reopened.get_plugin("timer", "k") == 4
    assert evil in reopened.plugins()
    reopened.close()
    with pytest.raises(ConfigError):
        PluginSettings(reopened, "has.dot", tmp_path)


def test_plugin_settings_view(tmp_path: Path, reg: ConfigRegistry) -> None:
    s = PluginSettings(reg, "qq", tmp_path / "plugins" / "qq" / "data")
    s.register_def(ConfigDef("napcat_url", "ws://127.0.0.1:3001", "string", "NapCat URL"))
    s.register_def(ConfigDef("token", "", "string", "Token", secret=True))
    assert [d.key for d in s.defs()] == ["napcat_url", "token"]
    assert reg.get("plugin.qq.napcat_url") == "ws://127.0.0.1:3001"
    s.set("token", "abcdefghijkl1234")
    assert s.get("token") == "abcdefghijkl1234"
    assert s.list() == {"napcat_url": "ws://127.0.0.1:3001", "token": "abcdefghijkl1234"}
    assert s.get_core("core.agent.max_tool_turns") == 10
    s.set_core("core.agent.max_tool_turns", "12")
    assert reg.get("core.agent.max_tool_turns") == 12
    assert "core.agent.max_tool_turns" in s.list_core("core.agent.")
    assert not any(k.startswith("plugin.") for k in s.list_core())
    with pytest.raises(ConfigError):
        s.get_core("plugin.qq.token")
    other = PluginSettings(reg, "webui", tmp_path)
    assert other.get_plugin("qq", "napcat_url") == "ws://127.0.0.1:3001"
    other.set_plugin("qq", "napcat_url", "ws://10.0.0.2:3001")
    assert s.get("napcat_url") == "ws://10.0.0.2:3001"
    assert other.list_plugin("qq", "nap") == {"napcat_url": "ws://10.0.0.2:3001"}
    assert s.dump()["plugin.qq.token"] == "****1234"
    assert "qq" in s.plugins()
    assert s.data_dir().is_dir()
    assert s.delete("token") is True and s.get("token") == ""


# ---------------------------------------------------------------- secrets


def test_secrets_are_masked_in_dump(reg: ConfigRegistry) -> None:
    reg.set("core.llm.api_key", "sk-0123456789abcd")
    reg.set("core.llm.sources.home.api_key", "sk-zzzzzzzzzzzz9876")
    reg.set_plugin("webui", "password", "hunter2")  # no def: the name marks it secret
    dump = reg.dump()
    assert dump["core.llm.api_key"] == "****abcd"
    assert dump["core.llm.sources.home.api_key"] == "****9876"
    assert dump["plugin.webui.password"] == "****"
    assert dump["core.agent.max_tool_turns"] == 10
    assert "sk-0123456789abcd" not in json.dumps(dump)
    assert reg.dump(mask_secrets=False)["core.llm.api_key"] == "sk-0123456789abcd"
    assert reg.list("core.llm.", mask_secrets=True)["core.llm.api_key"] == "****abcd"
    assert reg.is_secret("core.llm.api_key") and reg.is_secret("core.llm.sources.x.api_key")
    assert not reg.is_secret("core.llm.model")
    assert reg.masked("core.llm.api_key", "") == ""
    assert reg.masked("core.llm.model", "gpt-4o") == "gpt-4o"
    defs = {d.key: d for d in reg.defs("core.llm.sources.")}
    assert defs["core.llm.sources.home.api_key"].is_secret
    assert set(SOURCE_FIELDS) == {k.rsplit(".", 1)[1] for k in defs}


def test_secret_values_are_not_logged_or_echoed(reg: ConfigRegistry, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="homeagent.config")
    reg.set("core.llm.api_key", "sk-SECRETSECRET1234")
    with pytest.raises(ConfigError) as info:
        reg.set("core.llm.api_key", ["sk-SECRETSECRET1234"])
    assert "SECRET" not in str(info.value)
    assert "SECRET" not in caplog.text


# ---------------------------------------------------------------- core.llm snapshot


def test_core_llm_snapshot_and_restore(tmp_path: Path, reg: ConfigRegistry) -> None:
    reg.set("core.llm.model", "good-model")
    reg.set("core.llm.base_url", "https://good.example/v1")
    snapshot = tmp_path / "core_llm_snapshot.json"
    assert snapshot.exists()
    assert snapshot.stat().st_mode & 0o077 == 0
    saved = json.loads(snapshot.read_text())["values"]
    assert saved["core.llm.model"] == "good-model"  # taken before the base_url write
    assert saved["core.llm.base_url"] == ""

    reg.snapshot_core_llm()  # known-good baseline
    reg.set("core.llm.model", "broken-model")
    reg.snapshot_core_llm()
    reg.set("core.llm.sources.extra.base_url", "http://bad")
    heard: list[tuple[str, Any]] = []
    reg.on_change(lambda k, v: heard.append((k, v)))
    assert reg.restore_core_llm() == 1  # the new source's key is removed again
    assert reg.get("core.llm.model") == "broken-model"
    assert not reg.has("core.llm.sources.extra.base_url")
    assert heard == [("core.llm.sources.extra.base_url", "")]
    reg.close()
    again = ConfigRegistry(tmp_path / "config.db")
    assert not again.has("core.llm.sources.extra.base_url")
    again.close()


def test_restore_without_snapshot_changes_nothing(reg: ConfigRegistry) -> None:
    assert reg.restore_core_llm() == 0
    assert reg.get("core.llm.temperature") == 0.7


def test_non_llm_writes_take_no_snapshot(tmp_path: Path, reg: ConfigRegistry) -> None:
    reg.set("core.agent.max_tool_turns", 3)
    reg.set_plugin("timer", "x", 1)
    assert not (tmp_path / "core_llm_snapshot.json").exists()


# ---------------------------------------------------------------- listeners


def test_listener_undo_and_exception_isolation(reg: ConfigRegistry, caplog: pytest.LogCaptureFixture) -> None:
    heard: list[tuple[str, Any]] = []

    def broken(key: str, value: Any) -> None:
        raise RuntimeError("listener bug")

    undo_broken = reg.on_change(broken)
    undo = reg.on_change(lambda k, v: heard.append((k, v)))
    reg.set("core.agent.max_tool_turns", "7")
    reg.set("plugin.timer.max_duration", "1h")
    assert heard == [("core.agent.max_tool_turns", 7), ("plugin.timer.max_duration", "1h")]
    assert reg.get("core.agent.max_tool_turns") == 7  # the broken listener did not stop the write
    assert "listener bug" in caplog.text
    reg.delete("core.agent.max_tool_turns")
    assert heard[-1] == ("core.agent.max_tool_turns", 10)
    undo()
    undo()  # idempotent
    undo_broken()
    reg.set("core.agent.max_tool_turns", 8)
    assert len(heard) == 3


# ---------------------------------------------------------------- several processes


def test_second_instance_writes_first_sees_after_reload(tmp_path: Path) -> None:
    first = open_registry(tmp_path)
    second = open_registry(tmp_path)
    heard: list[tuple[str, Any]] = []
    first.on_change(lambda k, v: heard.append((k, v)))
    second.set("core.agent.max_tool_turns", 42)
    second.set_plugin("newplugin", "k", "v")
    assert first.get("core.agent.max_tool_turns") == 10  # cached until reload
    first.reload()
    assert first.get("core.agent.max_tool_turns") == 42
    assert first.get_plugin("newplugin", "k") == "v"
    assert ("core.agent.max_tool_turns", 42) in heard
    first.close()
    second.close()


def test_a_separate_process_writing(tmp_path: Path) -> None:
    reg = open_registry(tmp_path)
    code = (
        "import sys; from pathlib import Path; from homeagent.config import ConfigRegistry, core_defs\n"
        "r = ConfigRegistry(Path(sys.argv[1]) / 'config.db')\n"
        "[r.register_def(d) for d in core_defs(Path(sys.argv[1]))]\n"
        "r.set('core.daemon.log_level', 'debug'); r.set('plugin.timer.max_duration', '3h'); r.close()\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=60)
    reg.reload()
    assert reg.get("core.daemon.log_level") == "debug"
    assert reg.get("plugin.timer.max_duration") == "3h"
    reg.close()


# ---------------------------------------------------------------- damaged files


def test_corrupt_database_raises_naming_the_file_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    junk = b"this is not a database, but it is someone's data\n" * 200
    path.write_bytes(junk)
    with pytest.raises(ConfigError) as info:
        ConfigRegistry(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == junk


def test_damaged_database_pages_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    reg = open_registry(tmp_path)
    for i in range(300):
        reg.set_plugin("bulk", f"k{i}", "x" * 200)
    reg.close()
    data = bytearray(path.read_bytes())
    for off in range(4096 * 2, len(data), 4096):  # smash every page header after the first two
        data[off : off + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as info:
        ConfigRegistry(path)
    assert str(path) in str(info.value)


def test_unusable_path_is_reported(tmp_path: Path) -> None:
    (tmp_path / "config.db").mkdir()
    with pytest.raises(ConfigError, match=r"config\.db"):
        ConfigRegistry(tmp_path / "config.db")


# ---------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("10m", 600),
        ("1h30m", 5400),
        ("250ms", 0.25),
        ("1.5h", 5400),
        ("2d", 172800),
        ("0", 0),
        (" 1h 5s ", 3605),
        ("100us", 0.0001),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "m", "1x", "1h30", "-1s", "h1", "1..5s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**7))
def test_format_duration_round_trips(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


def test_json_and_select_defs(reg: ConfigRegistry) -> None:
    reg.register_def(ConfigDef("servers", [], "json", "Servers"), plugin="mcp")
    reg.register_def(ConfigDef("mode", "a", "select", "Mode", options=["a", "b"]), plugin="mcp")
    reg.set("plugin.mcp.servers", '[{"name": "fs"}]')
    assert reg.get("plugin.mcp.servers") == [{"name": "fs"}]
    with pytest.raises(ConfigError, match="JSON"):
        reg.set("plugin.mcp.servers", "[{oops")
    with pytest.raises(ConfigError, match="a, b"):
        reg.set("plugin.mcp.mode", "c")
    assert reg.get("plugin.mcp.servers") == [{"name": "fs"}]
    with pytest.raises(ConfigError, match="invalid definition"):
        reg.register_def(ConfigDef("bad", "x", "int"), plugin="mcp")


def test_reads_and_writes_are_fast(reg: ConfigRegistry) -> None:
    start = time.perf_counter()
    for _ in range(2000):
        reg.get("core.agent.max_tool_turns")
    read = (time.perf_counter() - start) / 2000
    start = time.perf_counter()
    for i in range(200):
        reg.set("core.agent.max_context_size", 20 + i % 5)
    write = (time.perf_counter() - start) / 200
    assert read < 1e-4 and write < 2e-3, (read, write)


def test_docs_list_every_core_key(tmp_path: Path) -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
    text = doc.read_text(encoding="utf-8")
    table = render_markdown_table(core_defs(tmp_path), (str(tmp_path), "<data>"))
    assert table in text, "docs/configuration.md is out of date: paste render_markdown_table's output"


def test_a_write_that_changes_nothing_keeps_the_restore_point(reg: ConfigRegistry) -> None:
    reg.set("core.llm.model", "good")
    reg.set("core.llm.model", "broken")  # snapshot holds "good"
    reg.set("core.llm.model", "broken")  # same value again: snapshot untouched
    reg.delete("core.llm.sources.none.model")  # nothing to delete: snapshot untouched
    assert reg.restore_core_llm() == 1
    assert reg.get("core.llm.model") == "good"
