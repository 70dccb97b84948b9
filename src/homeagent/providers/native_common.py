"""What the host-built request bodies share: reading JSON as the Lua sandbox does, the
per-message conversion cache, turn merging and splicing pre-encoded JSON into a body.

Why these exist: every host-built body must equal the JSON its adapter's Lua
``transform_request`` makes (tests/test_native_*.py compare them over generated
requests). The sandbox's JSON decoder drops null-valued object keys at any depth, keeps
nulls inside arrays, and Lua treats only ``nil`` and ``false`` as false; the helpers
here reproduce that, and anything they cannot reproduce exactly raises :class:`Decline`,
after which the adapter's Lua builds the body as before.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any, Generic, TypeVar

import orjson

from homeagent.providers.request_json import RequestJSON

__all__ = [
    "DATA_URL",
    "Decline",
    "MessageCache",
    "Native",
    "ToolsCache",
    "Turns",
    "decode_rest",
    "dumps",
    "json_string",
    "lua_fields",
    "lua_text_of",
    "lua_truthy",
    "lua_view",
    "mirrored",
    "parse_args",
    "splice",
]

E = TypeVar("E")

LUA_INT_END = 2**63  # Lua integers are int64: the sandbox reads a bigger integer as a float


class Decline(Exception):
    """The host cannot reproduce the adapter's Lua for this request: the Lua builds it."""


@dataclass(frozen=True)
class Native:
    """A shipped adapter's host-built request body.

    ``build`` returns the body, or None when the adapter's Lua must build it. With
    ``message_texts`` it reads each message's own JSON text (``RequestJSON.message_texts``,
    made by ``request_parts(message_sizes=True)``), which its conversion cache is keyed by;
    the Lua it falls back to keeps a cache keyed by the same texts.
    """

    build: Callable[[RequestJSON], bytes | None]
    message_texts: bool = False


def lua_truthy(value: Any) -> bool:
    """Lua's truth: only nil (absent / null) and false are false; 0 and "" are true."""
    return value is not None and value is not False


def mirrored(value: Any) -> bool:
    """Whether the sandbox reads this JSON value back unchanged: its decoder drops null-valued
    keys at any depth, and huge integers become floats."""
    if value is None:
        return False
    kind = type(value)
    if kind is dict:
        return all(mirrored(v) for v in value.values())
    if kind is list:
        return all(v is None or mirrored(v) for v in value)  # arrays keep their nulls
    if kind is int:
        return -LUA_INT_END <= value < LUA_INT_END
    return True


def lua_view(value: Any) -> Any:
    """A decoded JSON value as the sandbox's decoder gives it to Lua: null-valued object keys
    dropped at any depth, nulls inside arrays kept (as None here, json.null there).
    Raises Decline for integers the sandbox reads as floats."""
    kind = type(value)
    if kind is dict:
        return {k: lua_view(v) for k, v in value.items() if v is not None}
    if kind is list:
        return [None if v is None else lua_view(v) for v in value]
    if kind is int and not -LUA_INT_END <= value < LUA_INT_END:
        raise Decline("integer beyond int64")
    return value


def decode_rest(rest: bytes) -> dict[str, Any] | None:
    """The request's other fields as the sandbox decodes its top level (nulls dropped)."""
    doc = orjson.loads(rest)
    if type(doc) is not dict:
        return None
    return {k: v for k, v in doc.items() if v is not None}


def splice(body: dict[str, Any], raw: dict[str, bytes]) -> bytes:
    """``body``'s JSON with each ``raw`` value (JSON text made already) under its key,
    without decoding or re-encoding it."""
    head = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    tail = b"".join(b',"' + key.encode() + b'":' + text for key, text in raw.items())
    if not tail:
        return head
    return (head[:-1] + tail + b"}") if len(head) > 2 else (b"{" + tail[1:] + b"}")


def lua_fields(value: Any, what: str) -> dict[str, Any]:
    """A decoded value whose fields Lua reads: an object's, or none (json.null and arrays
    have no named fields). Strings, numbers and booleans decline (indexing them reads the
    string library or fails)."""
    if type(value) is dict:
        return value
    if value is None or type(value) is list:
        return {}
    raise Decline(f"{what} that is not an object")


