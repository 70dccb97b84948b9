"""The host-built body of the shipped gemini.lua equals what its Lua makes.

The Lua side is the very same file loaded as a user's adapter (a user's file always
runs its Lua); one builder serves every example, so its caches are exercised.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from homeagent.providers.adapter_loader import Adapter, request_parts
from homeagent.providers.native_common import MessageCache, Native
from homeagent.providers.native_gemini import native_gemini
from tests.fakes.native_equivalence import big_ints, host_body, lua_body, scalars, texts, user_adapter, values


@pytest.fixture(scope="module")
def lua(tmp_path_factory: pytest.TempPathFactory) -> Adapter:
    return user_adapter(tmp_path_factory, "gemini")


@pytest.fixture(scope="module")
def native() -> Native:
    return native_gemini()


TOOLS = [
    {"type": "function", "function": {
        "name": "get_time", "description": "the time",
        "parameters": {"type": "object", "additionalProperties": False,
                       "$schema": "http://json-schema.org/draft-07/schema#",
                       "properties": {"tz": {"type": ["string", "null"], "description": "zone"},
                                      "fmt": {"const": "iso"},
                                      "n": {"type": "integer", "default": 3, "minimum": 0, "exclusiveMaximum": 9},
                                      "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                                      "when": {"anyOf": [{"type": "string", "format": "date-time"},
                                                         {"type": "null"}]}},
                       "required": ["tz"]}}},
    {"type": "function", "function": {"name": "noop"}},
    {"name": "bare", "description": "no function wrapper", "parameters": {"type": "object", "properties": {}}},
]

image_url = st.one_of(st.just("data:image/png;base64,iVBORw0K"), st.just("https://example.org/cat.png"),
                      st.just("data:;base64,x"), st.just("data:text/plain;base64,"), st.just("data:a;b;base64,x\ny"),
                      st.just("data:é/x;base64,ü"), texts, st.none(), big_ints, st.just({"u": 1}))
part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(texts, st.none(), big_ints)}),
    st.fixed_dictionaries({"type": st.just("image_url"),
                           "image_url": st.one_of(st.fixed_dictionaries({"url": image_url}), st.just([]), texts)},
                          optional={"text": texts}),
    texts, st.none(), big_ints, st.lists(texts, max_size=2),
)
content = st.one_of(texts, st.none(), st.just(""), st.lists(part, max_size=4), st.just({"text": "x"}),
                    big_ints, st.booleans())
arguments = st.one_of(st.just('{"tz": "UTC"}'), st.just(""), st.just("not json"), st.just("[1, 2]"), st.just("7"),
                      st.just("null"), st.just("  "), st.just('{"a": null, "b": [null, 1]}'),
                      st.just('{"a": 1, "a": null}'), st.just("{bad"), st.just('{"x": 1.}'),
                      st.just({"already": "decoded"}), st.just([]), st.none())
ids = st.sampled_from(["call_1", "call_2", ""])
odd_ids = st.one_of(st.none(), st.just(False), st.integers(-3, 3), st.just(2.0), texts, st.just({"a": 1}), st.just([1]))
tool_call = st.one_of(
    st.fixed_dictionaries({"id": ids, "type": st.just("function"),
                           "function": st.fixed_dictionaries({"name": st.sampled_from(["get_time", "noop", "a b\"c"]),
                                                              "arguments": arguments})}),
    st.fixed_dictionaries({}, optional={"id": odd_ids,
                                        "function": st.one_of(st.none(), st.just({}), st.just([]), st.just(False),
                                                              st.fixed_dictionaries({}, optional={
                                                                  "name": st.one_of(st.none(), st.just(False),
                                                                                    big_ints, texts, st.just({"x": 1})),
                                                                  "arguments": arguments}))}),
    st.none(), st.just([]),
)
message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user"]), "content": content}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": content},
        optional={"tool_calls": st.one_of(st.lists(tool_call, max_size=3), st.just({}), st.none(), st.just(False)),
                  "reasoning_content": st.one_of(texts, st.none())}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": content},
                          optional={"tool_call_id": st.one_of(ids, odd_ids),
                                    "name": st.one_of(st.just("named"), st.none(), st.just(False), big_ints)}),
    st.fixed_dictionaries({"content": content}, optional={"role": st.one_of(st.just("narrator"), st.integers(-5, 5))}),
    st.none(), st.just([]),
)
tool_choices = st.sampled_from(["auto", "none", "required", "any", "bogus", "", False, 3,
                                {"type": "function", "function": {"name": "noop"}}])
requests = st.fixed_dictionaries(
    {"model": st.sampled_from(["gemini-2.5-flash", "models/x"]), "messages": st.lists(message, max_size=6),
     "stream": st.booleans(), "thinking": st.one_of(st.booleans(), st.just(0), st.just(""), st.none())},
    optional={
        "tools": st.sampled_from([TOOLS, TOOLS[:1], [], {"a": 1}, [None, [], {"function": {}}]]),
        "tool_choice": tool_choices,
        "temperature": st.one_of(st.floats(0, 2), st.just(1), st.just(False), st.just({"a": None, "b": [None]})),
        "max_tokens": st.one_of(st.integers(1, 100_000), st.just(1500.5), st.just("9"), st.just(2**62)),
        "extra": st.one_of(st.dictionaries(st.sampled_from(["top_p", "tools", "contents"]), values, max_size=3),
                           st.lists(values, max_size=2)),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests)
def test_host_body_equals_the_lua_body(lua: Adapter, native: Native, request: dict[str, Any]) -> None:
    host = host_body(native, request)
    if host is not None:  # declined: the Lua builds it
        assert host == lua_body(lua, request)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(message, min_size=2, max_size=12), cut=st.lists(st.integers(1, 12), max_size=4))
def test_every_round_of_a_growing_conversation_equals_the_lua(lua: Adapter, native: Native, history: list[Any],
                                                             cut: list[int]) -> None:
    ends = sorted({min(c, len(history)) for c in cut} | {len(history)})
    for end in ends:  # each request = the previous one + new messages
        request = {"model": "gemini-2.5-flash", "stream": True, "messages": history[:end], "tools": TOOLS,
                   "tool_choice": "auto"}
        host = host_body(native, request)
        if host is not None:
            assert host == lua_body(lua, request)


type_values = st.one_of(st.sampled_from(["string", "object", "integer"]),
                        st.lists(st.sampled_from(["string", "null", "integer", "array"]), max_size=3, unique=True),
                        st.permutations(["string", "null", "integer"]),
                        st.just({"a": "string"}), st.just(["string", None]), st.just(7))
schema_keys = {
    "type": type_values, "nullable": st.one_of(st.booleans(), st.just("yes")), "description": texts,
    "enum": st.lists(scalars, max_size=2), "const": scalars, "required": st.lists(texts, max_size=2),
    "default": values, "format": texts, "minimum": big_ints, "additionalProperties": st.booleans(),
    "$ref": texts, "example": values,
}


def _schema_node(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    nested = {"properties": st.one_of(st.dictionaries(st.sampled_from(["p", "q", "r"]), inner, max_size=3),
                                      st.lists(st.one_of(inner, st.none()), min_size=1, max_size=2), texts),
              "items": st.one_of(inner, st.lists(inner, max_size=2), texts),
              "anyOf": st.one_of(st.lists(st.one_of(inner, st.none()), min_size=1, max_size=3), st.just({"a": {}}),
                                 texts)}
    return st.fixed_dictionaries({}, optional={**schema_keys, **nested}) | st.lists(inner, max_size=2)


schemas = st.recursive(st.fixed_dictionaries({}, optional=schema_keys) | scalars, _schema_node, max_leaves=8)
tool_defs = st.lists(st.one_of(
    st.fixed_dictionaries({"type": st.just("function"),
                           "function": st.fixed_dictionaries({"name": texts}, optional={
                               "description": st.one_of(texts, big_ints), "parameters": schemas})}),
    st.fixed_dictionaries({}, optional={"name": texts, "parameters": schemas, "function": st.one_of(
        st.just(False), st.just([]), st.none())}),
), min_size=1, max_size=3)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tools=tool_defs)
def test_tool_schemas_are_cleaned_as_the_lua_cleans_them(lua: Adapter, native: Native, tools: list[Any]) -> None:
    request = {"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    host = host_body(native, request)
    if host is not None:
        assert host == lua_body(lua, request)


SCHEMA_RULES: list[tuple[Any, Any]] = [
    ({"type": ["null", "integer", "string"], "additionalProperties": False, "$ref": "#/x"},
     {"type": "integer", "nullable": True}),  # the first type wins; what Gemini rejects is dropped
    ({"type": ["string", "null"], "nullable": True, "const": "a"}, {"type": "string", "nullable": True, "enum": ["a"]}),
    ({"anyOf": [{"type": "string", "pattern": "x"}, None], "items": [{"type": "x"}], "type": {"a": 1}},
     {"anyOf": [{"type": "string", "pattern": "x"}, {}], "items": {}}),  # a null item is an empty schema
    ({"properties": [{"type": "string", "maxLength": 3}, None], "anyOf": {"a": {}}, "items": "string"},
     {"properties": {"1": {"type": "string", "maxLength": 3}, "2": {}}, "anyOf": [], "items": "string"}),
    ({"properties": {"p": {"properties": "odd", "default": {"k": [1, None]}, "minimum": 1.5}}, "required": []},
     {"properties": {"p": {"properties": "odd", "default": {"k": [1, None]}, "minimum": 1.5}}, "required": []}),
    ([{"type": "string"}], {}),
    ("just text", "just text"),
]


@pytest.mark.parametrize(("parameters", "expected"), SCHEMA_RULES)
def test_schemas_keep_only_what_gemini_accepts(lua: Adapter, native: Native, parameters: Any, expected: Any) -> None:
    request = {"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}],
               "tools": [{"type": "function", "function": {"name": "t", "parameters": parameters}}]}
    host = host_body(native, request)
    assert host is not None and host == lua_body(lua, request)
    assert host["tools"] == [{"functionDeclarations": [{"name": "t", "parameters": expected}]}]


def tool_loop(rounds: int) -> list[dict[str, Any]]:
    """A conversation's requests as the daemon sends them: system, user with images, then
    an assistant tool call and its result per round."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are HomeAgent."},
        {"role": "user", "content": [{"type": "text", "text": "look at these"},
                                     {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
                                     {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}]}]
    out = [{"model": "gemini-2.5-flash", "messages": list(messages), "stream": True, "thinking": True,
            "tools": TOOLS, "tool_choice": "auto", "temperature": 0.3, "max_tokens": 4096,
            "extra": {"top_p": 0.9, "safety": {"level": "low"}}}]
    for k in range(rounds):
        call = {"role": "assistant", "content": None if k % 2 else ("" if k % 3 else "let me check"),
                "reasoning_content": f"thinking {k}",
                "tool_calls": [{"id": f"call_{k}", "type": "function",
                                "function": {"name": "get_time", "arguments": json.dumps({"tz": "UTC", "k": k})}}]}
        messages += [call, {"role": "tool", "tool_call_id": f"call_{k}", "content": f"12:0{k}"}]
        out.append({**out[-1], "messages": list(messages)})
    return out


