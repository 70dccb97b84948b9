"""The request body of the shipped mistral.lua, built by the host.

Why: Mistral's API is OpenAI-like but strict (only known message fields, tool call
ids of exactly 9 letters/digits, ``tool_choice`` "any" for "required"), so mistral.lua
rewrites every message; entering Lua for that costs 150–250 µs per round with cold
CPU caches. Here each message is converted once (cached by its JSON text, as the Lua
caches it) and a round is cache lookups and one bytes join; the tools pass through as
the request's own JSON text.

Same JSON as mistral.lua's ``transform_request`` (tests/test_native_mistral.py
compares them over generated requests). Declined (the Lua builds the body, or fails
as it would) for shapes the daemon never sends: a message that is a string, number or
boolean; ``tool_calls`` that is a number or ``true``, or holds numbers or booleans
(the Lua errors on those); tool call ids / ``tool_call_id`` of types Lua would ``tostring``
(numbers, ``true``, tables); a 9-byte id with non-ASCII bytes (whether Lua's ``%w``
takes them depends on the C locale); messages that are not an array; integers the
sandbox may not hold exactly (see native_common).
"""

from __future__ import annotations

from typing import Any

import orjson

from homeagent.providers.native_common import (
    Decline,
    MessageCache,
    Native,
    decode_rest,
    lua_truthy,
    lua_view,
    splice,
)
from homeagent.providers.request_json import RequestJSON

__all__ = ["native_mistral", "short_id"]

_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "prefix"})  # MESSAGE_FIELDS
_EXTRA_KEYS = ("top_p", "random_seed", "response_format", "safe_prompt", "stop", "presence_penalty",
               "frequency_penalty", "n", "parallel_tool_calls", "prompt_mode")
_EMPTY_MESSAGE = b"{}"  # json.null or an array as a message: pairs() finds no known field


def short_id(text: str) -> str:
    """mistral.lua's ``short_id`` of a string: itself when it is 9 ASCII letters/digits, else a
    stable 9-character hash of its UTF-8 bytes. The Lua's integer arithmetic stays below 2**63
    (x < 2147483647 * 2147483629 + 2147483629 < 2**62.01), so Python's ints give the same digits."""
    raw = text.encode()
    if len(raw) == 9:
        if raw.isalnum():  # bytes.isalnum is ASCII-only, as %w is in a C / UTF-8 locale
            return text
        if not raw.isascii():
            raise Decline("a 9-byte id with non-ASCII bytes: Lua's %w depends on the C locale")
    h1, h2 = 5381, 52711
    for b in raw:
        h1 = (h1 * 33 + b) % 2147483647
        h2 = (h2 * 31 + b * 7) % 2147483629
    x = h1 * 2147483629 + h2
    out = []
    for _ in range(9):
        x, k = divmod(x, 62)
        out.append(_ALPHABET[k])
    return "".join(out)


_EMPTY_ID = short_id("")


def _id_text(value: Any) -> str:
    """``tostring(id or "")`` where it is exact: strings, and nil / false (-> "")."""
    if type(value) is str:
        return value
    if value is None or value is False:
        return ""
    raise Decline("an id Lua would tostring")


def _call(tc: Any) -> dict[str, Any]:
    if type(tc) is dict:
        out = {"id": short_id(_id_text(tc.get("id"))), "type": "function"}
        fn = tc.get("function")
        if fn is not None:
            out["function"] = fn
        return out
    if tc is None or type(tc) is list or type(tc) is str:
        # json.null / an array / a string (indexing one reads the string library): id and function are nil
        return {"id": _EMPTY_ID, "type": "function"}
    raise Decline("a tool call Lua cannot index")  # a number or boolean: the Lua errors


def _convert_one(m: Any) -> tuple[bytes, int]:
    """``convert_one`` of mistral.lua: the message (as the sandbox decodes it) -> its JSON text."""
    if type(m) is not dict:
        if m is None or type(m) is list:
            return _EMPTY_MESSAGE, 2 * len(_EMPTY_MESSAGE)
        raise Decline("a message that is not an object")  # pairs() of a string/number errors
    c = {k: v for k, v in m.items() if k in _FIELDS}
    calls = m.get("tool_calls")
    if calls is not None and calls is not False:
        if type(calls) is list:
            c["tool_calls"] = [_call(tc) for tc in calls]
        elif type(calls) is dict or type(calls) is str:
            c["tool_calls"] = []  # ipairs over an object or a string yields nothing; json.array() is written []
        else:
            raise Decline("tool_calls Lua cannot iterate")  # a number or true: the Lua errors
    call_id = m.get("tool_call_id")
    if call_id is not None and call_id is not False:
        c["tool_call_id"] = short_id(_id_text(call_id))
    encoded = orjson.dumps(c)
    return encoded, 2 * len(encoded)  # the Lua counts an entry's JSON twice


def _body(req: dict[str, Any], tools: bool) -> dict[str, Any]:
    """The top-level fields of ``transform_request`` but messages and tools."""
    body: dict[str, Any] = {"stream": lua_truthy(req.get("stream"))}
    for key in ("model", "temperature", "max_tokens"):
        if key in req:
            body[key] = lua_view(req[key])
    if tools:
        choice = req.get("tool_choice")
        if choice == "required":
            choice = "any"
        if choice is not None:
            body["tool_choice"] = lua_view(choice)
    extra = req.get("extra")
    if type(extra) is dict:  # an array: extra[k] is nil for every name
        for key in _EXTRA_KEYS:
            value = extra.get(key)
            if value is not None:
                body[key] = lua_view(value)
    return body


def native_mistral(cache: MessageCache[bytes] | None = None) -> Native:
    """A builder with its own per-message conversion cache (mistral.lua converts no tools)."""
    cache = MessageCache() if cache is None else cache

    def build(parts: RequestJSON) -> bytes | None:
        req = decode_rest(parts.rest)
        if req is None:
            return None
        try:
            body = _body(req, bool(parts.tools))
            with cache.lock:
                entries = cache.convert(parts, _convert_one)
                messages = b"[" + b",".join(entries) + b"]"
        except Decline:
            return None
        raw = {"messages": messages, "tools": parts.tools} if parts.tools else {"messages": messages}
        return splice(body, raw)

    return Native(build, message_texts=True)
