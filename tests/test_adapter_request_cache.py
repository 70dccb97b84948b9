"""Adapters that convert messages keep each converted message across requests (keyed by its
JSON text): a conversation's later rounds must give exactly what a cold adapter gives.

Bodies of two Lua states are compared as decoded JSON: the order of an object's keys follows
each state's string hash seed. Within one state, the same request gives the same bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from homeagent.providers.adapter import Adapter, AdapterError, RequestContext, request_parts
from homeagent.providers.adapter_loader import AdapterLoader

CONVERTING = ("anthropic", "gemini", "ollama", "mistral")
ALL = (*CONVERTING, "openai", "deepseek")

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "find things",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def history(tag: str = "") -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": f"Be helpful. {tag}"},
        {"role": "user", "content": f"find cats {tag} 中文 \"quoted\" \\ new\nline"},
        {"role": "assistant", "content": "", "reasoning_content": "thinking about cats",
         "reasoning_signature": "sig-1",
         "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"cats\"}"}},
                        {"id": "call_1", "type": "function", "function": {"name": "count", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "3 cats"},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "two parts"}, "x"]},
        {"role": "user", "content": [{"type": "text", "text": "and dogs?"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
    ]


def tool_round(k: int) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": f"step {k}",
             "tool_calls": [{"id": f"call_r{k}", "type": "function", "function": {"name": "lookup",
                                                                                  "arguments": json.dumps({"q": k})}}]},
            {"role": "tool", "tool_call_id": f"call_r{k}", "content": f"result {k} " * 20}]


def request(messages: list[dict[str, Any]], *, thinking: bool = False) -> dict[str, Any]:
    return {"model": "m", "messages": messages, "stream": True, "thinking": thinking, "temperature": 0.2,
            "max_tokens": 2048, "tools": TOOLS, "tool_choice": "auto"}


async def body(adapter: Adapter, req: dict[str, Any]) -> str:
    ctx = await adapter.context(RequestContext(model="m", stream=True, thinking=bool(req.get("thinking"))))
    return (await adapter.build_request(request_parts(req), ctx)).decode()


async def cold_body(name: str, req: dict[str, Any]) -> str:
    return await body(AdapterLoader().get(name), req)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("thinking", [False, True])
async def test_conversation_rounds_match_a_cold_adapter(name: str, thinking: bool) -> None:
    adapter = AdapterLoader().get(name)
    messages = history()
    for k in range(4):
        req = request(messages, thinking=thinking)
        warm = await body(adapter, req)
        assert json.loads(warm) == json.loads(await cold_body(name, req)), f"round {k}"
        assert warm == await body(adapter, req)  # the same request again: every message cached
        messages = messages + tool_round(k)


@pytest.mark.parametrize("name", CONVERTING)
async def test_an_edited_message_is_not_served_from_the_cache(name: str) -> None:
    adapter = AdapterLoader().get(name)
    messages = history() + tool_round(0)
    first = await body(adapter, request(messages))
    edited = [dict(m) for m in messages]
    edited[3]["content"] = "4 cats, not 3"
    edited[1]["content"] = "find kittens"
    second = await body(adapter, request(edited))
    assert "4 cats, not 3" in second and "find kittens" in second
    assert "3 cats" not in second and "3 cats" in first
    assert json.loads(second) == json.loads(await cold_body(name, request(edited)))


async def test_gemini_tool_names_follow_the_call_that_precedes_them() -> None:
    # the same tool result text answers a different function in another conversation
    adapter = AdapterLoader().get("gemini")
    result = {"role": "tool", "tool_call_id": "call_x", "content": "done"}

    def conv(fn: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": "go"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_x", "type": "function", "function": {"name": fn, "arguments": "{}"}}]}, result]

    for fn in ("alpha", "beta", "alpha", "weird \"name\""):
        sent = json.loads(await body(adapter, request(conv(fn))))
        assert sent["contents"][-1]["parts"][0]["functionResponse"]["name"] == fn


async def test_consecutive_same_role_messages_still_merge() -> None:
    adapter = AdapterLoader().get("anthropic")
    messages = [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "a"},
                {"role": "user", "content": "b"}]
    for _ in range(2):
        sent = json.loads(await body(adapter, request(messages)))
        assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
        assert sent["messages"][0]["content"] == [{"type": "text", "text": "(continued)"}]
        assert [b["text"] for b in sent["messages"][2]["content"]] == ["a", "b"]


def write(path: Path, source: str) -> None:
    path.write_text(source, encoding="utf-8")


CACHE_PROBE = """
local cache = openai_compat.message_cache(10, 20000)
local function count(g)
  local n = 0
  for _, t in pairs(g.texts) do if type(t) == "string" then n = n + 1 end end
  for _ in pairs(g.by_text) do n = n + 1 end
  return n
