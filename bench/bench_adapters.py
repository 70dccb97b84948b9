"""Cost of the Lua adapter transforms, against pure-Python transforms of the same payloads.

    .venv/bin/python bench/bench_adapters.py [--quick]

Per request: unified request dict -> JSON body text (Lua: orjson + decode,
transform_request, encode in Lua; Python: the same OpenAI transform on dicts +
orjson; the other adapters against the same transform written in Python, both
sides caching the tools conversion by the tools JSON text). The per-adapter rows are
tool loops, each timed twice: ``cold`` (a request never seen: every message converted)
and ``round`` (the conversation's earlier requests were sent: the Lua adapters reuse the
messages they converted then, keyed by each message's JSON text; the Python ports keep
nothing). Per response: raw body ->
content/usage/tool calls. Per stream chunk: one SSE data payload -> a chunk (Lua: the
adapter via the harness; Python: orjson.loads + field picking). Built-in adapters
declare a ``stream_format``: their plain delta chunks are parsed by the host
(``openai_chunk_fast`` & co.), the rest by Lua. Everything runs on one event loop, as
in the daemon; both sides are timed in the same run.

The shipped adapters' request bodies are built by the host in the daemon
(``native_requests.py``, ``native_<name>.py``); to time their Lua, this bench loads the same
files as a user's adapters (which always run their Lua: what a user's own adapter costs) and
prints the host-built bodies, as the daemon makes them, as extra rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from homeagent.providers.adapter_loader import BUILTIN_DIR, Adapter, AdapterLoader, RequestContext, request_parts
from homeagent.providers.native_requests import NATIVE_ADAPTERS, native_builder


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


def py_openai_request(req: dict[str, Any]) -> str:
    """What openai.lua does, written in Python."""
    messages = [m if "reasoning_content" not in m else {k: v for k, v in m.items() if k != "reasoning_content"}
                for m in req["messages"]]
    body: dict[str, Any] = {"model": req["model"], "messages": messages, "stream": bool(req.get("stream"))}
    if req.get("tools"):
        body["tools"] = req["tools"]
        if req.get("tool_choice") is not None:
            body["tool_choice"] = req["tool_choice"]
    if req.get("temperature") is not None:
        body["temperature"] = req["temperature"]
    if req.get("max_tokens") is not None:
        body["max_tokens"] = req["max_tokens"]
    if req.get("stream"):
        body["stream_options"] = {"include_usage": True}
    return _DUMPS(body)


def _DUMPS(value: Any) -> str:
    """The serialiser of both sides: the host's (orjson)."""
    return orjson.dumps(value).decode()


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(p if isinstance(p, str) else p["text"] for p in content
                     if isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str)))


def _args(arguments: Any) -> Any:
    if isinstance(arguments, dict):
        return arguments
    try:
        v = json.loads(arguments) if arguments else {}
    except ValueError:
        return {"_raw": arguments}
    return v if isinstance(v, dict | list) else {"_raw": arguments}


class ToolsCache:
    """Converted tools JSON text by the request's tools JSON text: what the Lua adapters keep too."""

    def __init__(self, convert: Callable[[list[dict[str, Any]]], Any]) -> None:
        self.convert = convert
        self.texts: dict[str, str] = {}

    def __call__(self, tools: list[dict[str, Any]]) -> str:
        key = _DUMPS(tools)
        hit = self.texts.get(key)
        if hit is None:
            hit = self.texts[key] = _DUMPS(self.convert(tools))
        return hit


def _with_raw(body: dict[str, Any], key: str, text: str | None) -> str:
    out = _DUMPS(body)
    return out if text is None else f'{out[:-1]},"{key}":{text}}}'


