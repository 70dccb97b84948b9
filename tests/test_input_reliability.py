"""Every input survives (issue 22): lone surrogates, socket frame edges, corrupt stores at start.

Lone UTF-16 surrogates (``"\\ud800"``, valid JSON) once killed the text-log
writer for the rest of the daemon's life; a frame one byte over 4 MiB made
the socket drop the next valid frame; JSON nested 1,000 deep closed the
connection without an error frame; a corrupt ``graph.db`` or
``documents.db`` stopped the daemon with a traceback. Each is tested here
against the real thing: the text log's writer task, the daemon's socket over
a real Unix socket, its HTTP API over loopback, and a real daemon start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from homeagent.cli.client import Client
from homeagent.daemon import Daemon
from homeagent.io.socket_server import MAX_FRAME
from homeagent.memory.textlog import TextLog
from homeagent.paths import DataPaths
from homeagent.sdk.protocol import ProtocolError, Request, parse
from homeagent.text import MAX_DEPTH, TooDeep, scrub_deep, scrub_text
from tests.fakes.webui_fixtures import start_web

LONE = "\ud800"
REPLACED = "\ufffd"


# ---------------------------------------------------------------- the helper


def test_scrub_replaces_lone_surrogates_everywhere_and_keeps_clean_values() -> None:
    assert scrub_text(f"a{LONE}b\udfff") == f"a{REPLACED}b{REPLACED}"
    clean = {"k": ["v", 1, {"x": None}]}
    assert scrub_deep(clean) is clean  # nothing to replace: nothing copied
    assert scrub_deep({f"k{LONE}": [f"v{LONE}", (1, LONE)]}) == {f"k{REPLACED}": [f"v{REPLACED}", [1, REPLACED]]}
    deep: Any = "leaf"
    for _ in range(5_000):  # deeper than the recursion limit: refused, never RecursionError
        deep = [deep]
    with pytest.raises(TooDeep):
        scrub_deep(deep)


def test_plugin_rpc_frames_are_scrubbed_and_deep_ones_refused() -> None:
    message = parse('{"id": 1, "method": "io.inject", "params": {"text": "hi \\ud800"}}')
    assert isinstance(message, Request) and message.params["text"] == f"hi {REPLACED}"
    with pytest.raises(ProtocolError, match="nested too deeply"):
        parse('{"id": 1, "method": "x", "params": {"a": ' + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "}}")


# ---------------------------------------------------------------- the text log writer


def lines_of(directory: Path) -> list[dict[str, Any]]:
    path = directory / "turns.jsonl"
    return [json.loads(line) for line in path.read_bytes().decode("utf-8").splitlines()]


async def logged_users(daemon: Daemon, last: str, timeout: float = 10.0) -> list[str]:
    """The user lines of the daemon's text log once ``last`` is among them (a turn is logged after its reply)."""
    deadline = time.monotonic() + timeout
    while True:
        await daemon.textlog.flush()
        path = daemon.textlog.directory / "turns.jsonl"
        records = lines_of(daemon.textlog.directory) if path.exists() else []
        users = [str(r["content"]) for r in records if r["role"] == "user"]
        if last in users or time.monotonic() > deadline:
            return users
        await asyncio.sleep(0.05)


async def test_text_log_writes_a_surrogate_record_and_every_one_after_it(tmp_path: Path) -> None:
    log = TextLog(tmp_path / "text")
    log.start()
    log.append("user", f"broken {LONE} text", channel="cli")
    log.append("user", "the good one", channel="cli")
    await log.flush()
    log.append("user", "a later turn", channel="cli")
    await asyncio.sleep(0.5)  # the background writer, not flush, writes this one
    assert log._task is not None and not log._task.done()
    records = lines_of(tmp_path / "text")
    assert [r["content"] for r in records] == [f"broken {REPLACED} text", "the good one", "a later turn"]
    await log.close()


