"""The host-side stream fast path (``stream_format = "openai"``) gives exactly what the Lua path gives."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from homeagent.providers.adapter_loader import (
    AdapterError,
    AdapterLoader,
    ParsedChunk,
    RequestContext,
    openai_chunk_fast,
    request_parts,
)
from homeagent.providers.base import ChatRequest
from homeagent.providers.lua_provider import LuaAdaptedProvider
from tests.fakes.llm_openai import FakeOpenAI, Turn

OPENAI_LIKE = ("openai", "deepseek", "github", "groq", "mistral", "kimi", "server")


def chunk(delta: Any = None, finish: Any = None, **top: Any) -> str:
    choice: dict[str, Any] = {"index": 0, "delta": {} if delta is None else delta, "finish_reason": finish}
    return json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [choice], **top}, ensure_ascii=False)


COMMON = [
    "[DONE]",
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hello, wor"}),
    chunk({"content": "中文 и emoji 😀 \"quoted\" \\ back\nnew line\t\u0001"}),
    chunk({"reasoning_content": "thinking..."}),
    chunk({"reasoning": "groq style"}),
    chunk({"content": None, "reasoning_content": "r"}),
    chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                           "function": {"name": "lookup", "arguments": ""}}]}),
    chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{\"q\": \"cats"}}]}),
    chunk({"tool_calls": [{"function": {"arguments": "x"}}, {"function": {"name": "b"}}]}),
    chunk({}, "stop"),
    chunk({}, "tool_calls"),
    chunk({"content": "x"}, None, system_fingerprint="fp", obfuscation="abc", service_tier="default"),
    json.dumps({"choices": []}),
    json.dumps({"id": "no choices"}),
    json.dumps({"choices": [{"message": {"content": "whole message"}, "finish_reason": "stop"}]}),
    '{"choices": [{"delta": {"content": "\\ud83d\\ude00 escaped pair"}}]}',
]

LONE = '{"choices": [{"delta": {"content": "lone \\ud800 surrogate"}}]}'

# Shapes the fast path may decline; the Lua result is then the answer, so both must agree when it doesn't.
ODD = [
    chunk({"content": "x"}, None, usage={"prompt_tokens": 3, "completion_tokens": 4}),
    chunk({}, "stop", usage=None),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}),
    json.dumps({"x_groq": {"id": "req_1"}, "choices": [{"delta": {"content": "g"}}]}),
    json.dumps({"x_groq": {"usage": {"prompt_tokens": 5}}, "choices": []}),
    json.dumps({"choices": [{"delta": {"content": "k"}, "usage": {"prompt_tokens": 9}}]}),
    json.dumps({"error": {"message": "overloaded", "type": "server_error"}}),
    json.dumps({"error": None, "choices": [{"delta": {"content": "e"}}]}),
    json.dumps({"error": False, "choices": []}),
    chunk({"content": [{"type": "text", "text": "a"}, {"type": "thinking", "thinking": "b"}]}),
    chunk({"content": 42}),
    chunk({"content": True}),
    chunk({"content": False}),
    chunk({"reasoning_content": "", "reasoning": "second"}),
    chunk({"reasoning_content": False, "reasoning": "second"}),
    chunk({"reasoning_content": "first", "reasoning": 5}),
    chunk({"reasoning_content": {"a": 1}}),
    chunk({}, 7),
    chunk({}, False),
    chunk({"tool_calls": {"0": {"function": {"name": "x"}}}}),
    chunk({"tool_calls": "nope"}),
    chunk({"tool_calls": [None]}),
    chunk({"tool_calls": [{"index": "2", "function": {"name": "n"}}]}),
    chunk({"tool_calls": [{"index": 2.0, "function": {"name": "n"}}]}),
    chunk({"tool_calls": [{"index": True, "stream_index": 3, "function": {"name": "n"}}]}),
    chunk({"tool_calls": [{"stream_index": 4, "function": {"name": "n"}}]}),
    chunk({"tool_calls": [{"index": 2**60, "function": {"name": "n"}}]}),
    chunk({"tool_calls": [{"index": 0, "id": 17, "function": {"name": "n"}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"name": 3, "arguments": {"a": 1}}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"name": "n", "arguments": None, "raw_arguments": "raw"}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"name": "n", "arguments": 12}}]}),
    chunk({"tool_calls": [{"index": 0, "function": [1, 2]}]}),
    chunk({"tool_calls": [{"index": 0, "function": None, "name": "flat", "arguments": "{}"}]}),
    json.dumps({"choices": [{"delta": None, "message": {"content": "m"}}]}),
    json.dumps({"choices": [{"delta": "text"}]}),
    json.dumps({"choices": [None]}),
    json.dumps({"choices": "x"}),
    json.dumps({"choices": {"0": {}}}),
    json.dumps([1, 2, 3]),
    '"just a string"',
    "null",
    LONE,
    '{"choices": [{"delta": {"content": "low \\udc00 first"}}], "id": "\\u00e9"}',
    '{"choices": [{"delta": {"content": "raw \x01 control"}}]}',
    '{"choices": [{"delta": {"content": "nan"}}], "created": NaN}',
    '{"choices": [{"delta": {"content": "x"}}]} trailing',
    '{"choices": [{"delta": {"content": "bad \\q escape"}}]}',
    "not json at all",
    "",
    '{"choices": [{"delta": {"content": 1e400}}]}',
    '  {"choices": [{"delta": {"content": "spaced"}}]}  ',
]


def fuzz_lines(n: int, seed: int = 7) -> list[str]:
    """Random OpenAI-like chunks with fields of random types."""
    rnd = random.Random(seed)
    scalars: list[Any] = [None, "", "text", "ü😀", 0, 3, -1, 2.5, True, False, [], {}, ["a"], {"k": "v"}]

    def pick() -> Any:
        return rnd.choice(scalars)

    out = []
    for _ in range(n):
        delta: dict[str, Any] = {}
        for key in ("content", "reasoning_content", "reasoning", "role"):
            if rnd.random() < 0.5:
                delta[key] = pick() if rnd.random() < 0.4 else "s" + str(rnd.random())
        if rnd.random() < 0.4:
            calls = []
            for _ in range(rnd.randint(0, 3)):
                tc: dict[str, Any] = {}
                for key, choices in (("index", [0, 1, 5, None, "1", 1.5, True]), ("id", ["call_x", None, 4]),
                                     ("stream_index", [2, None])):
                    if rnd.random() < 0.6:
                        tc[key] = rnd.choice(choices)
                fn: dict[str, Any] = {}
                for key in ("name", "arguments", "raw_arguments"):
                    if rnd.random() < 0.6:
                        fn[key] = pick() if rnd.random() < 0.3 else '{"a": 1}'
                tc["function"] = fn if rnd.random() < 0.9 else pick()
                calls.append(tc)
            delta["tool_calls"] = calls if rnd.random() < 0.9 else pick()
        choice: dict[str, Any] = {"index": 0}
        choice["delta" if rnd.random() < 0.9 else "message"] = delta if rnd.random() < 0.9 else pick()
        if rnd.random() < 0.3:
            choice["finish_reason"] = rnd.choice(["stop", "length", None, 1, False])
        doc: dict[str, Any] = {"id": "c", "choices": [choice] if rnd.random() < 0.95 else pick()}
        if rnd.random() < 0.1:
            doc["usage"] = rnd.choice([None, {"prompt_tokens": 1, "completion_tokens": 2}])
        out.append(json.dumps(doc, ensure_ascii=rnd.random() < 0.5))
    return out


@pytest.fixture
def loader(tmp_path: Path) -> AdapterLoader:
    d = tmp_path / "adapters"
    d.mkdir()
    return AdapterLoader(user_dir=d)


async def via_lua(loader: AdapterLoader, name: str, line: str) -> ParsedChunk | str | None:
    adapter = loader.get(name)
    ctx = adapter.context(RequestContext(model="m", stream=True, thinking=False))
    try:
        return await adapter.parse_chunk_lua(line, adapter.new_stream_state(), ctx)
    except AdapterError as exc:
        return f"error: {exc.kind}"


@pytest.mark.parametrize("name", OPENAI_LIKE)
async def test_fast_path_equals_lua_for_every_openai_compatible_adapter(loader: AdapterLoader, name: str) -> None:
    assert loader.get(name).stream_format == "openai"
    for line in COMMON + ODD + fuzz_lines(150):
        fast = openai_chunk_fast(line)
        if fast is not None:
            assert fast == await via_lua(loader, name, line), f"{name}: {line!r}"


async def test_fast_path_takes_the_common_chunks(loader: AdapterLoader) -> None:
    for line in COMMON:
        assert openai_chunk_fast(line) is not None, line
    declined = [line for line in ODD if openai_chunk_fast(line) is None]
    assert len(declined) > len(ODD) // 2
    # what reaches the user is the same either way
    assert openai_chunk_fast(COMMON[3]) == ParsedChunk(content=json.loads(COMMON[3])["choices"][0]["delta"]["content"])
    lone = LONE
    assert "\\ud800" in lone and openai_chunk_fast(lone) is None
    result = await via_lua(loader, "openai", lone)
    assert isinstance(result, ParsedChunk) and result.content == "lone \ufffd surrogate"


async def test_fast_path_is_used_by_parse_chunk_and_falls_back_to_lua(loader: AdapterLoader) -> None:
    adapter = loader.get("kimi")
    ctx = adapter.context(RequestContext(model="m", stream=True, thinking=False))
    state = adapter.new_stream_state()
    got = await adapter.parse_chunk(chunk({"content": "hi"}), state, ctx)
    assert got == ParsedChunk(content="hi")
    # kimi's own Lua reads usage from inside the choice: declined by the fast path, handled by Lua
    usage_line = json.dumps({"choices": [{"delta": {}, "finish_reason": "stop",
                                          "usage": {"prompt_tokens": 7, "completion_tokens": 2}}]})
    got = await adapter.parse_chunk(usage_line, state, ctx)
    assert got is not None and got.usage == (7, 2, 0, 0, 0) and got.finish_reason == "stop"


async def test_user_adapter_without_stream_format_keeps_its_own_parser(loader: AdapterLoader) -> None:
    assert loader.user_dir is not None
    (loader.user_dir / "openai.lua").write_text(
        """
