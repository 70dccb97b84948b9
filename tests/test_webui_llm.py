"""The web API in front of a real LLM wire format (the fake OpenAI server): reasoning, interrupt with reset."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.webui_fixtures import Web, start_web


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def web(data_dir: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Web]:
    monkeypatch.setenv("HOMEAGENT_LLM_BASE_URL", fake.base_url)
    monkeypatch.setenv("HOMEAGENT_LLM_API_KEY", "sk-test-secret-0000")
    monkeypatch.setenv("HOMEAGENT_LLM_MODEL", "gpt-fake")
    daemon = Daemon(DataPaths(data_dir), web=False)
    await daemon.start()
    w = await start_web(daemon)
    try:
        yield w
    finally:
        await w.server.close()
        await daemon.stop()


async def frames_of(response: httpx.Response) -> list[dict[str, Any]]:
    frames = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            frames.append(json.loads(line[5:]))
            if frames[-1]["type"] == "response":
                break
    return frames


async def test_reasoning_streams_before_the_answer(web: Web, fake: FakeOpenAI) -> None:
    fake.script(Turn.text("The answer is 42.", chunks=4, reasoning="Let me think about it.", usage={"prompt": 30}))
    async with web.client() as c, c.stream("POST", "/api/v1/chat/stream", json={"text": "meaning?"}) as response:
        frames = await frames_of(response)
    kinds = [f["type"] for f in frames]
    assert kinds.index("reasoning_delta") < kinds.index("content_delta")
    assert "".join(f["text"] for f in frames if f["type"] == "reasoning_delta") == "Let me think about it."
    assert frames[-1]["text"] == "The answer is 42." and frames[-1]["source"] == "env"


async def test_interrupt_while_streaming_resets_and_answers_again(web: Web, fake: FakeOpenAI) -> None:
    fake.script(Turn.slow("word " * 60, chunks=60, delay=0.05), Turn.text("Handled the interrupt."))
    async with web.client() as c, c.stream("POST", "/api/v1/chat/stream", json={"text": "talk a lot"}) as response:
        frames: list[dict[str, Any]] = []
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            frames.append(json.loads(line[5:]))
            if sum(f["type"] == "content_delta" for f in frames) == 3:
                async with web.client() as c2:
                    assert (await c2.post("/api/v1/chat/interrupt", json={"text": "stop, the tea is ready"})).json()[
                        "busy"
                    ]
            if frames[-1]["type"] == "response":
                break
    assert any(f["type"] == "content_delta" and f.get("reset") for f in frames)
    assert frames[-1]["text"] == "Handled the interrupt."
    second_call = fake.requests[1].body["messages"]
    assert any("[打断消息]" in str(m.get("content")) and "tea is ready" in str(m.get("content")) for m in second_call)


async def test_openai_endpoint_streams_reasoning_content(web: Web, fake: FakeOpenAI) -> None:
    fake.script(Turn.text("Forty-two.", chunks=3, reasoning="Counting."))
    async with openai.AsyncOpenAI(
        base_url=web.url + "v1", api_key=web.token, max_retries=0, http_client=httpx.AsyncClient(verify=False)
    ) as oa:
        stream = await oa.chat.completions.create(
            model="homeagent", stream=True, messages=[{"role": "user", "content": "meaning?"}]
        )
        chunks = [chunk async for chunk in stream]
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    assert reasoning == "Counting."
    assert "".join(d.content or "" for d in deltas) == "Forty-two."
