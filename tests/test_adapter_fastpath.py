"""The host-side stream fast paths (``stream_format``) give exactly what the Lua path gives."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from homeagent.providers.adapter_loader import (
    NO_CHUNK,
    AdapterError,
    AdapterLoader,
    FastResult,
    ParsedChunk,
    RequestContext,
    anthropic_chunk_fast,
    gemini_chunk_fast,
    ollama_chunk_fast,
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
    # the usage chunk that ends every OpenAI stream (stream_options.include_usage), and DeepSeek's
    json.dumps({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13,
                                         "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0},
                                         "completion_tokens_details": {"reasoning_tokens": 1}}}),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
                                         "prompt_cache_hit_tokens": 5, "prompt_cache_miss_tokens": 2}}),
    chunk({}, "stop", usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}),
]

LONE = '{"choices": [{"delta": {"content": "lone \\ud800 surrogate"}}]}'

# Shapes the fast path may decline; the Lua result is then the answer, so both must agree when it doesn't.
ODD = [
    chunk({"content": "x"}, None, usage={"prompt_tokens": 3, "completion_tokens": 4}),
    chunk({}, "stop", usage=None),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}),
    json.dumps({"x_groq": {"id": "req_1"}, "choices": [{"delta": {"content": "g"}}]}),
    json.dumps({"x_groq": {"usage": {"prompt_tokens": 5}}, "choices": []}),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3,
                                         "prompt_tokens_details": {"cached_tokens": 1}, "prompt_cache_hit_tokens": 2}}),
    json.dumps({"choices": [], "usage": {"prompt_tokens": "1", "completion_tokens": 2, "total_tokens": 3}}),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 1.5, "completion_tokens": 2, "total_tokens": 3}}),
    json.dumps({"choices": [], "usage": {"prompt_tokens": True, "completion_tokens": 2, "total_tokens": 3}}),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3,
                                         "input_tokens": 9}}),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3,
                                         "prompt_tokens_details": None, "completion_tokens_details": [1]}}),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 2**60, "completion_tokens": 2, "total_tokens": 3}}),
    json.dumps({"choices": [], "usage": [1, 2]}),
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
        if rnd.random() < 0.2:
            usage = {key: pick() if rnd.random() < 0.2 else rnd.randint(0, 99)
                     for key in ("prompt_tokens", "completion_tokens", "total_tokens", "prompt_cache_hit_tokens",
                                 "input_tokens", "reasoning_tokens") if rnd.random() < 0.7}
            for key, sub in (("prompt_tokens_details", "cached_tokens"), ("completion_tokens_details", "reasoning_tokens")):
                if rnd.random() < 0.4:
                    usage[key] = {sub: rnd.randint(0, 9) if rnd.random() < 0.8 else pick()} if rnd.random() < 0.9 else pick()
            doc["usage"] = rnd.choice([None, usage, usage, pick()])
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
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as c:
        yield c


async def test_streamed_reply_over_http_with_the_fast_path(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
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
    body = (await adapter.build_request(request_parts(req), ctx)).decode()
    doc = json.loads(body)  # strict: raw control characters would fail here
    found = strings_in(doc)
    for text in TRICKY:
        assert any(text in s for s in found), (name, text)
    assert "\u0001" not in body and "\n" not in body


# ------------------------------------------------------------------ anthropic / gemini / ollama
ODD_SCALARS: list[Any] = [None, "", "text", "ü😀 \"q\" \\ \n", 0, 3, -1, 2.5, True, False, [], {}, ["a"], {"k": "v"},
                          2**60, "1"]


def _maybe(rnd: random.Random, good: Any, p: float = 0.8) -> Any:
    return good if rnd.random() < p else rnd.choice(ODD_SCALARS)


def anthropic_lines(n: int, seed: int = 11) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rnd.choice(["content_block_delta"] * 5 + ["content_block_start"] * 2 + [
            "content_block_stop", "ping", "message_start", "message_delta", "message_stop", "error", "odd", None, 4])
        doc: dict[str, Any] = {"type": kind}
        if rnd.random() < 0.8:
            doc["index"] = _maybe(rnd, rnd.choice([0, 1, 7]))
        if kind == "content_block_delta":
            dtype = rnd.choice(["text_delta", "text_delta", "thinking_delta", "input_json_delta", "signature_delta",
                                "citations_delta", "other", None, 3])
            delta: dict[str, Any] = {"type": dtype}
            for key in ("text", "thinking", "partial_json", "signature"):
                if rnd.random() < 0.5:
                    delta[key] = _maybe(rnd, "s" + str(rnd.random()))
            doc["delta"] = _maybe(rnd, delta, 0.9)
        elif kind == "content_block_start":
            btype = rnd.choice(["text", "thinking", "tool_use", "server_tool_use", None])
            block: dict[str, Any] = {"type": btype}
            for key, good in (("text", rnd.choice(["", "start"])), ("thinking", rnd.choice(["", "hm"])),
                              ("id", "toolu_1"), ("name", "lookup"), ("input", {})):
                if rnd.random() < 0.5:
                    block[key] = _maybe(rnd, good)
            doc["content_block"] = _maybe(rnd, block, 0.9)
        elif kind == "message_start":
            doc["message"] = {"usage": {"input_tokens": 5, "cache_read_input_tokens": _maybe(rnd, 2)}}
        elif kind == "message_delta":
            doc["delta"] = {"stop_reason": _maybe(rnd, "end_turn")}
            doc["usage"] = {"output_tokens": 9}
        elif kind == "error":
            doc["error"] = {"type": "overloaded_error", "message": "busy"}
        out.append(json.dumps(doc if rnd.random() < 0.97 else rnd.choice(ODD_SCALARS), ensure_ascii=rnd.random() < 0.5))
    return out


def gemini_lines(n: int, seed: int = 13) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        parts: list[Any] = []
        for _ in range(rnd.randint(0, 3)):
            r = rnd.random()
            if r < 0.15:
                parts.append({"functionCall": _maybe(rnd, {"name": "lookup", "args": {"q": "x"}})})
            elif r < 0.2:
                parts.append({"inlineData": {"mimeType": "image/png", "data": "AA=="}})
            elif r < 0.25:
                parts.append(rnd.choice(ODD_SCALARS))
            else:
                part: dict[str, Any] = {"text": _maybe(rnd, "t" + str(rnd.random()), 0.85)}
                if rnd.random() < 0.4:
                    part["thought"] = rnd.choice([True, False, None, 0, "", "yes"])
                parts.append(part)
        cand: dict[str, Any] = {"content": _maybe(rnd, {"role": "model", "parts": _maybe(rnd, parts, 0.95)}, 0.95),
                                "index": 0}
        if rnd.random() < 0.15:
            cand["finishReason"] = rnd.choice(["STOP", "MAX_TOKENS", "SAFETY", "ODD", None, 5])
        doc: dict[str, Any] = {"candidates": _maybe(rnd, [cand], 0.9), "modelVersion": "gemini-x"}
        if rnd.random() < 0.6:
            usage = {key: _maybe(rnd, rnd.randint(0, 500), 0.85) for key in (
                "promptTokenCount", "candidatesTokenCount", "totalTokenCount", "cachedContentTokenCount",
                "thoughtsTokenCount") if rnd.random() < 0.7}
            doc["usageMetadata"] = _maybe(rnd, usage, 0.9)
        if rnd.random() < 0.05:
            doc["promptFeedback"] = {"blockReason": "SAFETY"}
        if rnd.random() < 0.05:
            doc["error"] = _maybe(rnd, {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"})
        out.append(json.dumps(doc if rnd.random() < 0.97 else rnd.choice(ODD_SCALARS), ensure_ascii=rnd.random() < 0.5))
    return out


def ollama_lines(n: int, seed: int = 17) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        msg: dict[str, Any] = {"role": "assistant"}
        for key in ("content", "thinking"):
            if rnd.random() < 0.7:
                msg[key] = _maybe(rnd, "w" + str(rnd.random()), 0.85)
        if rnd.random() < 0.15:
            msg["tool_calls"] = _maybe(rnd, [{"function": {"name": "lookup", "arguments": {"q": "x"}}}])
        doc: dict[str, Any] = {"model": "llama", "created_at": "2025-01-01T00:00:00Z", "message": _maybe(rnd, msg, 0.9),
                               "done": rnd.choice([False] * 6 + [True, None, 0, "no"])}
        if doc["done"] is True:
            doc.update(done_reason=rnd.choice(["stop", "length", None]), prompt_eval_count=12, eval_count=_maybe(rnd, 4))
        if rnd.random() < 0.05:
            doc["error"] = _maybe(rnd, "model not found")
        out.append(json.dumps(doc if rnd.random() < 0.97 else rnd.choice(ODD_SCALARS), ensure_ascii=rnd.random() < 0.5))
    return out


def _ant(delta: dict[str, Any], index: int = 0) -> str:
    return json.dumps({"type": "content_block_delta", "index": index, "delta": delta}, ensure_ascii=False)


ANTHROPIC_COMMON = [
    _ant({"type": "text_delta", "text": "Hello, wor"}),
    _ant({"type": "text_delta", "text": "中文 😀 \"q\" \\ \n\t\u0001"}),
    _ant({"type": "thinking_delta", "thinking": "hmm"}),
    _ant({"type": "input_json_delta", "partial_json": "{\"q\": \"ca"}, 2),
    _ant({"type": "signature_delta", "signature": "EqQBCgIYAhIM"}),
    json.dumps({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    json.dumps({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
    json.dumps({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "pre"}}),
    json.dumps({"type": "content_block_stop", "index": 0}),
    json.dumps({"type": "ping"}),
]
ANTHROPIC_LUA = [  # declined: the Lua parser answers
    json.dumps({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3, "output_tokens": 1}}}),
    json.dumps({"type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}}),
    json.dumps({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
    json.dumps({"type": "message_stop"}),
    json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lone \\ud800"}}',
    '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a", "text": null}}',
    '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "raw \x01"}}',
]


def _gem(parts: list[dict[str, Any]], **extra: Any) -> str:
    return json.dumps({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}], **extra},
                      ensure_ascii=False)


USAGE = {"promptTokenCount": 9, "candidatesTokenCount": 3, "totalTokenCount": 14, "thoughtsTokenCount": 2}
GEMINI_COMMON = [
    _gem([{"text": "Hello, wor"}]),
    _gem([{"text": "中文 😀 \"q\" \\ \n"}], usageMetadata=USAGE, modelVersion="gemini-2.5", responseId="r1"),
    _gem([{"text": "thinking", "thought": True}, {"text": "answer"}]),
    _gem([{"text": "a"}, {"inlineData": {"mimeType": "image/png", "data": "AA=="}}]),
    json.dumps({"usageMetadata": USAGE}),
]
GEMINI_LUA = [
    _gem([{"functionCall": {"name": "lookup", "args": {"q": "x"}}}]),
    json.dumps({"candidates": [{"content": {"parts": [{"text": "end"}]}, "finishReason": "STOP"}],
                "usageMetadata": USAGE}),
    json.dumps({"promptFeedback": {"blockReason": "SAFETY"}}),
    json.dumps({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}),
    _gem([{"text": "x"}], usageMetadata={"promptTokenCount": "9"}),
    _gem([{"text": "x"}], usageMetadata={"promptTokenCount": 2**60}),
]


def _oll(msg: dict[str, Any], done: bool = False, **extra: Any) -> str:
    return json.dumps({"model": "llama", "created_at": "2025-01-01T00:00:00Z", "message": msg, "done": done, **extra},
                      ensure_ascii=False)


OLLAMA_COMMON = [
    _oll({"role": "assistant", "content": "Hello, wor"}),
    _oll({"role": "assistant", "content": "", "thinking": "hmm"}),
    _oll({"role": "assistant", "content": "中文 😀 \"q\" \\ \n"}),
]
OLLAMA_LUA = [
    _oll({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}),
    _oll({"role": "assistant", "content": ""}, True, done_reason="stop", prompt_eval_count=5, eval_count=2),
    json.dumps({"error": "model 'x' not found"}),
]

FORMATS: dict[str, tuple[Callable[[str], FastResult], list[str], list[str], Callable[[int], list[str]]]] = {
    "anthropic": (anthropic_chunk_fast, ANTHROPIC_COMMON, ANTHROPIC_LUA, anthropic_lines),
    "gemini": (gemini_chunk_fast, GEMINI_COMMON, GEMINI_LUA, gemini_lines),
    "ollama": (ollama_chunk_fast, OLLAMA_COMMON, OLLAMA_LUA, ollama_lines),
}


async def lua_with_state(loader: AdapterLoader, name: str, line: str) -> tuple[ParsedChunk | str | None, Any]:
    adapter = loader.get(name)
    ctx = adapter.context(RequestContext(model="m", stream=True, thinking=False))
    state = adapter.new_stream_state()
    try:
        got: ParsedChunk | str | None = await adapter.parse_chunk_lua(line, state, ctx)
    except AdapterError as exc:
        got = f"error: {exc.kind}"
    return got, adapter.sandbox.to_python(state)


async def mismatches(loader: AdapterLoader, name: str, fast: Callable[[str], FastResult],
                     lines: list[str]) -> list[str]:
    """Lines the fast parser takes but answers differently from the adapter's Lua (or where Lua touches state)."""
    bad = []
    for line in lines:
        got = fast(line)
        if got is None:
            continue
        lua, state = await lua_with_state(loader, name, line)
        if (None if got is NO_CHUNK else got) != lua or state != {}:
            bad.append(line)
    return bad


