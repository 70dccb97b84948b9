"""A user adapter may declare ``request_format = "openai"`` instead of writing ``transform_request``:
its requests are then what ``openai_compat.request(req, request_options)`` makes, checked when the
file loads. Bodies are looked at where the vendor sees them: on a fake server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from homeagent.providers.adapter import AdapterError
from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import ChatRequest
from homeagent.providers.lua_provider import LuaAdaptedProvider
from tests.fakes.llm_openai import FakeOpenAI, Turn

COMMON = '''
  name = "{name}",
  endpoint = "/chat/completions",
  headers = function(key) return openai_compat.bearer(key) end,
  transform_response = function(raw) return openai_compat.response(raw) end,
  transform_stream_chunk = function(line) return openai_compat.chunk(line) end,
'''

OPTIONS = [
    "nil",
    "{stream_usage = true}",
    "{stream_usage = true, max_tokens_field = 'max_completion_tokens', drop_extra = {seed = true, user = true}}",
    "{strip = {reasoning_content = true, reasoning = true}, extra = false}",
    "{strip = {}, extra = true}",
]


def write_pair(folder: Path, options: str) -> tuple[str, str]:
    """A declared adapter and the same one written as Lua, with the same options."""
    (folder / "decl.lua").write_text("return {" + COMMON.format(name="decl")
                                     + f'  request_format = "openai", request_options = {options},\n}}\n')
    (folder / "lua.lua").write_text("return {" + COMMON.format(name="lua") + f"  transform_request = function(req) "
                                    f"return openai_compat.request(req, {options}) end,\n}}\n")
    return "decl", "lua"


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as c:
        yield c


async def sent(client: aiohttp.ClientSession, loader: AdapterLoader, name: str, request: ChatRequest,
               model: str = "m") -> Any:
    """The body a fake OpenAI-compatible server received from adapter ``name``."""
    async with FakeOpenAI(prefix="") as fake:
        fake.default_turn = Turn.text("ok")
        provider = LuaAdaptedProvider("src", fake.base_url, "sk-test", model, lambda: loader.get(name),
                                      http_client=client, adapter_name=name)
        assert "".join([c.content async for c in provider.chat_stream(request)]) == "ok"
        return fake.requests[-1].body


REQUESTS = [
    ChatRequest(messages=[{"role": "user", "content": "hi"}]),
    ChatRequest(messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "x", "reasoning_content": "thoughts", "reasoning": "r"},
                          {"role": "user", "content": "and?"}],
                tools=[{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}],
                tool_choice="auto", temperature=0.2, max_tokens=50, extra={"seed": 1, "top_p": 0.5, "user": "u"}),
]


@pytest.mark.parametrize("options", OPTIONS)
async def test_a_declared_request_equals_openai_compat_request(tmp_path: Path, client: aiohttp.ClientSession,
                                                               options: str) -> None:
    folder = tmp_path / "adapters"
    folder.mkdir()
    declared, written = write_pair(folder, options)
    loader = AdapterLoader(user_dir=folder)
    for request in REQUESTS:
        assert await sent(client, loader, declared, request) == await sent(client, loader, written, request)


async def test_the_options_shape_the_body(tmp_path: Path, client: aiohttp.ClientSession) -> None:
    folder = tmp_path / "adapters"
    folder.mkdir()
    write_pair(folder, OPTIONS[2])
    loader = AdapterLoader(user_dir=folder)
    request = ChatRequest(max_tokens=50, extra={"seed": 1, "top_p": 0.5},
                          messages=[{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": "x", "reasoning_content": "thoughts"}])
    got = await sent(client, loader, "decl", request)
    assert got["max_completion_tokens"] == 50 and "max_tokens" not in got
    assert got["stream_options"] == {"include_usage": True}
    assert got["top_p"] == 0.5 and "seed" not in got
    assert got["messages"][1] == {"role": "assistant", "content": "x"}  # the default strip


BROKEN = [
    ('request_format = "openai", transform_request = function(req) return {} end,',
     "give either 'transform_request' or 'request_format'"),
    ('request_format = "anthropic",', "field 'request_format' is 'anthropic', expected one of: openai"),
    ('request_format = "openai", request_options = {stream = true},', "request_options.stream is not an option"),
    ('request_format = "openai", request_options = {stream_usage = "yes"},', "request_options.stream_usage must be a boolean"),
    ('request_format = "openai", request_options = {strip = {"reasoning"}},',
     "request_options.strip must be a table of names set to true"),
    ('request_format = "openai", request_options = {max_tokens_field = ""},', "max_tokens_field must be a string"),
    ('request_format = 7,', "field 'request_format' is a number"),
]


@pytest.mark.parametrize(("fields", "message"), BROKEN)
async def test_a_wrong_declaration_is_rejected_naming_the_file(tmp_path: Path, client: aiohttp.ClientSession,
                                                               fields: str, message: str) -> None:
    folder = tmp_path / "adapters"
    folder.mkdir()
    (folder / "bad.lua").write_text("return {" + COMMON.format(name="bad") + "  " + fields + "\n}\n")
    write_pair(folder, "nil")
    loader = AdapterLoader(user_dir=folder)
    with pytest.raises(AdapterError) as caught:
        loader.get("bad")
    assert "bad.lua" in str(caught.value) and message in str(caught.value)
    assert (await sent(client, loader, "decl", REQUESTS[0]))["model"] == "m"  # the others work


async def test_a_declared_adapter_streams_a_reply(tmp_path: Path, client: aiohttp.ClientSession) -> None:
    folder = tmp_path / "adapters"
    folder.mkdir()
    write_pair(folder, OPTIONS[1])
    loader = AdapterLoader(user_dir=folder)
    async with FakeOpenAI(prefix="") as fake:
        fake.script(Turn.text("hello from acme", chunks=3))
        provider = LuaAdaptedProvider("acme", fake.base_url, "sk-test", "acme-1", lambda: loader.get("decl"),
                                      http_client=client, adapter_name="decl")
        chunks = [c async for c in provider.chat_stream(ChatRequest(messages=[{"role": "user", "content": "hi"}]))]
        sent = fake.requests[-1]
    assert "".join(c.content for c in chunks) == "hello from acme"
    assert sent.headers.get("authorization") == "Bearer sk-test"
    assert sent.body["model"] == "acme-1" and sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["messages"] == [{"role": "user", "content": "hi"}]
