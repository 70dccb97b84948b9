"""The OpenAI-compatible endpoint, driven by the official ``openai`` client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import openai
import pytest

from homeagent.daemon import Daemon
from tests.fakes.webui_fixtures import Web, start_web


@pytest.fixture
async def web(daemon: Daemon) -> AsyncIterator[Web]:
    w = await start_web(daemon)
    try:
        yield w
    finally:
        await w.server.close()


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
