"""Memory survives restarts of the real product: `homeagent run` as a process, stopped cleanly or killed with -9.

Facts are told through the real socket and CLI; after a restart they must come
back in the next turn (the offline provider answers only from memory: the
conversation history of L1 and the documents recalled from L2) and through
`homeagent memory search`. A kill -9 comes right after a reply or a tool call
was acknowledged, with no sleep: what was acknowledged was durable already.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bench.campaign.daemon import configure as campaign_configure
from homeagent.cli.client import Client, DaemonUnavailable
from homeagent.memory.cleaners import CleanerChain
from homeagent.memory.context import RelevanceContext
from homeagent.memory.documents import DocumentStore
from tests.conftest import run_cli
from tests.fakes.llm_openai import FakeOpenAI, Turn

pytestmark = pytest.mark.xdist_group("processes")


class Daemon:
    """`homeagent run --no-web` as a child process; its output goes to a log file (a full pipe would stall it)."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.log_path = data_dir.parent / f"daemon-{time.monotonic_ns()}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), "run", "--no-web"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    async def ready(self) -> Daemon:
        """Wait until the socket answers (a killed predecessor leaves a dead socket file behind)."""
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited early:\n{self.log()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"daemon did not answer on its socket:\n{self.log()}")
            try:
                client = await Client.connect(self.data_dir / "cli.sock", timeout=1.0)
            except DaemonUnavailable:
                await asyncio.sleep(0.05)
                continue
            await client.close()
            return self

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()
        # a killed daemon leaves its socket file behind; the next start replaces it
        assert self.proc.returncode == -signal.SIGKILL

    async def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(self.proc.wait, 20)
        self._log.close()


@pytest.fixture
async def daemons() -> AsyncIterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait(10)


async def start(daemons: list[Daemon], data_dir: Path, env: dict[str, str] | None = None) -> Daemon:
    d = Daemon(data_dir, env)
    daemons.append(d)
    return await d.ready()


async def say(client: Client, text: str) -> dict[str, Any]:
    """One turn through the socket; returns the response frame (the acknowledgement)."""
    async for frame in client.chat(text):
        if frame.get("type") == "response":
            return frame
    raise AssertionError(f"connection closed before the response to {text!r}")


def configure(data_dir: Path, **values: Any) -> None:
    """Config as `homeagent config set` writes it without a daemon (in-process: a CLI start costs ~0.7 s each).

    The hashing embedder loads in no time: these tests are about durability, not about ranking.
    """
    campaign_configure(data_dir, {key.replace("__", "."): value for key, value in values.items()})


async def ask(data_dir: Path, text: str) -> str:
    result = await run_cli(data_dir, "ask", text, timeout=30)
    assert result.code == 0, result.err
    return result.out


async def test_facts_survive_a_clean_restart_and_a_kill_9_right_after_the_reply(
    data_dir: Path, daemons: list[Daemon]
) -> None:
    # a small window, so the older turns sink into the document store (L2) on the way
    configure(data_dir, core__agent__context_top_k="4")
    first = await start(daemons, data_dir)
    client = await Client.connect(data_dir / "cli.sock")
    for fact in ("my name is Zed", "I live in Lisbon", "I like sailing"):
        assert "Noted" in (await say(client, fact))["text"]
    await client.close()
    assert "Noted" in await ask(data_dir, "I work as a carpenter")
    assert (await run_cli(data_dir, "stop")).code == 0
    await asyncio.to_thread(first.proc.wait, 20)
    assert first.proc.returncode == 0

    # (a) clean restart: the next turns still know, from L1 (history) or from L2 (recalled documents)
    await start(daemons, data_dir)
    assert "Your name is Zed." in await ask(data_dir, "what is my name?")
    client = await Client.connect(data_dir / "cli.sock")
    assert "You live in Lisbon." in (await say(client, "where do I live?"))["text"]
    assert "You like sailing." in (await say(client, "what do I like?"))["text"]
    # the early turns were pruned out of the window on the way: they are documents now
    found = await run_cli(data_dir, "memory", "search", "Zed name", "--k", "3")
    assert found.code == 0 and "my name is Zed" in found.out, found.out

    # (b) kill -9 right after the acknowledged reply, no sleep
    assert "Noted" in (await say(client, "my name is Ada"))["text"]
    daemons[-1].kill9()
    await client.close()
    journal = data_dir / "memory" / "context.journal"
    with journal.open("ab") as fh:  # and a torn last line, as a kill in the middle of a write leaves
        fh.write(b'{"s":99999,"op":"add","event":{"kind":"user","input":"never acknowle')
    third = await start(daemons, data_dir)
    assert "Your name is Ada." in await ask(data_dir, "what is my name?")
    client = await Client.connect(data_dir / "cli.sock")
    assert "You work as carpenter." in (await say(client, "what is my job?"))["text"]
    await client.close()
    await third.stop()
    assert third.proc.returncode == 0
    assert "torn last line" in third.log()
    assert journal.read_bytes() == b""  # compacted into context.json at the clean stop
    timeline = RelevanceContext(data_dir / "memory" / "context.json", None, None, CleanerChain(), read_only=True)
    assert any(e.input == "my name is Ada" for e in timeline.timeline())
    assert not any("never acknowle" in e.input for e in timeline.timeline())


async def test_a_document_recalled_by_doc_query_survives_a_kill_9_right_after_the_tool_call(
    data_dir: Path, daemons: list[Daemon]
) -> None:
    configure(data_dir)
    store = DocumentStore(data_dir / "memory" / "documents.db", None)
    doc_id = store.commit("The boat registration number is PT-4471-LX.", "boat registration")
    store.close()
    async with FakeOpenAI() as fake:
        fake.script(
            Turn.tool_calls([("doc_query", {"query": "boat registration number"})]),
            Turn.slow("Let me look at that document " * 20, chunks=40, delay=0.1),
        )
        env = {
            "HOMEAGENT_LLM_BASE_URL": fake.base_url,
            "HOMEAGENT_LLM_API_KEY": "sk-e2e-test-000000",
            "HOMEAGENT_LLM_MODEL": "gpt-fake",
        }
        daemon = await start(daemons, data_dir, env)
        client = await Client.connect(data_dir / "cli.sock")
        frames: list[dict[str, Any]] = []
        async for frame in client.chat("what is the registration number of my boat?"):
            frames.append(frame)
            if frame.get("type") == "tool_call" and frame.get("tool") == "doc_query":
                daemon.kill9()  # acknowledged: the document left L2, so it must be durable in L1
                break
        await client.close()
    call = next(f for f in frames if f.get("type") == "tool_call")
    assert call["status"] == "ok" and "PT-4471-LX" in call["result"], call

    ctx = RelevanceContext(data_dir / "memory" / "context.json", None, None, CleanerChain(), read_only=True)
    in_l1 = [e for e in ctx.timeline() if e.kind == "cold_storage" and e.meta.get("doc_id") == doc_id]
    store = DocumentStore(data_dir / "memory" / "documents.db", None)
    in_l2 = store.get(doc_id) is not None
    store.close()
    assert in_l1 or in_l2
    assert in_l1 and "PT-4471-LX" in in_l1[0].input  # the tool call was acknowledged: the move completed

    # after a restart (offline now) the next turn sees it, recalled into the timeline at its original time
    again = await start(daemons, data_dir)
    client = await Client.connect(data_dir / "cli.sock")
    assert "PT-4471-LX" in (await say(client, "what is the boat registration number?"))["text"]
    await client.close()
    await again.stop()
