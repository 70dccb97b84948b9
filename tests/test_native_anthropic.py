"""The host-built body of the shipped anthropic.lua equals what its Lua makes.

The Lua side is the very same file loaded as a user's adapter (a user's file always
runs its Lua); one builder serves every example, so its message cache is exercised.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from homeagent.providers.adapter_loader import Adapter, AdapterLoader, RequestContext, request_parts
from homeagent.providers.native_anthropic import native_anthropic
from homeagent.providers.native_common import MessageCache, Native
from tests.fakes.native_equivalence import big_ints, host_body, lua_body, texts, user_adapter, values


@pytest.fixture(scope="module")
def lua(tmp_path_factory: pytest.TempPathFactory) -> Adapter:
    return user_adapter(tmp_path_factory, "anthropic")


@pytest.fixture(scope="module")
def native() -> Native:
    return native_anthropic()


TOOLS = [
    {"type": "function", "function": {"name": "get_time", "description": "the time",
                                      "parameters": {"type": "object", "properties": {"tz": {"type": "string"}},
                                                     "default": None}}},
    {"type": "function", "function": {"name": "noop"}},
]

image_url = st.one_of(st.just("data:image/png;base64,iVBORw0K"), st.just("https://example.org/cat.png"),
                      st.just("data:;base64,x"), st.just("data:text/plain;base64,"), texts, st.none(), big_ints)
part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(texts, st.none(), big_ints)}),
    st.fixed_dictionaries({"type": st.just("image_url"),
                           "image_url": st.one_of(st.fixed_dictionaries({"url": image_url}), st.just([]), texts)}),
    texts, st.none(), big_ints, st.lists(texts, max_size=2),
)
content = st.one_of(texts, st.none(), st.just(""), st.lists(part, max_size=4), st.just({"text": "x"}),
                    big_ints, st.booleans())
arguments = st.one_of(st.just('{"tz": "UTC"}'), st.just(""), st.just("not json"), st.just("[1, 2]"), st.just("7"),
                      st.just('{"a": null, "b": [null, 1]}'), st.just('{"a": 1, "a": null}'), st.just("{bad"),
                      st.just('{"x": 1.}'), st.just({"already": "decoded"}), st.none())
tool_call = st.one_of(
    st.fixed_dictionaries({"id": st.sampled_from(["call_1", "call_2"]), "type": st.just("function"),
                           "function": st.fixed_dictionaries({"name": st.sampled_from(["get_time", "noop"]),
                                                              "arguments": arguments})}),
    st.fixed_dictionaries({}, optional={"id": st.one_of(st.none(), big_ints, texts),
                                        "function": st.one_of(st.none(), st.just({}), texts)}),
    st.none(),
)
message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user"]), "content": content}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": content},
        optional={"tool_calls": st.one_of(st.lists(tool_call, max_size=3), st.just({}), st.none()),
                  "reasoning_content": st.one_of(texts, st.none()),
                  "reasoning_signature": st.one_of(st.just("sig"), st.none(), st.integers(-5, 5))}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": content},
                          optional={"tool_call_id": st.one_of(st.sampled_from(["call_1", "call_2"]), st.none())}),
    st.fixed_dictionaries({"content": content}, optional={"role": st.one_of(st.just("narrator"), st.integers(-5, 5))}),
)
requests = st.fixed_dictionaries(
    {"model": st.sampled_from(["claude-sonnet-4", "claude-x"]), "messages": st.lists(message, max_size=6),
     "stream": st.booleans(), "thinking": st.booleans()},
    optional={
        "tools": st.just(TOOLS),
        "tool_choice": st.sampled_from(["auto", "none", "required", "any", "bogus",
                                        {"type": "function", "function": {"name": "noop"}},
                                        {"type": "function", "function": {}}, {"type": "function"}]),
        "temperature": st.floats(0, 2),
        "max_tokens": st.one_of(st.integers(1, 100_000), st.just(1500.5), st.just(2048)),
        "extra": st.one_of(st.dictionaries(st.sampled_from(["top_p", "top_k", "metadata", "seed"]), values, max_size=3),
                           st.lists(values, max_size=2)),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests)
def test_host_body_equals_the_lua_body(lua: Adapter, native: Native, request: dict[str, Any]) -> None:
    host = host_body(native, request)
    if host is not None:  # declined: the Lua builds it
        assert host == lua_body(lua, request)


def tool_loop(rounds: int, thinking: bool, signed: bool) -> list[dict[str, Any]]:
    """A conversation's requests: system, user, then a tool call and its result per round."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are HomeAgent."},
                                      {"role": "user", "content": [{"type": "text", "text": "look at this"},
                                                                   {"type": "image_url", "image_url": {
                                                                       "url": "data:image/jpeg;base64,/9j/4AAQ"}}]}]
    out = [{"model": "claude-sonnet-4", "messages": list(messages), "stream": True, "thinking": thinking,
            "tools": TOOLS, "tool_choice": "auto", "temperature": 0.3, "max_tokens": 4096}]
    for k in range(rounds):
        call = {"role": "assistant", "content": None if k % 2 else "let me check",
                "tool_calls": [{"id": f"call_{k}", "type": "function",
                                "function": {"name": "get_time", "arguments": json.dumps({"tz": "UTC", "k": k})}}]}
        if signed:
            call |= {"reasoning_content": f"thinking {k}", "reasoning_signature": f"sig{k}"}
        messages += [call, {"role": "tool", "tool_call_id": f"call_{k}", "content": f"12:0{k}"}]
        out.append({**out[-1], "messages": list(messages)})
    return out


