"""What the Lua adapters cost per request, response and stream chunk, as the daemon runs them.

    .venv/bin/python bench/bench_adapters.py [--quick]

The Lua adapters are the one implementation of each wire format: every request
body, response and stream payload goes through the shipped script. Per request:
``request_parts`` + ``Adapter.build_request``, exactly the provider's path, timed
against the same run's ``orjson.dumps`` of the same unified request (the
serialisation any implementation pays; "Lua adds" is the rest). The per-adapter
rows are tool loops, timed ``cold`` (a request never seen: every message
converted) and ``round`` (the conversation's earlier requests were sent, as in every
LLM round: the adapters that rebuild the history reuse the messages they converted
then). A second table repeats the rounds with the CPU caches evicted before each
request, as between the LLM rounds of a real turn. Per response and per chunk:
the adapter through the harness, against ``orjson.loads`` of the same payload.
Everything runs on one event loop, as in the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from homeagent.providers.adapter import Adapter, RequestContext, request_parts
from homeagent.providers.adapter_loader import AdapterLoader

ADAPTERS = ("openai", "deepseek", "anthropic", "gemini", "ollama", "mistral")
SIZES = {"typical": (20, 5, 120), "large": (60, 30, 300)}  # messages, tools, words of text per message
ROUNDS = 5  # timed rounds per conversation (its last ones)


def make_request(n_messages: int, n_tools: int, text: int, tag: str = "") -> dict[str, Any]:
    """A request of about ``n_messages`` text messages; ``tag`` makes every message's text unique."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are HomeAgent. " * (text // 20 + 1)}]
    for i in range(n_messages // 2):
        messages.append({"role": "user", "content": f"{tag}question {i} " + "word " * (text // 5)})
        messages.append({"role": "assistant", "content": f"{tag}answer {i} " + "text " * (text // 5)})
    messages.append({"role": "user", "content": f"{tag}and now?"})
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": "does a useful thing with its arguments " * 2,
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]}}} for i in range(n_tools)]
    req: dict[str, Any] = {"model": "gpt-bench", "messages": messages, "stream": True, "thinking": False,
                           "temperature": 0.7, "max_tokens": 1024}
    if tools:
        req["tools"] = tools
    return req


def tool_round(tag: str, k: int, text: int) -> list[dict[str, Any]]:
    """One tool-loop round: the assistant's tool call and its result."""
    call_id = f"call_{tag}{k}"
    return [{"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": f"tool_{k % 5}", "arguments": json.dumps({"query": f"{tag} step {k}", "limit": 5})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": f"{tag} result {k}: " + "data " * (text // 5)}]


def conversation(n_messages: int, n_tools: int, text: int, tag: str) -> list[dict[str, Any]]:
    """A tool loop's requests: system + user, then each request is the previous one plus a tool
    call and its result, up to ``n_messages`` messages."""
    out = [make_request(0, n_tools, text, tag)]
    k = 0
    while len(out[-1]["messages"]) + 2 <= n_messages:
        prev = out[-1]
        out.append({**prev, "messages": prev["messages"] + tool_round(tag, k, text)})
        k += 1
    return out


def response_body(n_calls: int, text: int) -> str:
    msg: dict[str, Any] = {"role": "assistant", "content": "The answer is " + "x" * text}
    if n_calls:
        msg["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                              "function": {"name": "tool", "arguments": json.dumps({"q": "v" * 40, "n": i})}}
                             for i in range(n_calls)]
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt",
                       "choices": [{"index": 0, "message": msg, "finish_reason": "stop", "logprobs": None}],
                       "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                                 "prompt_tokens_details": {"cached_tokens": 64}}})


CHUNKS = {
    "content delta": json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt",
                                 "choices": [{"index": 0, "delta": {"content": "Hello, wor"}, "finish_reason": None}]}),
    "tool-call fragment": json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                                      "model": "gpt", "choices": [{"index": 0, "delta": {"tool_calls": [
                                          {"index": 1, "function": {"arguments": "{\"q\": \"cats"}}]},
                                          "finish_reason": None}]}),
    "usage (ends every stream)": json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                                             "model": "gpt", "choices": [], "usage": {
                                                 "prompt_tokens": 1200, "completion_tokens": 80, "total_tokens": 1280,
                                                 "prompt_tokens_details": {"cached_tokens": 1024},
                                                 "completion_tokens_details": {"reasoning_tokens": 0}}}),
    "[DONE]": "[DONE]",
}

OTHER_CHUNKS = {
    "anthropic": json.dumps({"type": "content_block_delta", "index": 0,
                             "delta": {"type": "text_delta", "text": "Hello, wor"}}),
    "gemini": json.dumps({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hello, wor"}]},
                                          "index": 0}], "modelVersion": "gemini"}),
    "ollama": json.dumps({"model": "llama", "created_at": "2025-01-01T00:00:00Z",
                          "message": {"role": "assistant", "content": "Hello, wor"}, "done": False}),
}


