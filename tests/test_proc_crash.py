"""Crash isolation: what happens when a plugin process exits, hangs, forks and dies, or crash-loops.

Every test runs real child processes. One host holds a plugin per scenario
(they start concurrently); the raw (no-SDK) plugin is used where the SDK is
not the point, because it starts fastest.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from homeagent.plugins.proc.supervisor import Supervisor
from homeagent.sdk.types import Stage, StageContext
from tests.fakes.proc_host import FAST, ProcHost, fast, pid_alive, proc_host, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def host(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcHost]:
    data_dir = tmp_path_factory.mktemp("crash") / "d"
    async with proc_host(data_dir, options=fast(FAST, call_timeout=1.0, hang_timeout=0.3)) as h:
        for name in ("r_exit", "r_fork", "r_hang"):
            h.add("raw", name)
        h.add("raw", "r_loop", mode="crashloop")
        h.add("pyecho", "py_norestart")
        await h.registry.load_all()
        yield h


def tools_of(host: ProcHost, plugin: str) -> list[str]:
    return [t.name for t in host.services.tools.tools() if t.plugin == plugin]


async def test_exit_during_a_tool_call_fails_fast_then_the_plugin_comes_back(host: ProcHost) -> None:
    plugin = host.plugin("r_exit")
    first_pid = plugin.pid
    assert first_pid is not None
    started = time.perf_counter()
    result = await host.call("r_exit_exit")
    elapsed = time.perf_counter() - started
    assert result.status == "error" and elapsed < 0.9, "the call fails when the process dies, not at its timeout"
    assert "plugin 'r_exit' is not running (plugin process exited with code 5)" in result.result["content"]
    assert tools_of(host, "r_exit") == [], "its tools were removed as soon as it exited"
    assert [h.plugin for h in host.services.stages.handlers(Stage.PRE_ACTION)].count("r_exit") == 0
    assert (await host.call("r_exit_echo")).result["content"].startswith("unknown tool 'r_exit_echo'")

    await wait_for(lambda: plugin.state == "running", what="the restart")
    assert plugin.pid != first_pid and not pid_alive(first_pid)
    assert (await host.call("r_exit_echo", {"again": True})).result["echo"] == {"again": True}
    health = plugin.health()
    assert health["restarts"] == 1 and health["crashes"] == 1
    assert health["last_crash"]["exit_code"] == 5 and "exited with code 5" in health["last_crash"]["reason"]
    assert host.registry.info("r_exit")["tools"] == tools_of(host, "r_exit") != []
    ctx = StageContext(raw_message="back")
    await host.services.stages.run(Stage.PRE_ACTION, ctx)
    assert {"role": "system", "content": "r_exit saw: back"} in ctx.context_msgs, "its stage handler is back too"


async def test_a_grandchild_holding_stdout_does_not_hide_the_exit(host: ProcHost) -> None:
    plugin = host.plugin("r_fork")
    first_pid = plugin.pid
    grandchild = (await host.call("r_fork_fork")).result["grandchild"]
    assert pid_alive(grandchild)
    await wait_for(lambda: plugin.restarts == 1 and plugin.state == "running", what="restart after exit")
    assert plugin.last_crash is not None and plugin.last_crash["exit_code"] == 7
    assert first_pid is not None and not pid_alive(first_pid)
    await wait_for(lambda: not pid_alive(grandchild), timeout=3, what="the grandchild to be killed with its group")
    assert (await host.call("r_fork_echo")).status == "ok"


async def test_a_hung_plugin_is_killed_and_restarted(host: ProcHost) -> None:
    plugin = host.plugin("r_hang")
    result = await host.call("r_hang_hang")
    assert result.status == "error" and "did not answer within 1s" in result.result["content"]
    await wait_for(lambda: plugin.restarts == 1 and plugin.state == "running", what="kill and restart")
    assert plugin.last_crash is not None and "hung: no answer to a ping" in plugin.last_crash["reason"]
    assert (await host.call("r_hang_echo")).status == "ok"
    assert (await host.call("r_hang_echo")).status == "ok" and plugin.restarts == 1, "an answering plugin is left alone"


async def test_crash_loop_opens_the_circuit(host: ProcHost) -> None:
    plugin = host.plugin("r_loop")
    await wait_for(lambda: plugin.state == "failed", what="the circuit breaker")
    health = plugin.health()
    assert health["circuit"] == "open" and health["crashes"] == FAST.breaker_crashes
    assert "not restarting" in health["error"] and "homeagent plugin reload r_loop" in health["error"]
    assert tools_of(host, "r_loop") == []
    states = [e.data["state"] for e in host.services.events.recent(types=["plugin"]) if e.data["name"] == "r_loop"]
    assert states[0] == "running" and "restarting" in states and states[-1] == "failed"
    await asyncio.sleep(0.3)
    assert plugin.state == "failed" and plugin.pid is None, "nothing restarts it any more"


async def test_auto_restart_can_be_turned_off_by_the_plugin(host: ProcHost) -> None:
    plugin = host.plugin("py_norestart")
    assert (await host.call("py_norestart_no_restart")).result == {"auto_restart": False}
    crashed = await host.call("py_norestart_crash")
    assert crashed.status == "error" and "exited with code 3" in crashed.result["content"]
    await asyncio.sleep(0.3)
    assert plugin.state == "crashed" and plugin.pid is None and plugin.restarts == 0
    assert tools_of(host, "py_norestart") == [] and "automatic restart is off" in plugin.health()["error"]


async def test_stopping_the_registry_and_supervisor_ends_every_child(tmp_path: Path) -> None:
    async with proc_host(tmp_path / "d") as host:
        host.add("raw")
        host.add("raw", "raw2")
        await host.registry.load_all()
        pids = [host.plugin(n).pid for n in ("raw", "raw2")]
        assert all(p is not None and pid_alive(p) for p in pids)
        await host.registry.stop_all()
        assert [c.pid for c in host.supervisor.children] == []
        assert not any(pid_alive(p) for p in pids if p is not None)
        assert [t.name for t in host.services.tools.tools()] == []


async def test_supervisor_close_kills_children_that_ignore_sigterm(tmp_path: Path) -> None:
    supervisor = Supervisor(kill_grace=0.2)
    child = await supervisor.spawn(
        "stubborn",
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"],
        cwd=tmp_path, env=dict(os.environ), on_stdout=lambda b: None, on_exit=lambda c, e: None,
        logger=__import__("logging").getLogger("test"),
    )
    await asyncio.sleep(0.3)
    await supervisor.close()
    assert child.exit is not None and child.exit.code == -signal.SIGKILL and not pid_alive(child.pid)


async def test_children_die_with_a_killed_daemon() -> None:
    """PR_SET_PDEATHSIG: a daemon killed with SIGKILL cannot clean up, the kernel does."""
    await asyncio.to_thread(_kill_a_daemon_and_watch_its_child)


def _kill_a_daemon_and_watch_its_child() -> None:
    script = textwrap.dedent(
        """
        import asyncio, logging, os, sys
        from homeagent.plugins.proc.supervisor import Supervisor

        async def main():
            sup = Supervisor()
            child = await sup.spawn("sleeper", ["sleep", "60"], cwd=None, env=dict(os.environ),
                                    on_stdout=lambda b: None, on_exit=lambda c, e: None,
                                    logger=logging.getLogger("x"))
            print(child.pid, flush=True)
            await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    daemon = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert daemon.stdout is not None
        child = int(daemon.stdout.readline())
        assert pid_alive(child)
        daemon.kill()
        daemon.wait(5)
        deadline = time.monotonic() + 3
        while pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not pid_alive(child), "the plugin process outlived the daemon"
    finally:
        daemon.kill()
