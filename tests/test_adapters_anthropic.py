"""The Anthropic adapter against a fake Messages API (content blocks, tool_use, thinking, SSE events)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import ChatRequest, ProviderError, StreamChunk
from homeagent.providers.lua_provider import LuaAdaptedProvider
from homeagent.providers.manager import ProviderManager
from tests.fakes.llm_anthropic import FakeAnthropic, Turn

KEY = "sk-ant-test-123456"
TOOLS = [{"type": "function", "function": {"name": "get_time", "description": "now",
                                           "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}]


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as c:
        yield c


def make(fake: FakeAnthropic, client: aiohttp.ClientSession, **kw: Any) -> LuaAdaptedProvider:
    loader = AdapterLoader()
    return LuaAdaptedProvider("claude", fake.base_url, KEY, "claude-test", lambda: loader.get("anthropic"),
                              http_client=client, adapter_name="anthropic", **kw)


HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "system", "content": "[打断消息] stop"},
    {"role": "user", "content": "what time is it?"},
    {"role": "assistant", "content": "checking",
     "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\":\"UTC\"}"}},
                    {"id": "toolu_2", "type": "function", "function": {"name": "get_time", "arguments": ""}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "12:00"},
    {"role": "tool", "tool_call_id": "toolu_2", "content": ""},
]


async def test_request_shape(client: aiohttp.ClientSession) -> None:
    async with FakeAnthropic() as fake:
        fake.script(Turn.text("noon"))
        resp = await make(fake, client).chat(ChatRequest(messages=HISTORY, tools=TOOLS, tool_choice="required",
                                                         temperature=0.5))
        assert resp.content == "noon"
        sent = fake.requests[0]
        assert sent.headers["x-api-key"] == KEY and sent.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in sent.headers
        body = sent.body
        assert body["system"] == "You are terse.\n\n[打断消息] stop"
        assert body["max_tokens"] == 8192 and body["temperature"] == 0.5
        assert body["tools"] == [{"name": "get_time", "description": "now",
                                  "input_schema": TOOLS[0]["function"]["parameters"]}]
        assert body["tool_choice"] == {"type": "any"}
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["user", "assistant", "user"]
        assistant = body["messages"][1]["content"]
        assert assistant[0] == {"type": "text", "text": "checking"}
        assert assistant[1] == {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {"tz": "UTC"}}
        assert assistant[2]["input"] == {}
        results = body["messages"][2]["content"]
        assert [r["tool_use_id"] for r in results] == ["toolu_1", "toolu_2"]
        assert results[1]["content"] == "(no output)"


async def test_non_streaming_blocks_and_usage(client: aiohttp.ClientSession) -> None:
    async with FakeAnthropic() as fake:
        fake.script(Turn.tool_calls([("get_time", {"tz": "UTC"})], text="let me see", reasoning="hmm",
                                    usage={"prompt": 50, "completion": 12, "cached": 30}))
        resp = await make(fake, client).chat(ChatRequest(messages=HISTORY[:3], tools=TOOLS))
        assert resp.content == "let me see" and resp.reasoning == "hmm"
        assert resp.finish_reason == "tool_calls"
        assert [(c.id, c.name, c.arguments) for c in resp.tool_calls] == [("toolu_fake_0", "get_time", {"tz": "UTC"})]
        assert resp.usage.to_dict() == {"prompt": 50, "completion": 12, "total": 62, "cache_read": 30, "reasoning": 0}


async def test_streaming_text_thinking_and_parallel_tools(client: aiohttp.ClientSession) -> None:
    async with FakeAnthropic() as fake:
        fake.script(Turn.tool_calls([("get_time", {"tz": "UTC"}), ("get_time", {"tz": "Asia/Shanghai"})],
                                    text="two lookups", reasoning="need both", fragments=3, chunks=3,
                                    usage={"prompt": 40, "completion": 20, "cached": 10}))
        chunks: list[StreamChunk] = []
        resp = await ProviderManager([make(fake, client)]).run(ChatRequest(messages=HISTORY[:3], tools=TOOLS,
                                                                           thinking=True), chunks.append)
        assert resp.content == "two lookups" and resp.reasoning == "need both"
        assert [c.arguments for c in resp.tool_calls] == [{"tz": "UTC"}, {"tz": "Asia/Shanghai"}]
        assert [c.id for c in resp.tool_calls] == ["toolu_fake_0", "toolu_fake_1"]
        assert resp.finish_reason == "tool_calls"
        assert resp.usage.prompt == 40 and resp.usage.completion == 20 and resp.usage.cache_read == 10
        assert resp.usage.total == 60
        body = fake.requests[0].body
        assert body["thinking"]["type"] == "enabled" and body["thinking"]["budget_tokens"] >= 1024
        assert body["max_tokens"] > body["thinking"]["budget_tokens"]
        assert "temperature" not in body


async def test_thinking_is_left_off_when_the_signed_block_is_missing(client: aiohttp.ClientSession) -> None:
    async with FakeAnthropic() as fake:
        fake.script(Turn.text("ok"))
        await make(fake, client).chat(ChatRequest(messages=HISTORY, thinking=True))
        assert "thinking" not in fake.requests[0].body


@pytest.mark.parametrize(("turn", "kind"), [
    (Turn.error(429, retry_after=12), "rate_limit"),
    (Turn.error(401), "auth"),
    (Turn.error(529, message="Overloaded"), "server"),
    (Turn.malformed(), "bad_response"),
    (Turn.cut_after(3), "network"),
    (Turn(content="abc", chunks=3, end_early=4), "network"),
])
async def test_errors(client: aiohttp.ClientSession, turn: Turn, kind: str) -> None:
    async with FakeAnthropic() as fake:
        fake.script(turn)
        with pytest.raises(ProviderError) as info:
            async for _ in make(fake, client).chat_stream(ChatRequest(messages=HISTORY[:3])):
                pass
        assert info.value.kind == kind
        if kind == "rate_limit":
            assert info.value.retry_after == 12


async def test_error_event_mid_stream(client: aiohttp.ClientSession) -> None:
    async with FakeAnthropic() as fake:
        fake.script(Turn(content="x", body=None))
        orig = fake.events

        def with_error(turn: Turn, model: str) -> list[bytes]:
            events = orig(turn, model)
            return [*events[:2], fake.event("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}}),
                    *events[-2:]]

        fake.events = with_error  # type: ignore[method-assign]
        with pytest.raises(ProviderError) as info:
            async for _ in make(fake, client).chat_stream(ChatRequest(messages=HISTORY[:3])):
                pass
        assert info.value.kind == "server" and "Overloaded" in str(info.value)
