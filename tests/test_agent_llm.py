"""The agent loop against a fake OpenAI-compatible server over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from homeagent.cli.client import Client
from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from tests.conftest import run_cli
from tests.fakes.llm_openai import FakeOpenAI, Turn


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def llm_daemon(data_dir: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Daemon]:
    monkeypatch.setenv("HOMEAGENT_LLM_BASE_URL", fake.base_url)
    monkeypatch.setenv("HOMEAGENT_LLM_API_KEY", "sk-test-secret-0000")
    monkeypatch.setenv("HOMEAGENT_LLM_MODEL", "gpt-fake")
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


async def collect(client: Client, text: str) -> list[dict[str, Any]]:
    return [f async for f in client.chat(text)]


async def test_streamed_reply_through_cli(llm_daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(Turn.text("Hello from the fake model", chunks=5, reasoning="thinking hard"))
    result = await run_cli(llm_daemon.paths.root, "ask", "--json", "hi")
    assert result.code == 0, result.err
    payload = json.loads(result.out)
    assert payload["text"] == "Hello from the fake model"
    assert payload["source"] == "env"
    body = fake.requests[0].body
    assert body["stream"] is True
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][-1] == {"role": "user", "content": "hi"}
    assert fake.requests[0].headers["authorization"] == "Bearer sk-test-secret-0000"


async def test_reasoning_and_content_frames_stream_over_socket(llm_daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(Turn.text("abcdef", chunks=3, reasoning="step one", usage={"prompt": 20, "cached": 5}))
    client = await Client.connect(llm_daemon.paths.socket)
    try:
        frames = await collect(client, "go")
    finally:
        await client.close()
    kinds = [f["type"] for f in frames]
    assert "reasoning_delta" in kinds
    assert kinds.index("reasoning_delta") < kinds.index("content_delta")
    assert "".join(f["text"] for f in frames if f["type"] == "content_delta") == "abcdef"
    assert frames[-1]["usage"]["cache_read"] == 5
    chain = [e for e in llm_daemon.events.recent() if e.type == "agent_llm_chain"]
    assert chain and chain[-1].data["reasoning"] == "step one"


async def test_tool_call_round_trip_keeps_history_valid(llm_daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(
        Turn.tool_calls([("output_list_channels", {}), ("llm_list_sources", {})], fragments=4),
        Turn.text("There is one channel."),
    )
    result = await run_cli(llm_daemon.paths.root, "ask", "--json", "which channels?")
    payload = json.loads(result.out)
    assert payload["ok"] and payload["text"] == "There is one channel."
    assert [t["tool"] for t in payload["tool_calls"]] == ["output_list_channels", "llm_list_sources"]
    second = fake.requests[1].body["messages"]
    assistant = next(m for m in second if m["role"] == "assistant" and m.get("tool_calls"))
    ids = [c["id"] for c in assistant["tool_calls"]]
    tool_msgs = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ids
    assert "cli" in tool_msgs[0]["content"]
    assert "sk-test-secret" not in json.dumps(second)  # the key never reaches the model


async def test_malformed_tool_arguments_reach_the_model_as_a_clear_error(llm_daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(Turn.tool_calls([("llm_set_source", "{not json")]), Turn.text("sorry"))
    result = await run_cli(llm_daemon.paths.root, "ask", "--json", "switch")
    assert json.loads(result.out)["text"] == "sorry"
    tool_msg = next(m for m in fake.requests[1].body["messages"] if m["role"] == "tool")
    assert "JSON" in tool_msg["content"] and "isError" in tool_msg["content"]


async def test_interrupt_cancels_stream_and_reaches_next_call(llm_daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(Turn.slow("word " * 60, chunks=60, delay=0.05), Turn.text("Handled the interrupt."))
    client = await Client.connect(llm_daemon.paths.socket)
    try:
        await client.send({"type": "chat", "text": "tell me a long story"})
        frames: list[dict[str, Any]] = []
        deltas: list[float] = []
        while len(deltas) < 2:
            frame = await asyncio.wait_for(client.frames.get(), 10)
            frames.append(frame)
            if frame["type"] == "content_delta" and frame.get("text"):
                deltas.append(time.monotonic())
        chunk_gap = max(deltas[1] - deltas[0], 0.05)  # this run's pace: one 50 ms chunk, plus whatever the load adds
        sent_at = time.monotonic()
        llm_daemon.io.inject_interrupt_text("timer", "timer", "timer: tea is ready")
        await asyncio.wait_for(fake.disconnected.wait(), 2)
        closed_after = fake.disconnects[0] - sent_at
        assert closed_after < 2 * chunk_gap, f"the HTTP stream was closed after {closed_after:.3f} s, chunks every {chunk_gap:.3f} s"
        while frames[-1]["type"] != "response":
            frames.append(await asyncio.wait_for(client.frames.get(), 10))
    finally:
        await client.close()
    assert any(f["type"] == "content_delta" and f.get("reset") for f in frames)
    assert frames[-1]["text"] == "Handled the interrupt."
    retried = fake.requests[1].body["messages"]
    assert any(m["role"] == "system" and m["content"].startswith("[打断消息]") and "tea is ready" in m["content"] for m in retried)


async def test_cancel_stops_the_turn_and_the_daemon_keeps_serving(llm_daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(Turn.slow("word " * 100, chunks=100, delay=0.05), Turn.text("next one"))
    client = await Client.connect(llm_daemon.paths.socket)
    try:
        await client.send({"type": "chat", "text": "long"})
        while (await asyncio.wait_for(client.frames.get(), 10))["type"] != "content_delta":
            pass
        await client.send({"type": "cancel"})
        started = time.monotonic()
        frames = []
        while True:
            frame = await asyncio.wait_for(client.frames.get(), 10)
            frames.append(frame)
            if frame["type"] == "response":
                break
        assert time.monotonic() - started < 1
        assert frames[-1]["interrupted"] is True
        again = await collect(client, "hello again")
        assert again[-1]["text"] == "next one"
    finally:
        await client.close()


async def test_fallback_to_second_source_and_401_disables(
    data_dir: Path, fake: FakeOpenAI
) -> None:
    async with FakeOpenAI() as second:
        d = Daemon(DataPaths(data_dir), web=False)
        await d.start()
        try:
            for name, server, prio in (("primary", fake, 10), ("backup", second, 0)):
                for key, value in (
                    ("base_url", server.base_url),
                    ("model", "m"),
                    ("api_key", f"sk-{name}-key-123456"),
                    ("priority", prio),
                ):
                    d.config.set(f"core.llm.sources.{name}.{key}", value)
            await d.llm.reload()
            assert [s["name"] for s in d.llm.sources()["sources"]][:2] == ["primary", "backup"]
            fake.script(Turn.error(500), Turn.error(401))
            second.script(Turn.text("from backup"), Turn.text("backup again"))
            client = await Client.connect(d.paths.socket)
            try:
                first = await collect(client, "one")
                assert first[-1]["text"] == "from backup" and first[-1]["source"] == "backup"
                states = {s["name"]: s["state"] for s in d.llm.sources()["sources"]}
                assert states["primary"] == "cooldown"
                d.llm.manager.reset("primary")
                again = await collect(client, "two")
                assert again[-1]["text"] == "backup again"
                states = {s["name"]: s["state"] for s in d.llm.sources()["sources"]}
                assert states["primary"] == "disabled"
            finally:
                await client.close()
        finally:
            await d.stop()


async def test_stream_cut_after_output_is_an_error_not_a_silent_fallback(
    llm_daemon: Daemon, fake: FakeOpenAI
) -> None:
    fake.script(Turn.cut_after(2), Turn.text("recovered"))
    client = await Client.connect(llm_daemon.paths.socket)
    try:
        frames = await collect(client, "x")
        assert frames[-1]["ok"] is False
        assert any(f["type"] == "error" and "env" in f["message"] for f in frames)
        # the daemon keeps serving (the source cools down briefly; the offline provider may answer meanwhile)
        assert (await collect(client, "y"))[-1]["ok"] is True
    finally:
        await client.close()


async def test_missing_api_key_gives_one_clear_note_and_offline_answers(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOMEAGENT_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("HOMEAGENT_LLM_MODEL", "gpt-x")
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        notes = [n for n in d.llm.notes if "api_key" in n]
        assert len(notes) == 1 and "HOMEAGENT_LLM_API_KEY" in notes[0]
        client = await Client.connect(d.paths.socket)
        try:
            assert (await collect(client, "hi"))[-1]["text"].startswith("[offline]")
        finally:
            await client.close()
    finally:
        await d.stop()


async def test_llm_cli_sources_use_and_test(llm_daemon: Daemon, fake: FakeOpenAI) -> None:
    listing = await run_cli(llm_daemon.paths.root, "llm", "sources")
    assert listing.code == 0 and "env" in listing.out and "offline" in listing.out
    assert "sk-test-secret" not in listing.out and "(sees images)" not in listing.out
    llm_daemon.config.set("core.llm.sources.eyes.base_url", fake.base_url)
    llm_daemon.config.set("core.llm.sources.eyes.model", "gpt-4o")
    llm_daemon.config.set("core.llm.sources.eyes.api_key", "sk-eyes-0123456789")
    llm_daemon.config.set("core.llm.sources.eyes.vision", True)
    await llm_daemon.llm.reload()
    listing = await run_cli(llm_daemon.paths.root, "llm", "sources")
    eyes = next(line for line in listing.out.splitlines() if "eyes" in line)
    assert eyes.endswith("(sees images)") and "gpt-4o" in eyes
    fake.script(Turn.text("pong"))
    tested = await run_cli(llm_daemon.paths.root, "llm", "test", "env")
    assert tested.code == 0 and "pong" in tested.out and "ms" in tested.out
    fake.script(Turn.error(401, message="bad key"))
    failed = await run_cli(llm_daemon.paths.root, "llm", "test", "env")
    assert failed.code == 1 and "auth" in failed.out
    used = await run_cli(llm_daemon.paths.root, "llm", "use", "offline")
    assert used.code == 0 and llm_daemon.llm.manager.current_source() == "offline"
    unknown = await run_cli(llm_daemon.paths.root, "llm", "use", "nope")
    assert unknown.code == 1 and "nope" in unknown.err


async def test_fallback_across_two_adapters_in_one_turn(data_dir: Path, fake: FakeOpenAI) -> None:
    from tests.fakes.llm_anthropic import FakeAnthropic

    async with FakeAnthropic() as claude:
        d = Daemon(DataPaths(data_dir), web=False)
        await d.start()
        try:
            settings = {
                "claude": {"base_url": claude.base_url, "adapter": "anthropic", "priority": 5},
                "gpt": {"base_url": fake.base_url, "adapter": "openai", "priority": 1},
            }
            for name, values in settings.items():
                for key, value in {**values, "model": "m", "api_key": f"sk-{name}-0123456789"}.items():
                    d.config.set(f"core.llm.sources.{name}.{key}", value)
            await d.llm.reload()
            claude.script(Turn.error(529, message="overloaded"))
            fake.script(Turn.text("answered by the second adapter"))
            result = await d.io.inject_sync("test", "test", "hello")
            assert result.ok and result.text == "answered by the second adapter" and result.source == "gpt"
            assert claude.requests[0].path == "/v1/messages"
            assert claude.requests[0].headers["x-api-key"] == "sk-claude-0123456789"
            assert fake.requests[0].path.endswith("/chat/completions")
        finally:
            await d.stop()


async def test_a_tool_registered_between_turns_reaches_the_next_request(llm_daemon: Daemon, fake: FakeOpenAI) -> None:
    """The tool list, its wire form and the prompt's tool section are cached between turns: a change must show."""
    from homeagent.sdk.types import ToolDef

    def names(body: dict[str, Any]) -> set[str]:
        return {t["function"]["name"] for t in body.get("tools", [])}

    fake.script(Turn.text("one"), Turn.text("two"), Turn.text("three"))
    assert (await llm_daemon.io.inject_sync("test", "test", "first")).ok
    assert "late_tool" not in names(fake.requests[-1].body)

    async def late(args: dict[str, Any]) -> str:
        return "late"

    undo = llm_daemon.tools.register(ToolDef(name="late_tool", description="Arrived late.", plugin="t"), late)
    assert (await llm_daemon.io.inject_sync("test", "test", "second")).ok
    body = fake.requests[-1].body
    assert "late_tool" in names(body)
    assert "- late_tool: Arrived late." in body["messages"][0]["content"]
    undo()
    assert (await llm_daemon.io.inject_sync("test", "test", "third")).ok
    body = fake.requests[-1].body
    assert "late_tool" not in names(body)
    assert "late_tool" not in body["messages"][0]["content"]


async def test_llm_test_without_a_daemon_closes_its_clients(data_dir: Path, fake: FakeOpenAI) -> None:
    env = {"HOMEAGENT_LLM_BASE_URL": fake.base_url, "HOMEAGENT_LLM_API_KEY": "sk-local-0000000",
           "HOMEAGENT_LLM_MODEL": "gpt-x"}
    fake.script(Turn.text("pong"))
    tested = await run_cli(data_dir, "llm", "test", "env", env=env)
    assert tested.code == 0 and "pong" in tested.out
    assert "Unclosed" not in tested.err and "sk-local-0000000" not in tested.out + tested.err
