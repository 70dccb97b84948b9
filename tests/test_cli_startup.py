"""A starting daemon, as a real process: early commands wait for it, and a lost console never hangs its stop.

A plugin that holds its start until the test lets it go keeps the daemon
"starting" for as long as the test needs, so what a command sees in that
window is deterministic.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from homeagent.cli.client import connect_to
from homeagent.cli.main import format_status
from homeagent.cli.main import main as cli_main
from homeagent.datalock import lock_holder
from homeagent.paths import DataPaths
from homeagent.startup import Startup, StillStarting, needs
from tests.conftest import CLIResult, run_cli

pytestmark = pytest.mark.xdist_group("processes")

HELD_PLUGIN = '''
import asyncio
from pathlib import Path


class Held:
    """Starts only once the file `go` exists in its folder."""

    def __init__(self, name, folder):
        self.name = name
        self.go = Path(folder) / "go"

    async def start(self, sdk):
        while not self.go.exists():
            await asyncio.sleep(0.02)

    async def stop(self):
        pass


def create_plugin(name, config):
    return Held(name, config["path"])
'''


def held_plugin(data_dir: Path) -> Path:
    folder = data_dir / "plugins" / "held"
    folder.mkdir(parents=True)
    (folder / "main.py").write_text(HELD_PLUGIN)
    (folder / "plugin.json").write_text(json.dumps({"name": "held", "version": "1.0.0", "entry": "main.py"}))
    return folder / "go"


async def offline(data_dir: Path, *args: str) -> int:
    """The CLI in-process before any daemon runs (a thread: the test's event loop is running)."""
    return await asyncio.to_thread(cli_main, ["--data-dir", str(data_dir), *args])


async def cli_in(cwd: Path, data_dir: Path, *args: str) -> CLIResult:
    """The real `homeagent` command, run from ``cwd`` (for relative paths)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), *args,
        cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return CLIResult(proc.returncode, out.decode(), err.decode())


async def test_a_daemon_s_life_under_tee_early_commands_wait_and_a_lost_console_still_stops(
    data_dir: Path, tmp_path: Path
) -> None:
    """`homeagent run 2>&1 | tee log` with an MCP server: commands sent while it starts wait for it;
    then Ctrl-C reaches the whole pipeline, tee dies first, and the daemon must still stop, status 0."""
    go = held_plugin(data_dir)
    work = tmp_path / "work"
    work.mkdir()
    assert await offline(data_dir, "plugin", "init", "hello", "--kind", "lua", "--dir", str(work)) == 0
    assert await offline(data_dir, "plugin", "pack", str(work / "hello"), "-o", str(work / "hello.hmap")) == 0
    assert await offline(data_dir, "config", "set", "webui.listen_addr", "127.0.0.1:0") == 0
    server = Path(__file__).parent / "fakes" / "mcp_stdio_server.py"
    servers = json.dumps([{"name": "calc", "command": sys.executable, "args": [str(server)]}])
    assert await offline(data_dir, "config", "set", "plugin.mcp.servers", servers) == 0
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), "run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a shell job
    )
    assert proc.stdout is not None
    try:
        while lock_holder(data_dir / "daemon.lock") != str(proc.pid):  # `run` takes the data directory first
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")
            await asyncio.sleep(0.01)
        # sent at once: the CLI finds the data directory held and waits for the socket
        early = await run_cli(data_dir, "status", "--json")
        assert early.code == 0, early.err
        status = json.loads(early.out)
        assert status["ready"] is False and "plugins" in status["starting"]
        headline = format_status(status).splitlines()[0]
        assert "starting (" in headline and "plugins" in headline.split("starting (")[1]

        commands = [
            asyncio.create_task(run_cli(data_dir, "config", "set", "plugin.timer.max_timers", "notanumber")),
            asyncio.create_task(run_cli(data_dir, "plugin", "list", "--json")),
            asyncio.create_task(run_cli(data_dir, "webui", "token", "--json")),
            asyncio.create_task(cli_in(work, data_dir, "plugin", "install", "./hello.hmap")),
        ]
        await asyncio.sleep(0.5)  # let them reach the daemon first (the result is the same if they do not)
        go.touch()
        bad_setting, listed, token, installed = await asyncio.gather(*commands)

        # validated against the timer plugin's definition, not stored blindly
        assert bad_setting.code == 1 and "not a whole number" in bad_setting.err, bad_setting
        assert listed.code == 0, listed.err
        assert {"held", "timer", "mcp"} <= {p["name"] for p in json.loads(listed.out)}
        # a relative package path means the client's working directory, not the daemon's
        assert installed.code == 0, installed.err
        assert "installed hello" in installed.out and "state  running" in installed.out
        # the token was made by the running web UI, so the web UI accepts it
        assert token.code == 0, token.err
        made = json.loads(token.out)
        assert made["rotated_by"] == "daemon"
        async with httpx.AsyncClient() as http:
            reply = await http.get(made["url"] + "api/v1/status", headers={"Authorization": f"Bearer {made['token']}"})
        assert reply.status_code == 200
        client = await connect_to(DataPaths(data_dir))
        try:
            ready = await client.call("status")
        finally:
            await client.close()
        assert ready["ready"] is True and ready["starting"] == []

        seen = b""
        while b"LLM:" not in seen:  # the start banner is out
            line = await asyncio.to_thread(proc.stdout.readline)
            assert line, f"daemon exited early: {seen.decode(errors='replace')}"
            seen += line
        proc.stdout.close()  # tee is gone
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group, MCP server included
        code = await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0
    assert not (data_dir / "cli.sock").exists()


async def test_an_rpc_whose_subsystem_does_not_come_up_is_told_still_starting() -> None:
    startup = Startup(["memory", "plugins"], wait=0.05)
    await startup.gate("status")  # never waits
    await startup.gate("llm.sources")
    with pytest.raises(StillStarting, match=r"still starting \(memory, plugins\); try again"):
        await startup.gate("plugins.list")
    startup.done("plugins")
    await startup.gate("plugins.list")
    with pytest.raises(StillStarting, match=r"still starting \(memory\)"):
        await startup.gate("some_plugin.method")  # unknown methods wait for everything
    startup.finish()
    assert startup.ready and startup.starting == []
    assert needs("config.set", ["memory", "plugins", "web"]) == ("plugins", "web")


def test_status_lists_each_mcp_server() -> None:
    status = {"version": "x", "pid": 1, "uptime_s": 3, "ready": True, "mcp": {
        "servers": {"calc": {"state": "connected", "tools": 4, "error": ""},
                    "ghost": {"state": "reconnecting", "tools": 0, "error": "FileNotFoundError: /no/such"}},
        "problems": ["server 'bad': give exactly one of command (stdio) or url (HTTP)"]}}
    lines = format_status(status).splitlines()
    assert "mcp        calc: connected (4 tools)" in lines
    assert "mcp        ghost: reconnecting (FileNotFoundError: /no/such)" in lines
    assert any(line.startswith("mcp        problem: server 'bad'") for line in lines)
    assert not any("mcp" in line for line in format_status({**status, "mcp": None}).splitlines())
