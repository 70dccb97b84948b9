"""The OpenAI-compatible endpoint, driven by the official ``openai`` client."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.fakes.webui_fixtures import Web


def client(web: Web, key: str | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=web.url + "v1", api_key=key or web.token, max_retries=0, http_client=httpx.AsyncClient(verify=False)
    )


async def test_openai_client_non_streaming(web: Web) -> None:
    async with client(web) as oa:
        models = await oa.models.list()
        assert [m.id for m in models.data] == ["homeagent"]
        reply = await oa.chat.completions.create(
            model="homeagent",
            messages=[{"role": "system", "content": "ignored"}, {"role": "user", "content": "zorbl quuxle"}],
        )
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content.startswith("[offline] I received: zorbl quuxle")
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens > 0


async def test_openai_client_streaming(web: Web) -> None:
    async with client(web) as oa:
        stream = await oa.chat.completions.create(
            model="homeagent",
            stream=True,
            messages=[{"role": "user", "content": [{"type": "text", "text": "zorbl streamed"}]}],
        )
        chunks = [chunk async for chunk in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("[offline] I received: zorbl streamed")
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert len(chunks) >= 4  # really streamed, not one blob


async def test_openai_errors_use_openai_shapes(web: Web) -> None:
    async with client(web, key="wrong") as oa:
        with pytest.raises(openai.AuthenticationError):
            await oa.chat.completions.create(model="homeagent", messages=[{"role": "user", "content": "hi"}])
    async with client(web) as oa:
        with pytest.raises(openai.BadRequestError) as err:
            await oa.chat.completions.create(model="homeagent", messages=[{"role": "assistant", "content": "hi"}])
        assert "no user message" in str(err.value)
        with pytest.raises(openai.BadRequestError):
            await oa.chat.completions.create(model="homeagent", messages=[])
    # the memory stays clean: OpenAI-compatible calls are kept out of it (channel http, no_memory)
    assert web.daemon.agent.turns == 0


async def test_each_openai_chat_is_a_conversation_of_its_own(web: Web) -> None:
    """A client's chat maps onto one conversation (header, ``user``, or the hash of its first messages), which
    keeps its own recent turns (the offline model answers from its prompt) and shows in the web UI's list."""
    first = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "my name is Zed"}]
    async with web.client() as c:
        one = await c.post("/v1/chat/completions", json={"model": "homeagent", "messages": first})
        assert one.status_code == 200, one.text
        conv = int(one.headers["X-HomeAgent-Conversation"])
        # the same chat, resent whole with the next message (as OpenAI clients do): the same conversation
        follow = [*first, one.json()["choices"][0]["message"], {"role": "user", "content": "what is my name?"}]
        two = await c.post("/v1/chat/completions", json={"model": "homeagent", "messages": follow})
        assert int(two.headers["X-HomeAgent-Conversation"]) == conv
        assert "Your name is Zed." in two.json()["choices"][0]["message"]["content"]
        # another chat (another first message) does not see it
        other = await c.post("/v1/chat/completions", json={"model": "homeagent",
                                                            "messages": [{"role": "user", "content": "what is my name?"}]})
        assert int(other.headers["X-HomeAgent-Conversation"]) != conv
        assert "Zed" not in other.json()["choices"][0]["message"]["content"]
        # one conversation per `user`
        for user, text in (("alice", "my name is Alice"), ("bob", "my name is Bob")):
            await c.post("/v1/chat/completions", json={"model": "homeagent", "user": user,
                                                        "messages": [{"role": "user", "content": text}]})
        asked = await c.post("/v1/chat/completions", json={"model": "homeagent", "user": "alice",
                                                            "messages": [{"role": "user", "content": "what is my name?"}]})
        assert "Your name is Alice." in asked.json()["choices"][0]["message"]["content"]
        # the header names a web conversation: the turn goes there, streamed too
        made = (await c.post("/api/v1/conversations", json={"title": "from the web"})).json()["id"]
        async with client(web) as oa:
            stream = await oa.chat.completions.create(
                model="homeagent", stream=True, messages=[{"role": "user", "content": "zorbl pinned"}],
                extra_headers={"X-HomeAgent-Conversation": str(made)})
            text = "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])
        assert "zorbl pinned" in text
        pinned = (await c.get(f"/api/v1/conversations/{made}/entries")).json()["entries"]
        assert [e["kind"] for e in pinned] == ["user", "assistant"] and pinned[1]["text"] == text
        listed = {x["id"]: x for x in (await c.get("/api/v1/conversations")).json()["conversations"]}
        assert listed[conv]["origin"] == "openai" and listed[conv]["title"] == "my name is Zed"
        assert listed[conv]["entries"] == 4 and listed[made]["origin"] == "web"
        assert len(listed) == 5  # the two chats, alice, bob, and the web one
    async with client(web) as oa:
        with pytest.raises(openai.NotFoundError) as missing:
            await oa.chat.completions.create(model="homeagent", messages=[{"role": "user", "content": "hi"}],
                                             extra_headers={"X-HomeAgent-Conversation": "424242"})
        assert "no conversation 424242" in str(missing.value)
        with pytest.raises(openai.BadRequestError):
            await oa.chat.completions.create(model="homeagent", messages=[{"role": "user", "content": "hi"}],
                                             extra_headers={"X-HomeAgent-Conversation": "zed"})
