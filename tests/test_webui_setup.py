"""Setting up LLM sources from the web API against real wire formats (fake OpenAI servers on loopback).

The first-run flow (presets, test an unsaved source, save it), reordering the
fallback chain, removing a source, and the chat's "a fallback answered" field.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from homeagent.paths import DataPaths
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.webui_fixtures import Web

KEY = "sk-setup-secret-4242"


def form(fake: FakeOpenAI, name: str = "main", **extra: Any) -> dict[str, Any]:
    return {"name": name, "adapter": "openai", "base_url": fake.base_url, "model": "gpt-fake", "api_key": KEY,
            **extra}


async def test_first_run_presets_test_and_save(web: Web) -> None:
    async with FakeOpenAI() as fake, web.client() as c:
        presets = (await c.get("/api/v1/llm/presets")).json()
        assert presets["configured"] is False
        adapters = {p["adapter"] for p in presets["presets"]}
        assert {"openai", "deepseek", "anthropic", "gemini", "mistral", "groq", "github", "ollama", "kimi",
                "server"} <= adapters
        assert next(p for p in presets["presets"] if p["adapter"] == "ollama")["needs_key"] is False

        fake.script(Turn.text("pong"))
        tested = (await c.post("/api/v1/llm/test", json=form(fake))).json()
        assert tested["ok"] is True and tested["reply"] == "pong"
        assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
        assert "main" not in [s["name"] for s in (await c.get("/api/v1/llm/sources")).json()["sources"]]

        saved = await c.post("/api/v1/llm/sources", json=form(fake))
        assert saved.status_code == 201, saved.text
        assert KEY not in saved.text
        sources = (await c.get("/api/v1/llm/sources")).json()
        assert sources["current"] == "main"
        assert (await c.get("/api/v1/llm/presets")).json()["configured"] is True

        fake.script(Turn.text("hello from the saved source"))
        reply = (await c.post("/api/v1/chat", json={"text": "hi"})).json()
        assert reply["text"] == "hello from the saved source" and reply["source"] == "main"


async def test_a_failing_test_says_why_and_saves_nothing(web: Web) -> None:
    async with FakeOpenAI() as fake, web.client() as c:
        fake.script(Turn.error(401))
        tested = (await c.post("/api/v1/llm/test", json=form(fake))).json()
        assert tested["ok"] is False and "401" in tested["error"]
        no_key = (await c.post("/api/v1/llm/test", json=form(fake, api_key=""))).json()
        assert no_key["ok"] is False and "api_key" in no_key["error"]
        bad = await c.post("/api/v1/llm/sources", json=form(fake, adapter="nope"))
        assert bad.status_code == 400 and "adapter 'nope' not found" in bad.json()["error"]
        reserved = await c.post("/api/v1/llm/sources", json=form(fake, name="env"))
        assert reserved.status_code == 400 and "reserved" in reserved.json()["error"]
        assert (await c.post("/api/v1/llm/sources", json=form(fake, model=""))).status_code == 400
        assert web.daemon.config.sources() == []


async def test_reorder_remove_and_the_fallback_note(web: Web) -> None:
    async with FakeOpenAI() as first, FakeOpenAI() as second, web.client() as c:
        assert (await c.post("/api/v1/llm/sources", json=form(first, "alpha"))).status_code == 201
        assert (await c.post("/api/v1/llm/sources", json=form(second, "beta"))).status_code == 201
        names = [s["name"] for s in (await c.get("/api/v1/llm/sources")).json()["sources"]]
        assert names == ["alpha", "beta", "offline"], "a new source goes last, before the offline provider"

        order = await c.put("/api/v1/llm/order", json={"names": ["beta", "alpha"]})
        assert order.status_code == 200, order.text
        assert [s["name"] for s in order.json()["sources"]] == ["beta", "alpha", "offline"]
        wrong = await c.put("/api/v1/llm/order", json={"names": ["beta"]})
        assert wrong.status_code == 400 and "every source" in wrong.json()["error"]

        second.script(Turn.error(500), Turn.error(500), Turn.error(500))
        first.script(Turn.text("alpha answered"))
        async with c.stream("POST", "/api/v1/chat/stream", json={"text": "who answers?"}) as response:
            frames = [json.loads(line[5:]) async for line in response.aiter_lines() if line.startswith("data:")]
        done = frames[-1]
        assert done["type"] == "response" and done["text"] == "alpha answered"
        assert done["source"] == "alpha" and done["fallback_from"] == "beta"

        first.script(Turn.text("plain"))
        # beta is cooling down now, so alpha answers again as the fallback; after removing beta it is first
        removed = await c.delete("/api/v1/llm/sources/beta")
        assert removed.status_code == 200 and [s["name"] for s in removed.json()["sources"]] == ["alpha", "offline"]
        assert not any(k.startswith("core.llm.sources.beta.") for k in web.daemon.config.list("core.llm.sources."))
        reply = (await c.post("/api/v1/chat", json={"text": "again"})).json()
        assert reply["source"] == "alpha" and not reply.get("fallback_from")
        assert (await c.delete("/api/v1/llm/sources/beta")).status_code == 404


async def test_every_setting_has_a_chinese_label(web: Web) -> None:
    """`?lang=zh` gives every core and built-in plugin setting a Chinese label and help text."""
    async with web.client() as c:
        await c.post("/api/v1/llm/sources", json={"name": "main", "adapter": "ollama",
                                                  "base_url": "http://127.0.0.1:9", "model": "m"})
        zh = (await c.get("/api/v1/settings", params={"lang": "zh"})).json()["categories"]
        en = (await c.get("/api/v1/settings")).json()["categories"]
    han = re.compile(r"[\u4e00-\u9fff]")
    settings = [s for cat in zh for s in cat["settings"] if s["description"] or s["display_name"] != s["key"]]
    assert len(settings) > 90
    missing = [s["key"] for s in settings if not han.search(s["display_name"]) or not han.search(s["description"])]
    assert missing == []
    by_key = {s["key"]: s for cat in zh for s in cat["settings"]}
    assert by_key["core.llm.temperature"]["display_name"] == "温度"
    assert by_key["core.llm.sources.main.model"]["display_name"] == "main：模型"
    english = {s["key"]: s for cat in en for s in cat["settings"]}
    assert english["core.llm.temperature"]["display_name"] == "Temperature"


async def test_mcp_env_values_are_shown_masked_and_kept_when_sent_back(web: Web) -> None:
    secret = "mcp-secret-5521"
    block = {"mcpServers": {"fs": {"command": "npx", "args": ["-y", "x"], "env": {"TOKEN": secret}}}}
    async with web.client() as c:
        assert (await c.put("/api/v1/settings", json={"plugin.mcp.servers": json.dumps(block)})).status_code == 200
        shown = (await c.get("/api/v1/settings")).text
        assert secret not in shown and "TOKEN" in shown
        value = next(s["value"] for cat in json.loads(shown)["categories"] for s in cat["settings"]
                     if s["key"] == "plugin.mcp.servers")
        # the MCP page's round trip: the masked list plus a new server
        data = json.loads(value) if isinstance(value, str) else value
        assert data["mcpServers"]["fs"]["env"] == {"TOKEN": "••••••"}
        servers = [{**spec, "name": name} for name, spec in data["mcpServers"].items()]
        servers.append({"name": "web", "url": "http://127.0.0.1:9/mcp", "env": {"KEY": "new-value"}})
        saved = await c.put("/api/v1/settings", json={"plugin.mcp.servers": json.dumps(servers)})
        assert saved.status_code == 200, saved.text
        stored = web.daemon.config.get("plugin.mcp.servers")
        stored = json.loads(stored) if isinstance(stored, str) else stored
        assert {s["name"]: s.get("env") for s in stored} == {"fs": {"TOKEN": secret}, "web": {"KEY": "new-value"}}
        # a mask for a variable that was never stored is refused, and nothing is written
        servers[1]["env"] = {"KEY": "••••••", "OTHER": "••••••"}
        refused = await c.put("/api/v1/settings", json={"plugin.mcp.servers": json.dumps(servers)})
        assert refused.status_code == 400 and "OTHER" in refused.json()["errors"]["plugin.mcp.servers"]
        again = web.daemon.config.get("plugin.mcp.servers")
        assert (json.loads(again) if isinstance(again, str) else again) == stored


async def test_a_base_url_that_is_no_http_url_is_refused_before_any_request(web: Web) -> None:
    async with web.client() as c:
        for url in ("api.openai.com/v1", "ftp://host/v1", "http://"):
            tested = await c.post("/api/v1/llm/test", json={"name": "x", "adapter": "openai", "base_url": url,
                                                            "model": "m", "api_key": "k"})
            assert tested.status_code == 400 and "http:// or https://" in tested.json()["error"], url


def test_the_shipped_qq_plugin_settings_have_chinese_labels_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import homeagent.plugins.bundled as bundled
    from homeagent.config.labels_zh import ZH

    monkeypatch.syspath_prepend(str(Path(bundled.__path__[0]) / "qq"))
    for name in [m for m in sys.modules if m == "qqbot" or m.startswith("qqbot.")]:
        monkeypatch.delitem(sys.modules, name)  # put back as they were afterwards
    from qqbot.plugin import _defs

    assert [d.key for d in _defs() if f"plugin.qq.{d.key}" not in ZH] == []
    for name in [m for m in sys.modules if m == "qqbot" or m.startswith("qqbot.")]:
        del sys.modules[name]  # ours, imported above: gone again (any earlier ones come back at teardown)


async def test_reorder_around_a_source_from_the_environment(tmp_path: Path) -> None:
    """The env source keeps priority 0 (nothing stores its own): configured ones go before or after it."""
    from homeagent.config import ConfigRegistry, core_defs
    from homeagent.llm_control import LLMControl

    config = ConfigRegistry(tmp_path / "config.db")
    for d in core_defs(tmp_path):
        config.register_def(d)
    env = {"HOMEAGENT_LLM_BASE_URL": "http://127.0.0.1:9/v1", "HOMEAGENT_LLM_API_KEY": "k",
           "HOMEAGENT_LLM_MODEL": "m"}
    llm = LLMControl(config, DataPaths(tmp_path), env=env)
    try:
        for name in ("a", "b", "c"):
            llm.save_source({"name": name, "adapter": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m",
                             "api_key": "k"})
        assert [s["name"] for s in llm.sources()["sources"]] == ["env", "a", "b", "c", "offline"]
        for order in (["b", "env", "c", "a"], ["c", "a", "b", "env"], ["env", "a", "c", "b"]):
            after = llm.reorder({"names": order})
            assert [s["name"] for s in after["sources"]] == [*order, "offline"], order
            assert not next(s for s in after["sources"] if s["name"] == "env")["configured"]
        with pytest.raises(ValueError, match="every source once"):
            llm.reorder({"names": ["a", "a", "b", "c"]})
        with pytest.raises(ValueError, match="no configured LLM source"):
            llm.remove_source({"name": "env"})
    finally:
        await llm.close()
        config.close()


def test_llm_add_order_remove_from_the_cli_without_a_daemon(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from homeagent.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--data-dir", str(data_dir), "llm", *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, _ = run("add", "ds", "--adapter", "deepseek", "--api-key", "sk-cli-1234")
    assert code == 0 and "added LLM source ds: deepseek deepseek-chat at https://api.deepseek.com" in out
    assert "sk-cli-1234" not in out
    code, out, _ = run("add", "local", "--adapter", "ollama", "--model", "qwen2.5:7b")
    assert code == 0 and "at http://127.0.0.1:11434" in out
    code, out, _ = run("order", "local", "ds")
    assert code == 0 and out.strip() == "fallback order: local > ds > offline"
    code, _, err = run("order", "ds")
    assert code == 1 and "every source once" in err
    code, out, _ = run("add", "ds", "--model", "deepseek-reasoner")  # a change keeps the stored key and adapter
    assert code == 0 and "changed LLM source ds: deepseek deepseek-reasoner" in out
    code, _, err = run("add", "x", "--base-url", "not a url", "--model", "m", "--api-key", "k")
    assert code == 1 and "http:// or https://" in err
    code, out, _ = run("remove", "local")
    assert code == 0 and "removed LLM source local" in out
    code, _, err = run("remove", "local")
    assert code == 1 and "no configured LLM source" in err
    _, out, _ = run("sources", "--json")
    sources = json.loads(out)["sources"]
    assert [s["name"] for s in sources] == ["ds", "offline"] and sources[0]["model"] == "deepseek-reasoner"
