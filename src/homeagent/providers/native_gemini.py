"""The request body of the shipped gemini.lua, built by the host.

Why: Gemini's generateContent restructures every request (systemInstruction split out,
contents/parts, functionCall / functionResponse, merged turns, tool schemas cut down to
Gemini's OpenAPI subset). In Lua that costs 150–250 µs per round with cold CPU caches;
here each message of the history is converted once (cached by its JSON text, as the Lua
caches it), the tools once per tools text, and a round joins bytes.

Same JSON as gemini.lua's ``transform_request`` (tests/test_native_gemini.py compares
them over generated requests). Declined (the Lua builds the body) for shapes the daemon
never sends: a message, tool call, tool or tool function that is a string, number or
boolean; user content that is a number (Lua would ``tostring`` it); ``true`` as an id
(a Lua table key unlike Python's); a tool schema whose output depends on ``pairs`` order
(a ``type`` list holding "null" beside a ``nullable`` other than true, ``const`` beside
``enum``) or whose ``type`` list holds a null; values the sandbox would read back
differently (see native_common).
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
    json_string,
    lua_fields,
    lua_text_of,
    lua_truthy,
    lua_view,
    parse_args,
    splice,
)
from homeagent.providers.request_json import RequestJSON

__all__ = ["native_gemini"]

_TURN = {"user": b'{"role":"user","parts":', "model": b'{"role":"model","parts":'}
_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}
_SCHEMA_KEYS = frozenset({
    "type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems", "properties", "required",
    "minProperties", "maxProperties", "minLength", "maxLength", "pattern", "example", "anyOf", "propertyOrdering",
    "default", "items", "minimum", "maximum",
})


@dataclass(slots=True)
class _Entry:
    """One converted message (``convert_one`` in gemini.lua); ``role`` None: left out."""

    role: str | None = None  # the turn it joins: "user" / "model"
    json: bytes = b""  # parts (JSON array text); a system part; a tool result's response (object text)
    system: bool = False
    names: tuple[tuple[Any, Any], ...] = ()  # (id key, function name or None) of an assistant's tool calls
    tool: bool = False
    tool_id: Any = None  # the id key a tool result answers
    fallback: Any = None  # its name when no earlier call has that id
    for_name: str | None = None  # the name ``parts`` was made for (a string name only)
    parts: bytes = b""

    def response_parts(self, name: Any) -> bytes:
        if type(name) is str and self.for_name == name:
            return self.parts
        parts = b'[{"functionResponse":{"name":' + json_string(name) + b',"response":' + self.json + b"}}]"
        if type(name) is str:
            self.for_name, self.parts = name, parts
        return parts


def _id_key(value: Any) -> Any:
    """``x or ""`` used as a Lua table key, as a Python dict key that matches the same ids."""
    if value is None or value is False:
        return ""
    if value is True:
        raise Decline("true as an id")  # as a Python key it would equal the id 1
    if type(value) is dict or type(value) is list:
        return object()  # a table: Lua compares table keys by identity, so no other id equals it
    return value  # strings; numbers (1 and 1.0 are one key in both languages)


def _user_parts(content: Any) -> list[dict[str, Any]]:
    if content is None or content is False:
        return [{"text": ""}]
    if content is True:
        return [{"text": "true"}]
    if type(content) is str:
        return [{"text": content}]
    if type(content) is dict:
        return [{"text": ""}]  # ipairs over an object yields nothing
    if type(content) is not list:
        raise Decline("content Lua would tostring")
    parts: list[dict[str, Any]] = []
    for p in content:
        if type(p) is dict:
            image = p.get("image_url")
            if p.get("type") == "image_url" and (type(image) is dict or type(image) is list):
                url = image.get("url") if type(image) is dict else None
                data = DATA_URL.match(url) if type(url) is str else None  # tostring of the rest never matches
                if data:
                    parts.append({"inlineData": {"mimeType": data[1], "data": data[2]}})
            elif type(p.get("text")) is str:
                parts.append({"text": p["text"]})
        elif type(p) is str:
            parts.append({"text": p})
    return parts or [{"text": ""}]


def _assistant(m: dict[str, Any]) -> tuple[_Entry, int]:
    text = lua_text_of(m.get("content"))
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    calls = m.get("tool_calls")
    if calls is None or calls is False or type(calls) is dict:
        calls = ()  # absent, or an object: ipairs yields nothing
    elif type(calls) is not list:
        raise Decline("tool_calls Lua cannot iterate the same way")
    names = []
    for tc in calls:
        call = lua_fields(tc, "a tool call")
        fn = call.get("function")
        fn = lua_fields(fn if lua_truthy(fn) else None, "a tool call's function")
        name = fn.get("name")
        names.append((_id_key(call.get("id")), name))
        call_part: dict[str, Any] = {"args": parse_args(fn.get("arguments"))}
        if name is not None:
            call_part["name"] = name
        parts.append({"functionCall": call_part})
    if not parts:
        return _Entry(), 0
    encoded = dumps(parts)
    return _Entry(role="model", json=encoded, names=tuple(names)), 2 * len(encoded)


def _convert_one(m: Any) -> tuple[_Entry, int]:
    m = lua_fields(m, "a message")  # json.null or an array: every field nil
    role = m.get("role")
    if role == "system" or role == "developer":
        text = lua_text_of(m.get("content"))
        if not text:
            return _Entry(), 0
        encoded = dumps({"text": text})
        return _Entry(system=True, json=encoded), 2 * len(encoded)
    if role == "assistant":
        return _assistant(m)
    if role == "tool":
        name = m.get("name")
        encoded = dumps({"content": lua_text_of(m.get("content"))})
        entry = _Entry(role="user", json=encoded, tool=True, tool_id=_id_key(m.get("tool_call_id")),
                       fallback=name if lua_truthy(name) else "tool")
        return entry, 2 * len(encoded)
    encoded = dumps(_user_parts(m.get("content")))
    return _Entry(role="user", json=encoded), 2 * len(encoded)


def _assemble(entries: list[_Entry]) -> tuple[bytes | None, bytes]:
    """systemInstruction and contents as JSON text; tool results get the names of earlier calls."""
    system: list[bytes] = []
    names: dict[Any, Any] = {}
    turns = Turns(_TURN)
    add = turns.add
    for e in entries:
        if e.names:
            for key, name in e.names:
                if name is None:
                    names.pop(key, None)  # Lua: names[id] = nil
                else:
                    names[key] = name
        if e.tool:
            name = names.get(e.tool_id)
            add("user", e.response_parts(name if name is not None and name is not False else e.fallback))
        elif e.system:
            system.append(e.json)
        elif e.role is not None:
            add(e.role, e.json)
    instruction = (b'{"parts":[' + b",".join(system) + b"]}") if system else None
    return instruction, turns.text()


def _schema_item(s: Any) -> Any:
    """``schema`` of an array element: json.null is an empty table there."""
    return {} if s is None else _schema(s)


def _schema(s: Any) -> Any:
    """gemini.lua's ``schema``: the OpenAPI subset Gemini accepts."""
    if type(s) is list:
        return {}  # pairs over an array: integer keys, none kept
    if type(s) is not dict:
        return s
    kind = s.get("type")
    if type(kind) is list:
        if None in kind:
            raise Decline("a null in a type list")  # out.type = json.null: kept apart from absent here
        if "null" in kind and "nullable" in s and s["nullable"] is not True:
            raise Decline("a type list with null beside nullable: pairs order decides")
    if "const" in s and "enum" in s:
        raise Decline("const beside enum: pairs order decides")
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k == "properties" and type(v) is dict:
            out["properties"] = {name: _schema(sub) for name, sub in v.items()}
        elif k == "properties" and type(v) is list:
            out["properties"] = {str(i): _schema_item(sub) for i, sub in enumerate(v, 1)}
        elif k == "items":
            out["items"] = _schema(v)
        elif k == "anyOf" and type(v) is dict:
            out["anyOf"] = []
        elif k == "anyOf" and type(v) is list:
            out["anyOf"] = [_schema_item(sub) for sub in v]
        elif k == "type" and type(v) is dict:
            pass  # ipairs over an object yields nothing
        elif k == "type" and type(v) is list:
            for t in v:
                if t == "null":
                    out["nullable"] = True
                elif "type" not in out:
                    out["type"] = t
        elif k == "const":
            out["enum"] = [v]
        elif k in _SCHEMA_KEYS:
            out[k] = v
    return out