def lua_text_of(content: Any) -> str:
    """``openai_compat.text_of``: a string, or the strings / ``text`` fields of a list, joined
    by newlines; anything else is ""."""
    if type(content) is str:
        return content
    if type(content) is not list:
        return ""
    parts = []
    for p in content:
        if type(p) is str:
            parts.append(p)
        elif type(p) is dict and type(p.get("text")) is str:
            parts.append(p["text"])
    return "\n".join(parts)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")  # Lua keeps an earlier value over a later null: not mimicked
    return out


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number out of range")  # the sandbox cannot encode it again
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # the sandbox's decoder rejects NaN/Infinity too


_STRICT = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=_unique_keys, parse_float=_finite)
_SURROGATE = re.compile("[\ud800-\udfff]")
_LONG_DIGITS = re.compile("[0-9]{19}")  # a number that may be beyond int64 (texts here are short)


def _lone_surrogate(value: Any) -> bool:
    """Whether a decoded value holds a lone surrogate (the json module keeps one; a valid
    escaped pair is one character by then)."""
    kind = type(value)
    if kind is str:
        return _SURROGATE.search(value) is not None
    if kind is dict:
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    if kind is list:
        return any(_lone_surrogate(v) for v in value)
    return False


def sandbox_loads(text: str) -> Any:
    """Untrusted JSON text as the sandbox's decoder reads it (:func:`lua_view` of it); raises
    Decline where the two may differ: invalid JSON (the sandbox accepts some, e.g. ``1.``),
    duplicate keys followed by a null, numbers out of range, lone surrogates (the sandbox
    writes U+FFFD for one)."""
    try:
        if "null" not in text:  # duplicate keys read differently only with a null
            value = orjson.loads(text)  # refuses NaN, infinities and lone surrogates
            return lua_view(value) if _LONG_DIGITS.search(text) else value  # else nothing to drop or check
        value = _STRICT.decode(text)
    except (ValueError, RecursionError):  # orjson.JSONDecodeError is a ValueError
        raise Decline("JSON the sandbox may read differently") from None
    if "\\u" in text and _lone_surrogate(value):
        raise Decline("a lone surrogate")
    return lua_view(value)


def parse_args(arguments: Any) -> Any:
    """``openai_compat.parse_args``: tool-call arguments as a table (the sandbox's view)."""
    if type(arguments) is dict or type(arguments) is list:
        return arguments  # a table already: the Lua returns it as it is
    if type(arguments) is not str or arguments == "":
        return {}
    if arguments.lstrip(" \t\r\n")[:1] not in _JSON_STARTS:
        return {"_raw": arguments}  # the sandbox's decoder fails on the first character: pcall gives false
    value = sandbox_loads(arguments)  # may Decline: the Lua decides
    if type(value) is dict or type(value) is list:
        return value
    return {"_raw": arguments}


_JSON_STARTS = frozenset('{["-0123456789tfn')


def json_string(value: Any) -> bytes:
    """A string's JSON text (``openai_compat.json_string``)."""
    return orjson.dumps(value)


def request_messages(parts: RequestJSON) -> tuple[Sequence[bytes] | None, list[Any] | None]:
    """The request's messages: their texts (cacheable), or else the decoded list (none to cache).
    Raises Decline when the messages are not a JSON array."""
    if parts.message_texts:
        return parts.message_texts, None
    doc = orjson.loads(parts.messages) if parts.messages else []
    if type(doc) is not list:
        raise Decline("messages is not an array")
    return None, doc


# 19 digits in a row: an integer that may be beyond int64 (or a long fraction: checked, harmless).
# A translate and a substring search: ~10x faster than the regex [0-9]{19}.
_DIGITS_AS_ZERO = bytes(48 if 48 <= i < 58 else 32 for i in range(256))
_LONG_NUMBER = b"0" * 19


def message_view(text: bytes) -> Any:
    """One message's JSON text (the host's own, from orjson) as the sandbox decodes it."""
    value = orjson.loads(text)
    if b"null" in text or _LONG_NUMBER in text.translate(_DIGITS_AS_ZERO):
        return lua_view(value)
    return value  # nothing to drop or to check: most messages


