"""Replies nobody waits for reach the user: a timer answers where it was set, old timers and channel-less inputs
go to ``core.agent.proactive_channels``.

A real daemon (offline provider) and real socket clients: one sets a timer
with ``/tool timer_set`` over channel ``cli`` and leaves; an attached client
(what ``homeagent chat`` is) receives the agent's reply to the reminder as an
``output`` frame when it fires.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from typing import Any

from homeagent.cli.client import Client
from homeagent.daemon import Daemon
from homeagent.sdk.types import InjectOptions


async def _attached(daemon: Daemon) -> Client:
    client = await Client.connect(daemon.paths.socket)
    await client.send({"type": "attach"})
    ack = await asyncio.wait_for(client.frames.get(), 5)
    assert ack == {"type": "ack", "of": "attach"}
    return client


async def _output(client: Client, needle: str, timeout: float = 10) -> dict[str, Any]:
    async def wait() -> dict[str, Any]:
        while True:
            frame = await client.frames.get()
            if frame.get("type") == "output" and needle in str(frame.get("text")):
                return frame

    return await asyncio.wait_for(wait(), timeout)


async def test_a_timer_set_in_a_chat_answers_in_that_chat(daemon: Daemon) -> None:
    watcher = await _attached(daemon)
    setter = await Client.connect(daemon.paths.socket)
    try:
        frames = [f async for f in setter.chat('/tool timer_set {"duration": "1s", "message": "tea is ready"}')]
        assert frames[-1]["ok"] and any(f.get("tool") == "timer_set" and f.get("status") == "ok" for f in frames)
        await setter.close()  # the client that asked is gone; attached ones still hear the reminder

        frame = await _output(watcher, "timer: tea is ready")
        assert frame["meta"]["proactive"] is True and frame["meta"]["source"] == "timer"
        with sqlite3.connect(daemon.paths.root / "plugin_data" / "timer" / "timers.db") as db:
            stored = db.execute("SELECT origin, state FROM timers").fetchall()
        assert [(json.loads(o)["channel"], s) for o, s in stored] == [("cli", "fired")]
    finally:
        await watcher.close()


async def test_replies_from_no_output_channel_go_to_the_proactive_channels(daemon: Daemon) -> None:
    watcher = await _attached(daemon)
    try:
        # an input on a channel nobody reads, naming no destination (a timer of an older version, a plugin's ping)
        daemon.io.inject_text("plugin", "nowhere", "a note from nowhere", options=InjectOptions(no_memory=True))
        frame = await _output(watcher, "a note from nowhere")
        assert frame["meta"]["proactive"] is True

        # the owner can send them elsewhere; a channel that does not exist delivers nothing and loses no turn
        daemon.config.set("core.agent.proactive_channels", "nosuchchannel")
        before = daemon.agent.status()["turns"]
        daemon.io.inject_text("plugin", "nowhere", "a second note", options=InjectOptions(no_memory=True))
        for _ in range(500):
            if daemon.agent.status()["turns"] > before:
                break
            await asyncio.sleep(0.02)
        assert daemon.agent.status()["turns"] == before + 1
        assert watcher.frames.empty()
    finally:
        await watcher.close()


async def test_a_timer_remembers_the_person_and_group_it_was_set_for(daemon: Daemon) -> None:
    # an input from a chat plugin carries its user and group; the timer set in that turn keeps them
    daemon.io.inject_text(
        "qqlike", "cli", '/tool timer_set {"duration": "1h", "message": "water the plants"}',
        options=InjectOptions(user_id="10001", group_id="777"),
    )
    db_path = daemon.paths.root / "plugin_data" / "timer" / "timers.db"
    deadline = time.monotonic() + 10
    rows: list[Any] = []
    while not rows and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        if db_path.exists():
            with sqlite3.connect(db_path) as db:
                rows = db.execute("SELECT origin FROM timers").fetchall()
    assert [json.loads(r[0]) for r in rows] == [{"channel": "cli", "user_id": "10001", "group_id": "777"}]