@pytest.mark.parametrize("name", sorted(FORMATS))
async def test_native_formats_equal_lua(loader: AdapterLoader, name: str) -> None:
    fast, common, lua_only, fuzz = FORMATS[name]
    assert loader.get(name).stream_format == name
    lines = common + lua_only + fuzz(400)
    assert await mismatches(loader, name, fast, lines) == []
    for line in common:
        assert fast(line) is not None, line
    for line in lua_only:
        assert fast(line) is None, line
    taken = sum(fast(line) is not None for line in fuzz(400))
    assert 40 < taken < 360  # the fuzzer exercises both sides


@pytest.mark.parametrize("name", sorted(FORMATS))
async def test_native_formats_keep_the_stream_state_in_step(loader: AdapterLoader, name: str) -> None:
    """A whole stream through parse_chunk (fast + Lua) and through Lua alone: same chunks, same final state."""
    _, common, lua_only, fuzz = FORMATS[name]
    rnd = random.Random(5)
    lines = common * 3 + lua_only + fuzz(300)
    rnd.shuffle(lines)
    adapter = loader.get(name)
    ctx = adapter.context(RequestContext(model="m", stream=True, thinking=False))
    results = []
    for parse in (adapter.parse_chunk, adapter.parse_chunk_lua):
        state = adapter.new_stream_state()
        got: list[Any] = []
        for line in lines:
            try:
                got.append(await parse(line, state, ctx))
            except AdapterError as exc:
                got.append(exc.kind)
        results.append((got, adapter.sandbox.to_python(state)))
    assert results[0] == results[1]
    # gemini and ollama count tool calls in the state; anthropic.lua keeps none
    assert (results[0][1] == {}) == (name == "anthropic")