class MessageCache(Generic[E]):
    """Converted messages kept by their JSON text, as ``openai_compat.message_cache`` keeps them
    in Lua: each round of a conversation re-sends the whole history, so each message is
    converted once. Two generations, each at most half of ``max_entries`` / ``max_bytes``:
    a full generation retires the older one; entries still in use move to the new one.
    An entry must depend on its message alone (context such as tool names is resolved
    when assembling)."""

    def __init__(self, max_entries: int = 4096, max_bytes: int = 8 * 1024 * 1024) -> None:
        self._max_entries, self._max_bytes = max_entries // 2, max_bytes // 2
        self._new: dict[bytes, tuple[E, int]] = {}
        self._old: dict[bytes, tuple[E, int]] = {}
        self._bytes = 0
        self.converted = 0  # messages converted so far (the misses): what the cache saves is visible
        self.lock = threading.Lock()  # a huge request is built in a worker thread

    def _put(self, text: bytes, item: tuple[E, int]) -> None:
        size = item[1]
        if size > self._max_bytes:
            return
        if len(self._new) >= self._max_entries or self._bytes + size > self._max_bytes:
            self._old, self._new, self._bytes = self._new, {}, 0
        self._new[text] = item
        self._bytes += size

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

    def convert(self, parts: RequestJSON, convert: Callable[[Any], tuple[E, int]]) -> list[E]:
        """One entry per message of the request: cached by the message's JSON text, or
        ``convert(message)`` (the message as the sandbox decodes it) returning the entry and
        the bytes it holds beyond the text. Without message texts each message is converted
        and nothing is kept, as in the Lua. Raises Decline when the messages are not an array."""
        texts, decoded = request_messages(parts)
        if texts is None:
            return [convert(lua_view(m))[0] for m in decoded or ()]
        out: list[Any] = []
        misses: list[int] = []
        new = self._new
        for i, text in enumerate(texts):
            item = new.get(text)
            if item is None:
                item = self._old.pop(text, None)
                if item is None:
                    misses.append(i)
                    out.append(None)
                    continue
                self._put(text, item)  # still in use: moves to the new generation
                new = self._new
            out.append(item[0])
        if misses:
            self._convert_misses(parts, texts, misses, out, convert)
        return out

    def _convert_misses(self, parts: RequestJSON, texts: Sequence[bytes], misses: list[int], out: list[Any],
                        convert: Callable[[Any], tuple[E, int]]) -> None:
        plain: list[Any] | None = None
        if len(misses) * 3 >= len(texts):
            # many new messages (a conversation's first request): one decode and one check for the list
            whole = parts.messages
            if b"null" not in whole and _LONG_NUMBER not in whole.translate(_DIGITS_AS_ZERO):
                plain = orjson.loads(whole)
        for i in misses:
            text = texts[i]
            entry, extra = convert(plain[i] if plain is not None else message_view(text))
            self.converted += 1
            self._put(text, (entry, len(text) + extra + 128))
            out[i] = entry


class ToolsCache:
    """Converted tools JSON by the request's tools JSON text, as the Lua adapters keep it:
    the same tools list is sent every round of a conversation. A few entries; emptied when full."""

    def __init__(self, convert: Callable[[bytes], bytes], size: int = 8) -> None:
        self._convert, self._size = convert, size
        self._known: dict[bytes, bytes] = {}

    def __call__(self, text: bytes) -> bytes:
        hit = self._known.get(text)
        if hit is None:
            hit = self._convert(text)
            if len(self._known) >= self._size:
                self._known.clear()
            self._known[text] = hit
        return hit


DATA_URL = re.compile(r"data:([^;]+);base64,(.*)\Z", re.S)  # the adapters' "^data:([^;]+);base64,(.*)$" (bytes, . = any)


def dumps(value: Any) -> bytes:
    """JSON text of a converted value (integer keys written as strings, as the Lua encoder does)."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


class Turns:
    """A JSON array of turns built from content lists kept as JSON text (``openai_compat.turns``):
    consecutive lists of one role merge into one turn. ``opening`` maps a role to its turn's
    text up to the list (``b'{"role":"user","content":'``). Lists are only collected until
    :meth:`text` (one pass: a method call per message is most of the cost)."""

    def __init__(self, opening: dict[str, bytes]) -> None:
        self._opening = opening
        self._items: list[tuple[str | None, bytes]] = []  # (role, content list); None: a whole turn

    def add(self, role: str, content_list: bytes) -> None:
        self._items.append((role, content_list))

    def raw(self, turn: bytes) -> None:
        self._items.append((None, turn))

    def empty(self) -> bool:
        return not self._items

    def text(self) -> bytes:
        out: list[bytes] = []
        opening = self._opening
        for role, group in groupby(self._items, key=_first):
            if role is None:
                out.extend(turn for _, turn in group)
                continue
            lists = [content for _, content in group]
            merged = lists[0] if len(lists) == 1 else b"[" + b",".join([x[1:-1] for x in lists]) + b"]"
            out.append(opening[role] + merged + b"}")
        return b"[" + b",".join(out) + b"]"


_first = itemgetter(0)
