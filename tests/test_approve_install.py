"""Approve, then install: the model's plugin_install / plugin_remove / plugin_enable wait for the owner.

Through a real daemon, the scripted fake LLM, the local socket (what
``homeagent approvals`` and ``homeagent chat`` use) and the real CLI. What a
user would notice is checked: is the plugin there and running, what the
model was told, what the approvals log says.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from homeagent.cli.client import Client, RemoteError
from homeagent.daemon import Daemon
from homeagent.plugins.package import pack_plugin
from tests.conftest import run_cli
from tests.fakes.builtins_host import daemon_services, llm_daemon, run_tool, tool_messages
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.plugins_host import FIXTURES


@asynccontextmanager
async def owner(d: Daemon) -> AsyncIterator[Client]:
    client = await Client.connect(d.paths.socket)
    try:
        yield client
    finally:
        await client.close()


async def one_request(d: Daemon, tool: str) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            waiting = [p for p in d.approvals.pending() if p["tool"] == tool]
            if waiting:
                return waiting[0]
            await asyncio.sleep(0.01)


def told(fake: FakeOpenAI, request: int = 1) -> str:
    return str(tool_messages(fake.requests[request].body)[-1]["content"])


@pytest.fixture
def package(tmp_path: Path) -> Path:
    path, _, _ = pack_plugin(FIXTURES / "luademo", tmp_path / "luademo.hmap")
    return path


async def test_an_install_runs_once_the_owner_allows_it(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, package: Path
) -> None:
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d, owner(d) as me:
        fake.script(Turn.tool_calls([("plugin_install", {"url": str(package)})]), Turn.text("Installed."))
        turn = asyncio.ensure_future(d.io.inject_sync("qq", "group42", "install luademo", timeout=30))
        request = await one_request(d, "plugin_install")
        assert request["subject"] == str(package) and request["always"] is False
        assert not (d.paths.plugins / "luademo").exists()  # waiting, not installed
        listed = await run_cli(data_dir, "approvals", "list")
        assert "plugin_install" in listed.out and str(package) in listed.out, listed
        answer = await me.call("approvals.answer", {"id": request["id"], "decision": "allow", "always": True})
        assert answer["decision"] == "allowed" and answer["rule"] is None  # one call at a time, no rule
        result = await turn
        assert result.ok and result.text == "Installed."
        payload = json.loads(told(fake))
        assert payload["status"] == "installed" and payload["state"] == "running"
        assert "luademo" in d.plugins.running() and "luademo_echo" in d.tools
        log = await me.call("approvals.log")
        assert log[0]["tool"] == "plugin_install" and log[0]["decision"] == "allowed" and log[0]["by"] == "socket"
        assert await me.call("approvals.rules") == []
        with pytest.raises(RemoteError, match="one call at a time"):
            await me.call("approvals.add_rule", {"tool": "plugin_install", "match": "*"})

        # removing it: asked again, allowed, gone
        fake.script(Turn.tool_calls([("plugin_remove", {"name": "luademo"})]), Turn.text("Removed."))
        turn = asyncio.ensure_future(d.io.inject_sync("cli", "cli", "remove it", timeout=30))
        request = await one_request(d, "plugin_remove")
        assert request["subject"] == "luademo"
        await me.call("approvals.answer", {"id": request["id"], "decision": "allow"})
        assert (await turn).text == "Removed."
        assert not (d.paths.plugins / "luademo").exists() and "luademo_echo" not in d.tools


async def test_deny_and_timeout_install_nothing(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, package: Path
) -> None:
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d, owner(d) as me:
        fake.script(Turn.tool_calls([("plugin_install", {"url": str(package)})]), Turn.text("It was refused."))
        turn = asyncio.ensure_future(d.io.inject_sync("cli", "cli", "install luademo", timeout=30))
        request = await one_request(d, "plugin_install")
        await me.call("approvals.answer", {"id": request["id"], "decision": "deny"})
        result = await turn
        assert result.text == "It was refused." and result.tool_calls[0]["status"] == "denied"
        assert "the owner denied plugin_install" in told(fake)
        assert not (d.paths.plugins / "luademo").exists() and "luademo" not in d.plugins.running()

        d.config.set("core.approvals.timeout", "1s")
        fake.script(Turn.tool_calls([("plugin_install", {"url": str(package), "upgrade": True})]),
                    Turn.text("Nobody answered."))
        result = await d.io.inject_sync("cli", "cli", "install it anyway", timeout=30)
        assert result.text == "Nobody answered."
        assert "needs the owner's approval and nobody answered within 1s" in told(fake, 3)
        assert not (d.paths.plugins / "luademo").exists()
        decisions = [e["decision"] for e in await me.call("approvals.log")]
        assert decisions[:2] == ["timeout", "denied"]


async def test_the_policy_cannot_wave_them_through(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, package: Path
) -> None:
    """An allow-everything rule and an empty ask list: enabling still asks; without a gate the tool refuses."""
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d, owner(d) as me:
        d.config.set("core.approvals.rules", json.dumps([{"tool": "*", "action": "allow"}]))
        await d.plugins.install(str(package))  # the owner's own install, then a disable
        await d.plugins.disable("luademo", by="cli")
        fake.script(Turn.tool_calls([("plugin_enable", {"name": "luademo"})]), Turn.text("Enabled."))
        turn = asyncio.ensure_future(d.io.inject_sync("cli", "cli", "enable luademo", timeout=30))
        request = await one_request(d, "plugin_enable")
        assert "luademo" not in d.plugins.running()
        await me.call("approvals.answer", {"id": request["id"], "decision": "allow"})
        assert (await turn).text == "Enabled."
        assert json.loads(told(fake))["state"] == "running" and "luademo" in d.plugins.running()
        # the tool itself, called with no approval gate in front of it (as a runner without one would)
        direct = await run_tool(daemon_services(d), "plugin_remove", {"name": "luademo"})
        assert direct.success is False and "homeagent plugin remove luademo" in direct.result["content"]
        assert "did not happen" in direct.result["content"]
        assert (d.paths.plugins / "luademo").exists() and "luademo" in d.plugins.running()


async def test_homeagent_chat_asks_once_only_for_an_install(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, package: Path
) -> None:
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d:
        fake.script(Turn.tool_calls([("plugin_install", {"url": str(package)})]), Turn.text("Installed it."))
        chat = await run_cli(data_dir, "chat", stdin="install luademo\na\n")  # "a" (always) counts as once here
        assert chat.code == 0, chat
        assert "approval needed" in chat.out and "plugin_install" in chat.out
        assert "allow this once? [y]es / [N]o" in chat.out and "[a]lways" not in chat.out
        assert "(allowed)" in chat.out and "Installed it." in chat.out
        assert "luademo" in d.plugins.running()
        assert d.approvals.rules() == []
