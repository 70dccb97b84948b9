"""Per-connection limits on the local socket (issue 22, item 3), against the real daemon over a real Unix socket.

A client that sends thousands of RPCs and never reads used to grow the daemon
by hundreds of MB (every answer waited in a task for the client to read), and
one client could queue thousands of turns. Now: RPCs past the in-flight limit
and turns past the queue limit are refused with a ``busy`` error at once, the
daemon stops reading from a client that leaves its replies unread, and a
client whose unread output passes the cap is disconnected with an error.
Other clients are served all along.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from homeagent.cli.client import Client
from homeagent.daemon import Daemon
from homeagent.io.socket_server import MAX_FRAME
from homeagent.sdk.types import ToolDef


class Raw:
    """A raw NDJSON connection: writes without waiting for answers, reads only when told to."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, path: Path) -> Raw:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_FRAME * 2)
        raw = cls(reader, writer)
        assert (await raw.frame())["type"] == "hello"
        return raw

    def stop_reading(self) -> None:
        """Leave the daemon's frames in the socket (the client's loop would otherwise buffer them)."""
        self.writer.transport.pause_reading()  # type: ignore[attr-defined]

    def start_reading(self) -> None:
        self.writer.transport.resume_reading()  # type: ignore[attr-defined]

    def send(self, *frames: dict[str, Any]) -> None:
        self.writer.write(b"".join(json.dumps(f).encode() + b"\n" for f in frames))

    async def frame(self, timeout: float = 15.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        assert line, "the daemon closed the connection"
        frame: dict[str, Any] = json.loads(line)
        return frame

    async def frames_until_eof(self, timeout: float = 15.0) -> list[dict[str, Any]]:
        frames = []
        while line := await asyncio.wait_for(self.reader.readline(), timeout):
            frames.append(json.loads(line))
        return frames

    async def close(self) -> None:
        self.writer.transport.abort()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


@pytest.fixture
async def gate(daemon: Daemon) -> AsyncIterator[asyncio.Event]:
    """An RPC ``test.wait`` and a tool ``test_wait`` that both wait for the event."""
    event = asyncio.Event()

    async def wait(_: dict[str, Any]) -> Any:
        await event.wait()
        return {"waited": True}

    daemon.socket.add_method("test.wait", wait)
    daemon.tools.register(ToolDef(name="test_wait", description="waits for the test", plugin="test"), wait)
    try:
        yield event
    finally:
        event.set()


async def status_ok(daemon: Daemon) -> dict[str, Any]:
    """Another client, served while one misbehaves."""
    other = await Client.connect(daemon.paths.socket)
    try:
        status: dict[str, Any] = await other.call("status", timeout=10)
        return status
    finally:
        await other.close()


async def test_rpcs_past_the_in_flight_limit_are_answered_busy_at_once(daemon: Daemon, gate: asyncio.Event) -> None:
    daemon.config.set("core.socket.max_inflight_rpcs", 4)
    raw = await Raw.connect(daemon.paths.socket)
    try:
        raw.send(*({"type": "rpc", "id": i, "method": "test.wait", "params": {}} for i in range(1, 7)))
        busy = [await raw.frame(), await raw.frame()]
        assert [(f["type"], f["id"], f["code"]) for f in busy] == [("rpc_error", 5, "busy"), ("rpc_error", 6, "busy")]
        assert "core.socket.max_inflight_rpcs" in busy[0]["error"]
        assert (await status_ok(daemon))["socket_clients"]["inflight_rpcs"] == 4 + 1  # + that status call
        gate.set()
        answered = sorted([(await raw.frame())["id"] for _ in range(4)])
        assert answered == [1, 2, 3, 4]
        # the slots are free again: the same connection is served as usual
        raw.send({"type": "rpc", "id": 7, "method": "test.wait", "params": {}})
        assert (await raw.frame()) == {"type": "rpc_result", "id": 7, "result": {"waited": True}}
    finally:
        await raw.close()


async def test_turns_past_the_queue_limit_are_refused_with_a_failed_response(daemon: Daemon, gate: asyncio.Event) -> None:
    daemon.config.set("core.socket.max_queued_turns", 2)
    raw = await Raw.connect(daemon.paths.socket)
    try:
        raw.send(*({"type": "chat", "text": "/tool test_wait {}"} for _ in range(3)))
        refused = [await raw.frame(), await raw.frame()]
        assert refused[0]["type"] == "error" and refused[0]["code"] == "busy"
        assert "core.socket.max_queued_turns" in refused[0]["message"]
        assert refused[1]["type"] == "response" and refused[1]["ok"] is False and refused[1]["code"] == "busy"
        # another client is served while this one's two turns wait
        assert (await status_ok(daemon))["socket_clients"]["queued_turns"] == 2
        gate.set()
        responses = []
        while len(responses) < 2:
            frame = await raw.frame(timeout=30)
            if frame["type"] == "response":
                responses.append(frame)
        assert [r["ok"] for r in responses] == [True, True]
        assert (await status_ok(daemon))["socket_clients"]["queued_turns"] == 0
    finally:
        await raw.close()


async def test_a_flooding_client_that_never_reads_is_paused_not_buffered(daemon: Daemon) -> None:
    daemon.config.set("core.socket.max_unread_bytes", 256 * 1024)  # reading pauses at 32 KiB unread
    daemon.socket.add_method("test.kib", lambda _: "x" * 1024)
    count = 1500  # ~1.5 MB of answers: six times the cap
    flood = await Raw.connect(daemon.paths.socket)
    try:
        flood.stop_reading()
        flood.send(*({"type": "rpc", "id": i, "method": "test.kib", "params": {}} for i in range(count)))
        # the daemon answers until the client's unread output passes 32 KiB, then stops reading from it
        for _ in range(200):
            await asyncio.sleep(0.02)
            stats = (await status_ok(daemon))["socket_clients"]
            if stats["max_unread_bytes"] >= 32 * 1024 and stats["inflight_rpcs"] == 1:  # only that status call
                break
        assert 32 * 1024 <= stats["max_unread_bytes"] <= 256 * 1024, stats
        assert stats["overflow_disconnects"] == 0
        flood.start_reading()
        # now it reads: every RPC is answered exactly once (a result, or busy when too many were read at once)
        seen: dict[int, str] = {}
        while len(seen) < count:
            frame = await flood.frame()
            assert frame["type"] in ("rpc_result", "rpc_error"), frame
            assert frame["id"] not in seen
            seen[frame["id"]] = frame.get("code") or "ok"
            if frame["type"] == "rpc_result":
                assert frame["result"] == "x" * 1024
        assert set(seen.values()) <= {"ok", "busy"} and "ok" in seen.values()
    finally:
        await flood.close()
    assert (await status_ok(daemon))["socket_clients"]["clients"] == 1  # only the status client itself


async def test_an_attached_client_that_never_reads_is_disconnected_with_an_error(daemon: Daemon) -> None:
    daemon.config.set("core.socket.max_unread_bytes", 256 * 1024)
    stuck = await Raw.connect(daemon.paths.socket)
    try:
        stuck.send({"type": "attach"})
        assert (await stuck.frame())["type"] == "ack"
        stuck.stop_reading()
        assert daemon.socket.attached_clients == 1
        delivered = []
        for i in range(200):  # 200 × 16 KiB of proactive output, far more than the socket buffers hold
            delivered.append(await daemon.socket.broadcast({"type": "output", "text": f"{i:04d}" + "y" * 16380}))
        assert delivered[0] == 1 and delivered[-1] == 0
        assert daemon.socket.attached_clients == 0
        assert (await status_ok(daemon))["socket_clients"]["overflow_disconnects"] == 1
        stuck.start_reading()
        # what it had not read is still readable, in order, ending with the reason it was cut off
        frames = await stuck.frames_until_eof()
        outputs = [f for f in frames if f["type"] == "output"]
        assert [int(f["text"][:4]) for f in outputs] == list(range(len(outputs)))
        assert frames[-1]["type"] == "error" and frames[-1]["code"] == "overflow"
        assert "core.socket.max_unread_bytes" in frames[-1]["message"]
    finally:
        await stuck.close()


async def test_interrupts_are_limited_to_a_humans_rate(daemon: Daemon) -> None:
    raw = await Raw.connect(daemon.paths.socket)
    try:
        raw.send(*({"type": "interrupt", "text": f"stop {i}"} for i in range(30)))
        frames = [await raw.frame() for _ in range(30)]
        acks = [f for f in frames if f["type"] == "ack"]
        busy = [f for f in frames if f["type"] == "error" and f.get("code") == "busy"]
        assert len(acks) + len(busy) == 30
        assert 10 <= len(acks) <= 12 and "interrupts a second" in busy[0]["message"]
        assert (await status_ok(daemon))["socket_clients"]["busy_refusals"] == len(busy)
    finally:
        await raw.close()


async def test_one_reply_larger_than_the_cap_still_reaches_a_client_that_reads(daemon: Daemon) -> None:
    daemon.config.set("core.socket.max_unread_bytes", 64 * 1024)
    daemon.socket.add_method("test.big", lambda _: "z" * 200_000)
    raw = await Raw.connect(daemon.paths.socket)
    try:
        for i in range(3):
            raw.send({"type": "rpc", "id": i, "method": "test.big", "params": {}})
            assert (await raw.frame()) == {"type": "rpc_result", "id": i, "result": "z" * 200_000}
    finally:
        await raw.close()
