"""The host-built bodies of the shipped OpenAI-style adapters equal what their Lua makes.

The Lua side is the very same file loaded as a user's adapter (a user's file
always runs its Lua), so both sides are real adapters over real interfaces.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from homeagent.providers.adapter_loader import BUILTIN_DIR, AdapterLoader, RequestContext, request_parts
from homeagent.providers.native_requests import PASS_THROUGH, native_builder

NAMES = sorted(PASS_THROUGH)


@pytest.fixture(scope="module")
def loaders(tmp_path_factory: pytest.TempPathFactory) -> tuple[AdapterLoader, AdapterLoader]:
    user = tmp_path_factory.mktemp("adapters")
    for name in NAMES:
        shutil.copy(BUILTIN_DIR / f"{name}.lua", user / f"{name}.lua")
    return AdapterLoader(), AdapterLoader(user_dir=user)


def bodies(loaders: tuple[AdapterLoader, AdapterLoader], name: str, request: dict[str, Any]) -> tuple[Any, Any]:
    native, lua = loaders[0].get(name), loaders[1].get(name)
    assert native.builtin and not lua.builtin
    parts = request_parts(request)
    ctx = RequestContext(model=str(request.get("model")), stream=bool(request.get("stream")),
                         thinking=bool(request.get("thinking")))
    host_body = native.build_request_sync(parts, native.context(ctx))
    lua_body = lua.build_request_sync(parts, lua.context(ctx))
    return json.loads(host_body), json.loads(lua_body)


TOOLS = [
    {"type": "function", "function": {"name": "get_time", "description": "the time",
                                      "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
]

texts = st.text(max_size=40)
json_scalars = st.one_of(st.booleans(), st.integers(-(2**60), 2**60), st.floats(allow_nan=False), texts, st.none())
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3), max_leaves=8)
plain_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": st.one_of(texts, st.none())},
    optional={
        "tool_call_id": st.just("call_1"),
        "tool_calls": st.just([{"id": "call_1", "type": "function", "function": {"name": "noop", "arguments": "{}"}}]),
    },
)
reasoning_message = st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": texts},
    optional={"reasoning_content": texts, "reasoning": texts},
)
# mostly histories the host builds; now and then one the Lua must rewrite
messages = st.lists(plain_message, min_size=1, max_size=5) | st.lists(
    st.one_of(plain_message, reasoning_message), min_size=1, max_size=4)
requests = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["gpt-4o", "o1-mini", "o3", "gpt-5-mini", "gpt-50", "deepseek-chat", "oz", ""]),
        "messages": messages,
        "stream": st.booleans(),
        "thinking": st.booleans(),
    },
    optional={
        "tools": st.just(TOOLS),
        "tool_choice": st.sampled_from(["auto", "none", {"type": "function", "function": {"name": "noop"}}]),
        "temperature": st.floats(0, 2),
        "max_tokens": st.integers(1, 100_000),
        "extra": st.dictionaries(
            st.sampled_from(["top_p", "seed", "disable_thinking", "extra_body", "temperature", "tools", "stream",
                             "messages", "user"]),
            json_values, max_size=3),
    },
)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests)
def test_host_body_equals_the_adapters_lua_body(loaders: tuple[AdapterLoader, AdapterLoader], name: str,
                                                request: dict[str, Any]) -> None:
    host_body, lua_body = bodies(loaders, name, request)
    assert host_body == lua_body


SPECIAL = [
    ("openai", {"model": "o3-mini", "temperature": 0.3, "max_tokens": 99}, {"max_completion_tokens": 99}),
    ("openai", {"model": "gpt-5", "extra": {"temperature": 1.5}}, {}),
    ("openai", {"model": "gpt-4o", "max_tokens": 99}, {"max_tokens": 99, "stream_options": {"include_usage": True}}),
    ("groq", {"max_tokens": 7}, {"max_completion_tokens": 7}),
    ("kimi", {"extra": {"disable_thinking": True, "extra_body": {"a": 1}, "seed": 3}}, {"seed": 3}),
    ("server", {"thinking": False, "extra": {"extra_body": {"a": 1}}}, {"disable_thinking": True}),
    ("server", {"thinking": True, "extra": {"disable_thinking": False}}, {"disable_thinking": False}),
    ("deepseek", {"thinking": True}, {"thinking": {"type": "enabled"}}),
    ("github", {"max_tokens": 5, "extra": {"tools": [{"type": "x"}]}}, {"max_tokens": 5, "tools": [{"type": "x"}]}),
]


@pytest.mark.parametrize(("name", "fields", "expected"), SPECIAL)
def test_each_adapters_own_rules(loaders: tuple[AdapterLoader, AdapterLoader], name: str, fields: dict[str, Any],
                                 expected: dict[str, Any]) -> None:
    request = {"model": "gpt-4o", "stream": True, "thinking": False, "tools": TOOLS,
               "messages": [{"role": "user", "content": "hi"}], **fields}
    parts = request_parts(request)
    build = native_builder(name)
    assert build is not None and build.build(parts) is not None  # not declined
    host_body, lua_body = bodies(loaders, name, request)
    assert host_body == lua_body
    for key, value in expected.items():
        assert host_body[key] == value
    if name == "openai" and fields["model"] != "gpt-4o":
        assert "temperature" not in host_body and "max_tokens" not in host_body
    if name in ("kimi", "server"):
        assert "extra_body" not in host_body


@pytest.mark.parametrize("name", NAMES)
def test_an_ordinary_request_is_built_by_the_host(name: str) -> None:
    parts = request_parts({"model": "gpt-4o", "stream": True, "thinking": False, "temperature": 0.2,
                           "max_tokens": 512, "tools": TOOLS,
                           "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]})
    build = native_builder(name)
    assert build is not None
    body = build.build(parts)
    assert body is not None and parts.messages in body and parts.tools in body


def test_histories_the_lua_rewrites_are_left_to_it() -> None:
    parts = request_parts({"model": "m", "stream": False, "messages": [
        {"role": "assistant", "content": "x", "reasoning_content": "thoughts"}]})
    for name in ("openai", "deepseek", "github", "groq", "kimi"):
        build = native_builder(name)
        assert build is not None and build.build(parts) is None
    server = native_builder("server")
    assert server is not None and server.build(parts) is not None  # server strips nothing
    assert native_builder("my_gateway") is None  # no host builder for a file the project does not ship


async def test_a_users_openai_lua_runs_its_own_code(tmp_path: Path) -> None:
    user = tmp_path / "adapters"
    user.mkdir()
    source = (BUILTIN_DIR / "openai.lua").read_text()
    marked = source.replace("if special then body.temperature = nil end",
                            "if special then body.temperature = nil end\n    body.marker = 'mine'")
    assert marked != source
    (user / "openai.lua").write_text(marked)
    adapter = AdapterLoader(user_dir=user).get("openai")
    parts = request_parts({"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    body = json.loads(await adapter.build_request(parts, adapter.context(RequestContext(model="gpt-4o", stream=True, thinking=False))))
    assert body["marker"] == "mine"
