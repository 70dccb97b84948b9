"""The host-built body of the shipped mistral.lua equals what its Lua makes.

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
from homeagent.providers.native_common import Decline, MessageCache, Native
from homeagent.providers.native_mistral import native_mistral, short_id
from tests.fakes.native_equivalence import big_ints, host_body, lua_body, texts, user_adapter, values


@pytest.fixture(scope="module")
def lua(tmp_path_factory: pytest.TempPathFactory) -> Adapter:
    return user_adapter(tmp_path_factory, "mistral")


@pytest.fixture(scope="module")
def native() -> Native:
    return native_mistral()


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "default": None}}, "required": ["q"]}}}


TOOLS = [tool(name) for name in ("get_time", "search", "read_file", "write_file", "noop")]

ids: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(["call_1", "abcDEF123", "abc_EF123", "ABCDEFGHI", "123456789", "12345678", "1234567890",
                     "call_9f2Kx0aQ7bLm3ZpR1tYw", "", "ééé", "a\x00bcdefgh"]),
    st.sampled_from(["call_2", "abc_EF123", "abc-EF123", "call_1", "x" * 40, "9charsXYZ", "Zz0"]),
    st.sampled_from([None, True, False, 42, 2**60, 1.5, {"a": 1}, [], "abcdéfgh"]),
    texts,
)
part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(texts, st.none())}),
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries(
        {"url": st.sampled_from(["data:image/png;base64,iVBORw0K", "https://example.org/cat.png"])})}),
    texts, st.none(),
)
content = st.one_of(texts, st.none(), st.just(""), st.lists(part, max_size=3), st.just({"text": "x", "n": None}),
                    st.just([]), big_ints, st.booleans())
function = st.one_of(
    st.fixed_dictionaries({"name": st.sampled_from(["get_time", "noop"]),
                           "arguments": st.sampled_from(['{"q": "x"}', "", "{bad", '{"a": null}'])}),
    st.none(), st.just({}), texts, st.just(False), st.just({"name": None, "arguments": {"a": [None, 1]}}),
)
tool_call = st.one_of(
    st.fixed_dictionaries({"id": ids, "type": st.just("function"), "function": function},
                          optional={"index": st.integers(0, 3), "extra": values}),
    st.fixed_dictionaries({}, optional={"id": ids, "function": function}),
    st.none(), st.just([1, 2]), texts, st.integers(0, 5), st.booleans(),
)
tool_calls = st.one_of(st.lists(tool_call, max_size=3), st.just([]), st.just({}), st.just({"id": "x"}), st.none(),
                       st.just(False), st.just(True), texts, st.integers(0, 3))
daemon_ids = st.sampled_from(["call_1", "abcDEF123", "call_9f2Kx0aQ7bLm3ZpR1tYw", "toolu_01A09q90qw90lq917835lq9"]) | st.text(
    st.characters(min_codepoint=33, max_codepoint=126), max_size=30)  # providers' ids are ASCII
daemon_call = st.fixed_dictionaries({"id": daemon_ids, "type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": st.sampled_from(["get_time", "noop"]), "arguments": st.sampled_from(['{"q": "x"}', "{}", ""])})})
daemon_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries(
        {"url": st.sampled_from(["data:image/png;base64,iVBORw0K", "https://example.org/cat.png"])})}),
)
daemon_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]),
                           "content": st.one_of(texts, st.lists(daemon_part, min_size=1, max_size=3))}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(st.none(), st.just(""), texts)},
                          optional={"reasoning_content": texts,
                                    "tool_calls": st.lists(daemon_call, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": daemon_ids, "content": texts}),
)
message = st.one_of(
    daemon_message,
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": ids, "content": texts}),
    # odd shapes
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]), "content": content},
                          optional={"name": st.one_of(texts, st.none()), "junk": values}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": content},
        optional={"tool_calls": tool_calls, "reasoning_content": st.one_of(texts, st.none()),
                  "prefix": st.one_of(st.booleans(), st.none()), "name": texts}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": content},
                          optional={"tool_call_id": ids, "name": texts}),
    st.fixed_dictionaries({"content": content}, optional={"role": st.one_of(st.just("narrator"), big_ints),
                                                          "tool_call_id": ids, "tool_calls": tool_calls}),
    st.sampled_from([None, [1, "a"], {}, "just a string", 3]),
)
extra_keys = st.sampled_from(["top_p", "random_seed", "response_format", "safe_prompt", "stop", "presence_penalty",
                              "frequency_penalty", "n", "parallel_tool_calls", "prompt_mode", "seed", "top_k",
                              "messages", "model"])
requests = st.fixed_dictionaries(
    {"model": st.one_of(st.sampled_from(["mistral-large-latest", "codestral"]), values),
     "messages": st.lists(message, max_size=8), "stream": st.one_of(st.booleans(), values), "thinking": st.booleans()},
    optional={
        "tools": st.sampled_from([TOOLS, TOOLS, TOOLS[:1], {"odd": [None]}, "x"]),
        "tool_choice": st.sampled_from(["auto", "none", "required", "any", "", {"type": "function", "function": {
            "name": "noop"}}]) | values,
        "temperature": st.one_of(st.floats(0, 2), st.just(1.0), st.just(0)),
        "max_tokens": st.one_of(st.integers(1, 100_000), st.just(1500.5), big_ints),
        "extra": st.one_of(st.dictionaries(extra_keys, values, max_size=4), st.lists(values, max_size=2), texts),
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests)
def test_host_body_equals_the_lua_body(lua: Adapter, native: Native, request: dict[str, Any]) -> None:
    host = host_body(native, request)
    if host is not None:  # declined: the Lua builds it (or fails, as it would)
        assert host == lua_body(lua, request)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests, rounds=st.lists(st.lists(message, min_size=1, max_size=3), min_size=1, max_size=4))
def test_each_round_of_a_conversation_equals_the_lua(lua: Adapter, native: Native, request: dict[str, Any],
                                                     rounds: list[list[Any]]) -> None:
    messages = list(request["messages"])
    for new in rounds:  # each request re-sends the history plus its new messages
        messages += new
        current = {**request, "messages": list(messages)}
        host = host_body(native, current)
        if host is not None:
            assert host == lua_body(lua, current)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=st.fixed_dictionaries(
    {"model": st.just("mistral-large-latest"), "messages": st.lists(daemon_message, min_size=1, max_size=8),
     "stream": st.booleans(), "thinking": st.booleans()},
    optional={"tools": st.just(TOOLS), "tool_choice": st.sampled_from(
                  ["auto", "none", "required", {"type": "function", "function": {"name": "noop"}}]),
              "temperature": st.floats(0, 2), "max_tokens": st.integers(1, 100_000),
              "extra": st.dictionaries(extra_keys, st.one_of(texts, st.floats(0, 2), st.integers(0, 2**40),
                                                             st.lists(texts, max_size=2)), max_size=3)}))
def test_daemon_shaped_requests_are_never_declined(lua: Adapter, native: Native, request: dict[str, Any]) -> None:
    host = host_body(native, request)
    assert host is not None
    assert host == lua_body(lua, request)


def tool_loop(rounds: int) -> list[dict[str, Any]]:
    """A conversation's requests as the daemon sends them: a tool call and its result per round."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are HomeAgent."},
        {"role": "user", "content": [{"type": "text", "text": "what is on this picture, and the time?"},
                                     {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
                                     {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}]},
    ]
    out = [{"model": "mistral-large-latest", "messages": list(messages), "stream": True, "thinking": False,
            "tools": TOOLS, "tool_choice": "auto", "temperature": 0.3, "max_tokens": 4096}]
    for k in range(rounds):
        call = {"role": "assistant", "content": None if k % 2 else "" if k % 3 else "let me check",
                "tool_calls": [{"id": f"call_{k}abcdefghijklmnopq", "type": "function",
                                "function": {"name": TOOLS[k % 5]["function"]["name"],
                                             "arguments": json.dumps({"q": f"x{k}"})}}]}
        if k % 2:
            call["reasoning_content"] = f"thinking {k}"
        result = {"role": "tool", "tool_call_id": f"call_{k}abcdefghijklmnopq", "content": f"result {k}"}
        messages += [call, result]
        if k == rounds - 1:
            messages.append({"role": "user", "content": "thanks"})
        out.append({**out[-1], "messages": list(messages), "tool_choice": ["auto", "required", "none"][k % 3],
                    "stream": bool(k % 2), "extra": {"random_seed": 7, "safe_prompt": False, "seed": 1}})
    return out


