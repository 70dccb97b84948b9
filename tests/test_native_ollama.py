"""The host-built body of the shipped ollama.lua equals what its Lua makes.

The Lua side is the very same file loaded as a user's adapter (a user's file always
runs its Lua); one builder serves every example, so its message cache is exercised.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from homeagent.providers.adapter_loader import Adapter, request_parts
from homeagent.providers.native_common import MessageCache, Native
from homeagent.providers.native_ollama import native_ollama
from tests.fakes.native_equivalence import (
    big_ints,
    host_body,
    lua_body,
    plain_values,
    scalars,
    texts,
    user_adapter,
    values,
)


@pytest.fixture(scope="module")
def lua(tmp_path_factory: pytest.TempPathFactory) -> Adapter:
    return user_adapter(tmp_path_factory, "ollama")


@pytest.fixture(scope="module")
def native() -> Native:
    return native_ollama()


TOOLS = [
    {"type": "function", "function": {"name": "get_time", "description": "the time",
                                      "parameters": {"type": "object", "properties": {"tz": {"type": "string"}},
                                                     "default": None}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
]

IDS = ["call_1", "call_2", ""]
image_url = st.one_of(st.just("data:image/png;base64,iVBORw0K"), st.just("https://example.org/cat.png"),
                      st.just("data:;base64,x"), st.just("data:text/plain;base64,"), st.just("data:a\nb;base64,x\ny"),
                      st.just("data:a;b;base64,x"), texts, st.none(), big_ints, st.booleans())
part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(texts, st.none(), big_ints)}),
    st.fixed_dictionaries({"type": st.just("image_url"),
                           "image_url": st.one_of(st.fixed_dictionaries({"url": image_url}), st.just([]), st.just({}),
                                                  texts)}),
    texts, st.none(), big_ints, st.lists(texts, max_size=2),
)
content = st.one_of(texts, st.none(), st.just(""), st.lists(part, max_size=4), st.just({"text": "x"}),
                    big_ints, st.booleans())
arguments = st.one_of(st.just('{"tz": "UTC"}'), st.just(""), st.just("not json"), st.just("[1, 2]"), st.just("7"),
                      st.just('{"a": null, "b": [null, 1]}'), st.just('{"a": 1, "a": null}'), st.just("{bad"),
                      st.just('{"x": 1.}'), st.just("[]"), st.just("{}"), st.just({"already": "decoded"}),
                      st.just([]), st.none())
call_name = st.one_of(st.sampled_from(["get_time", "noop", "odd name \"q\""]), st.none(), st.just(""), big_ints,
                      st.booleans(), st.just({"a": 1}))
tool_call: st.SearchStrategy[Any] = st.one_of(
    st.fixed_dictionaries({"id": st.sampled_from(IDS), "type": st.just("function"),
                           "function": st.fixed_dictionaries({"name": call_name, "arguments": arguments})}),
    st.fixed_dictionaries({}, optional={"id": st.one_of(st.none(), st.sampled_from(IDS), big_ints),
                                        "function": st.one_of(st.none(), st.just({}), st.just([]), st.just(False),
                                                              texts)}),
    st.none(), st.just([]), texts,
)
odd_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user"]), "content": content}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": content},
        optional={"tool_calls": st.one_of(st.lists(tool_call, max_size=3), st.just({}), st.just([]), st.none(),
                                          st.just(False), st.just("calls"), big_ints),
                  "reasoning_content": st.one_of(texts, st.none(), big_ints)}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": content},
                          optional={"tool_call_id": st.one_of(st.sampled_from(IDS), st.none(), st.just(False), big_ints),
                                    "name": st.one_of(st.sampled_from(["from_result", ""]), st.none(), st.just(False),
                                                      big_ints, st.just(["x", None]))}),
    st.fixed_dictionaries({"content": content}, optional={"role": st.one_of(st.just("narrator"), big_ints)}),
    st.none(), st.just([]), st.just("a string"),
)
# what the daemon sends
daemon_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": st.sampled_from(
        ["data:image/png;base64,iVBORw0K", "data:image/jpeg;base64,/9j/4AAQ", "https://example.org/cat.png"])})}),
)
daemon_call = st.fixed_dictionaries({
    "id": st.sampled_from(IDS[:2]), "type": st.just("function"),
    "function": st.fixed_dictionaries({"name": st.sampled_from(["get_time", "noop"]), "arguments": st.one_of(
        st.just('{"tz": "UTC"}'), st.just("{}"), st.just(""),
        # as the daemon writes them (ensure_ascii=False; escaped surrogate pairs are declined by parse_args)
        st.dictionaries(st.sampled_from(["a", "b"]), scalars, max_size=2).map(lambda a: json.dumps(a, ensure_ascii=False)))})})
daemon_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]), "content": texts}),
    st.fixed_dictionaries({"role": st.just("user"), "content": st.lists(daemon_part, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(texts, st.none())},
                          optional={"tool_calls": st.lists(daemon_call, min_size=1, max_size=2),
                                    "reasoning_content": texts}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": st.sampled_from(IDS[:2]), "content": texts}),
)
message = st.one_of(daemon_message, daemon_message, odd_message)  # mostly daemon-shaped
extra_keys = st.sampled_from(["format", "keep_alive", "temperature", "num_predict", "num_ctx", "seed", "options",
                              "stream", "model", "messages", "tools", "think"])
extra = st.one_of(st.dictionaries(extra_keys, values, max_size=4), st.lists(values, max_size=2), texts, big_ints)
rest = {
    "tools": st.one_of(st.just(TOOLS), st.just([]), st.just({"a": None})),
    "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "function": {"name": "noop"}}]),
    "temperature": st.one_of(st.floats(0, 2), st.just(False), st.just({"a": None})),
    "max_tokens": st.one_of(st.integers(1, 100_000), st.just(1500.5), st.just(2**60)),
    "extra": extra,
}
requests = st.fixed_dictionaries(
    {"model": st.sampled_from(["llama3.2", "qwen3:8b"]), "messages": st.lists(message, max_size=6),
     "stream": st.booleans(), "thinking": st.booleans()},
    optional=rest,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests)
def test_host_body_equals_the_lua_body(lua: Adapter, native: Native, request: dict[str, Any]) -> None:
    host = host_body(native, request)
    if host is not None:  # declined: the Lua builds it
        assert host == lua_body(lua, request)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=requests, rounds=st.lists(st.lists(message, min_size=1, max_size=3), min_size=1, max_size=4))
def test_each_round_of_a_conversation_equals_the_lua(lua: Adapter, native: Native, base: dict[str, Any],
                                                     rounds: list[list[Any]]) -> None:
    history = list(base["messages"])
    for new in [[], *rounds]:
        history += new  # each request re-sends the history, plus its new messages
        request = {**base, "messages": list(history)}
        host = host_body(native, request)
        if host is not None:
            assert host == lua_body(lua, request)


daemon_requests = st.fixed_dictionaries(
    {"model": st.sampled_from(["llama3.2", "qwen3:8b"]), "messages": st.lists(daemon_message, max_size=8),
     "stream": st.booleans(), "thinking": st.booleans()},
    optional={"tools": st.just(TOOLS), "tool_choice": rest["tool_choice"], "temperature": st.floats(0, 2),
              "max_tokens": st.integers(1, 100_000), "extra": st.dictionaries(extra_keys, plain_values, max_size=4)},
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=daemon_requests)
def test_daemon_shaped_requests_are_never_declined(lua: Adapter, native: Native, request: dict[str, Any]) -> None:
    host = host_body(native, request)
    assert host is not None, "a daemon-shaped request was declined"
    assert host == lua_body(lua, request)


def tool_loop(rounds: int) -> list[dict[str, Any]]:
    """A conversation's requests as the daemon sends them: system, user (with an image), then a tool
    call (with reasoning) and its result per round."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are HomeAgent."},
        {"role": "user", "content": [{"type": "text", "text": "look at this"},
                                     {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
                                     {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}]}]
    out = [{"model": "qwen3:8b", "messages": list(messages), "stream": True, "thinking": True, "tools": TOOLS,
            "tool_choice": "auto", "temperature": 0.3, "max_tokens": 4096,
            "extra": {"num_ctx": 8192, "keep_alive": "5m", "format": {"type": "object"}}}]
    for k in range(rounds):
        call = {"role": "assistant", "content": None if k % 2 else "", "reasoning_content": f"thinking {k}",
                "tool_calls": [{"id": f"call_{k}", "type": "function",
                                "function": {"name": "get_time", "arguments": json.dumps({"tz": "UTC", "k": k})}}]}
        messages += [call, {"role": "tool", "tool_call_id": f"call_{k}", "content": f"12:0{k}"}]
        out.append({**out[-1], "messages": list(messages)})
    return out


