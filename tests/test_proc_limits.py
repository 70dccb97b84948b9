"""Subprocess plugins under resource limits (issue 22, item 7): memory, CPU time, log rate.

Real child processes (the ``hog`` fixture: raw protocol, standard library
only) leak memory, spin, and flood the log; the host stays up, the plugin
is restarted as after any crash, and its health says which limit it hit.
The last test goes through the real daemon: the limits come from its
settings and ``homeagent plugin info`` shows the reason.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from homeagent.cli.client import Client
from homeagent.daemon import Daemon
from homeagent.plugins.proc.limits import ResourceLimits
from homeagent.sdk.types import ToolCall
from tests.conftest import run_cli
from tests.fakes.proc_host import FAST, FIXTURES, ProcHost, fast, proc_host, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="module")

LIMITS = {
    "hog_mem": ResourceLimits(max_memory_mb=96),
    "hog_cpu": ResourceLimits(max_memory_mb=0, max_cpu_seconds=1),
    "hog_log": ResourceLimits(),
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def host(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcHost]:
    data_dir = tmp_path_factory.mktemp("limits") / "d"
    options = fast(FAST, call_timeout=20.0, log_rate=50.0, log_burst=100.0, limits=lambda name: LIMITS[name])
    async with proc_host(data_dir, options=options) as h:
        for name in LIMITS:
            h.add("hog", name)
        await h.registry.load_all()
        yield h


async def test_a_plugin_that_leaks_past_its_memory_limit_is_restarted_and_says_why(host: ProcHost) -> None:
    plugin = host.plugin("hog_mem")
    first = plugin.pid
    result = await host.call("hog_mem_alloc")
    assert result.status == "error" and "hog_mem" in result.result["content"]
    await wait_for(lambda: plugin.state == "running" and plugin.restarts == 1, what="the restart")
    health = plugin.health()
    crash = health["last_crash"]
    assert crash["limit"] == "memory" and crash["exit_code"] == 1
    assert "ran out of memory under its memory limit of 96 MB" in crash["reason"]
    assert any("MemoryError" in line for line in crash["stderr"])
    assert health["limits"] == {"max_memory_mb": 96, "max_cpu_seconds": 0}
    assert plugin.pid != first
    assert (await host.call("hog_mem_echo", {"back": 1})).result["echo"] == {"back": 1}


async def test_a_plugin_that_spins_past_its_cpu_limit_is_stopped_and_says_why(host: ProcHost) -> None:
    plugin = host.plugin("hog_cpu")
    result = await host.call("hog_cpu_spin")
    assert result.status == "error"
    await wait_for(lambda: plugin.state == "running" and plugin.restarts == 1, what="the restart")
    crash = plugin.health()["last_crash"]
    assert crash["limit"] == "cpu" and crash["exit_code"] == -24  # SIGXCPU
    assert "was killed by SIGXCPU: it used up its CPU-time limit of 1 s" in crash["reason"]
    assert (await host.call("hog_cpu_echo")).status == "ok"


async def test_a_plugin_flooding_the_log_is_cut_to_its_rate_with_one_summary(
    host: ProcHost, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = host.plugin("hog_log")
    with caplog.at_level(logging.INFO, "homeagent.plugin.hog_log"):
        result = await host.call("hog_log_logs", {"count": 5000})
        assert result.result == {"sent": 5000}
        await wait_for(lambda: any("dropped" in r.getMessage() for r in caplog.records), what="the summary line")
    lines = [r for r in caplog.records if r.getMessage().startswith("line ")]
    summaries = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert 100 <= len(lines) < 1000, len(lines)  # the burst, and what the rate refilled meanwhile
    assert len(summaries) == 1
    dropped = plugin.health()["log_dropped"]
    assert dropped == 5000 - len(lines)
    assert f"{dropped} log lines from plugin hog_log dropped (more than 50 a second" in summaries[0].getMessage()
    assert plugin.state == "running" and plugin.crashes == 0
    assert (await host.call("hog_log_echo")).status == "ok"


# ---------------------------------------------------------------- through the daemon and the CLI


@pytest.mark.asyncio(loop_scope="function")
async def test_daemon_limits_come_from_settings_and_plugin_info_shows_the_reason(daemon: Daemon) -> None:
    daemon.config.set("core.plugin.limits", {"hog": {"max_memory_mb": 80}})
    plugins_dir = daemon.paths.resolve(daemon.config.get_str("core.plugin.dir"), daemon.paths.plugins)
    shutil.copytree(FIXTURES / "hog", plugins_dir / "hog")
    client = await Client.connect(daemon.paths.socket)
    try:
        await client.call("plugins.reload", {"name": "hog"}, timeout=30)
        info = await client.call("plugins.info", {"name": "hog"})
        assert info["state"] == "running" and info["health"]["limits"] == {"max_memory_mb": 80, "max_cpu_seconds": 0}
        result = await daemon.tools.execute(ToolCall("c1", "hog_alloc", {}))
        assert result.status == "error"
        for _ in range(500):
            info = await client.call("plugins.info", {"name": "hog"})
            if info["health"]["restarts"] == 1 and info["state"] == "running":
                break
            await asyncio.sleep(0.02)
        assert info["health"]["last_crash"]["limit"] == "memory"
    finally:
        await client.close()
    shown = await run_cli(daemon.paths.root, "plugin", "info", "hog")
    assert shown.code == 0, shown.err
    assert "last crash:" in shown.out and "memory limit of 80 MB" in shown.out
    assert "limits:" in shown.out and "memory 80 MB, CPU time unlimited" in shown.out
