"""Plugins that break the protocol: each gets a clear error, and the host (and other plugins) carry on.

All misbehaving plugins are loaded into one host at once (the registry
prepares plugins concurrently), so the failures below happened side by side
with the well-behaved ``calm`` plugin.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes.proc_host import FAST, ProcHost, fast, pid_alive, proc_host

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def host(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcHost]:
    data_dir = tmp_path_factory.mktemp("badinput") / "d"
    async with proc_host(data_dir, options=fast(FAST, handshake_timeout=10.0, max_frame=1024 * 1024)) as h:
        h.add("raw")
        h.add("raw", "calm")
        h.add("raw", "garbage", mode="garbage")
        h.add("raw", "badproto", mode="bad_protocol")
        (h.add("raw", "noexec") / "rawplugin").chmod(0o644)  # e.g. unpacked from a zip: runs through its #! line
        binary = h.add("raw", "binary")
        (binary / "rawplugin").write_bytes(b"\x7fELF not really")
        (binary / "rawplugin").chmod(0o644)
        h.add("raw", "missing", entry="nope.bin")
        h.add("pyecho", "pybroken")
        (h.plugins_dir / "pybroken" / "main.py").write_text("import no_such_module_here\n")
        await h.registry.load_all()
        yield h


async def test_wrong_protocol_version_is_refused(host: ProcHost) -> None:
    info = host.registry.info("badproto")
    assert info["state"] == "failed"
    assert "speaks protocol version 99; this HomeAgent speaks version 1" in info["error"]
    assert info["tools"] == [] and "badproto" not in [c.name for c in host.supervisor.children]
    assert host.registry.info("calm")["state"] == "running"


async def test_a_plugin_that_never_answers_the_handshake(tmp_path: Path) -> None:
    async with proc_host(tmp_path / "d", options=fast(FAST, handshake_timeout=0.5)) as h:
        h.add("raw", "silent", mode="no_handshake")
        started = time.perf_counter()
        await h.registry.load_all()
        assert time.perf_counter() - started < 3
        info = h.registry.info("silent")
        assert info["state"] == "failed" and "did not answer the handshake within 0.5s" in info["error"]
        assert h.supervisor.children == [], "it was killed"


async def test_entries_that_cannot_run(host: ProcHost) -> None:
    assert host.registry.info("noexec")["state"] == "running"
    assert "is not executable; run: chmod +x" in host.registry.info("binary")["error"]
    assert "entry 'nope.bin' does not exist" in host.registry.info("missing")["error"]
    broken = host.registry.info("pybroken")
    assert broken["state"] == "failed"
    assert "cannot load the plugin: ModuleNotFoundError: No module named 'no_such_module_here'" in broken["error"]


async def test_garbage_on_stdout_is_counted_and_skipped(host: ProcHost) -> None:
    for i in range(3):
        assert (await host.call("garbage_echo", {"i": i})).result["echo"] == {"i": i}
    errors = host.plugin("garbage").health()["protocol_errors"]
    assert errors["malformed_frames"] >= 6
    # the host told the plugin what was wrong with its frames (JSON-RPC errors with id null)
    told = (await host.call("garbage_errors")).result["errors"]
    assert any(e["code"] == -32700 and "not JSON" in e["message"] for e in told)


async def test_oversized_frames_are_skipped_with_an_error(host: ProcHost) -> None:
    big = await host.call("raw_big", {"size": 2_000_000})
    assert big.status == "error" and "larger than the limit of 1048576 bytes" in big.result["content"]
    ok = await host.call("raw_big", {"size": 500_000})
    assert ok.status == "ok" and len(ok.result["blob"]) == 500_000
    assert (await host.call("raw_oversend", {"size": 2_000_000})).status == "ok"
    told = (await host.call("raw_errors")).result["errors"]
    limit = "larger than the limit of 1048576 bytes"
    assert {"code": -32006, "message": f"settings.get: frame of 2000073 bytes is {limit}"} in told
    assert (await host.call("raw_echo")).status == "ok"
    health = host.plugin("raw").health()
    assert health["protocol_errors"]["oversized_frames"] == 2 and health["restarts"] == 0


async def test_answers_to_calls_never_made_are_ignored(host: ProcHost) -> None:
    assert (await host.call("calm_phantom")).result == {"ok": True}
    assert host.plugin("calm").health()["protocol_errors"]["unknown_responses"] == 3
    assert (await host.call("calm_echo")).status == "ok"


async def test_a_flooding_plugin_does_not_starve_the_others(host: ProcHost) -> None:
    flood = asyncio.create_task(host.call("raw_flood", {"count": 10000}))
    latencies = []
    while not flood.done():
        started = time.perf_counter()
        assert (await host.call("calm_echo")).status == "ok"
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.005)
    assert (await flood).result == {"sent": 10000}
    assert latencies and max(latencies) < 1.0, "the other plugin kept being served during the flood"
    health = host.plugin("raw").health()
    served = health["served"]
    assert served.get("spam.notify", 0) + health["protocol_errors"]["dropped_notifications"] == 10000
    assert served["events.publish"] == 1000
    assert (await host.call("raw_echo")).status == "ok" and pid_alive(health["pid"])
