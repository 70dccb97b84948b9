"""The providers' HTTP client (aiohttp): proxies from the environment, the shared session, errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import ChatRequest, ProviderError
from homeagent.providers.http import SharedSession, proxy_for
from homeagent.providers.lua_provider import LuaAdaptedProvider
from tests.fakes.llm_openai import FakeOpenAI, Turn

# A host that never resolves (RFC 2606): reaching the "API" proves the proxy carried the request.
API = "http://llm.invalid:8080/v1"


@pytest.fixture
def loader(tmp_path: Path) -> AdapterLoader:
    return AdapterLoader(user_dir=tmp_path / "adapters")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def req() -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "hi"}])


def test_proxy_for_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "ALL_PROXY",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert proxy_for("https://api.example.com/v1") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.lan:3128")
    assert proxy_for("https://api.example.com/v1") == "http://proxy.lan:3128"
    assert proxy_for("http://api.example.com/v1") is None  # only HTTPS_PROXY is set
    monkeypatch.setenv("NO_PROXY", "example.com,localhost")
    assert proxy_for("https://api.example.com/v1") is None
    assert proxy_for("https://api.other.org/v1") == "http://proxy.lan:3128"
    assert proxy_for("not a url") is None
    monkeypatch.setenv("ALL_PROXY", "http://all.lan:8080")
    assert proxy_for("http://api.example.org/v1") == "http://all.lan:8080"
    monkeypatch.setenv("ALL_PROXY", "socks5://all.lan:1080")
    assert proxy_for("http://api.example.org/v1") is None


async def test_requests_go_through_the_proxy_the_environment_names(
    loader: AdapterLoader, session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with FakeOpenAI() as proxy:  # serves the absolute-form request a forward proxy receives
        monkeypatch.setenv("HTTP_PROXY", proxy.root_url)
        p = LuaAdaptedProvider("viaproxy", API, "sk-proxy-0000000", "m", lambda: loader.get("openai"),
                               http_client=session)
        proxy.script(Turn.text("through the proxy", chunks=2))
        chunks = [c.content async for c in p.chat_stream(req())]
        assert "".join(chunks) == "through the proxy"
        assert proxy.requests[-1].headers["host"] == "llm.invalid:8080"

        monkeypatch.setenv("NO_PROXY", "llm.invalid")  # read when a source is (re)built
        direct = LuaAdaptedProvider("direct", API, "sk-proxy-0000000", "m", lambda: loader.get("openai"),
                                    http_client=session)
        with pytest.raises(ProviderError) as info:
            await direct.chat(req())
        assert info.value.kind == "network"
        assert "cannot connect to http://llm.invalid:8080/v1" in str(info.value)


async def test_a_stream_cut_mid_body_is_a_network_error(loader: AdapterLoader, session: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as fake:
        fake.script(Turn.cut_after(2))
        p = LuaAdaptedProvider("cut", fake.base_url, "sk-cut-00000000", "m", lambda: loader.get("openai"),
                               http_client=session)
        seen: list[str] = []
        with pytest.raises(ProviderError) as info:
            async for chunk in p.chat_stream(req()):
                seen.append(chunk.content)
        assert info.value.kind == "network"
        assert "sk-cut-00000000" not in str(info.value)


async def test_the_shared_session_is_made_on_first_use_and_again_after_closing(loader: AdapterLoader) -> None:
    shared = SharedSession()
    await shared.start()
    first = shared.get()
    assert shared.get() is first
    async with FakeOpenAI() as fake:
        p = LuaAdaptedProvider("s", fake.base_url, "sk-shared-000000", "m", lambda: loader.get("openai"),
                               http_client=shared)
        fake.script(Turn.text("one"), Turn.text("two"))
        assert (await p.chat(req())).content == "one"
        await shared.aclose()
        assert first.closed
        assert (await p.chat(req())).content == "two"  # a new session, not a closed one
    await shared.aclose()