def _convert_tools(text: bytes) -> bytes:
    """``tools_json``: OpenAI tools as Gemini's ``[{"functionDeclarations": [...]}]``."""
    tools = lua_view(orjson.loads(text))
    if type(tools) is dict:
        tools = []  # ipairs over an object yields nothing
    if type(tools) is not list:
        raise Decline("tools that are not an array")
    decls = []
    for t in tools:
        tool = lua_fields(t, "a tool")
        fn = tool.get("function")
        fn = lua_fields(fn, "a tool's function") if lua_truthy(fn) else tool
        decl = {"name": fn.get("name"), "description": fn.get("description"), "parameters": _schema(fn.get("parameters"))}
        decls.append({k: v for k, v in decl.items() if v is not None})
    return dumps([{"functionDeclarations": decls}])


def native_gemini(cache: MessageCache[_Entry] | None = None) -> Native:
    """A builder with its own caches (per-message conversions and converted tools)."""
    messages_cache: MessageCache[_Entry] = MessageCache() if cache is None else cache
    tools_json = ToolsCache(_convert_tools)

    def build(parts: RequestJSON) -> bytes | None:
        req = decode_rest(parts.rest)
        if req is None:
            return None
        try:
            with messages_cache.lock:
                entries = messages_cache.convert(parts, _convert_one)
                instruction, contents = _assemble(entries)
                tools = tools_json(parts.tools) if parts.tools else None
            return _body(req, instruction, contents, tools)
        except Decline:
            return None

    return Native(build, message_texts=True)


def _body(req: dict[str, Any], instruction: bytes | None, contents: bytes, tools: bytes | None) -> bytes:
    body: dict[str, Any] = {}
    raw = {"contents": contents}
    if instruction is not None:
        raw["systemInstruction"] = instruction
    gen: dict[str, Any] = {}
    if "temperature" in req:  # decode_rest dropped the nulls: present means ~= nil
        gen["temperature"] = lua_view(req["temperature"])
    if "max_tokens" in req:
        gen["maxOutputTokens"] = lua_view(req["max_tokens"])
    if lua_truthy(req.get("thinking")):
        gen["thinkingConfig"] = {"includeThoughts": True}
    if gen:
        body["generationConfig"] = gen
    if tools is not None:
        raw["tools"] = tools
        choice = req.get("tool_choice")
        mode = _MODES.get(choice) if type(choice) is str else None
        if mode is not None:
            body["toolConfig"] = {"functionCallingConfig": {"mode": mode}}
    return splice(body, raw)
