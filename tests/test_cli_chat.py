"""`homeagent chat` in a real PTY against a real daemon process and a scripted LLM.

Input typed while a reply streams (`!text` interrupts, `/cancel` stops,
anything else is queued), an approval asked inline, `/clear`, `/reconnect` after the daemon restarted,
and the input history that outlives the session (owner-only file).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pexpect
import pytest

from homeagent.cli.chat import CLEAR_SCREEN, HISTORY_FILE
from homeagent.cli.main import main as cli_main
from homeagent.datalock import lock_holder
from tests.fakes.llm_openai import FakeOpenAI, Turn

pytestmark = pytest.mark.xdist_group("processes")

UP = "\x1b[A"


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


class DaemonProcess:
    """`homeagent run --no-web` that can be stopped and started again on one data directory."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir.parent / "daemon.log"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "homeagent", "--data-dir", str(self.data_dir), "run", "--no-web"],
                stdout=log, stderr=subprocess.STDOUT, env=self.env,
            )
        while lock_holder(self.data_dir / "daemon.lock") != str(self.proc.pid):
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.01)
        status = subprocess.run(
            [sys.executable, "-m", "homeagent", "--data-dir", str(self.data_dir), "status", "--json"],
            capture_output=True, env=self.env, timeout=60,
        )
        assert status.returncode == 0, status.stderr

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(20) == 0


def spawn_chat(data_dir: Path) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable,
        ["-m", "homeagent", "--data-dir", str(data_dir), "chat"],
        env={**os.environ, "NO_COLOR": "1"},
        encoding="utf-8",
        timeout=20,
    )


async def test_chat_takes_input_while_a_reply_streams_and_reconnects(data_dir: Path, llm: FakeOpenAI) -> None:
    env = {
        **os.environ,
        "HOMEAGENT_LLM_BASE_URL": llm.base_url,
        "HOMEAGENT_LLM_API_KEY": "sk-chat-test-000000",
        "HOMEAGENT_LLM_MODEL": "gpt-fake",
    }
    workdir = data_dir.parent / "w"
    workdir.mkdir()
    assert await asyncio.to_thread(cli_main, ["--data-dir", str(data_dir), "config", "set", "core.agent.workdir", str(workdir)]) == 0
    daemon = DaemonProcess(data_dir, env)
    llm.script(
        Turn.text("Quick answer.", chunks=3),
        Turn.slow("and on " * 200, chunks=200, delay=0.05),
        Turn.text("Summary after the interrupt."),
        Turn.slow("one two " * 200, chunks=200, delay=0.05),
        Turn.text("Then this."),
        Turn.tool_calls([("cmd_run", {"command": "touch inline"})]),
        Turn.text("Made it."),
        Turn.text("Welcome back."),
        Turn.text("Again."),
    )

    def drive() -> None:
        daemon.start()
        child = spawn_chat(data_dir)
        try:
            child.expect("you> ")
            child.sendline("hi")
            child.expect("Quick answer.")
            child.expect("you> ")

            # !text while the reply streams: the model gets it before its next call
            child.sendline("tell me everything")
            child.expect("and on")
            child.sendline("!stop and summarise")
            child.expect(r"\(interrupt sent")
            child.expect("Summary after the interrupt.")
            child.expect("you> ")

            # a plain line is queued, /cancel stops the reply, then the queued line is sent
            child.sendline("count slowly")
            child.expect("one two")
            child.sendline("and then?")
            child.expect(r"\(queued")
            child.sendline("/cancel")
            child.expect(r"\(stopped\)")
            child.expect("you> and then\\?")
            child.expect("Then this.")
            child.expect("you> ")

            child.sendline("/clear")
            child.expect_exact(CLEAR_SCREEN)
            child.expect("you> ")

            # a tool call that needs approval is asked inline, at a prompt of its own
            child.sendline("make a file")
            child.expect("approval needed")
            child.expect(r"allow\? \[y\]es once")
            child.sendline("y")
            child.expect(r"\(allowed\)")
            child.expect("Made it.")
            child.expect("you> ")

            # the daemon restarts under the client
            daemon.stop()
            child.sendline("anyone there?")
            child.expect("not connected: the daemon went away; /reconnect")
            child.expect("you> ")
            daemon.start()
            child.sendline("/reconnect")
            child.expect("connected to HomeAgent")
            child.expect("you> ")
            child.sendline("back")
            child.expect("Welcome back.")
            child.expect("you> ")
            child.sendline("/settings set plugin.nosuch.api_key sk-never-in-history")
            child.expect("you> ")
            child.sendline("/exit")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)

        # the history outlives the session: up arrow twice is "back" (then /exit; the secret was left out)
        child = spawn_chat(data_dir)
        try:
            child.expect("you> ")
            child.send(UP + UP + "\r")
            child.expect("Again.")
            child.expect("you> ")
            child.sendeof()
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)

    try:
        await asyncio.to_thread(drive)
    finally:
        await asyncio.to_thread(daemon.stop)

    assert (workdir / "inline").exists()
    interrupted = json.dumps(llm.requests[2].body, ensure_ascii=False)
    assert "stop and summarise" in interrupted
    assert llm.disconnects, "/cancel did not close the LLM stream"
    history = data_dir / HISTORY_FILE
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    lines = history.read_text().splitlines()
    assert "tell me everything" in lines and "and then?" in lines  # typed during a reply, kept too
    assert "sk-never-in-history" not in history.read_text()