def test_tool_loop_rounds_are_built_by_the_host_and_equal_the_lua(lua: Adapter) -> None:
    native = native_ollama()
    for request in tool_loop(5):
        host = host_body(native, request)
        assert host is not None, "a daemon-shaped request was declined"
        assert host == lua_body(lua, request)
    last = host
    assert last["model"] == "qwen3:8b" and last["stream"] is True and last["think"] is True
    assert last["options"] == {"temperature": 0.3, "num_predict": 4096, "num_ctx": 8192}
    assert last["keep_alive"] == "5m" and last["format"] == {"type": "object"}
    assert last["tools"] == TOOLS  # passed through, null in a schema included
    assert "tool_choice" not in last
    assert last["messages"][0] == {"role": "system", "content": "You are HomeAgent."}
    assert last["messages"][1] == {"role": "user", "content": "look at this", "images": ["/9j/4AAQ"]}
    assert last["messages"][2] == {"role": "assistant", "content": "", "thinking": "thinking 0", "tool_calls": [
        {"function": {"name": "get_time", "arguments": {"tz": "UTC", "k": 0}}}]}
    assert last["messages"][3] == {"role": "tool", "content": "12:00", "tool_name": "get_time"}
    assert [m["role"] for m in last["messages"]] == ["system", "user"] + ["assistant", "tool"] * 5