async def test_text_log_skips_a_record_it_cannot_encode_and_keeps_going(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = TextLog(tmp_path / "text")
    log.start()
    log._pending.append(f'{{"content": "{LONE}"}}')  # what append used to queue: unencodable
    log.append("user", "the good one")
    circular: dict[str, Any] = {}
    circular["self"] = circular
    with caplog.at_level(logging.ERROR, "homeagent.textlog"):
        log.append("user", "circular extra", meta=circular)  # cannot be serialised at all
        await log.flush()
    log.append("user", "after the bad ones")
    await log.close()
    assert [r["content"] for r in lines_of(tmp_path / "text")] == ["the good one", "after the bad ones"]
    assert log.skipped == 2 and log.write_errors == 0
    assert sum("skipped" in r.getMessage() for r in caplog.records) == 2


# ---------------------------------------------------------------- the real daemon's socket


class Raw:
    """A raw NDJSON connection to the daemon: bytes out exactly as given, frames in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, path: Path) -> Raw:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_FRAME * 2)
        raw = cls(reader, writer)
        assert (await raw.frame())["type"] == "hello"
        return raw

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def frame(self, timeout: float = 15.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        assert line, "the daemon closed the connection"
        frame: dict[str, Any] = json.loads(line)
        return frame

    async def until(self, kind: str, timeout: float = 20.0) -> list[dict[str, Any]]:
        frames = [await self.frame(timeout)]
        while frames[-1]["type"] != kind:
            frames.append(await self.frame(timeout))
        return frames

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


def rpc(ident: int, pad_to: int = 0) -> bytes:
    """A ``status`` RPC frame, padded with JSON whitespace to exactly ``pad_to`` bytes (newline not counted)."""
    body = json.dumps({"type": "rpc", "id": ident, "method": "status", "params": {}}).encode()
    return body + b" " * max(0, pad_to - len(body)) + b"\n"


@pytest.fixture
async def raw(daemon: Daemon) -> AsyncIterator[Raw]:
    conn = await Raw.connect(daemon.paths.socket)
    try:
        yield conn
    finally:
        await conn.close()


async def test_a_surrogate_over_the_socket_is_answered_and_later_turns_are_logged(daemon: Daemon, raw: Raw) -> None:
    await raw.write(b'{"type": "chat", "text": "lone \\ud800 surrogate"}\n')
    first = (await raw.until("response"))[-1]
    # raw bytes of a UTF-16 surrogate (CESU-8): json decodes them into one too
    await raw.write(b'{"type": "chat", "text": "raw \xed\xa0\x80 bytes"}\n')
    second = (await raw.until("response"))[-1]
    await raw.write(b'{"type": "chat", "text": "an ordinary later turn"}\n')
    third = (await raw.until("response"))[-1]
    assert first["ok"] and second["ok"] and third["ok"], (first, second, third)
    users = await logged_users(daemon, "an ordinary later turn")
    assert users == [f"lone {REPLACED} surrogate", f"raw {REPLACED} bytes", "an ordinary later turn"]
    assert daemon.textlog.skipped == 0 and daemon.textlog._task is not None and not daemon.textlog._task.done()


async def test_frame_exactly_at_the_limit_is_served(raw: Raw) -> None:
    frame = rpc(1, pad_to=MAX_FRAME)
    assert len(frame) == MAX_FRAME + 1
    await raw.write(frame)
    answer = await raw.frame()
    assert answer["type"] == "rpc_result" and answer["id"] == 1


async def test_frame_one_byte_over_gets_an_error_and_the_next_frame_is_kept(raw: Raw) -> None:
    # the over-long frame and the valid one in one write: both are in the buffer together
    await raw.write(rpc(1, pad_to=MAX_FRAME + 1) + rpc(2))
    error = await raw.frame()
    assert error["type"] == "error" and "too large" in error["message"]
    answer = await raw.frame()
    assert answer["type"] == "rpc_result" and answer["id"] == 2
    # and an over-long frame that arrives in pieces, its newline long after the limit
    await raw.write(b"x" * (MAX_FRAME + 10))
    await asyncio.sleep(0.1)
    await raw.write(b"x" * 1000 + b"\n" + rpc(3))
    error = await raw.frame()
    assert error["type"] == "error" and "too large" in error["message"]
    answer = await raw.frame()
    assert answer["type"] == "rpc_result" and answer["id"] == 3


async def test_deep_nesting_gets_an_error_frame_and_the_connection_stays_usable(raw: Raw) -> None:
    for depth in (MAX_DEPTH + 1, 1_000, 100_000):
        await raw.write(b'{"type": "chat", "text": ' + b"[" * depth + b"]" * depth + b"}\n")
        error = await raw.frame()
        assert error["type"] == "error" and "nested" in error["message"], (depth, error)
    for junk in (b"{not json\n", b"[1, 2]\n", b'{"type": 5}\n', b"\xff\xfe\n", b'{"type": "nope"}\n'):
        await raw.write(junk)
        assert (await raw.frame())["type"] == "error", junk
    await raw.write(rpc(7))
    answer = await raw.frame()
    assert answer["type"] == "rpc_result" and answer["id"] == 7


# ---------------------------------------------------------------- the HTTP API


async def test_http_chat_and_openai_endpoint_take_a_surrogate(daemon: Daemon) -> None:
    web = await start_web(daemon)
    try:
        async with web.client() as c:
            body = b'{"text": "web \\ud800 text"}'
            reply = await c.post("/api/v1/chat", content=body, headers={"Content-Type": "application/json"})
            assert reply.status_code == 200, reply.text
            completion = await c.post(
                "/v1/chat/completions",
                content=b'{"model": "homeagent", "messages": [{"role": "user", "content": "oa \\udfff"}]}',
                headers={"Content-Type": "application/json"},
            )
            assert completion.status_code < 500, completion.text
            deep = await c.post(
                "/api/v1/chat", content=b'{"text": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                headers={"Content-Type": "application/json"},
            )
            assert deep.status_code == 400 and "nested" in deep.json()["error"]
            later = await c.post("/api/v1/chat", json={"text": "a later web turn"})
            assert later.status_code == 200
    finally:
        await web.server.close()
    users = await logged_users(daemon, "a later web turn")
    assert f"web {REPLACED} text" in users and "a later web turn" in users


# ---------------------------------------------------------------- corrupt stores at start


async def test_daemon_starts_over_corrupt_stores_sets_them_aside_and_serves_a_turn(data_dir: Path) -> None:
    paths = DataPaths(data_dir)
    paths.ensure()
    paths.memory.mkdir(parents=True, exist_ok=True)
    garbage = os.urandom(64 * 1024)
    for name in ("graph.db", "documents.db"):
        (paths.memory / name).write_bytes(garbage)
    (paths.memory / "graph.db-wal").write_bytes(b"not a wal either")
    d = Daemon(paths, web=False)
    started = time.monotonic()
    await d.start()
    try:
        assert time.monotonic() - started < 30
        notes = [n for n in d.notes if "corrupt" in n]
        assert len(notes) == 2, d.notes
        assert any("memory graph" in n and "graph.db.corrupt-" in n for n in notes)
        assert any("document store" in n and "documents.db.corrupt-" in n for n in notes)
        assert all("kept" in n and "\n" not in n for n in notes)
        aside = sorted(p.name for p in paths.memory.iterdir() if ".corrupt-" in p.name)
        assert len([n for n in aside if n.startswith("graph.db.corrupt-") and not n.endswith("-wal")]) == 1
        assert any(n.startswith("graph.db.corrupt-") and n.endswith("-wal") for n in aside)
        assert any(n.startswith("documents.db.corrupt-") for n in aside)
        for name in aside:
            if not name.endswith("-wal"):
                assert (paths.memory / name).read_bytes() == garbage  # set aside untouched, never deleted
        # fresh stores that work: a turn, then its memory written to both
        client = await Client.connect(paths.socket)
        try:
            frames = [f async for f in client.chat("remember that the sky is green")]
        finally:
            await client.close()
        assert frames[-1]["type"] == "response" and frames[-1]["ok"], frames[-1]
        await d.graph.add_raw_record("a record", role="user", session="cli", speaker="", ts=time.time())
        with sqlite3.connect(paths.memory / "graph.db") as conn:
            assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    finally:
        await d.stop()


async def test_an_empty_graph_db_starts_as_new_and_says_so(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths = DataPaths(data_dir)
    paths.ensure()
    paths.memory.mkdir(parents=True, exist_ok=True)
    (paths.memory / "graph.db").write_bytes(b"")
    d = Daemon(paths, web=False)
    with caplog.at_level(logging.WARNING):
        await d.start()
    try:
        assert not [n for n in d.notes if "corrupt" in n]
        assert any("graph.db is empty" in r.getMessage() for r in caplog.records)
        assert await d.graph.schema_version() > 0
    finally:
        await d.stop()