def _anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for t in tools:
        fn = t.get("function") or t
        out.append({"name": fn["name"], "description": fn.get("description"),
                    "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}})
    return out


def py_anthropic_request(req: dict[str, Any], cache: ToolsCache) -> str:
    """What anthropic.lua does (text messages, tool calls and results, tools), written in Python."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in req["messages"]:
        role = m["role"]
        if role in ("system", "developer"):
            t = _text_of(m.get("content"))
            if t:
                system.append(t)
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            t = _text_of(m.get("content"))
            if t:
                blocks.append({"type": "text", "text": t})
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or {}
                blocks.append({"type": "tool_use", "id": tc.get("id"), "name": fn.get("name"),
                               "input": _args(fn.get("arguments"))})
            if blocks:
                push("assistant", blocks)
        elif role == "tool":
            push("user", [{"type": "tool_result", "tool_use_id": m.get("tool_call_id"),
                           "content": _text_of(m.get("content")) or "(no output)"}])
        else:
            c = m.get("content")
            push("user", [{"type": "text", "text": c or " "}] if isinstance(c, str) else
                 [{"type": "text", "text": p["text"]} for p in c if p.get("text")])
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": "(continued)"}]})
    body: dict[str, Any] = {"model": req["model"], "messages": out, "max_tokens": req.get("max_tokens") or 8192,
                            "stream": bool(req.get("stream"))}
    if req.get("temperature") is not None:
        body["temperature"] = req["temperature"]
    if system:
        body["system"] = "\n\n".join(system)
    return _with_raw(body, "tools", cache(req["tools"]) if req.get("tools") else None)


_GEMINI_KEYS = {"type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems", "properties",
                "required", "minProperties", "maxProperties", "minLength", "maxLength", "pattern", "example", "anyOf",
                "propertyOrdering", "default", "items", "minimum", "maximum"}


def _gemini_schema(s: Any) -> Any:
    if not isinstance(s, dict):
        return s
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k == "properties" and isinstance(v, dict):
            out["properties"] = {name: _gemini_schema(sub) for name, sub in v.items()}
        elif k == "items":
            out["items"] = _gemini_schema(v)
        elif k == "anyOf" and isinstance(v, list):
            out["anyOf"] = [_gemini_schema(sub) for sub in v]
        elif k == "type" and isinstance(v, list):
            for t in v:
                if t == "null":
                    out["nullable"] = True
                elif "type" not in out:
                    out["type"] = t
        elif k == "const":
            out["enum"] = [v]
        elif k in _GEMINI_KEYS:
            out[k] = v
    return out


def _gemini_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    decls = []
    for t in tools:
        fn = t.get("function") or t
        decls.append({"name": fn["name"], "description": fn.get("description"),
                      "parameters": _gemini_schema(fn.get("parameters"))})
    return [{"functionDeclarations": decls}]


def py_gemini_request(req: dict[str, Any], cache: ToolsCache) -> str:
    """What gemini.lua does, written in Python."""
    system: list[dict[str, str]] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}

    def push(role: str, parts: list[dict[str, Any]]) -> None:
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for m in req["messages"]:
        role = m["role"]
        if role in ("system", "developer"):
            t = _text_of(m.get("content"))
            if t:
                system.append({"text": t})
        elif role == "assistant":
            parts: list[dict[str, Any]] = []
            t = _text_of(m.get("content"))
            if t:
                parts.append({"text": t})
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or {}
                names[tc.get("id") or ""] = fn.get("name")
                parts.append({"functionCall": {"name": fn.get("name"), "args": _args(fn.get("arguments"))}})
            if parts:
                push("model", parts)
        elif role == "tool":
            name = names.get(m.get("tool_call_id") or "") or m.get("name") or "tool"
            push("user", [{"functionResponse": {"name": name, "response": {"content": _text_of(m.get("content"))}}}])
        else:
            c = m.get("content")
            push("user", [{"text": c}] if isinstance(c, str) else [{"text": p["text"]} for p in c])
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": system}
    gen: dict[str, Any] = {}
    if req.get("temperature") is not None:
        gen["temperature"] = req["temperature"]
    if req.get("max_tokens") is not None:
        gen["maxOutputTokens"] = req["max_tokens"]
    if req.get("thinking"):
        gen["thinkingConfig"] = {"includeThoughts": True}
    if gen:
        body["generationConfig"] = gen
    return _with_raw(body, "tools", cache(req["tools"]) if req.get("tools") else None)


def py_ollama_request(req: dict[str, Any]) -> str:
    """What ollama.lua does, written in Python."""
    out = []
    names: dict[str, str] = {}
    for m in req["messages"]:
        role = m["role"]
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": _text_of(m.get("content"))}
        if role == "assistant":
            if isinstance(m.get("reasoning_content"), str):
                msg["thinking"] = m["reasoning_content"]
            if m.get("tool_calls"):
                calls = []
                for tc in m["tool_calls"]:
                    fn = tc.get("function") or {}
                    names[tc.get("id") or ""] = fn.get("name")
                    calls.append({"function": {"name": fn.get("name"), "arguments": _args(fn.get("arguments"))}})
                msg["tool_calls"] = calls
        elif role == "tool":
            msg["tool_name"] = names.get(m.get("tool_call_id") or "") or m.get("name")
        out.append(msg)
    body: dict[str, Any] = {"model": req["model"], "messages": out, "stream": bool(req.get("stream"))}
    if req.get("tools"):
        body["tools"] = req["tools"]
    options: dict[str, Any] = {}
    if req.get("temperature") is not None:
        options["temperature"] = req["temperature"]
    if req.get("max_tokens") is not None:
        options["num_predict"] = req["max_tokens"]
    if options:
        body["options"] = options
    if req.get("thinking"):
        body["think"] = True
    return _DUMPS(body)


_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_MISTRAL_FIELDS = {"role", "content", "name", "tool_calls", "tool_call_id", "prefix"}


def _short_id(value: Any) -> str:
    s = str(value or "")
    if len(s) == 9 and s.isalnum() and s.isascii():
        return s
    h1, h2 = 5381, 52711
    for b in s.encode():
        h1 = (h1 * 33 + b) % 2147483647
        h2 = (h2 * 31 + b * 7) % 2147483629
    x = h1 * 2147483629 + h2
    out = []
    for _ in range(9):
        out.append(_ALPHABET[x % 62])
        x //= 62
    return "".join(out)


def py_mistral_request(req: dict[str, Any]) -> str:
    """What mistral.lua does, written in Python."""
    messages = []
    for m in req["messages"]:
        c = {k: v for k, v in m.items() if k in _MISTRAL_FIELDS}
        if m.get("tool_calls"):
            c["tool_calls"] = [{"id": _short_id(tc.get("id")), "type": "function", "function": tc.get("function")}
                               for tc in m["tool_calls"]]
        if m.get("tool_call_id"):
            c["tool_call_id"] = _short_id(m["tool_call_id"])
        messages.append(c)
    body: dict[str, Any] = {"model": req["model"], "messages": messages, "stream": bool(req.get("stream"))}
    for key in ("temperature", "max_tokens"):
        if req.get(key) is not None:
            body[key] = req[key]
    if req.get("tools"):
        body["tools"] = req["tools"]
        choice = req.get("tool_choice")
        if choice is not None:
            body["tool_choice"] = "any" if choice == "required" else choice
    return _DUMPS(body)


def py_openai_response(raw: str) -> tuple[Any, ...]:
    r = orjson.loads(raw)
    choice = r["choices"][0]
    msg = choice.get("message") or {}
    u = r.get("usage") or {}
    calls = [(c.get("id", ""), c["function"]["name"], c["function"].get("arguments", ""))
             for c in msg.get("tool_calls") or []]
    return (msg.get("content") or "", msg.get("reasoning_content") or "", choice.get("finish_reason"),
            u.get("prompt_tokens", 0), u.get("completion_tokens", 0),
            (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0), calls)


def py_openai_chunk(line: str) -> tuple[Any, ...] | None:
    if line == "[DONE]":
        return ("done",)
    r = orjson.loads(line)
    choice = (r.get("choices") or [None])[0]
    if choice is None:
        return ("usage", r.get("usage"))
    d = choice.get("delta") or {}
    calls = [(c.get("index", 0), c.get("id", ""), (c.get("function") or {}).get("name", ""),
              (c.get("function") or {}).get("arguments", "")) for c in d.get("tool_calls") or []]
    return (d.get("content") or "", d.get("reasoning_content") or "", choice.get("finish_reason"), calls)


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


ROUNDS = 5  # timed rounds per conversation (its last ones)


async def time_kind(kind: str, adapter: Adapter, actx: Any, py_transform: Callable[[dict[str, Any]], str],
                    cold: dict[str, list[dict[str, Any]]],
                    convs: dict[str, list[list[dict[str, Any]]]]) -> tuple[float, float]:
    """µs per request (median of 5 batches), Lua and Python, each prepared request used once."""
    if kind == "cold":
        lua_seq, py_seq = iter(cold["lua"]), iter(cold["py"])

        async def lua() -> str:
            return await adapter.build_request(request_parts(next(lua_seq), message_sizes=adapter.wants_message_sizes), actx)

        count = len(cold["lua"])
        return await timeit(lua, count, True), await timeit(lambda: py_transform(next(py_seq)), count, False)

    async def lua_one(req: dict[str, Any]) -> str:
        return await adapter.build_request(request_parts(req, message_sizes=adapter.wants_message_sizes), actx)

    async def py_one(req: dict[str, Any]) -> str:
        return py_transform(req)

    results = []
    for side, one in (("lua", lua_one), ("py", py_one)):
        conversations = convs[side]
        per = max(1, len(conversations) // 5)
        batches = []
        for b in range(5):
            total, count = 0.0, 0
            for conv in conversations[b * per:(b + 1) * per]:
                for req in conv[:-ROUNDS]:  # the conversation so far, not timed
                    await one(req)
                for req in conv[-ROUNDS:]:
                    start = time.process_time()
                    await one(req)
                    total += time.process_time() - start
                    count += 1
            batches.append(total / max(1, count) * 1e6)
        results.append(statistics.median(batches))
    return results[0], results[1]


def time_cold_empty(name: str, py_transform: Callable[[dict[str, Any]], str],
                    cold: dict[str, list[dict[str, Any]]]) -> tuple[float, float]:
    """µs per request (median), host builder with an empty message cache and Python: a
    conversation's first request after the daemon started (its tools converted before, as
    the Python side keeps them)."""
    results = []
    for side in ("lua", "py"):
        took = []
        for req in cold[side]:
            if side == "lua":
                native = native_builder(name)
                assert native is not None
                native.build(request_parts({**req, "messages": []}))  # the tools, not timed
                start = time.perf_counter()
                body = native.build(request_parts(req, message_sizes=native.message_texts))
                took.append(time.perf_counter() - start)
                assert body is not None, f"{name}: the host declined"
            else:
                start = time.perf_counter()
                py_transform(req)
                took.append(time.perf_counter() - start)
        results.append(statistics.median(took) * 1e6)
    return results[0], results[1]


_TRASH_FROM, _TRASH_TO = bytearray(16 * 1024 * 1024), bytearray(16 * 1024 * 1024)


def evict_caches() -> None:
    """Copy 16 MB: what an LLM round's network and Python work does to the CPU caches between two requests."""
    _TRASH_TO[:] = _TRASH_FROM


async def time_cache_cold(adapter: Adapter, actx: Any, py_transform: Callable[[dict[str, Any]], str],
                          convs: dict[str, list[list[dict[str, Any]]]]) -> tuple[float, float]:
    """µs per round request (median), Lua and Python, with the CPU caches evicted before each timed call."""
    results = []
    for side in ("lua", "py"):
        took = []
        for conv in convs[side]:
            for req in conv[:-ROUNDS]:
                if side == "lua":
                    await adapter.build_request(request_parts(req, message_sizes=adapter.wants_message_sizes), actx)
                else:
                    py_transform(req)
            for req in conv[-ROUNDS:]:
                evict_caches()
                start = time.perf_counter()
                if side == "lua":
                    await adapter.build_request(request_parts(req, message_sizes=adapter.wants_message_sizes), actx)
                else:
                    py_transform(req)
                took.append(time.perf_counter() - start)
        results.append(statistics.median(took) * 1e6)
    return results[0], results[1]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    scale = 1 if args.quick else 5
    user_dir = Path(tempfile.mkdtemp(prefix="bench-adapters-"))
    for name in NATIVE_ADAPTERS:  # as a user's files: their Lua runs, not the host's builder
        shutil.copy(BUILTIN_DIR / f"{name}.lua", user_dir / f"{name}.lua")
    loader = AdapterLoader(user_dir=user_dir)
    shipped = AdapterLoader()
    openai = loader.get("openai")

    def ctx_of(adapter: Adapter, stream: bool = True) -> Any:
        return adapter.context(RequestContext(model="gpt-bench", stream=stream, thinking=False))

    rows: list[tuple[str, int, float, float]] = []
    octx = ctx_of(openai)

    with_reasoning = make_request(20, 5, 120)
    with_reasoning["messages"][2]["reasoning_content"] = "earlier thoughts"  # forces a full decode + re-encode
    requests = {
        "request small (2 msgs, 0 tools)": make_request(2, 0, 60),
        "request typical (20 msgs, 5 tools)": make_request(20, 5, 120),
        "request large (60 msgs, 30 tools)": make_request(60, 30, 300),
        "request typical, decoded (strip field)": with_reasoning,
    }
    for label, req in requests.items():
        n = 400 * scale if "large" not in label else 60 * scale

        async def lua_req(req: dict[str, Any] = req) -> str:
            return await openai.build_request(request_parts(req), octx)

        body = await lua_req()
        assert json.loads(body) == json.loads(py_openai_request(req)), "Lua and Python bodies differ"
        lua_us = await timeit(lua_req, n, True)
        py_us = await timeit(lambda req=req: py_openai_request(req), n, False)
        rows.append((label, len(body), lua_us, py_us))

    for label, raw in {"response text": response_body(0, 400), "response 3 tool calls": response_body(3, 40)}.items():
        async def lua_resp(raw: str = raw) -> Any:
            return await openai.parse_response(raw, octx)

        lua_us = await timeit(lua_resp, 1000 * scale, True)
        py_us = await timeit(lambda raw=raw: py_openai_response(raw), 1000 * scale, False)
        rows.append((label, len(raw), lua_us, py_us))

    state = openai.new_stream_state()
    for label, line in CHUNKS.items():
        async def lua_chunk(line: str = line) -> Any:
            return await openai.parse_chunk(line, state, octx)

        lua_us = await timeit(lua_chunk, 4000 * scale, True)
        py_us = await timeit(lambda line=line: py_openai_chunk(line), 4000 * scale, False)
        rows.append((f"chunk {label}", len(line), lua_us, py_us))

    calibrate = openai.sandbox.load_trusted(
        "return function(n) local c = os.clock local t = c() local x = 0 for i = 1, n do x = x + i end "
        "return (c() - t) / n * 1e9 end", "calibrate")
    loop_ns = min(calibrate(2_000_000) for _ in range(3))
    sample = CHUNKS["content delta"]
    loads_us = await timeit(lambda: json.loads(sample), 20000, False)
    print(f"machine: Lua for-loop iteration {loop_ns:.1f} ns, Python json.loads({len(sample)} B) {loads_us:.2f} µs "
          "(a quiet modern x86 core: ~1 ns and ~1.5 µs)")
    print()
    print(f"{'openai adapter':<38} {'bytes':>7} {'Lua µs':>9} {'Python µs':>10} {'ratio':>6} {'Lua adds µs':>12}")
    for label, size, lua_us, py_us in rows:
        print(f"{label:<38} {size:>7} {lua_us:>9.1f} {py_us:>10.1f} {lua_us / py_us:>6.1f} {lua_us - py_us:>12.1f}")

    print()
    print("per adapter, per request (Lua: request_parts + build_request, as the daemon does; Python: the same")
    print("transform written in Python on the dict + orjson, the host's serialiser). The requests are tool loops: system, user,")
    print("then tool call + result pairs up to 20 messages (typical, 5 tools) or 60 (large, 30 tools).")
    print("Tools conversion cached by the tools JSON text on both sides; the Lua adapters also keep each")
    print("converted message by its JSON text, the Python ports keep no messages.")
    print("  cold:  the request is new (first of its conversation: every message converted)")
    print("  round: the conversation's previous request was sent before (only the 2 new messages are new)")
    print(f"{'':<38} {'bytes':>7} {'Lua µs':>9} {'Python µs':>10} {'ratio':>6} {'Lua adds µs':>12}")
    anthropic_cache, gemini_cache = ToolsCache(_anthropic_tools), ToolsCache(_gemini_tools)
    python_of: dict[str, Callable[[dict[str, Any]], str]] = {
        "openai": py_openai_request,
        "deepseek": py_openai_request,
        "anthropic": lambda req: py_anthropic_request(req, anthropic_cache),
        "gemini": lambda req: py_gemini_request(req, gemini_cache),
        "ollama": py_ollama_request,
        "mistral": py_mistral_request,
    }
    sizes = {"typical": (20, 5, 120), "large": (60, 30, 300)}
    serial = iter(range(10**9))

    def workload(size: str) -> tuple[dict[str, list[list[dict[str, Any]]]], dict[str, list[dict[str, Any]]]]:
        """Fresh conversations (for rounds) and fresh last requests (cold), one set per side."""
        n_msgs, n_tools, text = sizes[size]
        n = 300 * scale if size == "typical" else 40 * scale
        convs = {side: [conversation(n_msgs, n_tools, text, f"t{next(serial)} ") for _ in range(n // ROUNDS)]
                 for side in ("lua", "py")}
        cold = {side: [conversation(n_msgs, n_tools, text, f"c{next(serial)} ")[-1] for _ in range(n)]
                for side in ("lua", "py")}
        return convs, cold

    for name, py_transform in python_of.items():
        adapter = loader.get(name)
        actx = ctx_of(adapter)
        for size, (n_msgs, n_tools, text) in sizes.items():
            convs, cold = workload(size)
            check = conversation(n_msgs, n_tools, text, "check ")
            for req in check:
                body = await adapter.build_request(request_parts(req), actx)
                assert json.loads(body) == json.loads(py_transform(req)), f"{name}: Lua and Python bodies differ"
            for kind in ("cold", "round"):
                lua_us, py_us = await time_kind(kind, adapter, actx, py_transform, cold, convs)
                print(f"{name + ' ' + size + ' ' + kind:<38} {len(body):>7} {lua_us:>9.1f} {py_us:>10.1f} "
                      f"{lua_us / py_us:>6.1f} {lua_us - py_us:>12.1f}")
    print()
    print("the shipped files, whose bodies the daemon builds in the host (native_requests.py & co.):")
    print("  cold, empty cache:    a conversation's first request after a start (the tools were converted before)")
    print("  cold, cache churning: as 'cold' above: hundreds of never-seen histories through one adapter, its")
    print("                        message cache full and turning over (memory traffic; the worst case)")
    print(f"{'':<38} {'bytes':>7} {'host µs':>9} {'Python µs':>10} {'ratio':>6} {'host adds µs':>12}")
    for name in python_of:
        if name not in NATIVE_ADAPTERS:
            continue
        adapter = shipped.get(name)
        assert adapter.builtin
        actx = ctx_of(adapter)
        for size in sizes:
            convs, cold = workload(size)
            for req in convs["lua"][0]:
                body = await adapter.build_request(request_parts(req, message_sizes=adapter.wants_message_sizes), actx)
                assert json.loads(body) == json.loads(python_of[name](req)), f"{name}: host and Python bodies differ"
            fresh_us, py_us = time_cold_empty(name, python_of[name], cold)
            print(f"{name + ' ' + size + ' cold, empty cache':<38} {len(body):>7} {fresh_us:>9.1f} "
                  f"{py_us:>10.1f} {fresh_us / py_us:>6.1f} {fresh_us - py_us:>12.1f}")
            for kind in ("cold", "round"):
                lua_us, py_us = await time_kind(kind, adapter, actx, python_of[name], cold, convs)
                label = "cold, cache churning" if kind == "cold" else kind
                print(f"{name + ' ' + size + ' ' + label:<38} {len(body):>7} {lua_us:>9.1f} "
                      f"{py_us:>10.1f} {lua_us / py_us:>6.1f} {lua_us - py_us:>12.1f}")
    print()
    print("the same round requests with the CPU caches evicted before each one (16 MB copied, not timed), as between")
    print("the LLM rounds of a real turn; the loops above keep everything cached:")
    print(f"{'':<38} {'bytes':>7} {'Lua µs':>9} {'Python µs':>10} {'ratio':>6} {'Lua adds µs':>12}")
    for name, size in (("openai", "large"), ("anthropic", "typical"), ("gemini", "typical"), ("ollama", "typical"),
                       ("mistral", "typical")):
        for source in (loader, shipped):
            adapter = source.get(name)
            if adapter.builtin and name not in NATIVE_ADAPTERS:
                continue
            actx = ctx_of(adapter)
            n_msgs, n_tools, text = sizes[size]
            convs = {side: [conversation(n_msgs, n_tools, text, f"e{next(serial)} ")
                            for _ in range(40 * scale // ROUNDS)] for side in ("lua", "py")}
            lua_us, py_us = await time_cache_cold(adapter, actx, python_of[name], convs)
            size_bytes = len(await adapter.build_request(request_parts(convs["lua"][0][-1]), actx))
            label = f"{name} {size} round, caches cold{', host-built' if adapter.builtin else ''}"
            print(f"{label:<38} {size_bytes:>7} {lua_us:>9.1f} {py_us:>10.1f} "
                  f"{lua_us / py_us:>6.1f} {lua_us - py_us:>12.1f}")
    print()
    for name, line in OTHER_CHUNKS.items():
        adapter = loader.get(name)
        actx, st = ctx_of(adapter), adapter.new_stream_state()

        async def chunk(adapter: Adapter = adapter, line: str = line, st: Any = st, actx: Any = actx) -> Any:
            return await adapter.parse_chunk(line, st, actx)

        lua_us = await timeit(chunk, 4000 * scale, True)
        py_us = await timeit(lambda line=line: orjson.loads(line), 4000 * scale, False)
        print(f"{name + ' chunk content delta':<38} {len(line):>7} {lua_us:>9.1f} {py_us:>10.1f} {lua_us / py_us:>6.1f} "
              f"{lua_us - py_us:>12.1f}")

if __name__ == "__main__":
    asyncio.run(main())
