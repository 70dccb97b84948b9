"""Secrets stay home: no child the daemon starts (command, terminal, plugin, MCP server) sees its credentials."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from homeagent.childenv import scrubbed_env
from homeagent.plugins.manifest import Manifest, ManifestError
from tests.fakes.builtins_host import started, tool_value
from tests.fakes.plugins_host import make_services
from tests.fakes.proc_host import proc_host

SECRETS = {
    "HOMEAGENT_LLM_API_KEY": "sk-daemon-key",
    "OPENAI_API_KEY": "sk-openai-key",
    "GITHUB_TOKEN": "ghp-token",
    "DB_PASSWORD": "hunter2",
    "AWS_SESSION_TOKEN": "aws-session",
}
PLAIN = {"SAFETY_PLAIN_VAR": "plain-value", "HOMEAGENT_PLUGIN_LOG_LEVEL": "info"}


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**SECRETS, **PLAIN}.items():
        monkeypatch.setenv(name, value)


def test_the_one_helper_strips_credentials_and_keeps_what_is_named() -> None:
    env = {**SECRETS, **PLAIN, "PATH": "/usr/bin"}
    assert scrubbed_env(env) == {"SAFETY_PLAIN_VAR": "plain-value", "PATH": "/usr/bin"}
    kept = scrubbed_env(env, keep=["OPENAI_API_KEY"], keep_prefixes=("HOMEAGENT_PLUGIN_",))
    assert kept == {"OPENAI_API_KEY": "sk-openai-key", "PATH": "/usr/bin", **PLAIN}


def test_a_manifest_declares_the_variables_its_plugin_needs() -> None:
    manifest = Manifest.from_dict({"name": "p", "version": "1.0.0", "entry": "main.py", "env": ["OPENAI_API_KEY"]})
    assert manifest.env == ("OPENAI_API_KEY",) and manifest.to_dict()["env"] == ["OPENAI_API_KEY"]
    with pytest.raises(ManifestError) as bad:
        Manifest.from_dict({"name": "p", "version": "1.0.0", "entry": "main.py",
                            "env": ["HOMEAGENT_LLM_API_KEY", "NOT A NAME", 3]})
    assert "must be a list of strings" in str(bad.value)
    with pytest.raises(ManifestError) as bad:
        Manifest.from_dict({"name": "p", "version": "1.0.0", "entry": "main.py",
                            "env": ["HOMEAGENT_LLM_API_KEY", "NOT A NAME"]})
    assert "daemon's own" in str(bad.value) and "not an environment variable name" in str(bad.value)


async def test_a_subprocess_plugin_gets_only_the_credentials_its_manifest_declares(
    data_dir: Path, secret_env: None
) -> None:
    async with proc_host(data_dir) as host:
        host.add("pyecho", "envwant", env=["OPENAI_API_KEY"])
        host.add("pyecho", "envnone")
        await host.registry.load_all()
        assert host.registry.info("envwant")["env"] == ["OPENAI_API_KEY"]  # what `homeagent plugin info` shows
        wants = set((await host.call("envwant_env")).result["names"])
        plain = set((await host.call("envnone_env")).result["names"])
    assert wants & SECRETS.keys() == {"OPENAI_API_KEY"}
    assert plain & SECRETS.keys() == set()
    assert {"SAFETY_PLAIN_VAR", "HOMEAGENT_PLUGIN_LOG_LEVEL", "HOMEAGENT_PLUGIN_NAME"} <= plain


async def test_a_terminal_shows_no_credentials(tmp_path: Path, secret_env: None) -> None:
    services = make_services(tmp_path / "data")
    async with started(services, "agentcli"):
        tid = (await tool_value(services, "terminal_create", {"command": "env"}))["id"]
        seen = ""
        deadline = time.monotonic() + 5
        while "SAFETY_PLAIN_VAR" not in seen and time.monotonic() < deadline:
            seen += (await tool_value(services, "terminal_read", {"id": tid, "wait": 0.5}))["output"]
    assert "SAFETY_PLAIN_VAR=plain-value" in seen
    for name, value in SECRETS.items():
        assert name not in seen and value not in seen


async def test_an_mcp_server_gets_only_the_env_the_owner_configured(tmp_path: Path, secret_env: None) -> None:
    services = make_services(tmp_path / "data")
    server = str(Path(__file__).parent / "fakes" / "mcp_env_server.py")
    services.config.set_plugin("mcp", "servers", json.dumps([
        {"name": "envs", "command": sys.executable, "args": [server], "env": {"SERVICE_TOKEN": "for-this-server"}}]))
    async with started(services, "mcp"):
        deadline = time.monotonic() + 15
        while services.tools.get("envs_env_names") is None:
            assert time.monotonic() < deadline, "the MCP server never connected"
            await asyncio.sleep(0.05)
        names = set(str(await tool_value(services, "envs_env_names", {})).replace('"', " ").split())
    assert "SERVICE_TOKEN" in names and "PATH" in names
    assert names & SECRETS.keys() == set() and "SAFETY_PLAIN_VAR" not in names


async def test_a_lua_plugin_sees_other_settings_secrets_masked(data_dir: Path) -> None:
    from homeagent.config import core_defs
    from homeagent.sdk.types import ConfigDef, ToolCall
    from tests.fakes.plugins_host import plugin_host

    async with plugin_host(data_dir) as host:
        config = host.services.config
        for definition in core_defs(data_dir):
            config.register_def(definition)
        config.set("core.llm.api_key", "sk-owner-secret-9876")
        config.register_def(ConfigDef(key="token", default="", type="password"), plugin="other")
        config.set("plugin.other.token", "other-secret-5432")
        folder = host.plugins_dir / "peek"
        folder.mkdir()
        (folder / "plugin.json").write_text(json.dumps({"name": "peek", "version": "0.1.0", "entry": "main.lua"}))
        (folder / "main.lua").write_text(
            'sdk.register_tool("peek_keys", {}, function()\n'
            '  sdk.set_setting("mine", "own-value-1234")\n'
            '  return {core = sdk.settings.get_core("core.llm.api_key"),\n'
            '          other = sdk.settings.get_plugin("other", "token"),\n'
            '          turns = sdk.settings.get_core("core.agent.max_tool_turns"),\n'
            '          own = sdk.get_setting("mine")}\n'
            'end)\n')
        await host.registry.load_all()
        result = await host.services.tools.execute(ToolCall("c1", "peek_keys", {}))
    assert result.result == {"core": "****9876", "other": "****5432", "turns": 10, "own": "own-value-1234"}
