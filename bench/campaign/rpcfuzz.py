"""Plugin-RPC fuzzing: a real subprocess plugin (fuzzplugin/) sends the host malformed JSON-RPC frames.

The plugin is installed in the data dir's plugins folder the way a user drops
one in. Each burst is a `/tool rpcfuzz_burst` turn; after it the daemon must
answer `status` on a fresh connection and `/tool rpcfuzz_echo` must come back
with its token. Every few bursts the daemon is restarted (a clean stop, then a
kill -9, in turn) and the plugin's tools must work again.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from bench.campaign.daemon import DaemonProc, back_to_baseline, configure, settle_footprint
from bench.campaign.report import Row
from homeagent.cli.client import Client

PLUGIN = Path(__file__).parent / "fuzzplugin"
BURST = 1000


async def _tool(daemon: DaemonProc, name: str, args: dict[str, object]) -> str:
    client = await Client.connect(daemon.socket, timeout=10)
    try:
        async for frame in client.chat(f"/tool {name} {json.dumps(args)}"):
            if frame.get("type") == "response":
                return str(frame.get("text", ""))
        return ""
    finally:
        await client.close()


async def _echo_ok(daemon: DaemonProc, token: str) -> bool:
    return f'"echo": "{token}"' in await _tool(daemon, "rpcfuzz_echo", {"x": token})


async def run(workdir: Path, total: int, seed: int) -> Row:
    row = Row("plugin-RPC fuzzing")
    data = workdir / "rf"
    data.mkdir(parents=True)
    configure(data, {})
    shutil.copytree(PLUGIN, data / "plugins" / "rpcfuzz")
    daemon = DaemonProc(data)
    started = time.monotonic()
    sent = host_errors = failed_bursts = restarts = echo_failures = deaths = 0
    await daemon.start()
    try:
        if not await _echo_ok(daemon, "warm"):
            row.fail(f"the plugin's echo tool does not answer:\n{daemon.tail(20)}")
        baseline = await settle_footprint(daemon, daemon.footprint(), 2)
        files = daemon.open_files()
        burst = 0
        restart_every = max(1, -(-total // BURST) // 3)  # about two restarts in any run
        while sent < total:
            burst += 1
            count = min(BURST, total - sent)
            reply = await _tool(daemon, "rpcfuzz_burst", {"seed": seed * 100_000 + burst, "count": count,
                                                          "oversize": burst == 1})
            sent += count
            if '"ping_ok": true' in reply:
                found = reply.split('"host_errors": ', 1)[1].split(",", 1)[0]
                host_errors += int(found) if found.isdigit() else 0
            else:
                failed_bursts += 1
                if failed_bursts <= 3:
                    row.notes.append(f"burst {burst} did not complete: {reply[:300]}")
            if not await daemon.status_ok():
                deaths += 1
                row.fail(f"daemon stopped answering after {sent} frames:\n{daemon.tail(15)}")
                if daemon.alive():
                    daemon.kill9()
                await daemon.start()
            if not await _echo_ok(daemon, f"t{burst}"):
                echo_failures += 1
            if burst % restart_every == 0 and sent < total:
                if restarts % 2:
                    daemon.kill9()
                else:
                    await daemon.stop()
                restarts += 1
                await daemon.start()
                if not await _echo_ok(daemon, f"r{burst}"):
                    echo_failures += 1
                baseline = await settle_footprint(daemon, daemon.footprint(), 2)
                files = daemon.open_files()
        after = await settle_footprint(daemon, baseline)
        opened = sorted(daemon.open_files() - files)
    finally:
        await daemon.stop()
    row.figures = {
        "frames": sent,
        "bursts": burst,
        "host error answers seen": host_errors,
        "bursts not completed": failed_bursts,
        "daemon restarts (stop / kill -9)": restarts,
        "echo failures": echo_failures,
        "daemon deaths": deaths,
        "before": str(baseline),
        "after": str(after),
    }
    if failed_bursts:
        row.fail(f"{failed_bursts} bursts did not complete (the host stopped reading the plugin, or it was restarted)")
    if echo_failures:
        row.fail(f"the plugin's tool failed {echo_failures} times after a burst or a restart")
    if not back_to_baseline(baseline, after, opened=opened):
        row.fail(f"footprint not back to baseline: {baseline} -> {after}; fds opened since: {opened[:6]}")
    row.seconds = time.monotonic() - started
    return row
