"""The OpenAI-compatible adapters and user adapters (override, reload, broken scripts)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from homeagent.providers.adapter import AdapterError
from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import ChatRequest, ProviderError, StreamChunk
from homeagent.providers.lua_provider import LuaAdaptedProvider
from homeagent.providers.manager import ProviderManager
from tests.fakes.llm_openai import FakeOpenAI, Turn

KEY = "sk-adapter-test-key-42"


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as c:
        yield c


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    d = tmp_path / "adapters"
    d.mkdir()
    return d


@pytest.fixture
def loader(user_dir: Path) -> AdapterLoader:
    return AdapterLoader(user_dir=user_dir)


def make(base_url: str, loader: AdapterLoader, client: aiohttp.ClientSession, adapter: str, name: str = "src",
         model: str = "m-1", **kw: Any) -> LuaAdaptedProvider:
    return LuaAdaptedProvider(name, base_url, KEY, model, lambda: loader.get(adapter), http_client=client,
                              adapter_name=adapter, **kw)


def req(**kw: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "hi"}], **kw)


async def collect(p: LuaAdaptedProvider, request: ChatRequest) -> list[StreamChunk]:
    return [c async for c in p.chat_stream(request)]


# ------------------------------------------------------------------- deepseek
async def test_deepseek_usage_cache_and_reasoning(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI(prefix="", flavor="deepseek") as fake:
        fake.script(
            Turn.text("answer", chunks=2, reasoning="thinking hard",
                      usage={"prompt": 100, "completion": 20, "cached": 64, "reasoning": 9}),
            Turn.text("answer", reasoning="again", usage={"prompt": 50, "completion": 5, "cached": 32}),
        )
        p = make(fake.base_url, loader, client, "deepseek", model="deepseek-chat")
        manager = ProviderManager([p])
        resp = await manager.run(req())
        assert resp.reasoning == "thinking hard" and resp.content == "answer"
        assert resp.usage.to_dict() == {"prompt": 100, "completion": 20, "total": 120, "cache_read": 64, "reasoning": 9}
        assert fake.requests[0].path == "/chat/completions"
        assert fake.requests[0].body["stream_options"] == {"include_usage": True}
        whole = await p.chat(req())
        assert whole.reasoning == "again" and whole.usage.cache_read == 32


async def test_deepseek_reasoning_content_only_inside_the_tool_loop(loader: AdapterLoader,
                                                                    client: aiohttp.ClientSession) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer", "reasoning_content": "old thoughts"},
        {"role": "user", "content": "new question"},
        {"role": "assistant", "content": None, "reasoning_content": "current thoughts", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    async with FakeOpenAI(prefix="", flavor="deepseek") as fake:
        fake.default_turn = Turn.text("ok")
        p = make(fake.base_url, loader, client, "deepseek")
        await p.chat(ChatRequest(messages=messages, thinking=True))
        sent = fake.requests[0].body
        assert "reasoning_content" not in sent["messages"][1]
        assert sent["messages"][3]["reasoning_content"] == "current thoughts"
        assert sent["thinking"] == {"type": "enabled"}
        await p.chat(ChatRequest(messages=messages, thinking=False))
        sent = fake.requests[1].body
        assert all("reasoning_content" not in m for m in sent["messages"])
        assert "thinking" not in sent


async def test_openai_reasoning_models_use_max_completion_tokens(loader: AdapterLoader,
                                                                 client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as fake:
        fake.default_turn = Turn.text("ok")
        await make(fake.base_url, loader, client, "openai", model="o3-mini").chat(req(max_tokens=50, temperature=0.3))
        await make(fake.base_url, loader, client, "openai", model="gpt-4o").chat(req(max_tokens=50, temperature=0.3))
        first, second = fake.requests[0].body, fake.requests[1].body
        assert first["max_completion_tokens"] == 50 and "temperature" not in first and "max_tokens" not in first
        assert second["max_tokens"] == 50 and second["temperature"] == 0.3


async def test_extra_fields_are_forwarded(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as fake:
        fake.default_turn = Turn.text("ok")
        await make(fake.base_url, loader, client, "openai").chat(req(extra={"response_format": {"type": "json_object"},
                                                                          "seed": 7}))
        assert fake.requests[0].body["response_format"] == {"type": "json_object"}
        assert fake.requests[0].body["seed"] == 7


@pytest.mark.parametrize(("adapter", "path"), [("mistral", "/v1/chat/completions"), ("groq", "/openai/v1/chat/completions"),
                                               ("github", "/chat/completions"), ("kimi", "/v1/chat/completions"),
                                               ("server", "/chat/completions")])
async def test_openai_compatible_adapters_stream_tool_calls(loader: AdapterLoader, client: aiohttp.ClientSession,
                                                            adapter: str, path: str) -> None:
    async with FakeOpenAI(prefix="") as fake:
        fake.script(Turn.tool_calls([("get_time", {"tz": "UTC"}), ("add", {"a": 1})], text="calling",
                                    reasoning="plan", usage={"prompt": 9, "completion": 3, "cached": 4}),
                    Turn.text("done", usage={"prompt": 9, "completion": 3, "cached": 4, "reasoning": 2}))
        p = make(fake.base_url, loader, client, adapter)
        resp = await ProviderManager([p]).run(req(tools=[{"type": "function", "function": {"name": "get_time",
                                                                                           "parameters": {}}}]))
        assert fake.requests[0].path == path
        assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
        assert resp.content == "calling" and resp.reasoning == "plan"
        assert [(c.name, c.arguments) for c in resp.tool_calls] == [("get_time", {"tz": "UTC"}), ("add", {"a": 1})]
        whole = await p.chat(req())
        assert whole.content == "done" and whole.usage.prompt == 9
        if adapter != "groq" and adapter != "github":
            assert whole.usage.cache_read == 4


async def test_mistral_tool_call_ids_are_nine_characters(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    call = {"id": "call_abcdefghijklmnop", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_abcdefghijklmnop", "content": "r"}]
    async with FakeOpenAI(prefix="") as fake:
        fake.default_turn = Turn.text("ok")
        await make(fake.base_url, loader, client, "mistral").chat(ChatRequest(messages=messages, tool_choice="required",
                                                                              tools=[{"type": "function", "function": {"name": "t"}}]))
        sent = fake.requests[0].body
        new_id = sent["messages"][1]["tool_calls"][0]["id"]
        assert len(new_id) == 9 and new_id.isalnum()
        assert sent["messages"][2]["tool_call_id"] == new_id
        assert sent["tool_choice"] == "any"


async def test_kimi_strips_and_server_keeps_disable_thinking(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "a", "reasoning_content": "r"},
                {"role": "user", "content": "q2"}]
    extra = {"disable_thinking": True, "extra_body": {"x": 1}, "top_p": 0.5}
    async with FakeOpenAI(prefix="") as fake:
        fake.default_turn = Turn.text("ok")
        await make(fake.base_url, loader, client, "kimi").chat(ChatRequest(messages=messages, extra=extra))
        await make(fake.base_url, loader, client, "server").chat(ChatRequest(messages=messages, extra=extra))
        kimi, server = fake.requests[0].body, fake.requests[1].body
        assert "disable_thinking" not in kimi and "extra_body" not in kimi and kimi["top_p"] == 0.5
        assert all("reasoning_content" not in m for m in kimi["messages"])
        assert server["disable_thinking"] is True and "extra_body" not in server


# -------------------------------------------------------------- user adapters
ECHO_ADAPTER = """
return {
  name = "mine", version = "%(version)s",
  endpoint = "/chat/completions",
  headers = function(key) return {Authorization = "Bearer " .. key, ["X-Adapter-Version"] = "%(version)s"} end,
  transform_request = function(req) return openai_compat.request(req, {}) end,
  transform_response = function(raw) return openai_compat.response(raw) end,
  transform_stream_chunk = function(line) return openai_compat.chunk(line) end,
}
"""


def write(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a visible mtime change even on coarse clocks


async def test_user_adapter_overrides_builtin_and_reloads(loader: AdapterLoader, user_dir: Path,
                                                          client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI() as fake:
        fake.default_turn = Turn.text("ok")
        p = make(fake.base_url, loader, client, "openai")
        await p.chat(req())
        assert "x-adapter-version" not in fake.requests[-1].headers
        write(user_dir / "openai.lua", ECHO_ADAPTER % {"version": "1"})
        await p.chat(req())
        assert fake.requests[-1].headers["x-adapter-version"] == "1"
        write(user_dir / "openai.lua", ECHO_ADAPTER % {"version": "2"})
        await p.chat(req())
        assert fake.requests[-1].headers["x-adapter-version"] == "2"
        info = {a.name: a for a in loader.info()}
        assert info["openai"].overrides_builtin and not info["openai"].builtin
        (user_dir / "openai.lua").unlink()
        await p.chat(req())
        assert "x-adapter-version" not in fake.requests[-1].headers


BROKEN = {
    "syntax": ("return {\n  name = 'x',\n  endpoint = = '/chat/completions',\n}\n", "broken.lua:3"),
    "runtime": (
        "return {\n endpoint = '/chat/completions',\n headers = {},\n"
        " transform_request = function(req)\n   return req.nothing.here\n end,\n"
        " transform_response = function(raw) return {} end,\n}\n",
        "broken.lua:5",
    ),
    "shape": (
        "return {\n endpoint = '/chat/completions',\n"
        " transform_request = function(req) return {model = req.model, messages = req.messages} end,\n"
        " transform_response = function(raw)\n   return 42\n end,\n"
        " transform_stream_chunk = function(line)\n   return {content = {1, 2}}\n end,\n}\n",
        "broken.lua:4",
    ),
    "loop": (
        "return {\n endpoint = '/chat/completions',\n"
        " transform_request = function(req) return {model = req.model, messages = req.messages, stream = req.stream} end,\n"
        " transform_response = function(raw) return {} end,\n"
        " transform_stream_chunk = function(line)\n   while true do end\n end,\n}\n",
        "broken.lua:6",
    ),
    "missing": ("return { endpoint = '/x' }\n", "field 'transform_request' is missing"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
async def test_broken_user_adapter_is_rejected_while_others_work(case: str, loader: AdapterLoader, user_dir: Path,
                                                                 client: aiohttp.ClientSession) -> None:
    source, where = BROKEN[case]
    write(user_dir / "broken.lua", source)
    async with FakeOpenAI() as bad, FakeOpenAI() as good:
        bad.default_turn = Turn.text("never seen", chunks=2)
        good.default_turn = Turn.text("good answer")
        broken = make(bad.base_url, loader, client, "broken", name="broken")
        manager = ProviderManager([broken, make(good.base_url, loader, client, "openai", name="good")])
        with pytest.raises(ProviderError) as info:
            await broken.chat(req()) if case != "loop" else await collect(broken, req())
        assert info.value.kind == "adapter", info.value
        assert where in str(info.value)
        resp = await manager.run(req())
        assert resp.source == "good" and resp.content == "good answer"
        attempts = manager.list_sources()
        assert attempts[0].name == "broken" and attempts[0].state == "cooldown"
        assert where.split(":")[0] in attempts[0].last_error


async def test_wrong_chunk_shape_names_the_function(loader: AdapterLoader, user_dir: Path,
                                                    client: aiohttp.ClientSession) -> None:
    write(user_dir / "broken.lua", BROKEN["shape"][0])
    async with FakeOpenAI() as fake:
        fake.default_turn = Turn.text("x")
        p = make(fake.base_url, loader, client, "broken")
        with pytest.raises(ProviderError) as info:
            await collect(p, req())
        text = str(info.value)
        assert info.value.kind == "adapter"
        assert "transform_stream_chunk" in text and "broken.lua:7" in text and "content" in text


async def test_broken_file_recovers_when_fixed(loader: AdapterLoader, user_dir: Path, client: aiohttp.ClientSession) -> None:
    path = user_dir / "mine.lua"
    write(path, BROKEN["syntax"][0])
    with pytest.raises(AdapterError, match=r"mine\.lua:3"):
        loader.get("mine")
    with pytest.raises(AdapterError):  # cached: no recompilation until the file changes
        loader.get("mine")
    write(path, ECHO_ADAPTER % {"version": "9"})
    assert loader.get("mine").version == "9"


async def test_adapter_headers_can_fetch_a_token(loader: AdapterLoader, user_dir: Path,
                                                 client: aiohttp.ClientSession) -> None:
    async def token(request: web.Request) -> web.Response:
        await asyncio.sleep(0.05)
        return web.json_response({"token": "tok-" + (await request.json())["key"][-2:]})

    app = web.Application()
    app.add_routes([web.post("/token", token)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    token_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/token"  # type: ignore[union-attr]
    write(user_dir / "oauth.lua", """
