"""Memory used as a person would: state a fact, talk of other things, ask again and again.

A real daemon (its own wiring, stores and loops) talks to a fake
OpenAI-compatible model over loopback HTTP that records every request, so the
test reads the exact system prompt the model was given. The window keeps
only the newest four events, so the fact and the earlier copies of the
question sink into the document store on the way, as weeks of talk would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from homeagent.config import ConfigRegistry, core_defs
from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from tests.fakes.llm_openai import FakeOpenAI, Turn

QUESTION = "Who is my dentist?"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        server.default_turn = Turn.text("OK.")
        yield server


@pytest.fixture
async def daemon(data_dir: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Daemon]:
    paths = DataPaths(data_dir)
    paths.ensure()
    config = ConfigRegistry(paths.config_db)
    for definition in core_defs(paths.root):
        config.register_def(definition)
    config.set("core.agent.context_top_k", 4)
    config.close()
    monkeypatch.setenv("HOMEAGENT_LLM_BASE_URL", fake.base_url)
    monkeypatch.setenv("HOMEAGENT_LLM_API_KEY", "sk-test-as-used")
    monkeypatch.setenv("HOMEAGENT_LLM_MODEL", "gpt-fake")
    d = Daemon(paths, web=False)
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


def system_prompt(fake: FakeOpenAI) -> str:
    return str(fake.requests[-1].body["messages"][0]["content"])


def block(prompt: str, header: str) -> str:
    start = prompt.find(header)
    return "" if start < 0 else prompt[start : prompt.find("\n\n", start) if "\n\n" in prompt[start:] else None]


async def test_the_fact_comes_back_not_the_question(daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(
        Turn.tool_calls([("memory_commit", {"triples": [
            {"subject": "user", "relation": "has_dentist", "object": "Dr. Okafor"}]})]),
        Turn.text("Noted: your dentist is Dr. Okafor."),
    )
    say = lambda text: daemon.io.inject_sync("cli", "cli", text, timeout=20)  # noqa: E731
    await say("My dentist is Dr. Okafor, her practice is on Main Street.")
    for text in ("I need to buy milk and eggs.", "The weather is lovely today.", "Remind me to call my mother.",
                 QUESTION, "What should I cook tonight?", "Maybe pasta with tomatoes.", QUESTION,
                 "I watched a film about sailing.", "It was long but good."):
        await say(text)
    await say(QUESTION)
    prompt = system_prompt(fake)
    docs = block(prompt, "【相关记忆文档】")
    assert "Dr. Okafor" in docs, prompt
    # the earlier copies of the question are documents by now, and none of them fills a slot
    assert QUESTION not in docs.replace(f"before: user: {QUESTION}", "").replace(f"after: user: {QUESTION}", ""), docs
    assert docs.count("\n- [") == len({line for line in docs.splitlines() if line.startswith("- [")})
    index = block(prompt, "【记忆索引】")
    assert "has_dentist" in index and "Okafor" in index, prompt
    # the tool finds the relation by its word, not only by an entity's name
    recall, _ = await daemon.indexer.recall("dentist")
    found = recall.to_dict()["relations"]
    assert {"subject": "user", "relation": "has_dentist", "object": "Dr. Okafor"}.items() <= found[0].items(), found
