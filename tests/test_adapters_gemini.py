"""The Gemini adapter against a fake generativelanguage v1beta server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import ChatRequest, ProviderError
from homeagent.providers.lua_provider import LuaAdaptedProvider
from homeagent.providers.manager import ProviderManager
from tests.fakes.llm_gemini import FakeGemini, Turn

KEY = "AIza-test-key-0000"
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "find",
                                           "parameters": {"type": "object", "additionalProperties": False,
                                                          "$schema": "http://json-schema.org/draft-07/schema#",
                                                          "properties": {"q": {"type": ["string", "null"]},
                                                                         "n": {"type": "integer", "default": 3}},
                                                          "required": ["q"]}}}]


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as c:
        yield c


def make(fake: FakeGemini, client: aiohttp.ClientSession, **kw: Any) -> LuaAdaptedProvider:
    loader = AdapterLoader()
    return LuaAdaptedProvider("gem", fake.base_url, KEY, "gemini-test", lambda: loader.get("gemini"),
                              http_client=client, adapter_name="gemini", **kw)


HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be helpful."},
    {"role": "user", "content": "find cats"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"cats\"}"}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "3 cats"},
]


async def test_request_shape_and_non_streaming(client: aiohttp.ClientSession) -> None:
    async with FakeGemini() as fake:
        fake.script(Turn.text("three cats", reasoning="counting", usage={"prompt": 30, "completion": 10,
                                                                         "cached": 5, "reasoning": 4}))
        resp = await make(fake, client).chat(ChatRequest(messages=HISTORY, tools=TOOLS, tool_choice="auto",
                                                         temperature=0.1, max_tokens=99, thinking=True))
        assert resp.content == "three cats" and resp.reasoning == "counting"
        assert resp.usage.to_dict() == {"prompt": 30, "completion": 10, "total": 40, "cache_read": 5, "reasoning": 4}
        sent = fake.requests[0]
        assert sent.path == "/v1beta/models/gemini-test:generateContent"
        assert sent.headers["x-goog-api-key"] == KEY and "key" not in sent.query
        body = sent.body
        assert body["systemInstruction"] == {"parts": [{"text": "Be helpful."}]}
        assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
        assert body["contents"][1]["parts"] == [{"functionCall": {"name": "lookup", "args": {"q": "cats"}}}]
        assert body["contents"][2]["parts"] == [{"functionResponse": {"name": "lookup",
                                                                      "response": {"content": "3 cats"}}}]
        params = body["tools"][0]["functionDeclarations"][0]["parameters"]
        assert "additionalProperties" not in params and "$schema" not in params
        assert params["properties"]["q"] == {"type": "string", "nullable": True}
        assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}
        assert body["generationConfig"] == {"temperature": 0.1, "maxOutputTokens": 99,
                                            "thinkingConfig": {"includeThoughts": True}}


async def test_streaming_with_parallel_function_calls(client: aiohttp.ClientSession) -> None:
    async with FakeGemini() as fake:
        fake.script(Turn.tool_calls([("lookup", {"q": "a"}), ("lookup", {"q": "b"})], text="searching",
                                    reasoning="two queries", chunks=2))
        resp = await ProviderManager([make(fake, client)]).run(ChatRequest(messages=HISTORY[:2], tools=TOOLS))
        assert fake.requests[0].path == "/v1beta/models/gemini-test:streamGenerateContent"
        assert fake.requests[0].query == {"alt": "sse"}
        assert resp.content == "searching" and resp.reasoning == "two queries"
        assert [(c.id, c.arguments) for c in resp.tool_calls] == [("call_0", {"q": "a"}), ("call_1", {"q": "b"})]
        assert resp.finish_reason == "tool_calls"


async def test_non_streaming_calls_get_ids(client: aiohttp.ClientSession) -> None:
    async with FakeGemini() as fake:
        fake.script(Turn.tool_calls([("lookup", {"q": "a"}), ("lookup", {"q": "b"})]))
        resp = await make(fake, client).chat(ChatRequest(messages=HISTORY[:2], tools=TOOLS))
        assert [c.id for c in resp.tool_calls] == ["call_0", "call_1"]
        assert resp.finish_reason == "tool_calls"


@pytest.mark.parametrize(("turn", "kind"), [
    (Turn.error(429, retry_after=3), "rate_limit"),
    (Turn.error(403), "auth"),
    (Turn.error(503), "server"),
    (Turn.error(400, message="bad schema"), "client"),
    (Turn.malformed(), "bad_response"),
    (Turn.cut_after(1, chunks=4), "network"),
    (Turn(content="abcd", chunks=4, end_early=2), "network"),
])
async def test_errors(client: aiohttp.ClientSession, turn: Turn, kind: str) -> None:
    async with FakeGemini() as fake:
        fake.script(turn)
        with pytest.raises(ProviderError) as info:
            async for _ in make(fake, client).chat_stream(ChatRequest(messages=HISTORY[:2])):
                pass
        assert info.value.kind == kind, info.value
