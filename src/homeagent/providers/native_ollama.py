"""The request body of the shipped ollama.lua, built by the host.

Why: Ollama's /api/chat restructures every message (plain-text content, base64
``images``, ``thinking``, tool calls with object arguments, tool results naming their
tool), so ollama.lua converts the history; entering Lua for that costs 150–250 µs per
round with cold CPU caches. Here each message is converted once (cached by its JSON
text, as the Lua caches it), a tool result's ``tool_name`` is resolved when a round is
assembled (it comes from an earlier message), and a round is cache lookups and one
bytes join; the tools pass through as the request's own JSON text.

Same JSON as ollama.lua's ``transform_request`` (tests/test_native_ollama.py compares
them over generated requests). Declined (the Lua builds the body, or fails as it would)
for shapes the daemon never sends: a message that is a string, number or boolean;
``tool_calls`` (or one call, or its ``function``) that is a string, number or ``true``;
tool call ids / ``tool_call_id`` that are not strings (Lua keys tables by identity and
``true`` apart from ``1``); ``extra`` that is a non-empty array (its ``pairs`` would
write numbered options); a tool result whose name resolves to ``false`` (ollama.lua
then joins ``false`` and errors, unless an earlier name left text behind); messages
that are not an array; values the sandbox reads differently (see native_common).
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
    decode_rest,
    lua_fields,
    lua_text_of,
    lua_truthy,
    lua_view,
    parse_args,
    splice,
)
from homeagent.providers.request_json import RequestJSON

__all__ = ["native_ollama"]

_BODY_KEYS = frozenset({"format", "keep_alive"})  # extra keys that go to the body, not to options


@dataclass(slots=True)
class _Entry:
    """One converted message (``convert_one`` in ollama.lua). Depends on the message alone."""

    json: bytes  # the Ollama message's JSON text
    names: dict[str, Any] | None = None  # an assistant's tool calls: id -> name (the last call of an id wins)
    tool_id: str | None = None  # a tool result's tool_call_id ("" when absent); None: not a result
    fallback: Any = None  # a tool result's own "name"
    for_name: str | None = None  # the (string) tool_name `named` was made for
    named: bytes = b""  # json with that tool_name


def _images(content: Any) -> list[str] | None:
    """``images_of``: the base64 payloads of the data: URLs among the content parts."""
    if type(content) is not list:
        return None  # not a table, or an object: ipairs yields nothing
    images = []
    for p in content:
        if type(p) is dict and p.get("type") == "image_url":
            image = p.get("image_url")
            if type(image) is dict:
                url = image.get("url")
                # tostring() of a non-string never starts with "data:": no image either way
                data = DATA_URL.match(url) if type(url) is str else None
                if data:
                    images.append(data[2])
    return images or None


def _id(value: Any) -> str:
    """``x or ""`` of an id, where Lua's table keys match Python's: strings."""
    if value is None or value is False:
        return ""
    if type(value) is not str:
        raise Decline("an id that is not a string")
    return value


def _tool_calls(calls: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    if type(calls) is dict:
        return [], {}  # ipairs over an object yields nothing
    if type(calls) is not list:
        raise Decline("tool_calls that is not a table")
    out: list[dict[str, Any]] = []
    names: dict[str, Any] = {}
    for call in calls:
        tc = lua_fields(call, "a tool call")
        fn = tc.get("function")
        fn = lua_fields(fn if lua_truthy(fn) else None, "a tool call's function")
        name = fn.get("name")
        names[_id(tc.get("id"))] = name
        converted: dict[str, Any] = {"arguments": parse_args(fn.get("arguments"))}
        if name is not None:
            converted["name"] = name
        out.append({"function": converted})
    return out, names


def _convert_one(m: Any) -> tuple[_Entry, int]:
    m = lua_fields(m, "a message")
    role = m.get("role")
    content = m.get("content")
    msg: dict[str, Any] = {"content": lua_text_of(content)}
    if role is not None:
        msg["role"] = "system" if role == "developer" else role
    images = _images(content)
    if images is not None:
        msg["images"] = images
    names = None
    tool_id, fallback = None, None
    if role == "assistant":
        if type(m.get("reasoning_content")) is str:
            msg["thinking"] = m["reasoning_content"]
        if lua_truthy(m.get("tool_calls")):
            msg["tool_calls"], names = _tool_calls(m["tool_calls"])
    elif role == "tool":
        tool_id, fallback = _id(m.get("tool_call_id")), m.get("name")
    encoded = orjson.dumps(msg)
    return _Entry(encoded, names, tool_id, fallback), 2 * len(encoded)


def _named(e: _Entry, name: Any) -> bytes:
    """The tool result's text with its tool_name (remembered for a string name, as the Lua does)."""
    if type(name) is str:
        if e.for_name == name:
            return e.named
        e.for_name, e.named = name, e.json[:-1] + b',"tool_name":' + orjson.dumps(name) + b"}"
        return e.named
    if name is False:
        raise Decline("tool_name false: the Lua's remembered text may be unset (it errors)")
    return e.json[:-1] + b',"tool_name":' + orjson.dumps(name) + b"}"


def _assemble(entries: list[_Entry]) -> bytes:
    names: dict[str, Any] = {}  # tool-call id -> name, as declared so far (nil names included)
    out: list[bytes] = []
    add = out.append
    for e in entries:
        tool_id = e.tool_id
        if tool_id is None:
            if e.names:
                names.update(e.names)
            add(e.json)
            continue
        name = names.get(tool_id)
        if name is None or name is False:
            name = e.fallback  # names[id] or m.name
            if name is None:
                add(e.json)
                continue
        if e.for_name == name:  # only a string is remembered, and only a string equals one
            add(e.named)
        else:
            add(_named(e, name))
    return b"[" + b",".join(out) + b"]"


def _body(req: dict[str, Any], tools: bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    body: dict[str, Any] = {"stream": lua_truthy(req.get("stream"))}
    if "model" in req:
        body["model"] = lua_view(req["model"])
    options: dict[str, Any] = {}
    if "temperature" in req:
        options["temperature"] = lua_view(req["temperature"])
    if "max_tokens" in req:
        options["num_predict"] = lua_view(req["max_tokens"])
    extra = req.get("extra")
    if type(extra) is dict:
        for key, value in lua_view(extra).items():  # each key writes its own slot: no order to mind
            if key in _BODY_KEYS:
                body[key] = value
            else:
                options[key] = value  # overrides temperature / num_predict
    elif type(extra) is list:
        if extra:
            raise Decline("extra as a non-empty array: numbered options")
    if options:
        body["options"] = options
    if lua_truthy(req.get("thinking")):
        body["think"] = True
    raw = {"tools": tools} if tools else {}  # passed through as the request's own text
    return body, raw


def native_ollama(cache: MessageCache[_Entry] | None = None) -> Native:
    """A builder with its own cache of converted messages (the tools pass through as text)."""
    cache = MessageCache() if cache is None else cache

    def build(parts: RequestJSON) -> bytes | None:
        req = decode_rest(parts.rest)
        if req is None:
            return None
        try:
            body, raw = _body(req, parts.tools)
            with cache.lock:
                entries = cache.convert(parts, _convert_one)
                raw["messages"] = _assemble(entries)
        except Decline:
            return None
        return splice(body, raw)

    return Native(build, message_texts=True)