@pytest.mark.parametrize(("thinking", "signed"), [(False, False), (True, True), (True, False)])
def test_tool_loop_rounds_are_built_by_the_host_and_equal_the_lua(lua: Adapter, thinking: bool, signed: bool) -> None:
    native = native_anthropic()
    for request in tool_loop(5, thinking, signed):
        host = host_body(native, request)
        assert host is not None, "a daemon-shaped request was declined"
        assert host == lua_body(lua, request)
    last = host
    assert last["system"] == "You are HomeAgent."
    assert last["messages"][0]["content"][1] == {"type": "image", "source": {
        "type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}}
    assert [m["role"] for m in last["messages"]] == ["user"] + ["assistant", "user"] * 5
    assert last["messages"][1]["content"][-1] == {"type": "tool_use", "id": "call_0", "name": "get_time",
                                                  "input": {"tz": "UTC", "k": 0}}
    assert last["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "call_0", "content": "12:00"}]
    assert last["tools"][0]["input_schema"]["default"] is None  # schemas pass through untouched
    if thinking and signed:
        assert last["thinking"] == {"type": "enabled", "budget_tokens": 2048}
        assert "temperature" not in last
        assert last["messages"][1]["content"][0] == {"type": "thinking", "thinking": "thinking 0", "signature": "sig0"}
    else:  # an unsigned tool loop cannot use thinking: left off
        assert "thinking" not in last and last["temperature"] == 0.3
        assert all(block["type"] != "thinking" for m in last["messages"] for block in m["content"])


def test_a_round_converts_only_its_new_messages() -> None:
    cache: MessageCache[Any] = MessageCache()
    native = native_anthropic(cache)
    rounds = tool_loop(4, False, False)
    for k, request in enumerate(rounds):
        assert native.build(request_parts(request)) is not None
        assert cache.converted == 2 + 2 * k  # the history's messages were converted once, in earlier rounds
    again = native.build(request_parts(rounds[-1]))
    assert cache.converted == 10 and again is not None and json.loads(again)["messages"]


RULES = [
    # (request fields, expected top-level fields)
    ({"max_tokens": None}, {"max_tokens": 8192}),
    ({"thinking": True, "max_tokens": 1000, "temperature": 0.5}, {"max_tokens": 2048, "thinking": {
        "type": "enabled", "budget_tokens": 1024}}),
    ({"thinking": True, "tool_choice": "required"}, {"tool_choice": {"type": "auto"}}),
    ({"tool_choice": "required"}, {"tool_choice": {"type": "any"}}),
    ({"thinking": True, "max_tokens": 10000}, {"max_tokens": 10000, "thinking": {"type": "enabled", "budget_tokens": 5000}}),
    ({"tool_choice": {"type": "function", "function": {"name": "noop"}}}, {"tool_choice": {"type": "tool", "name": "noop"}}),
    ({"extra": {"top_k": 5, "seed": 3, "metadata": {"user_id": "u"}}}, {"top_k": 5, "metadata": {"user_id": "u"}}),
]


@pytest.mark.parametrize(("fields", "expected"), RULES)
def test_the_adapters_own_rules(lua: Adapter, native: Native, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    request = {"model": "claude-sonnet-4", "stream": False, "thinking": False, "tools": TOOLS, "max_tokens": 1000,
               "messages": [{"role": "system", "content": "a"}, {"role": "developer", "content": "b"},
                            {"role": "user", "content": "hi"}], **fields}
    request = {k: v for k, v in request.items() if v is not None}
    host = host_body(native, request)
    assert host is not None and host == lua_body(lua, request)
    assert host["system"] == "a\n\nb"
    for key, value in expected.items():
        assert host[key] == value
    if request.get("thinking"):
        assert "temperature" not in host
    assert "seed" not in host


def test_a_conversation_opening_with_the_assistant_gets_a_user_turn_first(lua: Adapter, native: Native) -> None:
    request = {"model": "m", "stream": False, "messages": [{"role": "assistant", "content": "earlier"},
                                                           {"role": "user", "content": "a"},
                                                           {"role": "user", "content": ""}]}
    host = host_body(native, request)
    assert host == lua_body(lua, request)
    assert host["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "(continued)"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "earlier"}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": " "}]},
    ]


@pytest.mark.parametrize("odd", [
    {"messages": ["just a string"]},
    {"messages": [{"role": "user", "content": 42}]},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": ["x"]}]},
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100.5},
    {"messages": [{"role": "user", "content": "hi"}], "temperature": {"a": None}},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "function": {"name": "n", "arguments": '{"a": 1, "a": null}'}}]}]},
])
def test_shapes_the_daemon_never_sends_are_left_to_the_lua(native: Native, odd: dict[str, Any]) -> None:
    assert native.build(request_parts({"model": "m", "stream": False, **odd})) is None


def test_a_failing_host_build_falls_back_to_the_lua(caplog: pytest.LogCaptureFixture) -> None:
    shipped = AdapterLoader().get("anthropic")
    assert shipped.builtin
    request = {"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]}
    parts = request_parts(request)
    # texts that do not match the messages: the host's builder fails (IndexError), the Lua reads the sizes
    broken = dataclasses.replace(parts, message_texts=(*parts.message_texts, b'{"role": "user", "content": "hi"'))
    ctx = shipped.context(RequestContext(model="m", stream=False, thinking=False))
    with caplog.at_level(logging.WARNING, logger="homeagent.providers.adapters"):
        body = json.loads(shipped.build_request_sync(broken, ctx))
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]  # the Lua's
    assert "host-built request failed" in caplog.text and "its Lua builds it" in caplog.text