return {
  endpoint = "/chat/completions",
  headers = function(key)
    local r, err = http_post("TOKEN_URL", {key = key}, {["Content-Type"] = "application/json"})
    if not r then error("token fetch failed: " .. err) end
    return {Authorization = "Bearer " .. json.decode(r.body).token}
  end,
  transform_request = function(req) return openai_compat.request(req) end,
  transform_response = openai_compat.response,
  transform_stream_chunk = openai_compat.chunk,
}
""".replace("TOKEN_URL", token_url))
    try:
        async with FakeOpenAI() as fake:
            fake.default_turn = Turn.text("ok")
            await make(fake.base_url, loader, client, "oauth").chat(req())
            assert fake.requests[0].headers["authorization"] == "Bearer tok-42"
    finally:
        await runner.cleanup()


def test_loader_lists_builtin_adapters(loader: AdapterLoader) -> None:
    names = loader.names()
    for expected in ("openai", "deepseek", "anthropic", "gemini", "mistral", "groq", "github", "ollama", "kimi",
                     "server"):
        assert expected in names
    assert "_openai_compat" not in names
    assert not loader.get("ollama").needs_api_key and loader.get("openai").needs_api_key
    assert all(not a.error for a in loader.info())
    with pytest.raises(AdapterError, match="not found"):
        loader.get("nope")
    with pytest.raises(AdapterError):
        loader.get("../etc/passwd")


async def test_adapters_see_every_request_field(loader: AdapterLoader, user_dir: Path,
                                               client: aiohttp.ClientSession) -> None:
    """messages/tools decode lazily; an adapter that copies the request with pairs() still gets them."""
    write(user_dir / "copyall.lua", """
