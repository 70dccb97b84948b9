"""LuaAdaptedProvider + ProviderManager against a real (fake) OpenAI server over HTTP."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import (
    AllProvidersFailed,
    ChatRequest,
    ChatResponse,
    ProviderError,
    StreamChunk,
)
from homeagent.providers.lua_provider import LuaAdaptedProvider, estimate_tokens, parse_retry_after, trim_messages
from homeagent.providers.manager import ProviderManager
from tests.fakes.llm_openai import FakeOpenAI, Turn

KEY = "sk-test-SECRET-0123456789"


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as c:
        yield c


@pytest.fixture
def loader(tmp_path: Path) -> AdapterLoader:
    user = tmp_path / "adapters"
    user.mkdir()
    return AdapterLoader(user_dir=user)


def provider(
    fake: FakeOpenAI,
    loader: AdapterLoader,
    client: aiohttp.ClientSession,
    name: str = "a",
    adapter: str = "openai",
    **kw: Any,
) -> LuaAdaptedProvider:
    return LuaAdaptedProvider(
        name,
        fake.base_url,
        KEY,
        "gpt-test",
        lambda: loader.get(adapter),
        http_client=client,
        adapter_name=adapter,
        **kw,
    )


def req(text: str = "hi", **kw: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": text}], **kw)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": []},
        },
    }
]


# --------------------------------------------------------------------- provider
async def test_chat_non_streaming_sends_openai_request(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as fake:
        fake.script(Turn.text("hello there", usage={"prompt": 20, "completion": 5, "cached": 8}))
        p = provider(fake, loader, client)
        resp = await p.chat(req(tools=TOOLS, temperature=0.2, max_tokens=100, tool_choice="auto"))
        assert resp.content == "hello there"
        assert resp.finish_reason == "stop"
        assert resp.usage.to_dict() == {"prompt": 20, "completion": 5, "total": 25, "cache_read": 8, "reasoning": 0}
        sent = fake.requests[0]
        assert sent.path == "/v1/chat/completions"
        assert sent.headers["authorization"] == f"Bearer {KEY}"
        assert sent.body["model"] == "gpt-test" and sent.body["stream"] is False
        assert sent.body["messages"][1] == {"role": "user", "content": "hi"}
        assert sent.body["tools"] == TOOLS  # empty "required" stays a list
        assert sent.body["temperature"] == 0.2 and sent.body["max_tokens"] == 100
        assert sent.body["tool_choice"] == "auto"


async def test_streaming_text_reasoning_and_usage(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as fake:
        fake.script(
            Turn.text(
                "hello streaming world",
                chunks=4,
                reasoning="let me think",
                usage={"prompt": 30, "completion": 7, "cached": 12, "reasoning": 3},
            )
        )
        manager = ProviderManager([provider(fake, loader, client)])
        seen: list[StreamChunk] = []
        resp = await manager.run(req(), seen.append)
        assert resp.content == "hello streaming world"
        assert resp.reasoning == "let me think"
        assert resp.source == "a"
        assert resp.usage.cache_read == 12 and resp.usage.reasoning == 3 and resp.usage.total == 37
        assert sum(1 for c in seen if c.content) == 4
        assert fake.requests[0].body["stream_options"] == {"include_usage": True}


async def test_parallel_tool_calls_with_fragmented_arguments(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as fake:
        fake.script(Turn.tool_calls([("get_time", {"tz": "UTC"}), ("add", {"a": 1, "b": [2, 3]})], fragments=4))
        manager = ProviderManager([provider(fake, loader, client)])
        deltas: list[StreamChunk] = []

        async def on_chunk(chunk: StreamChunk) -> None:
            deltas.append(chunk)

        resp = await manager.run(req(tools=TOOLS), on_chunk)
        assert [(c.id, c.name, c.arguments) for c in resp.tool_calls] == [
            ("call_fake_0", "get_time", {"tz": "UTC"}),
            ("call_fake_1", "add", {"a": 1, "b": [2, 3]}),
        ]
        assert resp.finish_reason == "tool_calls"
        assert sum(len(c.tool_calls) for c in deltas) >= 8  # fragments really arrived one by one


async def test_non_streaming_tool_calls(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as fake:
        fake.script(Turn.tool_calls([("get_time", {"tz": "UTC"}), ("broken", "{not json")]))
        resp = await provider(fake, loader, client).chat(req(tools=TOOLS))
        assert resp.tool_calls[0].arguments == {"tz": "UTC"}
        assert resp.tool_calls[1].parse_error and resp.tool_calls[1].raw_arguments == "{not json"


@pytest.mark.parametrize(
    ("turn", "kind", "status"),
    [
        (Turn.error(401, message="bad key"), "auth", 401),
        (Turn.error(403), "auth", 403),
        (Turn.error(429, retry_after=7), "rate_limit", 429),
        (Turn.error(500), "server", 500),
        (Turn.error(503, body="<html>oops</html>"), "server", 503),
        (Turn.error(400, message="context too long"), "client", 400),
        (Turn.malformed(), "bad_response", None),
        (Turn.cut_after(2), "network", None),
        (Turn(content="never finished", chunks=3, end_early=2), "network", None),
    ],
)
@pytest.mark.parametrize("stream", [True, False])
async def test_error_classes(
    loader: AdapterLoader, client: aiohttp.ClientSession, turn: Turn, kind: str, status: int | None, stream: bool
) -> None:
    if not stream and (turn.cut_at is not None or turn.end_early is not None):
        pytest.skip("stream-only failure")
    async with FakeOpenAI() as fake:
        fake.script(turn)
        p = provider(fake, loader, client)
        with pytest.raises(ProviderError) as info:
            if stream:
                async for _ in p.chat_stream(req()):
                    pass
            else:
                await p.chat(req())
        err = info.value
        assert err.kind == kind, err
        assert err.status == status
        assert err.source == "a"
        assert KEY not in str(err)
        if status == 429:
            assert err.retry_after == 7
        if turn.end_early is not None:
            assert "stream ended early" in str(err)
        if status == 401:
            assert "bad key" in str(err)


async def test_connect_error_is_network(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    p = LuaAdaptedProvider(
        "dead", f"http://127.0.0.1:{port}/v1", KEY, "m", lambda: loader.get("openai"), http_client=client
    )
    with pytest.raises(ProviderError) as info:
        await p.chat(req())
    assert info.value.kind == "network"


async def test_read_timeout_is_timeout(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as fake:
        fake.script(Turn.text("late", first_delay=1.0), Turn.text("late", delay=1.0))
        p = provider(fake, loader, client, timeout=0.2)
        with pytest.raises(ProviderError) as info:
            async for _ in p.chat_stream(req()):
                pass
        assert info.value.kind == "timeout"
        with pytest.raises(ProviderError) as info:
            await p.chat(req())
        assert info.value.kind == "timeout"


def test_retry_after_parsing() -> None:
    now = time.time()
    date = email.utils.formatdate(now + 120, usegmt=True)
    assert parse_retry_after({"Retry-After": "5"}) == 5
    assert 118 <= (parse_retry_after({"retry-after": date}, now=now) or 0) <= 121
    assert parse_retry_after({"retry-after-ms": "1500"}) == 1.5
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after({"Retry-After": "999999"}) == 3600


async def test_cancelling_the_consumer_closes_the_stream(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as fake:
        fake.script(Turn.slow("word " * 100, chunks=100, delay=0.05))
        manager = ProviderManager([provider(fake, loader, client)])
        first = asyncio.Event()
        task = asyncio.create_task(manager.run(req(), lambda c: first.set()))
        await asyncio.wait_for(first.wait(), 5)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(fake.disconnected.wait(), 2)
        assert fake.disconnects[0] - cancelled_at < 0.1
        assert not fake.stream_finished


# ---------------------------------------------------------------------- manager
async def test_fallback_to_second_source_before_output(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one, FakeOpenAI() as two:
        one.script(Turn.error(500))
        two.script(Turn.text("from two", chunks=2))
        manager = ProviderManager([provider(one, loader, client, "one"), provider(two, loader, client, "two")])
        chunks: list[StreamChunk] = []
        resp = await manager.run(req(), chunks.append)
        assert resp.content == "from two" and resp.source == "two"
        assert "".join(c.content for c in chunks) == "from two"
        states = {s.name: s.state for s in manager.list_sources()}
        assert states == {"one": "cooldown", "two": "ok"}


async def test_no_fallback_after_output_started(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one, FakeOpenAI() as two:
        one.script(Turn.cut_after(3, text="half an answer that is cut", chunks=6))
        two.script(Turn.text("should not be used"))
        manager = ProviderManager([provider(one, loader, client, "one"), provider(two, loader, client, "two")])
        chunks: list[StreamChunk] = []
        with pytest.raises(ProviderError) as info:
            await manager.run(req(), chunks.append)
        assert info.value.kind == "network" and info.value.source == "one"
        assert "".join(c.content for c in chunks)  # the user saw partial output
        assert not two.requests


async def test_no_fallback_after_a_tool_call_fragment(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one, FakeOpenAI() as two:
        one.script(Turn(calls=[("get_time", {"tz": "UTC"})], cut_at=2))
        manager = ProviderManager([provider(one, loader, client, "one"), provider(two, loader, client, "two")])
        with pytest.raises(ProviderError):
            await manager.run(req(tools=TOOLS))
        assert not two.requests


async def test_auth_failure_disables_until_reconfigured(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one, FakeOpenAI() as two:
        one.script(Turn.error(401))
        two.default_turn = Turn.text("ok")
        a, b = provider(one, loader, client, "one"), provider(two, loader, client, "two")
        manager = ProviderManager([a, b])
        assert (await manager.run(req())).source == "two"
        assert (await manager.run(req())).source == "two"
        assert len(one.requests) == 1  # not retried while disabled
        info = {s.name: s for s in manager.list_sources()}
        assert info["one"].state == "disabled" and "401" in info["one"].last_error
        # the same config again keeps it disabled
        manager.set_sources([provider(one, loader, client, "one"), b])
        assert {s.name: s.state for s in manager.list_sources()}["one"] == "disabled"
        # a new key re-enables it
        fixed = LuaAdaptedProvider(
            "one",
            one.base_url,
            "sk-new-key-987654",
            "gpt-test",
            lambda: loader.get("openai"),
            http_client=client,
            adapter_name="openai",
        )
        manager.set_sources([fixed, b])
        one.script(Turn.text("one again"))
        assert (await manager.run(req())).source == "one"


async def test_all_failed_names_every_attempt(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one, FakeOpenAI() as two:
        one.script(Turn.error(429, retry_after=30, message="slow down"))
        two.script(Turn.error(401, message="nope"))
        manager = ProviderManager([provider(one, loader, client, "one"), provider(two, loader, client, "two")])
        with pytest.raises(AllProvidersFailed) as info:
            await manager.run(req())
        assert info.value.attempts == ["one: rate_limit HTTP 429: slow down", "two: auth HTTP 401: nope"]
        # next call: two is disabled, one is cooling -> one is tried anyway (its cooldown ends first)
        one.script(Turn.text("recovered"))
        resp = await manager.run(req())
        assert resp.source == "one"


async def test_cooldown_honours_retry_after(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    now = [1000.0]
    async with FakeOpenAI() as one, FakeOpenAI() as two:
        one.script(Turn.error(429, retry_after=30))
        two.default_turn = Turn.text("two")
        manager = ProviderManager(
            [provider(one, loader, client, "one"), provider(two, loader, client, "two")],
            cooldown_base=1.0,
            clock=lambda: now[0],
        )
        assert (await manager.run(req())).source == "two"
        info = {s.name: s for s in manager.list_sources()}
        assert info["one"].state == "cooldown" and info["one"].cooldown_remaining == pytest.approx(30)
        assert manager.current_source() == "two"
        now[0] += 29
        assert (await manager.run(req())).source == "two"
        assert len(one.requests) == 1
        now[0] += 2
        one.script(Turn.text("one is back"))
        assert (await manager.run(req())).source == "one"
        assert manager.current_source() == "one"


async def test_backoff_grows_without_retry_after(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    now = [0.0]
    async with FakeOpenAI() as one:
        one.default_turn = Turn.error(500)
        manager = ProviderManager([provider(one, loader, client, "one")], cooldown_base=2.0, clock=lambda: now[0])
        waits = []
        for _ in range(4):
            with pytest.raises(AllProvidersFailed):
                await manager.run(req())
            waits.append(manager.list_sources()[0].cooldown_remaining)
        assert waits == [2.0, 4.0, 8.0, 16.0]


async def test_set_source_and_listing(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one, FakeOpenAI() as two:
        two.script(Turn.text("chosen"))
        manager = ProviderManager(
            [provider(one, loader, client, "one"), provider(two, loader, client, "two", priority=-1)]
        )
        assert manager.current_source() == "one"
        manager.set_source("two")
        assert manager.current_source() == "two"
        assert (await manager.run(req())).source == "two"
        with pytest.raises(ValueError, match="available: two, one"):
            manager.set_source("nope")
        listing = manager.list_sources()
        assert [s.name for s in listing] == ["two", "one"]
        assert listing[0].adapter == "openai" and listing[0].model == "gpt-test" and listing[0].preferred
        assert KEY not in repr(listing) and KEY not in repr(manager.provider("one"))


async def test_priority_orders_sources(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one, FakeOpenAI() as two:
        two.script(Turn.text("high"))
        manager = ProviderManager(
            [provider(one, loader, client, "low"), provider(two, loader, client, "high", priority=10)]
        )
        assert [s.name for s in manager.list_sources()] == ["high", "low"]
        assert (await manager.run(req())).source == "high"


class Offline:
    """A stand-in for the lead's offline provider: any Provider works."""

    name = "offline"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(content="[offline] hello")

    async def chat_stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        yield StreamChunk(content="[offline] ")
        yield StreamChunk(content="hello", finish_reason="stop")