end
return {
  name = "probe", endpoint = "/x",
  transform_response = function() return {} end,
  transform_request = function(req)
    local converted = 0
    local entries = openai_compat.each_message(req, cache, function(m)
      converted = converted + 1
      return { json = false }, { said = m.content }
    end)
    local parts = {}
    for i, e in ipairs(entries) do parts[i] = e.json end
    return { converted = converted, cached = count(cache.new) + count(cache.old),
             bytes = cache.bytes, parts = json.raw("[" .. table.concat(parts, ",") .. "]") }
  end,
}
"""


async def test_message_cache_stays_bounded_and_still_hits(tmp_path: Path) -> None:
    write(tmp_path / "probe.lua", CACHE_PROBE)
    adapter = AdapterLoader(user_dir=tmp_path).get("probe")
    for i in range(60):
        msgs = [{"role": "user", "content": f"message {i}-{j} " + "x" * (50 * j)} for j in range(4)]
        sent = json.loads(await body(adapter, request(msgs)))
        assert sent["converted"] == 4
        assert sent["cached"] <= 10 and sent["bytes"] <= 10000
        assert [p["said"] for p in sent["parts"]] == [m["content"] for m in msgs]
        again = json.loads(await body(adapter, request(msgs)))
        assert again["converted"] == 0 and again["parts"] == sent["parts"]
    # one message bigger than the cache: converted every time, never kept
    big = [{"role": "user", "content": "y" * 30000}]
    assert json.loads(await body(adapter, request(big)))["converted"] == 1
    assert json.loads(await body(adapter, request(big)))["converted"] == 1


async def test_builtin_adapter_memory_stays_bounded_over_many_conversations() -> None:
    adapter = AdapterLoader().get("gemini")
    for i in range(120):  # ~12 MB of distinct message text (~36 MB if every conversion were kept)
        msgs = [{"role": "user" if j % 2 else "assistant", "content": f"{i}/{j} " + "word " * 400} for j in range(50)]
        await body(adapter, request(msgs))
    adapter.sandbox._collect()
    assert adapter.sandbox.memory_used() < 24 * 1024 * 1024


async def test_fingerprint_collisions_are_told_apart(tmp_path: Path) -> None:
    # same size, same sampled bytes: differ only where the fingerprint does not look
    write(tmp_path / "probe.lua", CACHE_PROBE.replace("message_cache(10, 20000)", "message_cache()"))
    adapter = AdapterLoader(user_dir=tmp_path).get("probe")
    pad = "p" * 200
    msgs = [{"role": "user", "content": f"{pad}{i:03d}{pad}{pad}"} for i in range(30)]
    sent = json.loads(await body(adapter, request(msgs)))
    assert [p["said"] for p in sent["parts"]] == [m["content"] for m in msgs]
    again = json.loads(await body(adapter, request(msgs[::-1])))
    assert again["converted"] == 0
    assert [p["said"] for p in again["parts"]] == [m["content"] for m in msgs[::-1]]


MUTATOR = """
local cache = openai_compat.message_cache()
return {
  name = "mutator", endpoint = "/x",
  transform_response = function() return {} end,
  transform_request = function(req)
    if req.extra and req.extra.mutate then
      for _, m in ipairs(req.messages) do m.content = "MUTATED" end -- reads (decodes) req.messages
    end
    local entries = openai_compat.each_message(req, cache, function(m)
      local said = m.content
      m.content = "changed inside convert" -- the decoded table is the adapter's to change
      return { json = false }, { said = said }
    end)
    local out = json.array()
    for i, e in ipairs(entries) do out[i] = json.raw(e.json) end
    return { parts = out, items = json.items(req, "messages") and true or false }
  end,
}
"""


async def test_adapter_that_mutates_decoded_messages_does_not_corrupt_later_requests(tmp_path: Path) -> None:
    write(tmp_path / "mutator.lua", MUTATOR)
    adapter = AdapterLoader(user_dir=tmp_path).get("mutator")
    msgs = [{"role": "user", "content": "original one"}, {"role": "user", "content": "original two"}]
    mutated = json.loads(await body(adapter, {**request(msgs), "extra": {"mutate": True}}))
    assert [p["said"] for p in mutated["parts"]] == ["MUTATED", "MUTATED"]
    for _ in range(2):
        plain = json.loads(await body(adapter, request(msgs)))
        assert [p["said"] for p in plain["parts"]] == ["original one", "original two"]


RUNAWAY = """
local cache = openai_compat.message_cache()
return {
  name = "runaway", endpoint = "/x",
  transform_response = function() return {} end,
  transform_request = function(req)
    local entries = openai_compat.each_message(req, cache, function(m)
      if m.content == "spin" then while true do end end
      return { json = false }, m
    end)
    return { n = #entries }
  end,
}
"""


async def test_budget_still_stops_a_runaway_conversion(tmp_path: Path) -> None:
    write(tmp_path / "runaway.lua", RUNAWAY)
    adapter = AdapterLoader(user_dir=tmp_path, instruction_budget=200_000).get("runaway")
    ok = [{"role": "user", "content": "fine"}]
    with pytest.raises(AdapterError) as err:
        await body(adapter, request([*ok, {"role": "user", "content": "spin"}]))
    assert "instruction budget exceeded" in str(err.value) and "runaway.lua" in str(err.value)
    assert json.loads(await body(adapter, request(ok)))["n"] == 1  # the adapter still works


ITEMS = """
return {
  name = "items", endpoint = "/x",
  transform_response = function() return {} end,
  transform_request = function(req)
    local texts = json.items(req, "messages")
    local decoded = json.array()
    for i, t in ipairs(texts) do decoded[i] = json.decode(t) end
    local _ = req.messages
    return { texts = texts, decoded = decoded, after_read = json.items(req, "messages") == nil,
             each = json.encode_each({ { a = 1 }, "s", json.array() }) }
  end,
}
"""


async def test_items_are_the_messages_json_texts(tmp_path: Path) -> None:
    write(tmp_path / "items.lua", ITEMS)
    adapter = AdapterLoader(user_dir=tmp_path).get("items")
    msgs = [*history(), {"role": "user", "content": "emoji 😀 and \u0001 control"}]
    sent = json.loads(await body(adapter, request(msgs)))
    assert [json.loads(t) for t in sent["texts"]] == msgs
    assert sent["decoded"] == msgs and sent["after_read"] is True
    assert sent["each"] == ['{"a":1}', '"s"', "[]"]


BAD_UTF8 = """
return {
  name = "badutf8", endpoint = "/x",
  transform_response = function() return {} end,
  transform_request = function(req)
    if req.extra and req.extra.text then return '{"a":"x\\255"}' end
    return { model = req.model .. "\\255", n = #req.messages }
  end,
}
"""


async def test_invalid_utf8_from_an_adapter_is_replaced(tmp_path: Path) -> None:
    write(tmp_path / "badutf8.lua", BAD_UTF8)
    adapter = AdapterLoader(user_dir=tmp_path).get("badutf8")
    req = request([{"role": "user", "content": "hi"}])
    assert json.loads(await body(adapter, req)) == {"model": "m\ufffd", "n": 1}
    assert json.loads(await body(adapter, {**req, "extra": {"text": True}})) == {"a": "x\ufffd"}
    ctx = await adapter.context(RequestContext(model="m", stream=False, thinking=False))
    assert json.loads(adapter.build_request_sync(request_parts(req), ctx)) == {"model": "m\ufffd", "n": 1}
