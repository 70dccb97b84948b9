"""The agentcli plugin: real PTYs running real programs, notifications, keys, resize, cleanup, the agent loop."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from homeagent.builtin.agentcli import KEYS, clean, session_pids
from homeagent.confine import python_paths
from homeagent.io.manager import InputMessage
from homeagent.plugins.services import PluginServices
from tests.fakes.builtins_host import attached, llm_daemon, started, tool_messages, tool_value
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.plugins_host import make_services

PY = sys.executable


@pytest.fixture
def services(tmp_path: Path) -> PluginServices:
    return make_services(tmp_path / "data")


async def read_until(services: PluginServices, tid: str, pattern: str, within: float = 5.0) -> str:
    """Read (clearing) until the accumulated output matches ``pattern``."""
    seen = ""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = await tool_value(services, "terminal_read", {"id": tid, "wait": 0.5})
        seen += value["output"]
        if re.search(pattern, seen):
            return seen
    raise AssertionError(f"{pattern!r} never appeared in {tid}; got {seen!r}")


async def next_input(services: PluginServices, within: float = 3.0) -> InputMessage:
    return await asyncio.wait_for(services.io.next_input(), within)


async def inputs_until(services: PluginServices, prefix: str, within: float = 5.0, has: str = "") -> InputMessage:
    """The next injected input starting with ``prefix`` (and containing ``has``); older ones are skipped."""
    deadline = time.monotonic() + within
    while True:
        message = await next_input(services, max(deadline - time.monotonic(), 0.01))
        if message.text.startswith(prefix) and has in message.text:
            return message


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def gone(pid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


def test_keys_cover_the_documented_names() -> None:
    names = {"enter", "tab", "escape", "up", "down", "left", "right", "home", "end", "backspace", "delete",
             "page_up", "page_down"}
    names |= {f"ctrl_{c}" for c in "abcdefghijklmnopqrstuvwxyz"} | {f"alt_{c}" for c in "abcdefghijklmnopqrstuvwxyz"}
    names |= {f"f{i}" for i in range(1, 13)}
    assert names == set(KEYS)
    assert KEYS["ctrl_c"] == "\x03" and KEYS["alt_x"] == "\x1bx" and KEYS["f5"] == "\x1b[15~"
    assert clean("\x1b[?2004h>>> \x1b[1m2\x1b[0m\r\n") == ">>> 2\n"


async def test_python_repl_round_trip_and_notifications(services: PluginServices) -> None:
    async with started(services, "agentcli"):
        services.config.set_plugin("agentcli", "notify_interval", "200ms")
        created = await tool_value(services, "terminal_create", {"command": f"{PY} -i -q"})
        tid = created["id"]
        assert tid == "term_1" and created["rows"] == 24 and created["cols"] == 80
        started_msg = await next_input(services)
        assert started_msg.text == "[终端 term_1 已启动]" and started_msg.options.no_memory
        await read_until(services, tid, ">>> ")
        await tool_value(services, "terminal_write", {"id": tid, "input": "1+1", "key": "enter"})
        out = await read_until(services, tid, r"\n2\n")
        assert "1+1" in out  # echoed by the terminal
        # output nobody read is pushed to the agent, throttled
        await tool_value(services, "terminal_write", {"id": tid, "input": "print('hello ' * 3)", "key": "enter"})
        notice = await inputs_until(services, "[终端 term_1 有新输出]", has="hello hello hello")
        assert notice.options.no_memory
        assert len(notice.text.split("\n", 1)[1]) <= 200
        # clear=false shows the whole buffer; clear=true after a read shows nothing new
        whole = await tool_value(services, "terminal_read", {"id": tid, "clear": False})
        assert "1+1" in whole["output"] and "hello hello hello" in whole["output"]
        await tool_value(services, "terminal_read", {"id": tid})
        assert (await tool_value(services, "terminal_read", {"id": tid}))["output"] == ""
        listed = await tool_value(services, "terminal_list", {})
        assert [t["id"] for t in listed["terminals"]] == ["term_1"] and listed["terminals"][0]["running"]
        # the process exits: the agent is told, the output stays readable
        await tool_value(services, "terminal_write", {"id": tid, "input": "print('bye'); exit(3)", "key": "enter"})
        exited = await inputs_until(services, "[终端 term_1 中的进程已退出]")
        assert exited.text.startswith("[终端 term_1 中的进程已退出]")
        final = await tool_value(services, "terminal_read", {"id": tid, "clear": False})
        assert final["running"] is False and final["exit_code"] == 3 and "bye" in final["output"]
        refused = await tool_value(services, "terminal_write", {"id": tid, "input": "x"})
        assert refused["isError"] and "exited" in refused["content"]
        assert (await tool_value(services, "terminal_close", {"id": tid}))["status"] == "closed"
        assert (await tool_value(services, "terminal_list", {}))["terminals"] == []


async def test_ctrl_c_interrupts_a_foreground_job_and_resize_is_seen(services: PluginServices) -> None:
    async with started(services, "agentcli"):
        tid = (await tool_value(services, "terminal_create", {"command": "/bin/sh", "rows": 30, "cols": 100}))["id"]
        await tool_value(services, "terminal_write", {"id": tid, "input": "stty size", "key": "enter"})
        await read_until(services, tid, r"30 100")
        resized = await tool_value(services, "terminal_resize", {"id": tid, "rows": 40, "cols": 120})
        assert resized == {"status": "ok", "id": tid, "rows": 40, "cols": 120}
        await tool_value(services, "terminal_write", {"id": tid, "input": "stty size", "key": "enter"})
        await read_until(services, tid, r"40 120")
        began = time.monotonic()
        await tool_value(services, "terminal_write", {"id": tid, "input": "sleep 100; echo after-sleep", "key": "enter"})
        await asyncio.sleep(0.3)
        await tool_value(services, "terminal_write", {"id": tid, "key": "ctrl_c"})
        await tool_value(services, "terminal_write", {"id": tid, "input": "echo still-$((6*7))", "key": "enter"})
        out = await read_until(services, tid, r"still-42")
        assert time.monotonic() - began < 5
        assert not re.search(r"^after-sleep", out, re.M)  # only the echoed command line mentions it
        # tab, arrows and friends are just bytes: the shell survives them
        await tool_value(services, "terminal_write", {"id": tid, "key": "up"})
        bad = await tool_value(services, "terminal_write", {"id": tid, "key": "hyper_q"})
        assert bad["isError"]  # the schema's enum rejects it


async def test_close_kills_the_whole_process_tree(services: PluginServices, tmp_path: Path) -> None:
    async with started(services, "agentcli"):
        script = "sh -c 'sleep 300 & echo GRANDCHILD=$!; wait'"
        tid = (await tool_value(services, "terminal_create", {"command": f"sh -c \"{script}\""}))["id"]
        out = await read_until(services, tid, r"GRANDCHILD=\d+")
        grandchild = int(re.search(r"GRANDCHILD=(\d+)", out).group(1))  # type: ignore[union-attr]
        leader = next(t["pid"] for t in (await tool_value(services, "terminal_list", {}))["terminals"])
        assert alive(grandchild) and grandchild in session_pids(leader)
        await tool_value(services, "terminal_close", {"id": tid})
        assert await gone(grandchild), "a grandchild outlived terminal_close"
        missing = await tool_value(services, "terminal_read", {"id": tid})
        assert missing["isError"] and "no terminal" in missing["content"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for job control")
async def test_stop_kills_background_jobs_in_their_own_process_group(services: PluginServices) -> None:
    async with started(services, "agentcli"):
        tid = (await tool_value(services, "terminal_create", {"command": "bash --norc -i"}))["id"]
        await tool_value(services, "terminal_write", {"id": tid, "input": "sleep 301 & echo JOB=$!", "key": "enter"})
        out = await read_until(services, tid, r"JOB=\d+")
        job = int(re.search(r"JOB=(\d+)", out).group(1))  # type: ignore[union-attr]
        assert os.getpgid(job) != next(t["pid"] for t in (await tool_value(services, "terminal_list", {}))["terminals"])
    assert await gone(job), "stopping the plugin left a background job running"


async def test_idle_timeout_and_bad_input(services: PluginServices) -> None:
    async with started(services, "agentcli"):
        bad = await tool_value(services, "terminal_create", {"command": "/no/such/program"})
        assert bad["isError"] and "not found" in bad["content"]
        assert (await tool_value(services, "terminal_create", {"command": "'unclosed"}))["isError"]
        assert (await tool_value(services, "terminal_create", {"timeout": "soon"}))["isError"]
        tid = (await tool_value(services, "terminal_create", {"command": "sleep 60", "timeout": "400ms"}))["id"]
        assert tid == "term_1"  # failed creates use no id
        pid = (await tool_value(services, "terminal_list", {}))["terminals"][0]["pid"]
        message = await inputs_until(services, f"[终端 {tid} 已超时关闭")
        assert "400ms" in message.text or "0s" in message.text
        assert await gone(pid)
        assert (await tool_value(services, "terminal_list", {}))["terminals"] == []
        services.config.set_plugin("agentcli", "max_terminals", 1)
        await tool_value(services, "terminal_create", {"command": "sleep 60"})
        full = await tool_value(services, "terminal_create", {"command": "sleep 60"})
        assert full["isError"] and "max_terminals" in full["content"]


async def test_big_output_is_bounded_and_flagged(services: PluginServices) -> None:
    async with started(services, "agentcli"):
        tid = (await tool_value(services, "terminal_create",
                                {"command": f"{PY} -c \"print('x' * 300000); print('END')\""}))["id"]
        await inputs_until(services, f"[终端 {tid} 中的进程已退出]")
        value = await tool_value(services, "terminal_read", {"id": tid})
        assert value["truncated"] is True and value["output"].rstrip().endswith("END")
        assert len(value["output"]) <= 128 * 1024


async def test_through_the_agent_loop(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d, attached(d, "agentcli"):
        # the daemon's sandbox shows the system only; the owner lets this Python in, read-only
        d.config.set("core.sandbox.ro_paths", ",".join(python_paths()))
        fake.script(
            Turn.tool_calls([("terminal_create", {"command": f"{PY} -i -q"})]),
            Turn.tool_calls([("terminal_write", {"id": "term_1", "input": "6*7", "key": "enter"})]),
            Turn.tool_calls([("terminal_read", {"id": "term_1", "wait": 3})]),
            Turn.tool_calls([("terminal_close", {"id": "term_1"})]),
            Turn.text("Python says 42."),
        )
        result = await d.io.inject_sync("test", "test", "use python to compute 6*7", timeout=30)
        assert result.ok and result.text == "Python says 42."
        read_result: Any = tool_messages(fake.requests[3].body)[-1]["content"]
        assert "42" in read_result
        assert [c["tool"] for c in result.tool_calls] == ["terminal_create", "terminal_write", "terminal_read",
                                                          "terminal_close"]
