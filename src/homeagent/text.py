"""Making untrusted text storable: one place that turns lone surrogates into U+FFFD.

JSON may carry ``"\\ud800"`` (a lone UTF-16 surrogate) and Python's ``json``
module decodes it into a ``str`` that cannot be encoded as UTF-8. Such a
string crashes whoever writes it later (the text log, SQLite, the LLM
request), far from where it came in. Every boundary where outside text enters
the daemon (the socket, the HTTP API, plugin RPC, the IO manager, import)
calls these helpers once, so nothing past it ever holds one.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

__all__ = ["MAX_DEPTH", "TooDeep", "loads", "scrub_deep", "scrub_text"]

_SURROGATE = re.compile("[\ud800-\udfff]")

MAX_DEPTH = 200
"""Deepest nesting :func:`scrub_deep` accepts: far beyond any real frame, far below the recursion limit
that ``json.dumps`` and every recursive consumer later hit."""


class TooDeep(ValueError):
    """A value nested deeper than :data:`MAX_DEPTH`; refused instead of crashing a consumer later."""


def scrub_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8.

    The common case (nothing to replace) costs one C-level search and returns
    ``text`` itself.
    """
    if _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


def loads(data: bytes | bytearray | str) -> Any:
    """Decode untrusted JSON into values with no lone surrogate, nested at most :data:`MAX_DEPTH` deep.

    orjson parses first: it is iterative, so a frame nested 100,000 deep is a
    clean :class:`TooDeep` instead of a ``RecursionError`` thrown near the
    interpreter's stack limit (which closed socket connections and, in
    CPython 3.11, can leave later ``compile`` calls failing spuriously). What
    orjson refuses but JSON allows (lone surrogates) or cannot parse at all
    goes to the ``json`` module, which accepts the former and words the error
    for the latter as before. ``NaN``/``Infinity`` (not JSON at all, though
    Python's ``json`` takes them) and integers past 64 bits are refused here
    with a message that names them: no setting, tool argument or stored row
    can hold one, and a browser could not read it back. Raises ``ValueError``
    (``JSONDecodeError``, ``UnicodeDecodeError``, ``TooDeep``); ``RecursionError``
    only for a surrogate followed by nesting past orjson's own limit.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise TooDeep(f"nested deeper than {MAX_DEPTH} levels") from None
        value = json.loads(data, parse_constant=_no_constant, parse_int=_int64)
    return scrub_deep(value)


INT_MIN = -(2**63)
INT_MAX = 2**64 - 1  # orjson's own range: every integer it accepts fits in 64 bits


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows; send a finite number (or null)")


def _int64(digits: str) -> int:
    if len(digits) > 21:  # checked before int(): a 5,000-digit literal must not cost a conversion
        raise ValueError(f"the integer {digits[:12]}... ({len(digits)} digits) is out of range (64 bits at most)")
    value = int(digits)
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"the integer {digits} is out of range (64 bits at most)")
    return value


def scrub_deep(value: Any, *, max_depth: int = MAX_DEPTH) -> Any:
    """``value`` (decoded JSON) with lone surrogates replaced in every string, keys included.

    Floats that are not finite (``1e400`` decodes to infinity) raise ``ValueError``.
    The depth check walks iteratively, so a deep value raises :class:`TooDeep`
    (a ``ValueError``) here instead of ``RecursionError`` in whatever recursive
    code it reaches next (``json.dumps``, the LLM request, a plugin). A value
    without a surrogate (nearly every one) is returned as it is; tuples become
    lists, as JSON would make them.
    """
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, float):
        _finite(value)
    if not isinstance(value, dict | list | tuple):
        return value
    dirty = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise TooDeep(f"nested deeper than {max_depth} levels")
        children: Any = node
        if isinstance(node, dict):
            for key in node:
                if isinstance(key, str) and not dirty and _SURROGATE.search(key):
                    dirty = True
            children = node.values()
        for child in children:
            if isinstance(child, str):
                if not dirty and _SURROGATE.search(child):
                    dirty = True
            elif isinstance(child, dict | list | tuple):
                stack.append((child, depth + 1))
            elif isinstance(child, float):
                _finite(child)
    return _rebuild(value) if dirty else value


def _finite(number: float) -> None:
    """A literal such as ``1e400`` decodes to infinity: refused like ``Infinity`` itself."""
    if not math.isfinite(number):
        raise ValueError(f"{number!r} is out of range: send a finite number")


def _rebuild(value: Any) -> Any:
    """A scrubbed copy of ``value``; recursion is safe because the caller checked the depth."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {_rebuild(k): _rebuild(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rebuild(v) for v in value]
    return value
