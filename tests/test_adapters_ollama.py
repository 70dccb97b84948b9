"""The Ollama adapter (NDJSON streaming, object arguments, thinking) and local Ollama detection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import ChatRequest, ProviderError
from homeagent.providers.lua_provider import LuaAdaptedProvider
from homeagent.providers.manager import ProviderManager
from homeagent.providers.sources import detect_local_ollama
from tests.fakes.llm_ollama import FakeOllama, Turn


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as c:
        yield c


def make(fake: FakeOllama, client: aiohttp.ClientSession, key: str = "", **kw: Any) -> LuaAdaptedProvider:
    loader = AdapterLoader()
    return LuaAdaptedProvider("local", fake.base_url, key, "llama-test", lambda: loader.get("ollama"),
                              http_client=client, adapter_name="ollama", **kw)


HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "add"},
    {"role": "assistant", "content": "", "reasoning_content": "adding",
     "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1,\"b\":2}"}}]},
    {"role": "tool", "tool_call_id": "c9", "content": "3"},
]


async def test_request_shape_and_non_streaming(client: aiohttp.ClientSession) -> None:
    async with FakeOllama() as fake:
        fake.script(Turn.text("it is 3", reasoning="simple", usage={"prompt": 12, "completion": 4}))
        resp = await make(fake, client).chat(ChatRequest(messages=HISTORY, temperature=0.3, max_tokens=64,
                                                         thinking=True))
        assert resp.content == "it is 3" and resp.reasoning == "simple"
        assert resp.usage.to_dict() == {"prompt": 12, "completion": 4, "total": 16, "cache_read": 0, "reasoning": 0}
        sent = fake.requests[0]
        assert sent.path == "/api/chat" and "authorization" not in sent.headers
        body = sent.body
        assert body["stream"] is False and body["think"] is True
        assert body["options"] == {"temperature": 0.3, "num_predict": 64}
        assert body["messages"][2]["tool_calls"] == [{"function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]
        assert body["messages"][2]["thinking"] == "adding"
        assert body["messages"][3] == {"role": "tool", "content": "3", "tool_name": "add"}


async def test_ndjson_stream_with_tool_calls(client: aiohttp.ClientSession) -> None:
    async with FakeOllama() as fake:
        fake.script(Turn.tool_calls([("add", {"a": 1, "b": 2}), ("add", {"a": 5, "b": 5})], text="calling",
                                    reasoning="think", chunks=3))
        resp = await ProviderManager([make(fake, client, key="proxy-token")]).run(ChatRequest(messages=HISTORY[:2]))
        assert fake.requests[0].headers["authorization"] == "Bearer proxy-token"
        assert resp.content == "calling" and resp.reasoning == "think"
        assert [(c.id, c.arguments) for c in resp.tool_calls] == [("call_0", {"a": 1, "b": 2}),
                                                                  ("call_1", {"a": 5, "b": 5})]
        assert resp.finish_reason == "tool_calls"
        assert resp.usage.prompt == 11


@pytest.mark.parametrize(("turn", "kind"), [
    (Turn.error(500, message="model crashed"), "server"),
    (Turn.error(404, message="model not found"), "client"),
    (Turn.malformed(), "bad_response"),
    (Turn.cut_after(2, chunks=5), "network"),
    (Turn(content="abcd", chunks=4, end_early=2), "network"),
])
async def test_errors(client: aiohttp.ClientSession, turn: Turn, kind: str) -> None:
    async with FakeOllama() as fake:
        fake.script(turn)
        with pytest.raises(ProviderError) as info:
            async for _ in make(fake, client).chat_stream(ChatRequest(messages=HISTORY[:2])):
                pass
        assert info.value.kind == kind, info.value
        if kind == "client":
            assert "model not found" in str(info.value)


async def test_detect_local_ollama(client: aiohttp.ClientSession, tmp_path: Path) -> None:
    loader = AdapterLoader()
    async with FakeOllama(models=["qwen-fake:7b", "other"]) as fake:
        fake.script(Turn.text("hello from ollama"))
        provider, note = await detect_local_ollama(client, loader, base_url=fake.base_url)
        assert provider is not None and "qwen-fake:7b" in note
        assert (await provider.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}]))).content == \
            "hello from ollama"
    async with FakeOllama(models=[]) as empty:
        provider, note = await detect_local_ollama(client, loader, base_url=empty.base_url)
        assert provider is None and "ollama pull" in note
    provider, note = await detect_local_ollama(client, loader, base_url="http://127.0.0.1:9")
    assert provider is None and note == ""


async def test_a_daemon_with_nothing_configured_answers_through_a_local_ollama(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DESIGN: no source configured → a local Ollama that answers on loopback, before the offline provider."""
    from homeagent.daemon import Daemon
    from homeagent.paths import DataPaths

    async with FakeOllama(models=["qwen-fake:7b"]) as fake:
        fake.script(Turn.text("hello from the local ollama"))
        monkeypatch.setenv("HOMEAGENT_OLLAMA_URL", fake.base_url)
        d = Daemon(DataPaths(data_dir), web=False)
        await d.start()
        try:
            sources = d.llm.sources()
            assert sources["current"] == "ollama-local", sources
            assert any("found a local Ollama" in n and "qwen-fake:7b" in n for n in sources["notes"])
            result = await d.io.inject_sync("test", "test", "hi", timeout=30)
            assert result.ok and result.text == "hello from the local ollama"
            d.config.set("core.llm.sources.home.base_url", "http://127.0.0.1:9/v1")  # configured: Ollama steps aside
            d.config.set("core.llm.sources.home.model", "m")
            d.config.set("core.llm.sources.home.api_key", "sk-x")
            await d.llm.reload()
            assert "ollama-local" not in {s["name"] for s in d.llm.sources()["sources"]}
        finally:
            await d.stop()


async def test_no_local_ollama_leaves_the_offline_provider(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from homeagent.daemon import Daemon
    from homeagent.paths import DataPaths

    monkeypatch.setenv("HOMEAGENT_OLLAMA_URL", "http://127.0.0.1:9")  # nothing listens there
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        assert d.llm.sources()["current"] == "offline"
        assert any("offline provider" in n for n in d.llm.sources()["notes"])
    finally:
        await d.stop()