async def test_the_equivalence_check_catches_a_wrong_fast_path(loader: AdapterLoader) -> None:
    """Guards the guard: fast parsers that are wrong in small ways are caught by the same check."""

    def gemini_ignoring_calls(line: str) -> FastResult:
        doc = json.loads(line)
        if isinstance(doc, dict) and isinstance(doc.get("candidates"), list) and doc["candidates"]:
            cand = doc["candidates"][0]
            if isinstance(cand, dict) and isinstance(cand.get("content"), dict):
                parts = cand["content"].get("parts")
                if isinstance(parts, list) and any(isinstance(p, dict) and "functionCall" in p for p in parts):
                    return ParsedChunk()  # forgets the call and the state update
        return gemini_chunk_fast(line)

    def ollama_keeping_raw_surrogates(line: str) -> FastResult:
        doc = json.loads(line)
        if isinstance(doc, dict) and isinstance(doc.get("message"), dict) and not doc.get("done"):
            content = doc["message"].get("content")
            if isinstance(content, str) and "\ud800" in content:
                return ParsedChunk(content=content)
        return ollama_chunk_fast(line)

    def anthropic_dropping_index(line: str) -> FastResult:
        got = anthropic_chunk_fast(line)
        if isinstance(got, ParsedChunk) and got.tool_calls:
            return ParsedChunk(tool_calls=[(0, *got.tool_calls[0][1:])])
        return got

    assert await mismatches(loader, "gemini", gemini_ignoring_calls, GEMINI_LUA + gemini_lines(100))
    assert await mismatches(loader, "ollama", ollama_keeping_raw_surrogates, [json.dumps({"message": {"content": "x \ud800 y"}})])
    assert await mismatches(loader, "anthropic", anthropic_dropping_index, ANTHROPIC_COMMON)