def test_tool_loop_rounds_are_built_by_the_host_and_equal_the_lua(lua: Adapter) -> None:
    native = native_gemini()
    for request in tool_loop(5):
        host = host_body(native, request)
        assert host is not None, "a daemon-shaped request was declined"
        assert host == lua_body(lua, request)
    last = host
    assert last["systemInstruction"] == {"parts": [{"text": "You are HomeAgent."}]}
    assert last["contents"][0] == {"role": "user", "parts": [  # an http image is dropped: Gemini wants inline data
        {"text": "look at these"}, {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQ"}}]}
    assert [c["role"] for c in last["contents"]] == ["user"] + ["model", "user"] * 5
    assert last["contents"][1]["parts"] == [{"text": "let me check"},
                                            {"functionCall": {"name": "get_time", "args": {"tz": "UTC", "k": 0}}}]
    assert last["contents"][2]["parts"] == [{"functionResponse": {"name": "get_time", "response": {"content": "12:00"}}}]
    assert last["generationConfig"] == {"temperature": 0.3, "maxOutputTokens": 4096,
                                        "thinkingConfig": {"includeThoughts": True}}
    assert last["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}
    decls = last["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in decls] == ["get_time", "noop", "bare"]
    assert decls[0]["parameters"] == {
        "type": "object", "required": ["tz"],
        "properties": {"tz": {"type": "string", "nullable": True, "description": "zone"},
                       "fmt": {"enum": ["iso"]}, "n": {"type": "integer", "default": 3, "minimum": 0},
                       "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                       "when": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]}}}
    assert decls[1] == {"name": "noop"} and "top_p" not in last


@pytest.mark.parametrize("tool_choice", ["auto", "none", "required", {"type": "function", "function": {"name": "noop"}}])
@pytest.mark.parametrize("thinking", [True, False])
def test_daemon_shaped_requests_are_never_declined(lua: Adapter, native: Native, tool_choice: Any,
                                                   thinking: bool) -> None:
    for request in tool_loop(2):
        request = {**request, "tool_choice": tool_choice, "thinking": thinking, "stream": not thinking}
        host = host_body(native, request)
        assert host is not None and host == lua_body(lua, request)
    modes = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
    if isinstance(tool_choice, str):
        assert host["toolConfig"]["functionCallingConfig"]["mode"] == modes[tool_choice]
    else:
        assert "toolConfig" not in host  # Gemini's adapter maps named choices to nothing
    assert ("thinkingConfig" in host["generationConfig"]) is thinking


RULES: list[tuple[list[Any], dict[str, Any]]] = [
    # consecutive turns of one role merge; tool results join the user turn; empty system adds nothing
    ([{"role": "user", "content": "a"}, {"role": "system", "content": ""}, {"role": "user", "content": ["b", 7]},
      {"role": "developer", "content": [{"text": "d"}, "e"]}],
     {"contents": [{"role": "user", "parts": [{"text": "a"}, {"text": "b"}]}],
      "systemInstruction": {"parts": [{"text": "d\ne"}]}}),
    # a tool result's name: the latest call with its id, else its own name, else "tool"
    ([{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "function": {"name": "first", "arguments": "{}"}},
        {"id": "c2", "function": {"name": "second", "arguments": "oops"}}]},
      {"role": "tool", "tool_call_id": "c2", "content": "r2"},
      {"role": "tool", "tool_call_id": "zz", "name": "mine", "content": [{"text": "r3"}]},
      {"role": "tool", "content": None}],
     {"contents": [
         {"role": "model", "parts": [{"functionCall": {"name": "first", "args": {}}},
                                     {"functionCall": {"name": "second", "args": {"_raw": "oops"}}}]},
         {"role": "user", "parts": [{"functionResponse": {"name": "second", "response": {"content": "r2"}}},
                                    {"functionResponse": {"name": "mine", "response": {"content": "r3"}}},
                                    {"functionResponse": {"name": "tool", "response": {"content": ""}}}]}]}),
    # a later call with the same id and no name forgets the earlier name
    ([{"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "function": {"name": "n"}}]},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {}}]},
      {"role": "tool", "tool_call_id": "c", "content": "r"}],
     {"contents": [{"role": "model", "parts": [{"text": "x"}, {"functionCall": {"name": "n", "args": {}}},
                                               {"functionCall": {"args": {}}}]},
                   {"role": "user", "parts": [{"functionResponse": {"name": "tool", "response": {"content": "r"}}}]}]}),
    # an assistant message with nothing to say is left out; empty user content is one empty text
    ([{"role": "assistant", "content": None}, {"role": "user", "content": []},
      {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}],
     {"contents": [{"role": "user", "parts": [{"text": ""}, {"text": ""}]}]}),
]


@pytest.mark.parametrize(("messages", "expected"), RULES)
def test_the_adapters_own_rules(lua: Adapter, native: Native, messages: list[Any], expected: dict[str, Any]) -> None:
    request = {"model": "m", "stream": False, "messages": messages}
    host = host_body(native, request)
    assert host is not None and host == lua_body(lua, request)
    assert host == expected


def test_a_round_converts_only_its_new_messages() -> None:
    cache: MessageCache[Any] = MessageCache()
    native = native_gemini(cache)
    rounds = tool_loop(4)
    for k, request in enumerate(rounds):
        assert native.build(request_parts(request)) is not None
        assert cache.converted == 2 + 2 * k  # the history's messages were converted once, in earlier rounds
    again = native.build(request_parts(rounds[-1]))
    assert cache.converted == 10 and again is not None and json.loads(again)["contents"]


def test_a_cached_tool_result_takes_the_name_of_the_request_it_is_in(lua: Adapter) -> None:
    native = native_gemini()
    result = {"role": "tool", "tool_call_id": "c", "content": "r"}
    for name in ("alpha", "beta", "alpha"):
        request = {"model": "m", "stream": False, "messages": [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": name}}]}, result]}
        host = host_body(native, request)
        assert host == lua_body(lua, request)
        assert host["contents"][1]["parts"][0]["functionResponse"]["name"] == name
    alone = host_body(native, {"model": "m", "stream": False, "messages": [result]})
    assert alone["contents"][0]["parts"][0]["functionResponse"]["name"] == "tool"


@pytest.mark.parametrize("odd", [
    {"messages": ["just a string"]},
    {"messages": [{"role": "user", "content": 42}]},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": ["x"]}]},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": True, "function": {"name": "n"}}]}]},
    {"messages": [{"role": "user", "content": "hi"}], "temperature": 2**63},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "function": {"name": "n", "arguments": '{"a": 1, "a": null}'}}]}]},
    {"tools": [{"function": {"name": "t", "parameters": {"type": ["string", "null"], "nullable": False}}}]},
    {"tools": [{"function": {"name": "t", "parameters": {"const": 1, "enum": [2]}}}]},
    {"tools": ["a tool"]},
])
def test_shapes_the_daemon_never_sends_are_left_to_the_lua(native: Native, odd: dict[str, Any]) -> None:
    request = {"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}], **odd}
    assert native.build(request_parts(request)) is None
