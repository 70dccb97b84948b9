"""Request bodies of the shipped adapters, built by the host: the registry, and the
OpenAI-style (pass-through) ones. The restructuring adapters have a module each
(native_anthropic.py & co.), on the helpers of native_common.py.

Why: in a real turn the CPU caches are cold by the time the next LLM round
starts, and entering Lua to build a pass-through body costs 110–170 µs there
(19–25 µs in a warm loop; docs/PERFORMANCE.md). Built here it is a few dict
lookups and one join of the request's own JSON, ~0.14 ms less per round.

Scope and guarantees:
- Only the adapter files shipped in ``providers/adapters`` (``Adapter.builtin``).
  A user's adapter, even one named ``openai.lua``, always runs its own Lua.
- The body is the same JSON document the adapter's ``transform_request`` makes:
  tests/test_native_requests.py compares the two over generated requests.
- Anything not mirrored exactly is declined (``None``) and the Lua script runs:
  a history holding a field the adapter strips or rewrites (``reasoning_content``,
  ``reasoning``), ``extra`` values that are not a plain object of non-null values.

The Lua scripts stay the reference (and what a user copies to write their own):
a change to one of them must be made here too, or the name removed from
``NATIVE_ADAPTERS``; the equivalence test fails until then.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from homeagent.providers.native_anthropic import native_anthropic
from homeagent.providers.native_common import Native, decode_rest, lua_truthy, mirrored, splice
from homeagent.providers.native_gemini import native_gemini
from homeagent.providers.native_mistral import native_mistral
from homeagent.providers.native_ollama import native_ollama
from homeagent.providers.request_json import RequestJSON

__all__ = ["NATIVE_ADAPTERS", "PASS_THROUGH", "native_builder", "openai_request"]

_REASONING_MODEL = re.compile(r"o[0-9]|gpt-5")  # openai.lua: model:match("^o%d") or model:match("^gpt%-5")


@dataclass(frozen=True)
class _Compat:
    """The options of ``openai_compat.request`` one adapter passes (see _openai_compat.lua)."""

    stream_usage: bool = False
    strip: tuple[bytes, ...] = (b'"reasoning_content"',)
    max_tokens_field: str = "max_tokens"
    drop_extra: frozenset[str] = frozenset()
    merge_extra: bool = True  # opts.extra ~= false


def _compat_body(rest: dict[str, Any], tools: bytes, opts: _Compat) -> dict[str, Any] | None:
    """``openai_compat.request`` without its messages (the caller splices them in)."""
    body: dict[str, Any] = {"model": rest.get("model"), "stream": lua_truthy(rest.get("stream"))}
    if tools:
        body["tools"] = None  # placeholder: spliced by the caller
        if rest.get("tool_choice") is not None:
            if not mirrored(rest["tool_choice"]):
                return None
            body["tool_choice"] = rest["tool_choice"]
    if rest.get("temperature") is not None:
        body["temperature"] = rest["temperature"]
    if rest.get("max_tokens") is not None:
        body[opts.max_tokens_field] = rest["max_tokens"]
    if lua_truthy(rest.get("stream")) and opts.stream_usage:
        body["stream_options"] = {"include_usage": True}
    extra = rest.get("extra") if opts.merge_extra else None
    if extra is not None:
        if type(extra) is not dict or "messages" in extra or not mirrored(extra):
            return None
        for key, value in extra.items():
            if key not in opts.drop_extra:
                body[key] = value
    if body.get("model") is None:
        body.pop("model")
    return body


def _join(body: dict[str, Any], messages: bytes, tools: bytes) -> bytes:
    """The body's JSON with the request's own messages and tools texts in place (never re-encoded)."""
    has_tools = "tools" in body and body["tools"] is None
    if has_tools:
        del body["tools"]
    return splice(body, {"messages": messages, "tools": tools} if has_tools else {"messages": messages})


Finish = Callable[[dict[str, Any], dict[str, Any]], None]  # (body, request) -> None: an adapter's own last steps


def _build(opts: _Compat, rest: dict[str, Any], messages: bytes, tools: bytes, finish: Finish | None) -> bytes | None:
    body = _compat_body(rest, tools, opts)
    if body is None:
        return None
    if finish is not None:
        finish(body, rest)
    return _join(body, messages, tools)


def _compat_adapter(opts: _Compat, finish: Finish | None = None) -> Native:
    def build(parts: RequestJSON) -> bytes | None:
        for field in opts.strip:
            if field in parts.messages:
                return None  # the Lua strips those fields message by message
        rest = decode_rest(parts.rest)
        return None if rest is None else _build(opts, rest, parts.messages, parts.tools, finish)

    return Native(build)


def _no_temperature(body: dict[str, Any], rest: dict[str, Any]) -> None:
    body.pop("temperature", None)  # reasoning models reject a custom temperature, even one from extra


def _openai() -> Native:
    plain = _Compat(stream_usage=True)
    reasoning = _Compat(stream_usage=True, max_tokens_field="max_completion_tokens")

    def build(parts: RequestJSON) -> bytes | None:
        messages, tools = parts.messages, parts.tools
        if b'"reasoning_content"' in messages:
            return None
        rest = decode_rest(parts.rest)
        if rest is None:
            return None
        model = rest.get("model")
        if model is None:
            return _build(plain, rest, messages, tools, None)
        if not isinstance(model, str):
            return None  # tostring() of a number: not mirrored
        if _REASONING_MODEL.match(model):
            return _build(reasoning, rest, messages, tools, _no_temperature)
        return _build(plain, rest, messages, tools, None)

    return Native(build)


def _deepseek_finish(body: dict[str, Any], rest: dict[str, Any]) -> None:
    if lua_truthy(rest.get("thinking")):
        body["thinking"] = {"type": "enabled"}


def _server_finish(body: dict[str, Any], rest: dict[str, Any]) -> None:
    if body.get("disable_thinking") is None:
        body["disable_thinking"] = not lua_truthy(rest.get("thinking"))


NATIVE_ADAPTERS: dict[str, Callable[[], Native]] = {
    "openai": _openai,
    # deepseek.lua rewrites reasoning_content per message (kept inside the current tool loop):
    # a history with any is left to it
    "deepseek": lambda: _compat_adapter(_Compat(stream_usage=True, strip=(b'"reasoning_content"',)), _deepseek_finish),
    "github": lambda: _compat_adapter(_Compat()),
    "groq": lambda: _compat_adapter(
        _Compat(max_tokens_field="max_completion_tokens", strip=(b'"reasoning_content"', b'"reasoning"'))
    ),
    "kimi": lambda: _compat_adapter(
        _Compat(stream_usage=True, drop_extra=frozenset({"disable_thinking", "extra_body"}))
    ),
    "server": lambda: _compat_adapter(
        _Compat(stream_usage=True, strip=(), drop_extra=frozenset({"extra_body"})), _server_finish
    ),
    # the restructuring adapters: each message converted once, cached by its JSON text
    "anthropic": native_anthropic,
    "gemini": native_gemini,
    "mistral": native_mistral,
    "ollama": native_ollama,
}
PASS_THROUGH = ("openai", "deepseek", "github", "groq", "kimi", "server")  # messages sent as the request has them


def openai_request(options: dict[str, Any]) -> Native:
    """The host-built body of a user adapter that declares ``request_format = "openai"``: what
    ``openai_compat.request(req, options)`` makes (options checked by the loader)."""
    strip = options.get("strip")
    return _compat_adapter(_Compat(
        stream_usage=bool(options.get("stream_usage")),
        strip=(b'"reasoning_content"',) if strip is None else tuple(f'"{k}"'.encode() for k in strip),
        max_tokens_field=options.get("max_tokens_field") or "max_tokens",
        drop_extra=frozenset(options.get("drop_extra") or ()),
        merge_extra=options.get("extra") is not False,
    ))


def native_builder(file_stem: str) -> Native | None:
    """The host's builder for the shipped adapter file ``<file_stem>.lua``, if there is one."""
    make = NATIVE_ADAPTERS.get(file_stem)
    return make() if make is not None else None
