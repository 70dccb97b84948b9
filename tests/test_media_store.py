"""The media store on real files: what a user keeps, what bad input and damage do, what GC may and may not take."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from homeagent.memory.media import (
    MediaCorrupt,
    MediaError,
    MediaGCLoop,
    MediaGone,
    MediaStore,
    MediaTooLarge,
    UnknownMedia,
    marker,
)
from homeagent.memory.media.sniff import sniff_mime

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64))
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(range(200))
SRC = str(Path(__file__).resolve().parents[1] / "src")


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def blob(n: int, seed: int) -> bytes:
    return hashlib.sha256(str(seed).encode()).digest() * (n // 32) + b"x" * (n % 32)


def files_in(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> MediaStore:
    s = MediaStore(tmp_path / "media", max_bytes=1 << 20, cap=0, min_age=3600, clock=clock)
    yield s
    s.close()


def test_put_get_dedupe_and_marker(store: MediaStore) -> None:
    first = store.put_bytes(PNG, claimed_mime="image/png", source="webui", description="a  purple\nflag")
    again = store.put_bytes(PNG)
    assert first.new and not again.new
    assert first.info.digest == hashlib.sha256(PNG).hexdigest() == again.info.digest
    assert store.get(first.info.short) == PNG
    info = store.info(first.info.digest)
    assert (info.mime, info.size, info.source, info.description) == ("image/png", len(PNG), "webui", "a purple flag")
    assert marker(info) == f"[image/png {first.info.digest[:12]}] a purple flag"
    assert store.put_bytes(PNG, description="IMG_2041.png").info.description == "a purple flag"  # fills, never replaces
    assert store.describe(first.info.short, "the flag from the parade").description == "the flag from the parade"
    assert len(files_in(store.files.blobs)) == 1
    assert not files_in(store.files.tmp)


def test_lying_mime_is_sniffed(store: MediaStore) -> None:
    assert store.put_bytes(JPEG, claimed_mime="image/png").info.mime == "image/jpeg"
    assert store.put_bytes(b"just some notes\n", claimed_mime="image/png").info.mime == "text/plain"
    assert store.put_bytes(b"# title\n", claimed_mime="text/markdown").info.mime == "text/markdown"
    assert store.put_bytes(b"\x00\x01\x02garbage", claimed_mime="image/gif").info.mime == "application/octet-stream"


@pytest.mark.parametrize(
    ("head", "mime"),
    [
        (b"GIF89a....", "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x10\x00\x00\x00WAVEfmt ", "audio/wav"),
        (b"%PDF-1.7\n", "application/pdf"),
        (b"ID3\x04\x00\x00", "audio/mpeg"),
        (b"\xff\xfb\x90\x64\x00", "audio/mpeg"),
        (b"OggS\x00\x02", "audio/ogg"),
        (b"\x00\x00\x00\x20ftypM4A \x00", "audio/mp4"),
        (b"\x00\x00\x00\x20ftypisom\x00", "video/mp4"),
        (b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>', "image/svg+xml"),
        ("中文的笔记".encode()[:-1], "text/plain"),  # a character cut at the end of the sample is still text
    ],
)
def test_sniff_table(head: bytes, mime: str) -> None:
    assert sniff_mime(head) == mime


def test_empty_input_is_refused_and_leaves_nothing(store: MediaStore, tmp_path: Path) -> None:
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(MediaError, match="empty"):
        store.put_file(empty)
    with pytest.raises(MediaError, match="empty"):
        store.put_bytes(b"")
    assert store.stats()["present"] == 0
    assert not files_in(store.files.root / "blobs") and not files_in(store.files.tmp)


def test_oversized_file_refused_before_reading(store: MediaStore, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        fh.truncate(200 * 1024 * 1024)  # a 200 MB sparse file: reading it all would show
    started = time.perf_counter()
    with pytest.raises(MediaTooLarge, match="is 209715200 bytes, larger than the limit of 1048576"):
        store.put_file(big)
    assert time.perf_counter() - started < 1.0
    assert not files_in(store.files.tmp) and store.stats()["present"] == 0


async def test_oversized_stream_stops_at_the_limit(store: MediaStore) -> None:
    pulled = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield b"\x89PNG" + bytes(256 * 1024 - 4)

    with pytest.raises(MediaTooLarge, match="larger than the limit"):
        await store.aput_stream(endless(), claimed_mime="image/png")
    assert pulled == 5  # 1 MiB limit: the fifth 256 KiB chunk crosses it, nothing after is read
    assert not files_in(store.files.tmp) and store.stats()["present"] == 0
    ok = await store.aput_stream(_chunks([PNG[:10], PNG[10:]]), claimed_mime="text/plain")
    assert ok.info.mime == "image/png" and await store.aget(ok.info.digest) == PNG


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def test_unknown_short_and_ambiguous_digests(store: MediaStore) -> None:
    digest = store.put_bytes(PNG).info.digest
    assert store.resolve(digest[:12]) == digest
    assert store.resolve("sha256:" + digest.upper()) == digest
    with pytest.raises(UnknownMedia, match="no stored media"):
        store.get("0" * 64)
    with pytest.raises(UnknownMedia, match="not a media digest"):
        store.info("a photo of my cat")
    with pytest.raises(UnknownMedia, match="too short"):
        store.info(digest[:4])
    with sqlite3.connect(store.path) as conn:  # two entries sharing a 12-hex prefix (metadata only: evicted)
        for tail in ("1", "2"):
            conn.execute(
                "INSERT INTO blobs(digest, mime, size, created, last_access, state) VALUES (?, 'image/png', 1, 0, 0, "
                "'evicted')",
                ("abcdef012345" + tail * 52,),
            )
    with pytest.raises(UnknownMedia, match="more than one"):
        store.info("abcdef012345")
    assert store.resolve("abcdef0123451") == "abcdef012345" + "1" * 52


def test_corrupt_blob_is_quarantined_and_nothing_else_breaks(store: MediaStore) -> None:
    bad = store.put_bytes(PNG, description="the damaged one").info
    good = store.put_bytes(JPEG).info
    path = store.files.path(bad.digest)
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # one flipped byte, same length
    path.write_bytes(bytes(data))
    with pytest.raises(MediaCorrupt, match=rf"media {bad.short} is damaged on disk.*the damaged one"):
        store.get(bad.digest)
    assert not path.exists()
    assert [p.name.split(".")[0] for p in files_in(store.files.quarantine_dir)] == [bad.digest]
    assert store.info(bad.digest).state == "quarantined"
    with pytest.raises(MediaGone, match="damaged on disk"):
        store.get(bad.digest)
    assert store.get(good.digest) == JPEG
    with pytest.raises(MediaGone):
        store.add_refs("document", "doc-1", [bad.digest])
    assert store.put_bytes(PNG).new and store.get(bad.digest) == PNG  # the same bytes again bring it back


def test_truncated_and_missing_blobs(store: MediaStore) -> None:
    cut = store.put_bytes(PNG).info
    gone = store.put_bytes(JPEG).info
    path = store.files.path(cut.digest)
    path.write_bytes(path.read_bytes()[:10])
    with pytest.raises(MediaCorrupt, match="holds 10 bytes"):
        store.get(cut.digest)
    store.files.path(gone.digest).unlink()
    with pytest.raises(MediaGone, match="missing from disk"):
        store.get(gone.digest)
    assert store.info(gone.digest).state == "missing"


def test_references_are_idempotent_and_all_or_nothing(store: MediaStore) -> None:
    a = store.put_bytes(PNG).info.digest
    b = store.put_bytes(JPEG).info.digest
    assert store.add_refs("document", "doc-1", [a[:12], a]) == [a]
    assert store.add_refs("document", "doc-1", [a]) == []
    with pytest.raises(UnknownMedia):
        store.add_refs("graph_sentence", "s1", [b, "f" * 64])
    assert store.refs_of(b) == []
    with pytest.raises(MediaError, match="owner kind"):
        store.add_refs("photo_album", "x", [a])
    assert store.add_refs("context", "evt-9", [a, b]) == [a, b]
    assert store.info(a).refs == 2
    assert store.remove_refs("document", "doc-1", [a]) == 1
    assert store.remove_refs("document", "doc-1", [a]) == 0
    assert store.remove_refs("context", "evt-9", [b[:12], "f" * 64]) == 1  # short digests too; unknown: nothing to do
    assert store.remove_refs("context", "evt-9") == 1
    assert store.info(a).refs == 0


def test_gc_is_two_phase_and_never_takes_a_referenced_blob(store: MediaStore, clock: Clock) -> None:
    kept = store.put_bytes(PNG, description="kept").info.digest
    late = store.put_bytes(JPEG, description="referenced after the mark").info.digest
    loose = store.put_bytes(b"loose notes", description="nobody wants me").info.digest
    store.add_refs("document", "doc-1", [kept])
    report = store.gc()
    assert (report.marked, report.swept) == (2, 0)  # late and loose are stamped, nothing is old enough yet
    store.add_refs("graph_sentence", "s-1", [late])  # a reference arriving between mark and sweep
    clock.now += 3601
    report = store.gc()
    assert report.swept == 1 and report.swept_bytes == len(b"loose notes")
    assert store.get(kept) == PNG and store.get(late) == JPEG
    info = store.info(loose)
    assert info.state == "evicted" and info.description == "nobody wants me"
    with pytest.raises(MediaGone, match=r"evicted by the media GC.*nobody wants me"):
        store.get(loose)
    assert not store.files.path(loose).exists()
    store.remove_refs("graph_sentence", "s-1")
    assert store.gc().swept == 0  # just stamped now; the sweep waits min_age again
    clock.now += 3601
    assert store.gc().swept == 1 and store.info(late).state == "evicted"
    assert store.get(kept) == PNG


def test_cap_evicts_least_recently_used_unreferenced(tmp_path: Path, clock: Clock) -> None:
    store = MediaStore(tmp_path / "m", max_bytes=1 << 20, cap=3000, clock=clock)
    try:
        digests = []
        for i in range(3):
            digests.append(store.put_bytes(blob(1000, i)).info.digest)
            clock.now += 600
        store.add_refs("document", "d", [digests[0]])  # the oldest is referenced: it must stay
        store.get(digests[1])  # used recently: the LRU victim is digests[2]... after the grace period
        clock.now += 600
        fourth = store.put_bytes(blob(1000, 3)).info.digest
        assert store.info(digests[2]).state == "evicted"
        assert {store.info(d).state for d in (digests[0], digests[1], fourth)} == {"present"}
        assert store.stats()["present_bytes"] == 3000
        clock.now += 600
        fifth = store.put_bytes(blob(1500, 4)).info.digest  # room for it: both unreferenced older ones go
        assert store.info(digests[1]).state == store.info(fourth).state == "evicted"
        assert store.get(digests[0]) == blob(1000, 0) and store.get(fifth) == blob(1500, 4)
        store.add_refs("document", "d2", [fifth])
        clock.now += 600
        store.put_bytes(blob(2000, 5))  # over the cap now, but the rest is referenced or just stored
        assert store.info(digests[0]).state == "present"
        assert store.stats()["present_bytes"] == 1000 + 1500 + 2000
    finally:
        store.close()


def test_reconcile_repairs_crash_leftovers(store: MediaStore) -> None:
    kept = store.put_bytes(PNG).info.digest
    dropped = store.put_bytes(JPEG).info.digest
    store.add_refs("document", "d", [kept])
    orphan = hashlib.sha256(b"orphan").hexdigest()  # a put killed between its rename and its commit
    (store.files.blobs / orphan[:2]).mkdir(exist_ok=True)
    store.files.path(orphan).write_bytes(b"orphan")
    liar = "ab" * 32
    (store.files.blobs / "ab").mkdir(exist_ok=True)
    store.files.path(liar).write_bytes(b"not what the name says")
    store.files.path(dropped).unlink()  # a sweep that died after removing the file
    stale = store.files.tmp / "dead.tmp"
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    report = store.gc()
    assert (report.adopted, report.quarantined, report.missing, report.temporaries_removed) == (1, 1, 1, 1)
    assert store.info(dropped).state == "evicted" and store.get(kept) == PNG
    assert store.get(orphan) == b"orphan" and store.info(orphan).source == "recovered"
    assert not store.files.path(liar).exists() and not stale.exists()
    assert any(p.name.startswith(liar) for p in files_in(store.files.quarantine_dir))


def test_a_lost_database_loses_no_bytes(tmp_path: Path) -> None:
    root = tmp_path / "media"
    store = MediaStore(root)
    digest = store.put_bytes(PNG).info.digest
    store.close()
    for name in ("media.db", "media.db-wal", "media.db-shm"):
        (root / name).unlink(missing_ok=True)  # what set_aside does to a corrupt media.db
    store = MediaStore(root)
    try:
        assert store.gc().adopted == 1
        assert store.get(digest) == PNG and store.info(digest).mime == "image/png"
    finally:
        store.close()


def test_disk_full_leaves_nothing_behind(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, resource, signal, sys
        from homeagent.memory.media import MediaError, MediaStore
        store = MediaStore(sys.argv[1], max_bytes=8 << 20)
        store.put_bytes(b"small and fine")
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))
        try:
            store.put_bytes(os.urandom(1 << 20))
        except MediaError as exc:
            print("refused:", exc)
        """
    )
    root = tmp_path / "media"
    out = subprocess.run(
        [sys.executable, "-c", script, str(root)], capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert out.returncode == 0, out.stderr
    assert "refused: could not store the media: File too large; nothing was kept" in out.stdout
    store = MediaStore(root)
    try:
        assert store.stats()["present"] == 1
        assert not files_in(store.files.tmp)
        assert [p.read_bytes() for p in files_in(store.files.blobs)] == [b"small and fine"]
    finally:
        store.close()


def test_kill_9_during_writes_leaves_no_partial_blob(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import hashlib, sys
        from homeagent.memory.media import MediaStore
        store = MediaStore(sys.argv[1], max_bytes=64 << 20, cap=0)
        i = 0
        while True:
            data = hashlib.sha256(str(i).encode()).digest() * (6 << 15)  # 6 MiB, different each time
            print(store.put_bytes(data).info.digest, flush=True)
            i += 1
        """
    )
    root = tmp_path / "media"
    acknowledged: list[str] = []
    for delay in (0.0, 0.013, 0.041):
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        assert proc.stdout is not None
        for _ in range(2):
            acknowledged.append(proc.stdout.readline().strip())
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    store = MediaStore(root)
    try:
        for path in files_in(store.files.blobs):  # whatever is under a digest's name is exactly that digest
            assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name
        present = store.entries(limit=1000, state="present")
        assert {i.digest for i in present} >= set(acknowledged)
        for info in present:
            assert len(store.get(info.digest)) == info.size
        report = store.gc(min_age=0)
        assert report.missing == 0
    finally:
        store.close()


def test_storing_again_restarts_the_gc_grace(store: MediaStore, clock: Clock) -> None:
    digest = store.put_bytes(PNG).info.digest
    assert store.gc().marked == 1
    clock.now += 3000
    store.put_bytes(PNG, description="wanted again")  # e.g. the same photo uploaded again, about to be referenced
    clock.now += 1000  # past min_age since the first mark
    assert store.gc().swept == 0 and store.get(digest) == PNG
    clock.now += 3601
    assert store.gc().swept == 1


def _bulk_store(root: Path, n: int) -> list[str]:
    """``n`` small blobs, every other one referenced, written in bulk (through ``put`` this would be n fsyncs)."""
    MediaStore(root).close()
    now = time.time() - 10
    rows, refs, referenced = [], [], []
    for i in range(n):
        data = b"blob %d" % i
        digest = hashlib.sha256(data).hexdigest()
        (root / "blobs" / digest[:2]).mkdir(exist_ok=True)
        (root / "blobs" / digest[:2] / digest).write_bytes(data)
        rows.append((digest, "text/plain", len(data), now, now))
        if i % 2 == 0:
            refs.append(("document", f"doc-{i}", digest, now))
            referenced.append(digest)
    with sqlite3.connect(root / "media.db") as conn:
        conn.executemany("INSERT INTO blobs(digest, mime, size, created, last_access) VALUES (?,?,?,?,?)", rows)
        conn.executemany("INSERT INTO refs(owner_kind, owner_id, digest, created) VALUES (?,?,?,?)", refs)
    return referenced


def test_kill_9_during_gc_loses_no_referenced_blob(tmp_path: Path) -> None:
    root = tmp_path / "media"
    referenced = _bulk_store(root, 2000)
    script = textwrap.dedent(
        """
        import sys
        from homeagent.memory.media import MediaStore
        store = MediaStore(sys.argv[1])
        print("go", flush=True)
        store.gc(min_age=0)
        print("done", flush=True)
        """
    )
    for delay in (0.01, 0.04, 0.15):  # killed earlier and later in the pass, until one pass completes
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "go"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        finished = proc.stdout.read().strip() == "done"
        proc.stdout.close()
        store = MediaStore(root)
        try:
            for digest in referenced:  # after every kill, wherever it landed
                assert store.get(digest).startswith(b"blob ")
        finally:
            store.close()
        if finished:
            break
    store = MediaStore(root)
    try:
        report = store.gc(min_age=0)  # finishes the job and repairs what a kill left
        assert report.adopted == 0 and report.quarantined == 0
        assert {p.name for p in files_in(store.files.blobs)} == set(referenced)
        assert store.stats()["present"] == 1000
        assert {i.state for i in store.entries(limit=10_000)} == {"present", "evicted"}
    finally:
        store.close()


async def test_the_daemons_gc_loop_runs_a_pass_and_stops(store: MediaStore) -> None:
    digest = store.put_bytes(PNG).info.digest
    loop = MediaGCLoop(store, lambda: 3600.0, first_delay=0.0)
    loop.start()
    try:
        for _ in range(200):
            if (await store.ainfo(digest)).marked_at is not None:
                break
            await asyncio.sleep(0.01)
        assert (await store.ainfo(digest)).marked_at is not None
    finally:
        await loop.stop()