def test_a_round_converts_only_its_new_messages() -> None:
    cache: MessageCache[Any] = MessageCache()
    native = native_ollama(cache)
    rounds = tool_loop(4)
    for k, request in enumerate(rounds):
        assert native.build(request_parts(request)) is not None
        assert cache.converted == 2 + 2 * k  # the history's messages were converted once, in earlier rounds
        assert len(cache) == 2 + 2 * k
    again = native.build(request_parts(rounds[-1]))
    assert cache.converted == 10 and again is not None and json.loads(again)["messages"]


def test_tool_names_are_resolved_per_request_not_kept_in_the_cache(lua: Adapter, native: Native) -> None:
    result = {"role": "tool", "tool_call_id": "c1", "content": "done", "name": "own_name"}

    def calling(name: str | None) -> dict[str, Any]:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}]}

    cases = [
        ([calling("first"), result], "first"),
        ([calling("second"), result], "second"),  # the same (cached) result, another caller
        ([calling("first"), calling("second"), result], "second"),  # the latest declaration wins
        ([calling("first"), calling(None), result], "own_name"),  # a call without a name forgets the id
        ([calling(""), result], ""),  # "" is a name to Lua (only nil and false are not)
        ([result], "own_name"),  # no call: the result's own name
        ([result, calling("first")], "own_name"),  # a later call does not count
        ([calling("first"), {k: v for k, v in result.items() if k != "name"} | {"tool_call_id": "other"}], None),
    ]
    for messages, expected in cases:
        request = {"model": "llama3.2", "stream": False, "messages": messages}
        host = host_body(native, request)
        assert host is not None and host == lua_body(lua, request)
        tool = next(m for m in host["messages"] if m["role"] == "tool")
        assert tool.get("tool_name") == expected


RULES = [
    # (request fields, expected top-level fields; None: absent)
    ({}, {"options": None, "think": None, "tools": TOOLS, "stream": False}),
    ({"temperature": 0, "max_tokens": 64}, {"options": {"temperature": 0, "num_predict": 64}}),
    ({"temperature": 0.2, "max_tokens": 64, "extra": {"temperature": 0.9, "num_predict": 8, "seed": 7}},
     {"options": {"temperature": 0.9, "num_predict": 8, "seed": 7}}),  # extra keys override
    ({"extra": {"format": "json", "keep_alive": 0}}, {"format": "json", "keep_alive": 0, "options": None}),
    ({"extra": {"num_ctx": 4096, "stop": ["\n"], "gone": None}}, {"options": {"num_ctx": 4096, "stop": ["\n"]}}),
    ({"extra": {"options": {"a": None}}}, {"options": {"options": {}}}),
    ({"extra": "nonsense", "thinking": True, "stream": True}, {"options": None, "think": True, "stream": True}),
    ({"extra": [], "thinking": False}, {"options": None, "think": None}),
]


@pytest.mark.parametrize(("fields", "expected"), RULES)
def test_the_adapters_own_rules(lua: Adapter, native: Native, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    request = {"model": "llama3.2", "stream": False, "thinking": False, "tools": TOOLS, "tool_choice": "required",
               "messages": [{"role": "developer", "content": "b"}, {"role": "user", "content": "hi"}], **fields}
    host = host_body(native, request)
    assert host is not None and host == lua_body(lua, request)
    assert host["messages"] == [{"role": "system", "content": "b"}, {"role": "user", "content": "hi"}]
    assert "tool_choice" not in host and "max_tokens" not in host and "temperature" not in host
    for key, value in expected.items():
        assert host.get(key) == value


def test_messages_without_their_own_texts_are_converted_too(lua: Adapter) -> None:
    request = tool_loop(2)[-1]
    parts = request_parts(request, message_sizes=False)
    body = native_ollama().build(parts)
    assert body is not None and json.loads(body) == lua_body(lua, request)


@pytest.mark.parametrize("odd", [
    {"messages": ["just a string"]},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": "x"}]},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": [7]}]},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": 5, "function": {"name": "n"}}]}]},
    {"messages": [{"role": "tool", "content": "", "tool_call_id": 5}]},
    {"messages": [{"role": "user", "content": "hi"}], "extra": [1, 2]},
    {"messages": [{"role": "user", "content": "hi"}], "temperature": 2**63},  # beyond int64: a float in Lua
    {"messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "function": {"name": "n", "arguments": '{"a": 1, "a": null}'}}]}]},
    {"messages": {"role": "user", "content": "not a list"}},
])
def test_shapes_the_daemon_never_sends_are_left_to_the_lua(native: Native, odd: dict[str, Any]) -> None:
    assert native.build(request_parts({"model": "m", "stream": False, **odd})) is None
