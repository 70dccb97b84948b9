"""The daemon as a real process and `homeagent chat` in a real PTY."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pexpect
import pytest

from tests.conftest import run_cli
from tests.fakes.llm_openai import FakeOpenAI, Turn

pytestmark = pytest.mark.xdist_group("processes")


def start_daemon(data_dir: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), "run", "--no-web"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + 20
    while not (data_dir / "cli.sock").exists():
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited early: {proc.stderr.read() if proc.stderr else ''}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("daemon did not create its socket")
        time.sleep(0.02)
    return proc


@pytest.fixture
def daemon_proc(data_dir: Path) -> Iterator[subprocess.Popen[str]]:
    proc = start_daemon(data_dir)
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


async def test_run_prints_where_it_lives_and_a_second_run_refuses(data_dir: Path, daemon_proc: subprocess.Popen[str]) -> None:
    second = await run_cli(data_dir, "run", "--no-web", timeout=30)
    assert second.code == 1
    assert "already running" in second.err and str(daemon_proc.pid) in second.err
    result = await run_cli(data_dir, "ask", "my name is Zed")
    assert result.code == 0
    stopped = await run_cli(data_dir, "stop")
    assert stopped.code == 0
    out, _ = await asyncio.to_thread(daemon_proc.communicate, timeout=15)
    assert daemon_proc.returncode == 0
    assert f"data dir: {data_dir}" in out and "socket:" in out
    assert not (data_dir / "cli.sock").exists()
    # the turn was flushed to the text log before exit
    turns = (data_dir / "memory" / "text" / "turns.jsonl").read_text()
    assert "my name is Zed" in turns


async def test_sigterm_shuts_down_cleanly(data_dir: Path, daemon_proc: subprocess.Popen[str]) -> None:
    assert (await run_cli(data_dir, "ask", "hello")).code == 0
    daemon_proc.send_signal(signal.SIGTERM)
    await asyncio.to_thread(daemon_proc.wait, 15)
    assert daemon_proc.returncode == 0
    assert "hello" in (data_dir / "memory" / "text" / "turns.jsonl").read_text()
    # and the data dir can be used again right away
    again = start_daemon(data_dir)
    again.send_signal(signal.SIGINT)
    assert again.wait(15) == 0


@pytest.fixture
async def slow_fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


async def test_chat_in_a_pty_streams_and_ctrl_c_stops_the_reply(data_dir: Path, slow_fake: FakeOpenAI) -> None:
    env = {
        "HOMEAGENT_LLM_BASE_URL": slow_fake.base_url,
        "HOMEAGENT_LLM_API_KEY": "sk-pty-test-000000",
        "HOMEAGENT_LLM_MODEL": "gpt-fake",
    }
    proc = await asyncio.to_thread(start_daemon, data_dir, env)
    try:
        slow_fake.script(
            Turn.text("Quick answer.", chunks=3),
            Turn.slow("and on " * 200, chunks=200, delay=0.05),
            Turn.tool_calls([("output_list_channels", {})]),
            Turn.text("Listed them."),
        )

        def drive() -> str:
            child = pexpect.spawn(
                sys.executable,
                ["-m", "homeagent", "--data-dir", str(data_dir), "chat"],
                env={**os.environ, "NO_COLOR": "1"},
                encoding="utf-8",
                timeout=15,
            )
            transcript = []
            try:
                child.expect("you> ")
                child.sendline("hi")
                child.expect("Quick answer.")
                child.expect("you> ")
                child.sendline("tell me everything")
                child.expect("and on")
                child.sendintr()  # Ctrl-C stops the reply, not the client
                child.expect(r"\(stopped\)")
                child.expect("you> ")
                child.sendline("channels?")
                child.expect("output_list_channels")
                child.expect("Listed them.")
                child.expect("you> ")
                child.sendline("/status")
                child.expect(r"agent\s+(idle|busy)")  # the turn may still be recording memory after its reply
                child.sendline("/exit")
                child.expect(pexpect.EOF)
                transcript.append(child.before or "")
            finally:
                child.close(force=True)
            return "".join(transcript)

        await asyncio.to_thread(drive)
        assert slow_fake.disconnects, "Ctrl-C did not close the LLM stream"
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 15)


async def test_status_json(data_dir: Path, daemon_proc: subprocess.Popen[str]) -> None:
    result = await run_cli(data_dir, "status", "--json")
    status = json.loads(result.out)
    assert status["pid"] == daemon_proc.pid and status["agent"]["busy"] is False


async def test_run_starts_the_web_ui_on_loopback_and_prints_its_address(data_dir: Path) -> None:
    assert (await run_cli(data_dir, "config", "set", "webui.listen_addr", "127.0.0.1:0")).code == 0
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), "run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = await asyncio.to_thread(proc.stdout.readline)
            lines.append(line)
            if line.strip().startswith("set up a language model:"):
                break
        text = "".join(lines)
        assert "web UI:   http://127.0.0.1:" in text, text
        # no LLM configured: the first-run page's address is printed
        assert f"set up a language model: {text.split('web UI:   ')[1].split()[0]}#/setup" in text, text
        url = text.split("web UI:   ")[1].split()[0].rstrip("/")
        import httpx

        async with httpx.AsyncClient() as client:
            assert (await client.get(url + "/api/v1/status")).status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 15)
    assert proc.returncode == 0