async def test_plain_provider_as_last_fallback(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one:
        one.script(Turn.error(503), Turn.error(503))
        manager = ProviderManager([provider(one, loader, client, "one")], fallback=Offline())
        assert [s.name for s in manager.list_sources()] == ["one", "offline"]
        resp = await manager.run(req())
        assert resp.source == "offline" and resp.content == "[offline] hello"
        resp = await manager.run(req(), stream=False)
        assert resp.content == "[offline] hello"
        # the fallback survives set_sources
        manager.set_sources([])
        assert [s.name for s in manager.list_sources()] == ["offline"]


async def test_max_concurrent_limits_parallel_requests(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one:
        one.default_turn = Turn.text("x", chunks=1, first_delay=0.15)
        manager = ProviderManager([provider(one, loader, client, "one", max_concurrent=1)])
        started = time.monotonic()
        await asyncio.gather(manager.run(req()), manager.run(req()))
        assert time.monotonic() - started >= 0.3
        gaps = one.requests[1].at - one.requests[0].at
        assert gaps >= 0.14


async def test_consumer_errors_propagate_unchanged(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one, FakeOpenAI() as two:
        one.script(Turn.text("abc", chunks=3))
        manager = ProviderManager([provider(one, loader, client, "one"), provider(two, loader, client, "two")])

        def boom(chunk: StreamChunk) -> None:
            raise RuntimeError("consumer bug")

        with pytest.raises(RuntimeError, match="consumer bug"):
            await manager.run(req(), boom)
        assert not two.requests
        assert manager.list_sources()[0].state == "ok"


async def test_non_stream_mode_emits_one_chunk(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one:
        one.script(Turn.text("whole answer", reasoning="why"))
        manager = ProviderManager([provider(one, loader, client, "one")])
        chunks: list[StreamChunk] = []
        resp = await manager.run(req(), chunks.append, stream=False)
        assert resp.content == "whole answer" and resp.reasoning == "why"
        assert [c.content for c in chunks] == ["whole answer"]
        assert one.requests[0].body["stream"] is False


async def test_no_sources_at_all() -> None:
    with pytest.raises(AllProvidersFailed, match="no LLM source"):
        await ProviderManager().run(req())


# --------------------------------------------------------------- context window
def test_trim_keeps_system_last_user_and_tool_pairs() -> None:
    big = "x" * 3000
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": big},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": big},
        {"role": "assistant", "content": big},
        {"role": "user", "content": "latest question"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "t", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "result"},
    ]
    kept, dropped, before, after = trim_messages(messages, 1500)
    assert dropped == 3
    assert [m["role"] for m in kept] == ["system", "assistant", "user", "assistant", "tool"]
    assert kept[1]["content"] == big and after < before
    # a tool result never survives without its call
    for i, m in enumerate(kept):
        if m["role"] == "tool":
            assert kept[i - 1]["role"] in ("assistant", "tool")
    # nothing to drop: returned unchanged even if over budget
    kept2, dropped2, _, _ = trim_messages(messages[-3:], 1)
    assert dropped2 == 0 and kept2 == messages[-3:]
    assert estimate_tokens([{"role": "user", "content": "abc" * 100}]) > 100


async def test_provider_trims_to_context_window(
    loader: AdapterLoader, client: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with FakeOpenAI() as one:
        one.script(Turn.text("ok"))
        p = provider(one, loader, client, context_window=1000)
        history: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
        for i in range(10):
            history += [{"role": "user", "content": f"q{i} " + "y" * 600}, {"role": "assistant", "content": "a" * 600}]
        history.append({"role": "user", "content": "final"})
        await p.chat(ChatRequest(messages=history))
        sent = one.requests[0].body["messages"]
        assert sent[0]["role"] == "system" and sent[-1]["content"] == "final"
        assert len(sent) < len(history)
        assert estimate_tokens(sent) <= 1000
        assert any("context trimmed" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------- sources
def config(values: dict[str, Any]) -> tuple[Any, Any]:
    def get(key: str) -> Any:
        return values.get(key)

    def list_keys(prefix: str) -> dict[str, Any]:
        return {k: v for k, v in values.items() if k.startswith(prefix)}

    return get, list_keys


def test_sources_from_env_config_and_legacy_keys(loader: AdapterLoader, caplog: pytest.LogCaptureFixture) -> None:
    from homeagent.providers.sources import build_sources

    caplog.set_level(logging.DEBUG)
    get, list_keys = config({
        "core.llm.provider": "work",
        "core.llm.sources.work.base_url": "https://llm.example/v1",
        "core.llm.sources.work.model": "m1",
        "core.llm.sources.work.api_key": "sk-work-SECRET-1",
        "core.llm.sources.work.priority": "5",
        "core.llm.sources.work.max_concurrent": 2,
        "core.llm.sources.work.context_window": "32000",
        "core.llm.sources.work.thinking_enabled": "true",
        "core.llm.sources.nokey.base_url": "https://x.example",
        "core.llm.sources.nokey.model": "m2",
        "core.llm.sources.nourl.model": "m3",
        "core.llm.sources.local.base_url": "http://127.0.0.1:11434",
        "core.llm.sources.local.model": "llama",
        "core.llm.sources.local.adapter": "ollama",
        "core.llm.sources.weird.base_url": "https://y.example",
        "core.llm.sources.weird.model": "m",
        "core.llm.sources.weird.api_key": "k-weird-000",
        "core.llm.sources.weird.adapter": "doesnotexist",
    })
    env = {"HOMEAGENT_LLM_BASE_URL": "https://env.example/v1", "HOMEAGENT_LLM_API_KEY": "sk-env-SECRET-2",
           "HOMEAGENT_LLM_MODEL": "env-model", "DEEPSEEK_API_KEY": "sk-ds-SECRET-3"}
    providers, notes = build_sources(get, list_keys, env, loader, None)
    names = [p.name for p in providers]
    assert names == ["env", "deepseek", "local", "work"]
    by = {p.name: p for p in providers}
    env_p, ds, work = by["env"], by["deepseek"], by["work"]
    assert isinstance(env_p, LuaAdaptedProvider) and env_p.adapter_name == "openai" and env_p.model == "env-model"
    assert isinstance(ds, LuaAdaptedProvider) and ds.base_url == "https://api.deepseek.com" and ds.model == "deepseek-chat"
    assert isinstance(work, LuaAdaptedProvider)
    assert (work.priority, work.max_concurrent, work.context_window, work.thinking_enabled) == (5, 2, 32000, True)
    assert notes == [
        "LLM source 'nokey' skipped: no api_key (set core.llm.sources.nokey.api_key)",
        "LLM source 'nourl' skipped: no base_url (set core.llm.sources.nourl.base_url)",
        "LLM source 'weird' skipped: adapter 'doesnotexist' not found (available: anthropic, deepseek, gemini, github, "
        "groq, kimi, mistral, ollama, openai, server)",
    ]
    text = " ".join(notes) + repr(providers) + caplog.text
    for secret in ("SECRET", "k-weird-000"):
        assert secret not in text
    manager = ProviderManager(providers, preferred=get("core.llm.provider"))
    assert manager.current_source() == "work"
    assert "SECRET" not in repr(manager.list_sources())


def test_env_source_missing_fields_gives_one_note(loader: AdapterLoader) -> None:
    from homeagent.providers.sources import build_sources

    get, list_keys = config({})
    providers, notes = build_sources(get, list_keys, {"HOMEAGENT_LLM_BASE_URL": "http://x"}, loader, None)
    assert providers == []
    assert notes == ["LLM source 'env' skipped: no model (set HOMEAGENT_LLM_MODEL)"]
    providers, notes = build_sources(get, list_keys, {}, loader, None)
    assert providers == [] and notes == []


def test_configured_deepseek_takes_the_legacy_key(loader: AdapterLoader) -> None:
    from homeagent.providers.sources import build_sources

    get, list_keys = config({
        "core.llm.sources.deepseek.base_url": "https://api.deepseek.com",
        "core.llm.sources.deepseek.model": "deepseek-v4-flash",
        "core.llm.sources.deepseek.api_key": "",
        "core.llm.sources.deepseek.adapter": "deepseek",
        "core.llm.sources.deepseek.adapter_path": "adapters/deepseek.lua",
    })
    providers, notes = build_sources(get, list_keys, {}, loader, None)
    assert providers == [] and notes == ["LLM source 'deepseek' skipped: no api_key (set core.llm.sources.deepseek.api_key)"]
    providers, notes = build_sources(get, list_keys, {"LLM_API_KEY": "sk-legacy-1"}, loader, None)
    assert [p.name for p in providers] == ["deepseek"] and notes == []
    assert isinstance(providers[0], LuaAdaptedProvider) and providers[0].model == "deepseek-v4-flash"


def test_broken_registry_never_raises(loader: AdapterLoader) -> None:
    from homeagent.providers.sources import build_sources

    def boom(_: str) -> Any:
        raise RuntimeError("db locked")

    providers, notes = build_sources(boom, boom, {}, loader, None)
    assert providers == [] and notes == []


async def test_disabled_source_is_named_as_skipped(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as one:
        one.script(Turn.error(401, message="invalid key"))
        manager = ProviderManager([provider(one, loader, client, "one")])
        with pytest.raises(AllProvidersFailed) as first:
            await manager.run(req())
        assert first.value.attempts == ["one: auth HTTP 401: invalid key"]
        with pytest.raises(AllProvidersFailed) as second:
            await manager.run(req())
        assert second.value.attempts == ["one: skipped (disabled: 401)"]
        assert "one: skipped (disabled: 401)" in str(second.value)
        assert len(one.requests) == 1
