"""The cfgmgr plugin: reading with secrets masked, validated writes, protected keys, all-or-nothing batches."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from homeagent.config import core_defs
from homeagent.plugins.services import PluginServices
from homeagent.sdk.types import ConfigDef
from tests.fakes.builtins_host import attached, llm_daemon, run_tool, started, tool_messages, tool_value
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.plugins_host import make_services

SECRET = "tok-very-secret-value-9876"


@pytest.fixture
async def cfg(tmp_path: Path) -> AsyncIterator[PluginServices]:
    services = make_services(tmp_path / "data")
    for definition in core_defs(tmp_path / "data"):
        services.config.register_def(definition)
    services.config.register_def(ConfigDef(key="max_duration", default="24h", type="duration", min=1), plugin="timer")
    services.config.register_def(ConfigDef(key="mode", default="fast", type="select", options=["fast", "slow"]),
                                 plugin="demo")
    services.config.register_def(ConfigDef(key="token", default="", type="password"), plugin="demo")
    services.config.set("plugin.demo.token", SECRET)
    async with started(services, "cfgmgr"):
        yield services


def _err(result: object) -> str:
    value = getattr(result, "result", {})
    assert getattr(result, "success", True) is False, value
    return str(value["content"])


async def test_reads_mask_secrets_everywhere(cfg: PluginServices) -> None:
    got = await tool_value(cfg, "config_get", {"scope": "plugin", "key": "demo.token"})
    assert got["value"] == "****9876" and got["def"]["secret"] is True
    dumped = json.dumps([
        got,
        await tool_value(cfg, "config_dump", {}),
        await tool_value(cfg, "config_list_keys", {"scope": "plugin", "prefix": "demo"}),
        await tool_value(cfg, "config_get_defs", {"scope": "plugin", "prefix": "demo."}),
    ])
    assert SECRET not in dumped
    turns = await tool_value(cfg, "config_get", {"scope": "core", "key": "agent.max_tool_turns"})
    assert turns["key"] == "core.agent.max_tool_turns" and turns["value"] == 10 and turns["def"]["type"] == "int"
    keys = await tool_value(cfg, "config_list_keys", {"scope": "core", "prefix": "core.agent."})
    assert "core.agent.max_tool_turns" in keys["values"] and not any(k.startswith("plugin.") for k in keys["values"])
    defs = await tool_value(cfg, "config_get_defs", {"scope": "plugin", "prefix": "demo"})
    assert {d["key"] for d in defs["defs"]} == {"plugin.demo.mode", "plugin.demo.token"}
    plugins = await tool_value(cfg, "config_list_plugins", {})
    assert {"demo", "timer", "cfgmgr"} <= {p["name"] for p in plugins["plugins"]}


async def test_writes_are_validated_and_nothing_bad_is_stored(cfg: PluginServices) -> None:
    done = await tool_value(cfg, "config_set", {"scope": "core", "key": "core.agent.max_tool_turns", "value": "12"})
    assert done["value"] == 12 and done["previous"] == 10
    assert cfg.config.get("core.agent.max_tool_turns") == 12
    assert "whole number" in _err(await run_tool(cfg, "config_set", {"scope": "core", "key": "core.agent.max_tool_turns",
                                                                      "value": "lots"}))
    assert "did you mean" in _err(await run_tool(cfg, "config_set", {"scope": "core", "key": "core.agent.max_tool_turn",
                                                                      "value": 3}))
    assert "not one of" in _err(await run_tool(cfg, "config_set", {"scope": "plugin", "key": "demo.mode",
                                                                     "value": "turbo"}))
    assert "duration" in _err(await run_tool(cfg, "config_set", {"scope": "plugin", "key": "timer.max_duration",
                                                                  "value": "soon"}))
    assert "unknown setting" in _err(await run_tool(cfg, "config_set", {"scope": "plugin", "key": "ghost.key",
                                                                          "value": 1}))
    assert "scope plugin" in _err(await run_tool(cfg, "config_get", {"scope": "core", "key": "plugin.demo.mode"}))
    assert "<plugin>.<key>" in _err(await run_tool(cfg, "config_get", {"scope": "plugin", "key": "nodot"}))
    assert cfg.config.get("core.agent.max_tool_turns") == 12 and cfg.config.get("plugin.demo.mode") == "fast"
    ok = await tool_value(cfg, "config_set", {"scope": "plugin", "key": "plugin.timer.max_duration", "value": "12h"})
    assert ok["value"] == "12h"
    secret = await tool_value(cfg, "config_set", {"scope": "plugin", "key": "demo.token", "value": "new-secret-abcd1234"})
    assert secret["value"] == "****1234" and secret["previous"] == "****9876"


async def test_protected_keys_cannot_be_changed_by_the_model(cfg: PluginServices) -> None:
    # owner-only defs (the full table is in test_safety_owner_only.py)
    for scope, key in (("core", "core.agent.workdir"), ("core", "agent.workdir"),
                       ("plugin", "cfgmgr.protected_keys"), ("plugin", "plugin.cfgmgr.protected_keys")):
        assert "owner-only" in _err(await run_tool(cfg, "config_set", {"scope": scope, "key": key, "value": "/"}))
    # the owner's extra patterns
    cfg.config.set("plugin.cfgmgr.protected_keys", "core.agent.max_children, plugin.demo.*")
    for scope, key in (("core", "core.agent.max_children"), ("plugin", "demo.mode")):
        assert "protected" in _err(await run_tool(cfg, "config_set", {"scope": scope, "key": key, "value": "slow"}))
    # a stored key whose plugin is not running: nothing says it is safe
    cfg.config.set("plugin.ghost.command", "true")
    assert "no definition loaded" in _err(await run_tool(cfg, "config_set", {"scope": "plugin", "key": "ghost.command",
                                                                              "value": "sh"}))
    batch = await run_tool(cfg, "config_batch_set", {"items": [
        {"scope": "core", "key": "core.agent.tool_timeout", "value": "60s"},
        {"scope": "plugin", "key": "cfgmgr.protected_keys", "value": ""}]})
    assert "owner-only" in _err(batch) and cfg.config.get("core.agent.tool_timeout") == "120s"
    assert cfg.config.get("plugin.ghost.command") == "true"
    cfg.config.set("core.agent.workdir", "/srv/agent")  # the user still can, outside the tool
    assert cfg.config.get("core.agent.workdir") == "/srv/agent"
    shown = await tool_value(cfg, "config_get", {"scope": "core", "key": "core.agent.workdir"})
    assert shown["def"]["owner_only"] is True


async def test_batch_is_all_or_nothing(cfg: PluginServices) -> None:
    bad = await run_tool(cfg, "config_batch_set", {"items": [
        {"scope": "core", "key": "core.agent.max_tool_turns", "value": 20},
        {"scope": "plugin", "key": "demo.mode", "value": "turbo"},
        {"scope": "core", "key": "core.nope", "value": 1},
    ]})
    message = _err(bad)
    assert message.startswith("nothing was written") and "item 2" in message and "item 3" in message
    assert "item 1" not in message
    assert cfg.config.get("core.agent.max_tool_turns") == 10 and cfg.config.get("plugin.demo.mode") == "fast"
    twice = await run_tool(cfg, "config_batch_set", {"items": [
        {"scope": "core", "key": "core.agent.max_tool_turns", "value": 20},
        {"scope": "core", "key": "agent.max_tool_turns", "value": 21}]})
    assert "more than once" in _err(twice)
    good = await tool_value(cfg, "config_batch_set", {"items": [
        {"scope": "core", "key": "core.agent.max_tool_turns", "value": 20},
        {"scope": "plugin", "key": "demo.mode", "value": "SLOW"},
        {"scope": "plugin", "key": "demo.token", "value": "another-secret-wxyz"},
    ]})
    assert good["count"] == 3 and good["values"]["plugin.demo.mode"] == "slow"
    assert good["values"]["plugin.demo.token"] == "****wxyz"
    assert cfg.config.get("core.agent.max_tool_turns") == 20 and cfg.config.get("plugin.demo.mode") == "slow"


async def test_cfgmgr_through_the_agent_loop(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d:
        d.config.register_def(ConfigDef(key="token", default="", type="password"), plugin="demo")
        d.config.set("plugin.demo.token", SECRET)
        async with attached(d, "cfgmgr"):
            fake.script(
                Turn.tool_calls([("config_get", {"scope": "plugin", "key": "demo.token"}),
                                 ("config_set", {"scope": "core", "key": "core.agent.max_tool_turns", "value": 7})]),
                Turn.text("Done."),
            )
            result = await d.io.inject_sync("test", "test", "show the token and allow 7 tool rounds", timeout=30)
        assert result.ok and result.text == "Done."
        messages = tool_messages(fake.requests[1].body)
        assert json.loads(messages[0]["content"])["value"] == "****9876"
        assert SECRET not in json.dumps(fake.requests[1].body)
        assert d.config.get("core.agent.max_tool_turns") == 7
