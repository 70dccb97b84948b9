"""media.db lost (deleted, or corrupt and set aside): the blobs are adopted again and their references rebuilt
from the markers in the conversation window, the documents and the graph, so GC does not evict what memory cites.

Real daemons on a real data directory, the real `homeagent` command.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from homeagent.daemon import Daemon
from homeagent.memory.media import gc_pass
from homeagent.paths import DataPaths
from homeagent.sdk.types import MediaBlock, ToolCall
from tests.conftest import run_cli

FLAG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(100))
CHART = b"\x89PNG\r\n\x1a\n" + b"chart" + bytes(64)
PHOTO = b"\xff\xd8\xff\xe0" + b"photo" + bytes(80)
STRAY = b"GIF89a" + b"nobody cites me" + bytes(20)
_ids = itertools.count()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def tool(daemon: Daemon, name: str, /, **args: Any) -> Any:
    return (await daemon.tools.execute(ToolCall(id=f"r{next(_ids)}", name=name, arguments=args))).result


async def remember_three_ways(data_dir: Path) -> dict[str, tuple[str, str]]:
    """A turn with an image (context), a document with one (document), a fact with one (graph sentence), and a
    stray blob nobody cites; returns each digest's expected (owner kind, description)."""
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        assert d.media is not None
        await d.io.inject_sync("test", "test", "here is the flag", media=[MediaBlock(data=FLAG, description="striped flag")])
        chart = (await d.media.aput_bytes(CHART, description="sales chart for Q3")).info
        photo = (await d.media.aput_bytes(PHOTO, description="Alice at the beach")).info
        await d.media.aput_bytes(STRAY, description="a stray")
        assert (await tool(d, "doc_commit", content="The Q3 numbers", media_digests=[chart.short]))["ok"]
        fact = await tool(d, "memory_commit", triples=[{"subject": "Alice", "relation": "visited", "object": "the beach",
                                                         "sentence_text": "Alice went to the beach",
                                                         "media_digests": [photo.short]}])
        assert fact["ok"], fact
    finally:
        await d.stop()
    return {sha(FLAG): ("context", "striped flag"), sha(CHART): ("document", "sales chart for Q3"),
            sha(PHOTO): ("graph_sentence", "Alice at the beach")}


async def wait_repaired(d: Daemon) -> None:
    task = d.media_repair
    assert task is not None, "a fresh media.db next to stored files starts a repair"
    await asyncio.wait_for(asyncio.shield(task), 60)


async def check_rebuilt(d: Daemon, expected: dict[str, tuple[str, str]]) -> None:
    store = d.media
    assert store is not None
    for digest, (kind, description) in expected.items():
        info = await store.ainfo(digest)
        assert info.state == "present" and info.source == "recovered"
        assert info.description == description  # back from the marker
        # (the offline provider's reply quotes the input, marker and all: the agent event cites the flag too)
        assert {r["owner_kind"] for r in await store.arefs_of(digest)} == {kind}
    report = await gc_pass(store, d._media_owners(), 0.0)
    assert report.swept == 1  # only the stray: everything memory cites keeps its bytes
    for digest in expected:
        assert await store.aget(digest) in (FLAG, CHART, PHOTO)
    assert (await store.ainfo(sha(STRAY))).state == "evicted"


async def test_a_deleted_media_db_is_rebuilt_at_start(data_dir: Path) -> None:
    expected = await remember_three_ways(data_dir)
    media = data_dir / "memory" / "media"
    for name in ("media.db", "media.db-wal", "media.db-shm"):
        (media / name).unlink(missing_ok=True)
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        await wait_repaired(d)
        await check_rebuilt(d, expected)
        again = await run_cli(data_dir, "memory", "media", "repair", "--json")  # through the daemon's socket
        assert again.code == 0, again.err
        report = json.loads(again.out)
        assert report["adopted"] == 0 and report["references_added"] == 0 and report["owners"] >= 3
    finally:
        await d.stop()


async def test_a_corrupt_media_db_is_set_aside_and_rebuilt(data_dir: Path) -> None:
    expected = await remember_three_ways(data_dir)
    media = data_dir / "memory" / "media"
    for name in ("media.db-wal", "media.db-shm"):
        (media / name).unlink(missing_ok=True)
    (media / "media.db").write_bytes(b"SQLite format 3\x00" + b"\xde\xad" * 4000)  # a header, then garbage
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        assert list(media.glob("media.db.corrupt-*")), "the damaged file is kept aside, not deleted"
        await wait_repaired(d)
        await check_rebuilt(d, expected)
    finally:
        await d.stop()


async def test_repair_from_the_cli_without_a_daemon(data_dir: Path) -> None:
    expected = await remember_three_ways(data_dir)
    media = data_dir / "memory" / "media"
    for name in ("media.db", "media.db-wal", "media.db-shm"):
        (media / name).unlink(missing_ok=True)
    (media / "blobs" / sha(CHART)[:2] / sha(CHART)).unlink()  # these bytes are lost for good
    fixed = await run_cli(data_dir, "memory", "media", "repair")
    assert fixed.code == 0, fixed.err
    assert "files adopted:       3" in fixed.out and "references rebuilt:  3" in fixed.out  # flag ×2, photo
    assert f"markers whose bytes are gone: 1 ({sha(CHART)[:12]})" in fixed.out
    shown = await run_cli(data_dir, "memory", "media", "show", sha(PHOTO)[:12])
    assert shown.code == 0 and "Alice at the beach" in shown.out and "graph_sentence" in shown.out
    again = await run_cli(data_dir, "memory", "media", "repair")  # idempotent
    assert again.code == 0 and "references rebuilt:  0" in again.out
    assert expected
