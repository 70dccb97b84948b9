"""Event bus, text log, output channels and turn cancellation during tool calls."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from homeagent.cli.client import Client
from homeagent.daemon import Daemon
from homeagent.events import EventBus
from homeagent.memory.textlog import TextLog
from homeagent.sdk.types import ToolDef


def publish_time(bus: EventBus, start: int) -> float:
    started = time.perf_counter()
    for i in range(start, start + 5000):
        bus.publish("tick", {"i": i})
    return time.perf_counter() - started


async def test_slow_subscriber_never_blocks_the_publisher() -> None:
    # best of 3 on each side: a VM pause in one pass must not fail the test (seen in CI: one 0.45 s pass)
    baseline = min(publish_time(EventBus(history=50), 0) for _ in range(3))
    bus = EventBus(history=50)
    stuck = bus.subscribe(maxsize=10, name="stuck")  # never reads
    fast = bus.subscribe(types=["tick"], maxsize=20_000, name="fast")
    elapsed = min(publish_time(bus, 5000 * k) for k in range(3))
    # a stuck subscriber costs the publisher no more than a couple of deque appends per event
    assert elapsed < 4 * baseline + 0.05, (elapsed, baseline)
    assert stuck.dropped == 14990  # 3 passes of 5000, 10 kept
    first = await asyncio.wait_for(stuck.get(), 1)
    assert first.data["i"] == 14990  # the oldest were dropped, the newest kept
    assert fast.dropped == 0
    assert len(bus.recent(after_id=14990)) == 10  # replay ring for Last-Event-ID
    stats = {s["name"]: s for s in bus.stats()}
    assert stats["stuck"]["dropped"] == 14990
    await bus.close()


async def test_listener_exception_is_isolated_and_undo_stops_it() -> None:
    bus = EventBus()
    got: list[int] = []

    def bad(event: Any) -> None:
        raise RuntimeError("listener bug")

    def good(event: Any) -> None:
        got.append(event.data["n"])

    bus.listen(bad, name="bad")
    undo = bus.listen(good, ["n"], name="good")
    bus.publish("n", {"n": 1})
    await asyncio.sleep(0.05)
    undo()
    bus.publish("n", {"n": 2})
    await asyncio.sleep(0.05)
    assert got == [1]
    await bus.close()


async def test_text_log_rotates_and_keeps_every_line(tmp_path: Path) -> None:
    log = TextLog(tmp_path / "text", max_bytes=2000, backups=3)
    log.start()
    for i in range(60):
        log.append("user", f"message {i} " + "x" * 50, channel="cli")
        if i % 10 == 9:
            await log.flush()
    await log.close()
    files = sorted((tmp_path / "text").glob("turns.jsonl*"))
    assert len(files) >= 2
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert len(lines) <= 60 and lines  # older backups beyond 3 may be dropped, never corrupted
    assert any(line["content"].startswith("message 59") for line in lines)


async def test_output_send_cli_reaches_attached_clients(daemon: Daemon) -> None:
    watcher = await Client.connect(daemon.paths.socket)
    await watcher.send({"type": "attach"})
    assert (await asyncio.wait_for(watcher.frames.get(), 5))["type"] == "ack"
    sender = await Client.connect(daemon.paths.socket)
    try:
        frames = [f async for f in sender.chat('/tool output_send__cli {"payload": "dinner is ready"}')]
        tool = next(f for f in frames if f["type"] == "tool_call")
        assert tool["status"] == "ok" and '"clients": 2' not in tool["result"]
        pushed = await asyncio.wait_for(watcher.frames.get(), 5)
        assert pushed == {"type": "output", "text": "dinner is ready", "meta": {}, "kind": "text"}
        help_frames = [f async for f in sender.chat("/tool output_send__cli_help {}")]
        assert "caps" in next(f for f in help_frames if f["type"] == "tool_call")["result"]
    finally:
        await watcher.close()
        await sender.close()


async def test_cancel_during_a_tool_call_keeps_history_valid(daemon: Daemon) -> None:
    started = asyncio.Event()

    async def slow(args: dict[str, Any]) -> Any:
        started.set()
        await asyncio.sleep(30)
        return "never"

    daemon.tools.register(ToolDef(name="slow_tool", plugin="t"), slow)
    client = await Client.connect(daemon.paths.socket)
    try:
        await client.send({"type": "chat", "text": "/tool slow_tool {}"})
        await asyncio.wait_for(started.wait(), 5)
        t0 = time.perf_counter()
        await client.send({"type": "cancel"})
        frames = []
        while True:
            frame = await asyncio.wait_for(client.frames.get(), 5)
            frames.append(frame)
            if frame["type"] == "response":
                break
        assert time.perf_counter() - t0 < 1
        assert any(f["type"] == "tool_call" and f["status"] == "interrupted" for f in frames)
        assert frames[-1]["interrupted"] is True
        # the next turn works normally
        again = [f async for f in client.chat("hello")]
        assert again[-1]["ok"] is True
    finally:
        await client.close()


async def test_inject_sync_and_no_memory(daemon: Daemon) -> None:
    result = await daemon.io.inject_sync("test", "test", "my name is Quiet Person")
    assert result.ok and result.text.startswith("[offline]")
    daemon.io.inject_text_no_memory("test", "test", "I live in Secretville")
    await asyncio.sleep(0.3)
    await daemon.memory_loops.run_now("rules")
    remembered = await daemon.graph.recall(["Quiet Person"], 1)
    assert any(r.object == "Quiet Person" for r in remembered.relations), remembered
    hidden = await daemon.graph.recall(["Secretville"], 1)
    assert not hidden.relations  # a no-memory input never reaches long-term memory


async def test_interrupt_when_idle_becomes_an_ordinary_input(daemon: Daemon) -> None:
    outputs: list[str] = []
    daemon.events.listen(lambda e: outputs.append(e.data["text"]), ["agent_output"])
    daemon.io.inject_interrupt_text("timer", "timer", "timer: stretch your legs")
    for _ in range(100):
        if outputs:
            break
        await asyncio.sleep(0.02)
    assert outputs and "stretch your legs" in outputs[0]