def test_tool_loop_rounds_are_built_by_the_host_and_equal_the_lua(lua: Adapter) -> None:
    native = native_mistral()
    for request in tool_loop(9):
        host = host_body(native, request)
        assert host is not None, "a daemon-shaped request was declined"
        assert host == lua_body(lua, request)
    last = host
    assert [m["role"] for m in last["messages"]] == ["system", "user"] + ["assistant", "tool"] * 9 + ["user"]
    call, result = last["messages"][2], last["messages"][3]
    assert call["tool_calls"][0]["id"] == result["tool_call_id"] == short_id("call_0abcdefghijklmnopq")
    assert call["tool_calls"][0]["function"] == {"name": "get_time", "arguments": '{"q": "x0"}'}
    assert "reasoning_content" not in last["messages"][4]  # only Mistral's known fields are sent
    assert last["messages"][1]["content"][1]["image_url"]["url"] == "data:image/jpeg;base64,/9j/4AAQ"
    assert last["tools"] == TOOLS  # passed through, nulls in schemas included
    assert last["random_seed"] == 7 and last["safe_prompt"] is False and "seed" not in last


def test_a_round_converts_only_its_new_messages() -> None:
    cache: MessageCache[bytes] = MessageCache()
    native = native_mistral(cache)
    rounds = tool_loop(4)
    for k, request in enumerate(rounds):
        assert native.build(request_parts(request)) is not None
        assert cache.converted == 2 + 2 * k + (k == 4)  # the history's messages were converted in earlier rounds
    again = native.build(request_parts(rounds[-1]))
    assert cache.converted == 11 and len(cache) == 11 and again is not None


