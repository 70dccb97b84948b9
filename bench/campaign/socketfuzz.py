"""Socket fuzzing: batches of malformed frames on the local socket, each batch on a new connection.

After every batch the daemon must answer `status` on a fresh connection. The
daemon owes each malformed frame an error frame (docs/socket.md); a frame
right after a too-large one must still be answered (a valid `status` is sent
after every huge frame to catch a dropped successor). fds, RSS and kernel tasks
are read from /proc before the first batch and after the last.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.campaign.daemon import DaemonProc, back_to_baseline, configure, settle_footprint
from bench.campaign.frames import Frame, Generator
from bench.campaign.report import Row

BATCH = 250
SENTINEL = 2**31 - 1


@dataclass
class Counts:
    frames: int = 0
    owed_errors: int = 0
    errors: int = 0
    turns_owed: int = 0
    turns: int = 0
    disconnects: int = 0
    deaths: int = 0
    dropped_after_huge: int = 0
    kinds: dict[str, int] = field(default_factory=dict)


async def _batch(sock: Path, frames: list[Frame], counts: Counts, timeout: float) -> None:
    reader, writer = await asyncio.open_unix_connection(str(sock), limit=16 * 1024 * 1024)
    probes: set[int] = set()
    answered: set[int] = set()
    got = {"errors": 0, "turns": 0}
    done = asyncio.Event()
    resend = asyncio.Event()
    closed = False

    async def read() -> None:
        nonlocal closed
        while True:
            line = await reader.readline()
            if not line:
                closed = True
                done.set()
                return
            with contextlib.suppress(ValueError):
                frame = json.loads(line)
                kind = frame.get("type")
                if kind == "rpc_error" and frame.get("id") == SENTINEL:
                    # refused as busy (the connection's in-flight RPC limit, full of this batch's frames): ask again
                    resend.set()
                    continue
                if kind == "error" or (kind == "rpc_error"):
                    got["errors"] += 1
                if kind == "response":
                    got["turns"] += 1
                if kind in ("rpc_result", "rpc_error") and isinstance(frame.get("id"), int) and frame["id"] in probes:
                    answered.add(frame["id"])
                if kind == "rpc_result" and frame.get("id") == SENTINEL:
                    done.set()

    reading = asyncio.create_task(read())
    turns_owed = sum(1 for f in frames if f.owed == "turn")
    try:
        for i, frame in enumerate(frames):
            writer.write(frame.data)
            if frame.kind == "huge":  # the next valid frame must not be swallowed with it
                probe = 2**30 + counts.frames + i
                probes.add(probe)
                writer.write(json.dumps({"type": "rpc", "id": probe, "method": "status"}).encode() + b"\n")
            await writer.drain()
        writer.write(json.dumps({"type": "rpc", "id": SENTINEL, "method": "status"}).encode() + b"\n")
        await writer.drain()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not closed and (not done.is_set() or got["turns"] < turns_owed):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.2)
            if resend.is_set() and not done.is_set():
                resend.clear()
                writer.write(json.dumps({"type": "rpc", "id": SENTINEL, "method": "status"}).encode() + b"\n")
                await writer.drain()
        await asyncio.sleep(0.05)  # error frames for the last frames may trail the sentinel's answer
    except (ConnectionError, OSError):
        closed = True
    finally:
        reading.cancel()
        with contextlib.suppress(BaseException):
            await reading
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    counts.frames += len(frames)
    counts.owed_errors += sum(1 for f in frames if f.owed == "error")
    counts.errors += got["errors"]
    counts.turns_owed += turns_owed
    counts.turns += got["turns"]
    counts.dropped_after_huge += len(probes - answered)
    counts.disconnects += int(closed)
    for f in frames:
        counts.kinds[f.kind] = counts.kinds.get(f.kind, 0) + 1


async def culprits(sock: Path, frames: list[Frame]) -> list[str]:
    """Replays a batch's malformed frames one at a time, each followed by a `status`: the ones with no error answer."""
    reader, writer = await asyncio.open_unix_connection(str(sock), limit=16 * 1024 * 1024)
    found = []
    try:
        await reader.readline()  # hello
        for frame in frames:
            if frame.owed != "error":
                continue
            writer.write(frame.data + json.dumps({"type": "rpc", "id": SENTINEL, "method": "status"}).encode() + b"\n")
            await writer.drain()
            answered = False
            while True:
                line = await asyncio.wait_for(reader.readline(), 30)
                if not line:
                    return [*found, f"{frame.kind}: connection closed after {frame.data[:80]!r}"]
                reply = json.loads(line)
                if reply.get("type") in ("error", "rpc_error") and reply.get("id") != SENTINEL:
                    answered = True
                if reply.get("id") == SENTINEL:
                    break
            if not answered:
                found.append(f"{frame.kind}: {frame.data[:120]!r}")
    finally:
        writer.close()
    return found


async def run(workdir: Path, total: int, seed: int) -> Row:
    row = Row("socket fuzzing")
    data = workdir / "sf"
    data.mkdir(parents=True)
    configure(data, {})
    daemon = DaemonProc(data)
    gen = Generator(seed)
    counts = Counts()
    started = time.monotonic()
    await daemon.start()
    try:
        for _ in range(2):  # warm-up, not counted: the first turns start thread pools and load code
            await _batch(daemon.socket, [gen.frame() for _ in range(BATCH)], Counts(), 60)
        baseline = await settle_footprint(daemon, daemon.footprint(), 2)
        files = daemon.open_files()
        while counts.frames < total:
            frames = [gen.frame() for _ in range(min(BATCH, total - counts.frames))]
            owed_before, errors_before = counts.owed_errors, counts.errors
            await _batch(daemon.socket, frames, counts, 60)
            if counts.errors - errors_before < counts.owed_errors - owed_before and len(row.notes) < 10:
                row.notes += [f"no error frame for {c}" for c in await culprits(daemon.socket, frames)]
            if not await daemon.status_ok():
                counts.deaths += 1
                row.fail(f"daemon stopped answering after {counts.frames} frames:\n{daemon.tail(15)}")
                if daemon.alive():
                    daemon.kill9()
                await daemon.start()
                baseline = daemon.footprint()
                files = daemon.open_files()
        after = await settle_footprint(daemon, baseline)
        opened = sorted(daemon.open_files() - files)
    finally:
        await daemon.stop()
    unanswered = max(0, counts.owed_errors - counts.errors)
    row.figures = {
        "frames": counts.frames,
        "error frames": counts.errors,
        "malformed without an error frame": unanswered,
        "turns owed / answered": f"{counts.turns_owed}/{counts.turns}",
        "disconnects": counts.disconnects,
        "frames dropped after a huge one": counts.dropped_after_huge,
        "daemon deaths": counts.deaths,
        "before": str(baseline),
        "after": str(after),
    }
    if unanswered:
        row.fail(f"{unanswered} malformed frames got no error frame")
    if counts.turns < counts.turns_owed:
        row.fail(f"{counts.turns_owed - counts.turns} chat frames (lone surrogates) got no response")
    if counts.dropped_after_huge:
        row.fail(f"{counts.dropped_after_huge} valid frames after a too-large frame were not answered")
    if counts.disconnects:
        row.fail(f"the daemon closed {counts.disconnects} connections")
    if not back_to_baseline(baseline, after, opened=opened):
        row.fail(f"footprint not back to baseline: {baseline} -> {after}; fds opened since: {opened[:6]}")
    row.seconds = time.monotonic() - started
    return row
