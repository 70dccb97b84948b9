"""Each shipped adapter's own request rules, as the vendor's server receives them.

Every case goes through the provider to a fake server of that wire format on
loopback and looks at the body it got: what a user's vendor would see.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import ChatRequest
from homeagent.providers.lua_provider import LuaAdaptedProvider
from tests.fakes.llm_anthropic import FakeAnthropic
from tests.fakes.llm_common import FakeLLMServer, Turn
from tests.fakes.llm_gemini import FakeGemini
from tests.fakes.llm_ollama import FakeOllama
from tests.fakes.llm_openai import FakeOpenAI


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as c:
        yield c


def fake_for(adapter: str) -> FakeLLMServer:
    if adapter == "anthropic":
        return FakeAnthropic()
    if adapter == "gemini":
        return FakeGemini()
    if adapter == "ollama":
        return FakeOllama()
    return FakeOpenAI(prefix="")


async def sent(client: aiohttp.ClientSession, adapter: str, request: dict[str, Any], *, stream: bool = False) -> Any:
    """The body the vendor's server received for ``request`` (ChatRequest fields, ``model`` included)."""
    loader = AdapterLoader()
    fields = dict(request)
    model = fields.pop("model", "m")
    async with fake_for(adapter) as fake:
        fake.default_turn = Turn.text("ok")
        provider = LuaAdaptedProvider("src", fake.base_url, "sk-test-key", model, lambda: loader.get(adapter),
                                      http_client=client, adapter_name=adapter)
        chat = ChatRequest(**fields)
        if stream:
            assert "".join([c.content async for c in provider.chat_stream(chat)]) == "ok"
        else:
            assert (await provider.chat(chat)).content == "ok"
        return fake.requests[-1].body


# ------------------------------------------------------------------ the OpenAI-style adapters
OPENAI_TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]

OPENAI_RULES = [
    ("openai", {"model": "o3-mini", "temperature": 0.3, "max_tokens": 99}, {"max_completion_tokens": 99}),
    ("openai", {"model": "gpt-5", "extra": {"temperature": 1.5}}, {}),
    ("openai", {"model": "gpt-4o", "max_tokens": 99}, {"max_tokens": 99, "stream_options": {"include_usage": True}}),
    ("groq", {"max_tokens": 7}, {"max_completion_tokens": 7}),
    ("kimi", {"extra": {"disable_thinking": True, "extra_body": {"a": 1}, "seed": 3}}, {"seed": 3}),
    ("server", {"thinking": False, "extra": {"extra_body": {"a": 1}}}, {"disable_thinking": True}),
    ("server", {"thinking": True, "extra": {"disable_thinking": False}}, {"disable_thinking": False}),
    ("deepseek", {"thinking": True}, {"thinking": {"type": "enabled"}}),
    ("github", {"max_tokens": 5, "extra": {"seed": 1}}, {"max_tokens": 5, "seed": 1}),
]


@pytest.mark.parametrize(("name", "fields", "expected"), OPENAI_RULES)
async def test_openai_style_rules(client: aiohttp.ClientSession, name: str, fields: dict[str, Any],
                                  expected: dict[str, Any]) -> None:
    request = {"model": "gpt-4o", "tools": OPENAI_TOOLS, "messages": [{"role": "user", "content": "hi"}], **fields}
    body = await sent(client, name, request, stream=True)
    for key, value in expected.items():
        assert body[key] == value
    assert body["messages"] == [{"role": "user", "content": "hi"}] and body["tools"] == OPENAI_TOOLS
    if name == "openai" and fields["model"] != "gpt-4o":  # reasoning models take no temperature
        assert "temperature" not in body and "max_tokens" not in body
    if name in ("kimi", "server"):
        assert "extra_body" not in body


async def test_openai_style_adapters_strip_what_the_vendor_rejects(client: aiohttp.ClientSession) -> None:
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": "x", "reasoning_content": "thoughts", "reasoning": "more"},
               {"role": "user", "content": "and?"}]
    for name in ("openai", "github", "groq", "kimi"):
        body = await sent(client, name, {"messages": history})
        assert body["messages"][1]["content"] == "x" and "reasoning_content" not in body["messages"][1], name
    assert "reasoning" not in (await sent(client, "groq", {"messages": history}))["messages"][1]
    assert (await sent(client, "server", {"messages": history}))["messages"] == history  # strips nothing