return {
  name = "openai", endpoint = "/chat/completions",
  transform_request = function(req) return openai_compat.request(req) end,
  transform_response = function(raw) return openai_compat.response(raw) end,
  transform_stream_chunk = function(line)
    local out = openai_compat.chunk(line)
    if out.content then out.content = string.upper(out.content) end
    return out
  end,
}
""",
        encoding="utf-8",
    )
    adapter = loader.get("openai")
    assert not adapter.builtin and adapter.stream_format == ""
    ctx = adapter.context(RequestContext(model="m", stream=True, thinking=False))
    got = await adapter.parse_chunk(chunk({"content": "shout"}), adapter.new_stream_state(), ctx)
    assert got is not None and got.content == "SHOUT"


async def test_unknown_stream_format_is_rejected_with_the_file_name(loader: AdapterLoader) -> None:
    assert loader.user_dir is not None
    path = loader.user_dir / "odd.lua"
    path.write_text('return { endpoint = "/x", stream_format = "sse-v2",\n'
                    "  transform_request = function(r) return r end,\n"
                    "  transform_response = function(r) return {} end }\n", encoding="utf-8")
    with pytest.raises(AdapterError) as err:
        loader.get("odd")
    assert str(path) in str(err.value) and "stream_format" in str(err.value) and "sse-v2" in str(err.value)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=False) as c:
        yield c


async def test_streamed_reply_over_http_with_the_fast_path(loader: AdapterLoader, client: httpx.AsyncClient) -> None:
    async with FakeOpenAI(prefix="") as fake:
        fake.script(Turn.text("the quick brown fox", chunks=4))
        provider = LuaAdaptedProvider("src", fake.base_url, "sk-test", "m-1", lambda: loader.get("openai"),
                                      http_client=client, adapter_name="openai")
        chunks = [c async for c in provider.chat_stream(ChatRequest(messages=[{"role": "user", "content": "hi"}]))]
    assert "".join(c.content for c in chunks) == "the quick brown fox"
    assert chunks[-1].finish_reason == "stop" or any(c.finish_reason == "stop" for c in chunks)


TRICKY = [
    'line one\nline "two" \\ back\tslash',
    "ctrl \u0001\u001f and del \u007f in a long enough string",
    "unicode 中文 ü and emoji 😀😀 long enough",
    "short\n",
    "</script> plain and long enough to be memoised",
]


def strings_in(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(strings_in(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(strings_in(v) for v in value)) if value else set()
    return set()


@pytest.mark.parametrize("name", ["openai", "deepseek", "anthropic", "gemini", "ollama", "mistral", "kimi"])
async def test_request_strings_survive_decode_and_encode(loader: AdapterLoader, name: str) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": TRICKY[0]}]
    for text in TRICKY:
        messages.append({"role": "user", "content": text})
        messages.append({"role": "assistant", "content": text, "reasoning_content": text})
    messages.append({"role": "user", "content": "last"})
    tools = [{"type": "function", "function": {"name": "t1", "description": TRICKY[1],
                                               "parameters": {"type": "object", "properties": {
                                                   "q": {"type": "string", "description": TRICKY[2]}}}}}]
    req = {"model": "m", "messages": messages, "stream": False, "thinking": False, "tools": tools}
    adapter = loader.get(name)
    ctx = adapter.context(RequestContext(model="m", stream=False, thinking=False))
    body = await adapter.build_request(request_parts(req), ctx)
    doc = json.loads(body)  # strict: raw control characters would fail here
    found = strings_in(doc)
    for text in TRICKY:
        assert any(text in s for s in found), (name, text)
    assert "\u0001" not in body and "\n" not in body
