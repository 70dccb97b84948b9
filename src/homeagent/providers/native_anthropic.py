"""The request body of the shipped anthropic.lua, built by the host.

Why: the Messages API restructures every request (system split out, content blocks,
tool_use / tool_result, signed thinking blocks, merged turns). In Lua that costs
150–300 µs per round with cold CPU caches; here the history's messages are converted
once each (cached by their JSON text, as the Lua caches them) and a round joins bytes.

Same JSON as anthropic.lua's ``transform_request`` (tests/test_native_anthropic.py
compares them over generated requests). Declined (the Lua builds the body) for shapes
the daemon never sends: a message that is not an object, content or ids of types Lua
would ``tostring``, tool calls or tools that are not objects, a ``max_tokens`` that is
not an integer, values the sandbox would read back differently (see native_common).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from homeagent.providers.native_common import (
    DATA_URL,
    Decline,
    MessageCache,
    Native,
    ToolsCache,
    Turns,
    decode_rest,
    dumps,
    lua_text_of,
    lua_truthy,
    lua_view,
    mirrored,
    parse_args,
    splice,
)
from homeagent.providers.request_json import RequestJSON

__all__ = ["native_anthropic"]

DEFAULT_MAX_TOKENS = 8192
_TURN = {"user": b'{"role":"user","content":', "assistant": b'{"role":"assistant","content":'}
_CONTINUED = b'{"role":"user","content":[{"type":"text","text":"(continued)"}]}'
_EXTRA_KEYS = ("top_p", "top_k", "stop_sequences", "metadata", "service_tier")


@dataclass(slots=True)
class _Entry:
    """One converted message (``convert_one`` in anthropic.lua)."""

    mrole: Any  # the message's own role: feeds thinking_possible
    system: str | None = None  # a system/developer message's text
    role: str | None = None  # the turn it joins: "user" / "assistant"
    json: bytes | None = None  # its content blocks (JSON array text)
    think: bytes | None = None  # an assistant's signed thinking block (JSON object text)
    calls: bool = False
    signed: bool = False
    with_think: bytes | None = None  # json with the thinking block first (made when first asked)

    def blocks(self, thinking: bool) -> bytes | None:
        if not (thinking and self.think):
            return self.json
        if self.with_think is None:
            self.with_think = (b"[" + self.think + b"," + self.json[1:]) if self.json else (b"[" + self.think + b"]")
        return self.with_think


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if content is None or content is False:
        content = ""
    if type(content) is str:
        return [{"type": "text", "text": content or " "}]
    if type(content) is dict:
        return [{"type": "text", "text": " "}]  # ipairs over an object yields nothing
    if type(content) is not list:
        raise Decline("content Lua would tostring")
    blocks: list[dict[str, Any]] = []
    for p in content:
        if type(p) is dict and p.get("type") == "image_url" and type(p.get("image_url")) in (dict, list):
            image = p["image_url"]
            url = image.get("url") if type(image) is dict else None
            if url is None or url is False:
                url = ""
            if type(url) is not str:
                raise Decline("image url Lua would tostring")
            data = DATA_URL.match(url)
            if data:
                blocks.append({"type": "image", "source": {"type": "base64", "media_type": data[1], "data": data[2]}})
            else:
                blocks.append({"type": "image", "source": {"type": "url", "url": url}})
        else:
            text = p.get("text") if type(p) is dict else p
            if type(text) is str and text:
                blocks.append({"type": "text", "text": text})
    return blocks or [{"type": "text", "text": " "}]


def _tool_uses(calls: Any) -> list[dict[str, Any]]:
    if calls is None or calls is False or type(calls) is dict:
        return []  # absent, or an object: ipairs yields nothing
    if type(calls) is not list:
        raise Decline("tool_calls Lua cannot iterate the same way")
    out = []
    for call in calls:
        if call is None:
            call = {}  # json.null: every field is nil
        if type(call) is not dict:
            raise Decline("a tool call that is not an object")
        fn = call.get("function")
        if not lua_truthy(fn):
            fn = {}
        if type(fn) is not dict:
            raise Decline("a tool call's function that is not an object")
        block = {"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": parse_args(fn.get("arguments"))}
        out.append({k: v for k, v in block.items() if v is not None})
    return out


def _convert_one(m: Any) -> tuple[_Entry, int]:
    if type(m) is not dict:
        raise Decline("a message that is not an object")
    role = m.get("role")
    if role == "system" or role == "developer":
        text = lua_text_of(m.get("content"))
        return _Entry(mrole=role, system=text), len(text)
    if role == "assistant":
        reasoning, signature = m.get("reasoning_content"), m.get("reasoning_signature")
        think = None
        if type(reasoning) is str and type(signature) is str:
            think = dumps({"type": "thinking", "thinking": reasoning, "signature": signature})
        text = lua_text_of(m.get("content"))
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks += _tool_uses(m.get("tool_calls"))
        encoded = dumps(blocks) if blocks else None
        entry = _Entry(mrole=role, role="assistant", json=encoded, think=think,
                       calls=lua_truthy(m.get("tool_calls")), signed=lua_truthy(signature))
        return entry, 2 * len(think or b"") + 2 * len(encoded or b"")
    if role == "tool":
        text = lua_text_of(m.get("content")) or "(no output)"
        result = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": text}
        encoded = dumps([{k: v for k, v in result.items() if v is not None}])
        return _Entry(mrole=role, role="user", json=encoded), 2 * len(encoded)
    encoded = dumps(_user_blocks(m.get("content")))
    return _Entry(mrole=role, role="user", json=encoded), 2 * len(encoded)


def _thinking_possible(entries: list[_Entry]) -> bool:
    """Extended thinking with tools needs the signed thinking block of the current tool loop."""
    for e in reversed(entries):
        if e.mrole == "user":
            return True
        if e.mrole == "assistant" and e.calls and not e.signed:
            return False
    return True


def _assemble(entries: list[_Entry], thinking: bool) -> tuple[str, bytes]:
    system: list[str] = []
    turns = Turns(_TURN)
    for e in entries:
        if e.system is not None:
            if e.system:
                system.append(e.system)
            continue
        blocks = e.blocks(thinking)
        if blocks is not None and e.role is not None:
            if e.role != "user" and turns.empty():
                turns.raw(_CONTINUED)  # the conversation must open with a user turn
            turns.add(e.role, blocks)
    return "\n\n".join(system), turns.text()


def _tool_choice(choice: Any) -> dict[str, Any] | None:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required" or choice == "any":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    if type(choice) is dict and type(choice.get("function")) in (dict, list):
        fn = choice["function"]
        name = fn.get("name") if type(fn) is dict else None
        return {"type": "tool"} if name is None else {"type": "tool", "name": name}
    return None


def _convert_tools(text: bytes) -> bytes:
    """``tools_of``: the tools decoded with their "parameters" kept as they are (raw in Lua)."""
    tools = orjson.loads(text)
    if type(tools) is dict:
        tools = []
    if type(tools) is not list:
        raise Decline("tools that are not an array")
    out = []
    for tool in tools:
        if tool is None:
            tool = {}
        if type(tool) is not dict:
            raise Decline("a tool that is not an object")
        fn = tool.get("function")
        if not lua_truthy(fn):
            fn = tool
        if type(fn) is not dict:
            raise Decline("a tool's function that is not an object")
        params = fn.get("parameters")
        if type(fn.get("name")) in (dict, list) or type(fn.get("description")) in (dict, list):
            raise Decline("a tool name or description that is not a scalar")  # raw "parameters" inside
        converted = {"name": lua_view(fn.get("name")), "description": lua_view(fn.get("description")),
                     "input_schema": {"type": "object", "properties": {}} if params is None else params}
        out.append({k: v for k, v in converted.items() if v is not None})
    return dumps(out)


def native_anthropic(cache: MessageCache[Any] | None = None) -> Native:
    """A builder with its own caches (per-message conversions and converted tools)."""
    cache = MessageCache() if cache is None else cache
    tools_json = ToolsCache(_convert_tools)

    def build(parts: RequestJSON) -> bytes | None:
        req = decode_rest(parts.rest)
        if req is None:
            return None
        try:
            with cache.lock:
                entries = cache.convert(parts, _convert_one)
                thinking = lua_truthy(req.get("thinking")) and _thinking_possible(entries)
                system, messages = _assemble(entries, thinking)
                tools = tools_json(parts.tools) if parts.tools else None
            return _body(req, system, messages, tools, thinking)
        except Decline:
            return None

    return Native(build, message_texts=True)


def _body(req: dict[str, Any], system: str, messages: bytes, tools: bytes | None, thinking: bool) -> bytes | None:
    max_tokens = req.get("max_tokens")
    if max_tokens is None or max_tokens is False:
        max_tokens = DEFAULT_MAX_TOKENS
    if type(max_tokens) is not int or not mirrored(max_tokens):
        return None
    body: dict[str, Any] = {"max_tokens": max_tokens, "stream": lua_truthy(req.get("stream"))}
    for key in ("model", "temperature"):
        if key in req:
            if not mirrored(req[key]):
                return None
            body[key] = req[key]
    if system:
        body["system"] = system
    raw = {"messages": messages}
    if tools is not None:
        raw["tools"] = tools
        choice = _tool_choice(req.get("tool_choice"))
        if choice is not None:
            if not mirrored(choice):
                return None
            body["tool_choice"] = choice
    if thinking:
        budget = max(1024, max_tokens // 2)
        if max_tokens <= budget:
            body["max_tokens"] = budget + 1024
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body.pop("temperature", None)  # thinking requires the default temperature
        if "tool_choice" in body and body["tool_choice"].get("type") != "auto":
            body["tool_choice"] = {"type": "auto"}
    extra = req.get("extra")
    if type(extra) is dict:
        for key in _EXTRA_KEYS:
            if extra.get(key) is not None:
                if not mirrored(extra[key]):
                    return None
                body[key] = extra[key]
    return splice(body, raw)
