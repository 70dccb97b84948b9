"""A data directory that is backed up while the daemon runs, restored elsewhere, or simply copied, lives on its own.

Real `homeagent run` processes and the real CLI: facts are told and imported
into a running daemon, `homeagent backup` copies its directory meanwhile, and
daemons started on the restored copy and on a plain `cp -r` copy (whose
config.db carries the absolute paths older versions stored) find the facts
and write only into their own files; the original's stores stay byte for byte
as they were.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_memory_e2e import Daemon, configure

pytestmark = pytest.mark.xdist_group("processes")

TURNS = [
    {"role": "user", "content": "The boat registration number is PT-4471-LX.", "timestamp": 1767225600},
    {"role": "assistant", "content": "Noted the registration.", "timestamp": 1767225601},
    {"role": "user", "content": "My sister Ines lives in Braga.", "timestamp": 1767225700},
]


@pytest.fixture
async def procs() -> AsyncIterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait(10)


async def start(procs: list[Daemon], data_dir: Path) -> Daemon:
    d = Daemon(data_dir)
    procs.append(d)
    return await d.ready()


async def cli(data_dir: Path, *args: str) -> str:
    result = await run_cli(data_dir, *args, timeout=60)
    assert result.code == 0, f"{args}: {result.err}"
    return result.out


def fingerprint(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime of every file a daemon writes (not the lock and the socket)."""
    return {
        p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("daemon.lock", "cli.sock")
    }


def as_older_versions_stored_it(config_db: Path, original: Path) -> None:
    """Put back the absolute paths that versions before migration 2 stored (the copy then pointed at the original)."""
    db = sqlite3.connect(config_db)
    with db:
        for key, rel in (("core.memory.graph", "memory/graph.db"), ("core.memory.text", "memory/text"),
                         ("core.knowledge.path", "knowledge"), ("core.plugin.dir", "plugins"),
                         ("core.log.path", "log")):
            db.execute("UPDATE config SET value = ? WHERE key = ?", (json.dumps(str(original / rel)), key))
        db.execute("DELETE FROM schema_version WHERE version >= 2")
    db.close()


async def test_backup_while_running_restore_and_copy_each_use_their_own_files(
    tmp_path: Path, procs: list[Daemon]
) -> None:
    original = tmp_path / "a"
    configure(original)
    first = await start(procs, original)
    turns = tmp_path / "turns.jsonl"
    turns.write_text("".join(json.dumps(t) + "\n" for t in TURNS))
    await cli(original, "memory", "import", str(turns))
    assert "Noted" in await cli(original, "ask", "my name is Zed")
    await cli(original, "knowledge", "add", "boat", "--text", "The boat is moored in Cascais.")

    out = await cli(original, "backup", str(tmp_path / "bk"))  # while the daemon runs
    assert "backed up" in out
    assert first.proc.poll() is None

    await cli(original, "stop")
    await asyncio.to_thread(first.proc.wait, 20)
    assert first.proc.returncode == 0
    before = fingerprint(original)
    assert {"memory/graph.db", "memory/documents.db", "memory/text/turns.jsonl", "knowledge/boat/content.md"} <= set(
        before
    )

    restored = tmp_path / "r"
    assert "restored" in await cli(restored, "restore", str(tmp_path / "bk"))
    copied = tmp_path / "c"
    shutil.copytree(original, copied)
    as_older_versions_stored_it(copied / "config.db", original)

    await asyncio.gather(start(procs, restored), start(procs, copied))  # side by side: no shared store, no shared lock
    found = await cli(restored, "memory", "search", "boat registration number")
    assert "PT-4471-LX" in found, found
    assert "Your name is Zed." in await cli(restored, "ask", "what is my name?")
    assert "Noted" in await cli(restored, "ask", "I like sailing")
    assert "Noted" in await cli(copied, "ask", "I live in Porto")
    assert "Braga" in await cli(copied, "memory", "search", "sister Ines")
    await cli(copied, "knowledge", "add", "porto", "--text", "Moved to Porto.")
    for d in (restored, copied):
        await cli(d, "stop")
    for p in procs[1:]:
        await asyncio.to_thread(p.proc.wait, 20)
        assert p.proc.returncode == 0, p.log()

    assert fingerprint(original) == before  # not one byte or mtime of the original changed
    assert "sailing" in (restored / "memory" / "text" / "turns.jsonl").read_text()
    assert "Porto" in (copied / "memory" / "text" / "turns.jsonl").read_text()
    assert (copied / "knowledge" / "porto" / "content.md").exists()
    assert "Cascais" in (restored / "knowledge" / "boat" / "content.md").read_text()
    with sqlite3.connect(copied / "config.db") as db:
        stored = dict(db.execute("SELECT key, value FROM config WHERE key LIKE 'core.%'").fetchall())
    assert json.loads(stored["core.memory.graph"]) == "memory/graph.db"
    assert json.loads(stored["core.daemon.data_dir"]) == str(copied)