def test_short_id_is_the_luas() -> None:
    assert short_id("abcDEF123") == "abcDEF123"  # already 9 letters/digits: kept
    assert short_id("call_1") == "Osxvt64VW"
    assert short_id("abc_EF123") == "gyukKeSqH"  # 9 characters, but not all letters/digits
    assert short_id("") == "UjPZCBrda"
    assert short_id("x" * 100) == "WlIGjVK25"
    assert short_id("é中") == "Nkpv99mm8"  # hashed by its UTF-8 bytes
    # the largest intermediate stays below 2**63: Lua's 64-bit integers never wrap
    assert 2147483646 * 2147483629 + 2147483628 < 2**63
    with pytest.raises(Decline):
        short_id("abcdéfgh")  # 9 bytes with non-ASCII ones: Lua's %w depends on the C locale


RULES = [
    # (request fields, expected top-level fields)
    ({"tool_choice": "required"}, {"tool_choice": "any"}),
    ({"tool_choice": "auto"}, {"tool_choice": "auto"}),
    ({"tool_choice": {"type": "function", "function": {"name": "noop"}}},
     {"tool_choice": {"type": "function", "function": {"name": "noop"}}}),
    ({"extra": {"top_p": 0.9, "random_seed": 3, "stop": ["\n"], "prompt_mode": "reasoning", "seed": 1, "top_k": 4,
                "response_format": {"type": "json_object", "schema": None}}},
     {"top_p": 0.9, "random_seed": 3, "stop": ["\n"], "prompt_mode": "reasoning",
      "response_format": {"type": "json_object"}}),
    ({"stream": False, "temperature": 0.2, "max_tokens": 99}, {"stream": False, "temperature": 0.2, "max_tokens": 99}),
]


@pytest.mark.parametrize(("fields", "expected"), RULES)
def test_the_adapters_own_rules(lua: Adapter, native: Native, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    request = {"model": "mistral-small", "stream": True, "thinking": True, "tools": TOOLS, "messages": [
        {"role": "system", "content": "be brief", "reasoning_content": "x", "weird": 1},
        {"role": "assistant", "content": None, "prefix": True, "tool_calls": [
            {"id": "call_1", "index": 0, "type": "function", "function": {"name": "noop", "arguments": "{}"}},
            {"id": "abcDEF123", "type": "function", "function": {"name": "noop", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "noop", "content": "ok"}], **fields}
    host = host_body(native, request)
    assert host is not None and host == lua_body(lua, request)
    for key, value in expected.items():
        assert host[key] == value
    assert "seed" not in host and "top_k" not in host and "thinking" not in host
    assert host["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "assistant", "prefix": True, "tool_calls": [
            {"id": "Osxvt64VW", "type": "function", "function": {"name": "noop", "arguments": "{}"}},
            {"id": "abcDEF123", "type": "function", "function": {"name": "noop", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "Osxvt64VW", "name": "noop", "content": "ok"}]


def test_without_tools_there_is_no_tool_choice(lua: Adapter, native: Native) -> None:
    request = {"model": "m", "stream": False, "tool_choice": "required", "messages": [{"role": "user", "content": "hi"}]}
    host = host_body(native, request)
    assert host == lua_body(lua, request) == {"model": "m", "stream": False,
                                               "messages": [{"role": "user", "content": "hi"}]}


def test_an_ordinary_request_passes_its_tools_text_through(native: Native) -> None:
    parts = request_parts({"model": "m", "stream": True, "tools": TOOLS, "messages": [{"role": "user", "content": "hi"}]})
    body = native.build(parts)
    assert body is not None and parts.tools in body


@pytest.mark.parametrize("odd", [
    {"messages": ["just a string"]},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": 3}]},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": [7]}]},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": 42, "function": {"name": "n"}}]}]},
    {"messages": [{"role": "tool", "content": "", "tool_call_id": {"a": 1}}]},
    {"messages": [{"role": "tool", "content": "", "tool_call_id": True}]},
    {"messages": [{"role": "user", "content": 2**63}]},  # read as a float by the sandbox
    {"messages": [{"role": "user", "content": "hi"}], "extra": {"n": 2**64 - 1}},
])
def test_shapes_the_daemon_never_sends_are_left_to_the_lua(native: Native, odd: dict[str, Any]) -> None:
    assert native.build(request_parts({"model": "m", "stream": False, **odd})) is None