return {
  endpoint = "/chat/completions",
  transform_request = function(req)
    local body = {}
    for k, v in pairs(req) do body[k] = v end
    body.n_messages = #req.messages
    body.first_tool = req.tools[1]["function"].name
    body.pending_after_read = json.pending(req, "messages") == nil
    return body
  end,
  transform_response = openai_compat.response,
}
""")
    async with FakeOpenAI() as fake:
        fake.default_turn = Turn.text("ok")
        tools = [{"type": "function", "function": {"name": "t1", "parameters": {"type": "object", "properties": {}}}}]
        await make(fake.base_url, loader, client, "copyall").chat(req(tools=tools))
        body = fake.requests[0].body
        assert body["messages"] == [{"role": "user", "content": "hi"}]
        assert body["tools"] == tools
        assert body["n_messages"] == 1 and body["first_tool"] == "t1" and body["pending_after_read"] is True
        assert body["model"] == "m-1" and body["stream"] is False


PLAIN = """
return {
  name = "plain",
  endpoint = function(ctx) return "/generate/" .. ctx.model end,
  headers = {["Content-Type"] = "application/json"},
  needs_api_key = false,
  transform_request = function(req)
    local prompt = {}
    for _, m in ipairs(req.messages) do prompt[#prompt + 1] = m.role .. ": " .. tostring(m.content or "") end
    return {prompt = table.concat(prompt, "\\n"), stream = req.stream, max_new_tokens = req.max_tokens}
  end,
  transform_response = function(raw)
    local r = json.decode(raw)
    return {content = r.text, finish_reason = "stop", usage = {prompt = r.in_tokens, completion = r.out_tokens}}
  end,
  transform_stream_chunk = function(line)
    local r = json.decode(line)
    if r["end"] then return {done = true, finish_reason = "stop"} end
    return {content = r.token}
  end,
}
"""


async def test_from_scratch_adapter_of_the_docs(loader: AdapterLoader, user_dir: Path,
                                                client: aiohttp.ClientSession) -> None:
    write(user_dir / "plain.lua", PLAIN)

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body["stream"]:
            return web.json_response({"text": body["prompt"].upper(), "in_tokens": 3, "out_tokens": 2})
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        for token in ("a", "b"):
            await resp.write(f'{{"token": "{token}"}}\n'.encode())
        await resp.write(b'{"end": true}\n')
        return resp

    app = web.Application()
    app.add_routes([web.post("/generate/{model}", generate)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        assert not loader.get("plain").needs_api_key
        p = LuaAdaptedProvider("plain", base, "", "tiny", lambda: loader.get("plain"), http_client=client)
        whole = await p.chat(req(max_tokens=5))
        assert whole.content == "USER: HI" and whole.usage.total == 5
        resp = await ProviderManager([p]).run(req())
        assert resp.content == "ab" and resp.finish_reason == "stop"
    finally:
        await runner.cleanup()


async def test_loader_rechecks_files_at_most_once_per_interval(user_dir: Path) -> None:
    """The daemon stats adapter files once a second, not on every LLM call; forget() forces a look."""
    slow = AdapterLoader(user_dir=user_dir, recheck_seconds=30.0)
    assert slow.get("openai").builtin
    write(user_dir / "openai.lua", ECHO_ADAPTER % {"version": "7"})
    assert slow.get("openai").builtin  # within the interval: the remembered adapter
    slow.forget()
    assert slow.get("openai").version == "7"
    with pytest.raises(AdapterError):
        slow.get("nothing-here")
    write(user_dir / "nothing-here.lua", ECHO_ADAPTER % {"version": "1"})
    with pytest.raises(AdapterError):  # the miss is remembered too
        slow.get("nothing-here")

    quick = AdapterLoader(user_dir=user_dir, recheck_seconds=0.05)
    assert quick.get("openai").version == "7"
    write(user_dir / "openai.lua", ECHO_ADAPTER % {"version": "8"})
    await asyncio.sleep(0.1)
    assert quick.get("openai").version == "8"
    assert quick.load_path(user_dir / "openai.lua").version == "8"


SPLICING_ADAPTER = """
return {
  endpoint = "/chat/completions",
  transform_request = function(req)
    local text = json.pending(req, "messages")
    return {model = req.model, messages = json.raw(text), again = {json.raw(text)}, tools = json.raw(json.pending(req, "tools")),
            n = 1}
  end,
  transform_response = function(raw) return openai_compat.response(raw) end,
}
"""


async def test_bodies_that_pass_the_history_through_are_joined_by_the_host(loader: AdapterLoader, user_dir: Path) -> None:
    """The history and tools JSON an adapter passes through unchanged reach the body byte for byte,
    wherever and however often the adapter puts them; small requests and huge ones (worker thread) alike."""
    from homeagent.providers.adapter import RequestContext, request_parts

    write(user_dir / "splice.lua", SPLICING_ADAPTER)
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "ü " * 200,
                                               "parameters": {"type": "object"}}} for i in range(3)]
    for size in (10, 2_000, 400_000):
        messages = [{"role": "system", "content": "系统 " + "s" * size}, {"role": "user", "content": "hi \"quoted\"\n"}]
        req = {"model": "m", "messages": messages, "stream": True, "tools": tools}
        parts = request_parts(req)
        for name in ("splice", "openai"):
            adapter = loader.get(name)
            ctx = await adapter.context(RequestContext(model="m", stream=True, thinking=False))
            body = await adapter.build_request(parts, ctx)
            sync_body = adapter.build_request_sync(parts, ctx)
            assert body == sync_body and parts.messages in body and parts.tools in body
            doc = json.loads(body)
            assert doc["messages"] == messages and doc["tools"] == tools
            if name == "splice":
                assert doc["again"] == [messages] and doc["n"] == 1


async def test_a_request_json_cannot_hold_is_refused_before_sending(loader: AdapterLoader,
                                                                    client: aiohttp.ClientSession) -> None:
    """A lone surrogate or a non-JSON value in the history gives one clear client error; nothing is sent,
    and the same provider answers the next, valid request."""
    async with FakeOpenAI() as fake:
        fake.default_turn = Turn.text("fine")
        p = make(fake.base_url, loader, client, "openai")
        for bad in ("half an emoji \udcff", {1, 2}, 2**70):
            with pytest.raises(ProviderError) as info:
                await collect(p, ChatRequest(messages=[{"role": "user", "content": bad}]))
            assert info.value.kind == "client" and "not JSON-serialisable" in str(info.value)
        assert fake.requests == []
        # NaN has no JSON form either: it becomes null, i.e. the setting is left out and the request goes
        await p.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], temperature=float("nan")))
        assert "temperature" not in fake.requests[-1].body
        assert (await p.chat(req())).content == "fine"


SHOUTING = """
return {
  name = "shout", endpoint = "/chat/completions", stream_format = "openai",
  transform_request = function(req) return openai_compat.request(req) end,
  transform_response = function(raw) return openai_compat.response(raw) end,
  transform_stream_chunk = function(line, state)
    state.n = (state.n or 0) + 1
    local out = openai_compat.chunk(line)
    if out.content then out.content = string.upper(out.content) .. "#" .. state.n end
    return out
  end,
}
"""


async def test_every_payload_reaches_the_adapters_own_parser(loader: AdapterLoader, user_dir: Path,
                                                             client: aiohttp.ClientSession) -> None:
    """Even with the old ``stream_format`` field, the user's function parses every payload, with one state."""
    write(user_dir / "shout.lua", SHOUTING)
    async with FakeOpenAI(prefix="") as fake:
        fake.script(Turn.text("abc", chunks=3))
        chunks = await collect(make(fake.base_url, loader, client, "shout"), req())
    # payload 1 is the role with empty content; a, b, c are payloads 2-4
    assert "".join(c.content for c in chunks) == "#1A#2B#3C#4"


async def test_a_payload_that_is_not_json_names_its_line(loader: AdapterLoader, client: aiohttp.ClientSession) -> None:
    async with FakeOpenAI(prefix="") as fake:
        fake.script(Turn.text("fine", bad_json=True))
        with pytest.raises(ProviderError) as info:
            await collect(make(fake.base_url, loader, client, "openai"), req())
    assert info.value.kind == "bad_response"
    assert "line starts '{this is not json'" in str(info.value)


async def serve_once(body: str) -> tuple[web.AppRunner, str]:
    """A server answering every chat request with ``body`` as one SSE response (one network read)."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=body, content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def test_a_bad_payload_among_several_in_one_read_names_its_line(loader: AdapterLoader,
                                                                      client: aiohttp.ClientSession) -> None:
    good = json.dumps({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]})
    runner, url = await serve_once(f"data: {good}\n\ndata: {good}\n\ndata: [1, oops]\n\ndata: {good}\n\n")
    try:
        with pytest.raises(ProviderError) as info:
            await collect(make(url, loader, client, "openai"), req())
    finally:
        await runner.cleanup()
    assert info.value.kind == "bad_response" and "line starts '[1, oops]'" in str(info.value)


async def test_a_stream_arriving_in_one_read_is_parsed_in_order(loader: AdapterLoader,
                                                                client: aiohttp.ClientSession) -> None:
    """A whole SSE stream in one network read: every chunk, in order, and nothing after [DONE]."""
    events = [{"choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in ("one ", "two ")]
    events.append({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
        "finish_reason": None}]})
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    events.append({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}})
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    body += 'data: {"choices": [{"delta": {"content": "after the end"}}]}\n\n'
    runner, url = await serve_once(body)
    try:
        chunks = await collect(make(url, loader, client, "openai"), req())
    finally:
        await runner.cleanup()
    assert [c.content for c in chunks if c.content] == ["one ", "two "]
    assert [(d.id, d.name, d.arguments) for c in chunks for d in c.tool_calls] == [("call_a", "f", '{"x":1}')]
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["tool_calls"]
    usage = [c.usage for c in chunks if c.usage]
    assert usage and usage[-1].to_dict() == {"prompt": 7, "completion": 3, "total": 10, "cache_read": 0, "reasoning": 0}
