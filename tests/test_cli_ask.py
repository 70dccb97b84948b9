"""`homeagent ask` against a real daemon process and a scripted LLM: streaming, --no-stream, Ctrl-C, a closed pipe."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from homeagent.cli.client import connect_to
from homeagent.datalock import lock_holder
from homeagent.paths import DataPaths
from tests.conftest import run_cli
from tests.fakes.llm_openai import FakeOpenAI, Turn

pytestmark = pytest.mark.xdist_group("processes")


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def daemon(data_dir: Path, tmp_path: Path, llm: FakeOpenAI) -> AsyncIterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "HOMEAGENT_LLM_BASE_URL": llm.base_url,
        "HOMEAGENT_LLM_API_KEY": "sk-ask-test-000000",
        "HOMEAGENT_LLM_MODEL": "gpt-fake",
    }
    log = (tmp_path / "daemon.log").open("wb")
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), "run", "--no-web"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        while lock_holder(data_dir / "daemon.lock") != str(proc.pid):  # `run` holds the data directory
            assert proc.poll() is None, (tmp_path / "daemon.log").read_text()
            await asyncio.sleep(0.01)
        ready = await run_cli(data_dir, "status", "--json")  # from here the CLI waits for the socket
        assert ready.code == 0, (tmp_path / "daemon.log").read_text()
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 20)
        log.close()


async def ask_proc(data_dir: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), "ask", *args,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def read_until(stream: asyncio.StreamReader, needle: bytes) -> bytes:
    seen = b""
    while needle not in seen:
        chunk = await asyncio.wait_for(stream.read(256), 30)
        assert chunk, f"stream ended before {needle!r}: {seen!r}"
        seen += chunk
    return seen


async def test_ask_streams_reasoning_and_tools_aside_and_no_stream_prints_only_the_reply(
    data_dir: Path, llm: FakeOpenAI, daemon: subprocess.Popen[bytes]
) -> None:
    llm.script(
        Turn.text("The answer is 42.", chunks=4, reasoning="let me think", usage=None),
        Turn.tool_calls([("output_list_channels", {})]),
        Turn.text("Listed them."),
        Turn.text("Plain reply.", reasoning="not for scripts"),
        Turn.text("As JSON."),
    )
    streamed = await run_cli(data_dir, "ask", "what is the answer")
    assert streamed.code == 0, streamed.err
    assert streamed.out == "The answer is 42.\n"  # only the reply on stdout: `ask … > file` keeps just the answer
    assert "thinking: let me think" in streamed.err

    tools = await run_cli(data_dir, "ask", "which channels?")
    assert tools.code == 0 and tools.out.strip() == "Listed them."
    assert "⚙ output_list_channels [ok]" in tools.err

    plain = await run_cli(data_dir, "ask", "--no-stream", "for a script")
    assert (plain.code, plain.out, plain.err) == (0, "Plain reply.\n", "")

    as_json = await run_cli(data_dir, "ask", "--json", "json please")
    result = json.loads(as_json.out)
    assert as_json.code == 0 and result["ok"] is True and result["text"] == "As JSON." and result["tool_calls"] == []


async def test_ctrl_c_stops_the_turn_on_the_daemon_and_a_closed_pipe_ends_ask_quietly(
    data_dir: Path, llm: FakeOpenAI, daemon: subprocess.Popen[bytes]
) -> None:
    llm.script(
        Turn.slow("and on " * 200, chunks=200, delay=0.05),
        Turn.text("Still here."),
        Turn.slow("other " * 40, chunks=40, delay=0.05),  # another client's turn
        Turn.slow("mine " * 200, chunks=200, delay=0.05),  # ask's, queued behind it
        Turn.slow("word " * 200, chunks=200, delay=0.02),
    )
    proc = await ask_proc(data_dir, "tell me everything")
    assert proc.stdout is not None and proc.stderr is not None
    await read_until(proc.stdout, b"and on")
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 130, err
    assert b"(stopped)" in err and b"Traceback" not in err
    assert llm.disconnects, "the LLM stream was not closed: the turn kept running on the daemon"
    # the daemon is idle again and answers the next message
    after = await run_cli(data_dir, "ask", "--no-stream", "still there?")
    assert (after.code, after.out) == (0, "Still here.\n")

    # Ctrl-C on an ask whose message still waits behind another client's turn stops ask's turn, not theirs
    other = await connect_to(DataPaths(data_dir))
    try:
        frames = other.chat("someone else's question")
        assert (await anext(frames))["type"] in ("content_delta", "reasoning_delta")  # their turn runs
        queued = await ask_proc(data_dir, "my question")
        while True:  # until ask's message waits in the daemon's queue
            if (await other.call("status"))["agent"]["queued"] >= 1:
                break
            assert queued.returncode is None
            await asyncio.sleep(0.02)
        queued.send_signal(signal.SIGINT)
        theirs = [f async for f in frames][-1]
        assert theirs["type"] == "response" and theirs["ok"] is True and not theirs["interrupted"]
    finally:
        await other.close()
    _, err = await asyncio.wait_for(queued.communicate(), 30)
    assert queued.returncode == 130 and b"(stopped)" in err, err

    # `homeagent ask hi | head -c 10`: no BrokenPipeError traceback, the status a shell gives for SIGPIPE
    def pipeline() -> tuple[int, bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), "ask", "hi"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.read(10)  # what `head -c 10` takes
        proc.stdout.close()  # and head is gone
        err = proc.stderr.read()
        return proc.wait(30), err

    code, err = await asyncio.to_thread(pipeline)
    assert code == 141
    assert err == b""


async def test_ask_says_when_a_fallback_source_answered(
    data_dir: Path, llm: FakeOpenAI, daemon: subprocess.Popen[bytes]
) -> None:
    """The env source fails; the configured backup answers, and ask says so on stderr (stdout stays the reply)."""
    async with FakeOpenAI() as backup:
        for field, value in (("base_url", backup.base_url), ("model", "gpt-fake"), ("api_key", "sk-backup-000")):
            assert (await run_cli(data_dir, "config", "set", f"core.llm.sources.backup.{field}", value)).code == 0
        for _ in range(50):
            sources = await run_cli(data_dir, "llm", "sources")
            if "backup" in sources.out:
                break
            await asyncio.sleep(0.1)
        llm.script(Turn.error(500), Turn.error(500), Turn.error(500))
        backup.script(Turn.text("the backup answered"))
        result = await run_cli(data_dir, "ask", "who answers?")
        assert result.code == 0, result.err
        assert result.out.strip() == "the backup answered"
        assert "(answered by backup: env did not answer)" in result.err