async def timeit(fn: Callable[[], Awaitable[Any]] | Callable[[], Any], n: int, is_async: bool) -> float:
    """Median of 5 batches, µs per call."""
    batches = []
    per = max(1, n // 5)
    for _ in range(5):
        start = time.process_time()
        if is_async:
            for _ in range(per):
                await fn()  # type: ignore[misc]
        else:
            for _ in range(per):
                fn()
        batches.append((time.process_time() - start) / per * 1e6)
    return statistics.median(batches)


_TRASH_FROM, _TRASH_TO = bytearray(16 * 1024 * 1024), bytearray(16 * 1024 * 1024)


def evict_caches() -> None:
    """Copy 16 MB: what an LLM round's network and Python work does to the CPU caches between two requests."""
    _TRASH_TO[:] = _TRASH_FROM


async def build(adapter: Adapter, actx: Any, req: dict[str, Any]) -> bytes:
    return await adapter.build_request(request_parts(req), actx)


async def time_requests(adapter: Adapter, actx: Any, kind: str, cold: list[dict[str, Any]],
                        convs: list[list[dict[str, Any]]], evict: bool = False) -> tuple[float, float]:
    """µs per request (median), the adapter and orjson.dumps of the same requests."""
    lua: list[float] = []
    dumps: list[float] = []

    async def one(req: dict[str, Any]) -> None:
        if evict:
            evict_caches()
        start = time.perf_counter()
        await build(adapter, actx, req)
        lua.append(time.perf_counter() - start)
        if evict:
            evict_caches()
        start = time.perf_counter()
        orjson.dumps(req)
        dumps.append(time.perf_counter() - start)

    if kind == "cold":
        for req in cold:
            await one(req)
    for conv in convs if kind == "round" else ():
        for req in conv[:-ROUNDS]:  # the conversation so far, not timed
            await build(adapter, actx, req)
        for req in conv[-ROUNDS:]:
            await one(req)
    return statistics.median(lua) * 1e6, statistics.median(dumps) * 1e6


def row(label: str, size: int, lua_us: float, base_us: float) -> str:
    return f"| {label} | {size:,} | {lua_us:.1f} | {base_us:.1f} | **{lua_us - base_us:.1f}** |"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    scale = 1 if args.quick else 5
    loader = AdapterLoader()

    async def ctx_of(adapter: Adapter) -> Any:
        return await adapter.context(RequestContext(model="gpt-bench", stream=True, thinking=False))

    openai = loader.get("openai")
    calibrate = openai.sandbox.load_trusted(
        "return function(n) local c = os.clock local t = c() local x = 0 for i = 1, n do x = x + i end "
        "return (c() - t) / n * 1e9 end", "calibrate")
    loop_ns = min(calibrate(2_000_000) for _ in range(3))
    sample = CHUNKS["content delta"]
    loads_us = await timeit(lambda: json.loads(sample), 20000, False)
    print(f"machine: Lua for-loop iteration {loop_ns:.1f} ns, Python json.loads({len(sample)} B) {loads_us:.2f} µs "
          "(a quiet modern x86 core: ~1 ns and ~1.5 µs)")
    print()
    print("per request, request_parts + build_request (the provider's path) against orjson.dumps of the same request")
    print("| request | bytes | adapter µs | orjson.dumps µs | **adapter adds µs** |")
    print("|---|---|---|---|---|")
    serial = iter(range(10**9))
    for name in ADAPTERS:
        adapter = loader.get(name)
        actx = await ctx_of(adapter)
        for size, (n_msgs, n_tools, text) in SIZES.items():
            n = 300 * scale if size == "typical" else 40 * scale
            convs = [conversation(n_msgs, n_tools, text, f"t{next(serial)} ") for _ in range(n // ROUNDS)]
            cold = [conversation(n_msgs, n_tools, text, f"c{next(serial)} ")[-1] for _ in range(n)]
            body = await build(adapter, actx, cold[0])
            json.loads(body)  # valid JSON
            for kind in ("cold", "round"):
                lua_us, base_us = await time_requests(adapter, actx, kind, cold, convs)
                print(row(f"{name} {size} {kind}", len(body), lua_us, base_us))
    print()
    print("the same round requests with the CPU caches evicted before each (16 MB copied, not timed), as between")
    print("the LLM rounds of a real turn")
    print("| request | bytes | adapter µs | orjson.dumps µs | **adapter adds µs** |")
    print("|---|---|---|---|---|")
    for name in ADAPTERS:
        adapter = loader.get(name)
        actx = await ctx_of(adapter)
        for size in ("typical", "large"):
            n_msgs, n_tools, text = SIZES[size]
            convs = [conversation(n_msgs, n_tools, text, f"e{next(serial)} ") for _ in range(40 * scale // ROUNDS)]
            lua_us, base_us = await time_requests(adapter, actx, "round", [], convs, evict=True)
            print(row(f"{name} {size} round, caches cold", len(await build(adapter, actx, convs[0][-1])), lua_us,
                      base_us))
    print()
    print("per response and stream payload, the adapter against orjson.loads of the same text")
    print("| payload | bytes | adapter µs | orjson.loads µs | **adapter adds µs** |")
    print("|---|---|---|---|---|")
    octx = await ctx_of(openai)
    for label, raw in {"response text": response_body(0, 400), "response 3 tool calls": response_body(3, 40)}.items():
        async def parse(raw: str = raw) -> Any:
            return await openai.parse_response(raw, octx)

        lua_us = await timeit(parse, 1000 * scale, True)
        print(row(f"openai {label}", len(raw), lua_us, await timeit(lambda raw=raw: orjson.loads(raw), 1000, False)))
    payloads = {f"openai chunk {label}": ("openai", line) for label, line in CHUNKS.items()}
    payloads.update({f"{name} chunk content delta": (name, line) for name, line in OTHER_CHUNKS.items()})
    for label, (name, line) in payloads.items():
        adapter = loader.get(name)
        actx, state = await ctx_of(adapter), adapter.new_stream_state()

        async def chunk(adapter: Adapter = adapter, line: str = line, state: Any = state, actx: Any = actx) -> Any:
            return await adapter.parse_chunks([line], state, actx)

        lua_us = await timeit(chunk, 4000 * scale, True)
        base_us = await timeit(lambda line=line: orjson.loads(line) if line != "[DONE]" else None, 4000 * scale, False)
        print(row(label, len(line), lua_us, base_us))


if __name__ == "__main__":
    asyncio.run(main())