# ------------------------------------------------------------------ anthropic
ANTHROPIC_TOOLS = [
    {"type": "function", "function": {"name": "get_time", "description": "the time",
                                      "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "noop"}},
]

ANTHROPIC_RULES = [
    ({"max_tokens": None}, {"max_tokens": 8192}),
    ({"thinking": True, "max_tokens": 1000, "temperature": 0.5},
     {"max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ({"thinking": True, "tool_choice": "required"}, {"tool_choice": {"type": "auto"}}),
    ({"tool_choice": "required"}, {"tool_choice": {"type": "any"}}),
    ({"thinking": True, "max_tokens": 10000}, {"max_tokens": 10000, "thinking": {"type": "enabled", "budget_tokens": 5000}}),
    ({"tool_choice": {"type": "function", "function": {"name": "noop"}}}, {"tool_choice": {"type": "tool", "name": "noop"}}),
    ({"extra": {"top_k": 5, "seed": 3, "metadata": {"user_id": "u"}}}, {"top_k": 5, "metadata": {"user_id": "u"}}),
]


@pytest.mark.parametrize(("fields", "expected"), ANTHROPIC_RULES)
async def test_anthropic_rules(client: aiohttp.ClientSession, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    request = {"model": "claude-sonnet-4", "tools": ANTHROPIC_TOOLS, "max_tokens": 1000,
               "messages": [{"role": "system", "content": "a"}, {"role": "developer", "content": "b"},
                            {"role": "user", "content": "hi"}], **fields}
    body = await sent(client, "anthropic", {k: v for k, v in request.items() if v is not None})
    assert body["system"] == "a\n\nb"
    for key, value in expected.items():
        assert body[key] == value
    if fields.get("thinking"):
        assert "temperature" not in body
    assert "seed" not in body


async def test_anthropic_conversation_opening_with_the_assistant_gets_a_user_turn_first(
        client: aiohttp.ClientSession) -> None:
    body = await sent(client, "anthropic", {"messages": [{"role": "assistant", "content": "earlier"},
                                                         {"role": "user", "content": "a"},
                                                         {"role": "user", "content": ""}]})
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "(continued)"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "earlier"}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": " "}]},
    ]


# ------------------------------------------------------------------ gemini
GEMINI_TOOLS = [
    {"type": "function", "function": {
        "name": "get_time", "description": "the time",
        "parameters": {"type": "object", "additionalProperties": False,
                       "$schema": "http://json-schema.org/draft-07/schema#",
                       "properties": {"tz": {"type": ["string", "null"], "description": "zone"},
                                      "fmt": {"const": "iso"},
                                      "n": {"type": "integer", "default": 3, "minimum": 0, "exclusiveMaximum": 9},
                                      "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                                      "when": {"anyOf": [{"type": "string", "format": "date-time"},
                                                         {"type": "null"}]}},
                       "required": ["tz"]}}},
    {"type": "function", "function": {"name": "noop"}},
    {"name": "bare", "description": "no function wrapper", "parameters": {"type": "object", "properties": {}}},
]


def gemini_tool_loop(rounds: int) -> list[dict[str, Any]]:
    """A tool loop's history as the daemon sends it: system, user with images, then an
    assistant tool call and its result per round."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are HomeAgent."},
        {"role": "user", "content": [{"type": "text", "text": "look at these"},
                                     {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
                                     {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}]}]
    for k in range(rounds):
        call = {"role": "assistant", "content": None if k % 2 else ("" if k % 3 else "let me check"),
                "reasoning_content": f"thinking {k}",
                "tool_calls": [{"id": f"call_{k}", "type": "function",
                                "function": {"name": "get_time", "arguments": json.dumps({"tz": "UTC", "k": k})}}]}
        messages += [call, {"role": "tool", "tool_call_id": f"call_{k}", "content": f"12:0{k}"}]
    return messages


async def test_gemini_tool_loop_body(client: aiohttp.ClientSession) -> None:
    body = await sent(client, "gemini", {
        "model": "gemini-2.5-flash", "messages": gemini_tool_loop(5), "thinking": True, "tools": GEMINI_TOOLS,
        "tool_choice": "auto", "temperature": 0.3, "max_tokens": 4096,
        "extra": {"top_p": 0.9, "safety": {"level": "low"}}}, stream=True)
    assert body["systemInstruction"] == {"parts": [{"text": "You are HomeAgent."}]}
    assert body["contents"][0] == {"role": "user", "parts": [  # an http image is dropped: Gemini wants inline data
        {"text": "look at these"}, {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQ"}}]}
    assert [c["role"] for c in body["contents"]] == ["user"] + ["model", "user"] * 5
    assert body["contents"][1]["parts"] == [{"text": "let me check"},
                                            {"functionCall": {"name": "get_time", "args": {"tz": "UTC", "k": 0}}}]
    assert body["contents"][2]["parts"] == [{"functionResponse": {"name": "get_time", "response": {"content": "12:00"}}}]
    assert body["generationConfig"] == {"temperature": 0.3, "maxOutputTokens": 4096,
                                        "thinkingConfig": {"includeThoughts": True}}
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}
    decls = body["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in decls] == ["get_time", "noop", "bare"]
    assert decls[0]["parameters"] == {
        "type": "object", "required": ["tz"],
        "properties": {"tz": {"type": "string", "nullable": True, "description": "zone"},
                       "fmt": {"enum": ["iso"]}, "n": {"type": "integer", "default": 3, "minimum": 0},
                       "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                       "when": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]}}}
    assert decls[1] == {"name": "noop"} and "top_p" not in body


@pytest.mark.parametrize("tool_choice", ["auto", "none", "required", {"type": "function", "function": {"name": "noop"}}])
async def test_gemini_tool_choice(client: aiohttp.ClientSession, tool_choice: Any) -> None:
    body = await sent(client, "gemini", {"messages": gemini_tool_loop(1), "tools": GEMINI_TOOLS,
                                         "tool_choice": tool_choice, "thinking": False})
    modes = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
    if isinstance(tool_choice, str):
        assert body["toolConfig"]["functionCallingConfig"]["mode"] == modes[tool_choice]
    else:
        assert "toolConfig" not in body  # named choices map to nothing
    assert "thinkingConfig" not in body.get("generationConfig", {})


GEMINI_SCHEMA_RULES: list[tuple[Any, Any]] = [
    ({"type": ["null", "integer", "string"], "additionalProperties": False, "$ref": "#/x"},
     {"type": "integer", "nullable": True}),  # the first type wins; what Gemini rejects is dropped
    ({"type": ["string", "null"], "nullable": True, "const": "a"}, {"type": "string", "nullable": True, "enum": ["a"]}),
    ({"anyOf": [{"type": "string", "pattern": "x"}, None], "items": [{"type": "x"}], "type": {"a": 1}},
     {"anyOf": [{"type": "string", "pattern": "x"}, {}], "items": {}}),  # a null item is an empty schema
    ({"properties": {"p": {"properties": "odd", "default": {"k": [1, None]}, "minimum": 1.5}}, "required": []},
     {"properties": {"p": {"properties": "odd", "default": {"k": [1, None]}, "minimum": 1.5}}, "required": []}),
    ([{"type": "string"}], {}),
]


@pytest.mark.parametrize(("parameters", "expected"), GEMINI_SCHEMA_RULES)
async def test_gemini_schemas_keep_only_what_gemini_accepts(client: aiohttp.ClientSession, parameters: Any,
                                                            expected: Any) -> None:
    body = await sent(client, "gemini", {"messages": [{"role": "user", "content": "hi"}],
                                         "tools": [{"type": "function", "function": {"name": "t", "parameters": parameters}}]})
    assert body["tools"] == [{"functionDeclarations": [{"name": "t", "parameters": expected}]}]


GEMINI_MESSAGE_RULES: list[tuple[list[Any], dict[str, Any]]] = [
    # consecutive turns of one role merge; tool results join the user turn; empty system adds nothing
    ([{"role": "user", "content": "a"}, {"role": "system", "content": ""}, {"role": "user", "content": ["b", 7]},
      {"role": "developer", "content": [{"text": "d"}, "e"]}],
     {"contents": [{"role": "user", "parts": [{"text": "a"}, {"text": "b"}]}],
      "systemInstruction": {"parts": [{"text": "d\ne"}]}}),
    # a tool result's name: the latest call with its id, else its own name, else "tool"
    ([{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "function": {"name": "first", "arguments": "{}"}},
        {"id": "c2", "function": {"name": "second", "arguments": "oops"}}]},
      {"role": "tool", "tool_call_id": "c2", "content": "r2"},
      {"role": "tool", "tool_call_id": "zz", "name": "mine", "content": [{"text": "r3"}]},
      {"role": "tool", "content": None}],
     {"contents": [
         {"role": "model", "parts": [{"functionCall": {"name": "first", "args": {}}},
                                     {"functionCall": {"name": "second", "args": {"_raw": "oops"}}}]},
         {"role": "user", "parts": [{"functionResponse": {"name": "second", "response": {"content": "r2"}}},
                                    {"functionResponse": {"name": "mine", "response": {"content": "r3"}}},
                                    {"functionResponse": {"name": "tool", "response": {"content": ""}}}]}]}),
    # an assistant message with nothing to say is left out; empty user content is one empty text
    ([{"role": "assistant", "content": None}, {"role": "user", "content": []},
      {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}],
     {"contents": [{"role": "user", "parts": [{"text": ""}, {"text": ""}]}]}),
]


@pytest.mark.parametrize(("messages", "expected"), GEMINI_MESSAGE_RULES)
async def test_gemini_message_rules(client: aiohttp.ClientSession, messages: list[Any], expected: dict[str, Any]) -> None:
    body = await sent(client, "gemini", {"messages": messages})
    assert {k: v for k, v in body.items() if k != "generationConfig"} == expected


# ------------------------------------------------------------------ mistral
MISTRAL_TOOLS = [{"type": "function", "function": {"name": "noop", "description": "the noop tool", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]

MISTRAL_RULES = [
    ({"tool_choice": "required"}, {"tool_choice": "any"}),
    ({"tool_choice": "auto"}, {"tool_choice": "auto"}),
    ({"tool_choice": {"type": "function", "function": {"name": "noop"}}},
     {"tool_choice": {"type": "function", "function": {"name": "noop"}}}),
    ({"extra": {"top_p": 0.9, "random_seed": 3, "stop": ["\n"], "prompt_mode": "reasoning", "seed": 1, "top_k": 4,
                "response_format": {"type": "json_object", "schema": None}}},
     {"top_p": 0.9, "random_seed": 3, "stop": ["\n"], "prompt_mode": "reasoning",
      "response_format": {"type": "json_object"}}),
    ({"temperature": 0.2, "max_tokens": 99}, {"stream": False, "temperature": 0.2, "max_tokens": 99}),
]


@pytest.mark.parametrize(("fields", "expected"), MISTRAL_RULES)
async def test_mistral_rules(client: aiohttp.ClientSession, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    body = await sent(client, "mistral", {"model": "mistral-small", "thinking": True, "tools": MISTRAL_TOOLS, "messages": [
        {"role": "system", "content": "be brief", "reasoning_content": "x", "weird": 1},
        {"role": "assistant", "content": None, "prefix": True, "tool_calls": [
            {"id": "call_1", "index": 0, "type": "function", "function": {"name": "noop", "arguments": "{}"}},
            {"id": "abcDEF123", "type": "function", "function": {"name": "noop", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "noop", "content": "ok"}], **fields})
    for key, value in expected.items():
        assert body[key] == value
    assert "seed" not in body and "top_k" not in body and "thinking" not in body
    assert body["messages"] == [  # Mistral wants 9-character ids: others are hashed, the same way each round
        {"role": "system", "content": "be brief"},
        {"role": "assistant", "prefix": True, "tool_calls": [
            {"id": "Osxvt64VW", "type": "function", "function": {"name": "noop", "arguments": "{}"}},
            {"id": "abcDEF123", "type": "function", "function": {"name": "noop", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "Osxvt64VW", "name": "noop", "content": "ok"}]


# ------------------------------------------------------------------ ollama
OLLAMA_TOOLS = [
    {"type": "function", "function": {"name": "get_time", "description": "the time",
                                      "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
]

OLLAMA_RULES: list[tuple[dict[str, Any], dict[str, Any], bool]] = [
    # (request fields, expected top-level fields (None: absent), streamed)
    ({}, {"options": None, "think": None, "tools": OLLAMA_TOOLS, "stream": False}, False),
    ({"temperature": 0, "max_tokens": 64}, {"options": {"temperature": 0, "num_predict": 64}}, False),
    ({"temperature": 0.2, "max_tokens": 64, "extra": {"temperature": 0.9, "num_predict": 8, "seed": 7}},
     {"options": {"temperature": 0.9, "num_predict": 8, "seed": 7}}, False),  # extra keys override
    ({"extra": {"format": "json", "keep_alive": 0}}, {"format": "json", "keep_alive": 0, "options": None}, False),
    ({"extra": {"num_ctx": 4096, "stop": ["\n"], "gone": None}}, {"options": {"num_ctx": 4096, "stop": ["\n"]}}, False),
    ({"thinking": True}, {"options": None, "think": True, "stream": True}, True),
    ({"thinking": False}, {"options": None, "think": None}, False),
]


@pytest.mark.parametrize(("fields", "expected", "stream"), OLLAMA_RULES)
async def test_ollama_rules(client: aiohttp.ClientSession, fields: dict[str, Any], expected: dict[str, Any],
                            stream: bool) -> None:
    body = await sent(client, "ollama", {"model": "llama3.2", "tools": OLLAMA_TOOLS, "tool_choice": "required",
                                         "messages": [{"role": "developer", "content": "b"},
                                                      {"role": "user", "content": "hi"}], **fields}, stream=stream)
    assert body["messages"] == [{"role": "system", "content": "b"}, {"role": "user", "content": "hi"}]
    assert "tool_choice" not in body and "max_tokens" not in body and "temperature" not in body
    for key, value in expected.items():
        assert body.get(key) == value
