"""What the media store costs over writing and hashing the bytes yourself, and how long GC takes at scale.

    .venv/bin/python -m bench.bench_media [--gc-blobs 100000] [--dir /path/on/the/disk/to/measure]

Put/get rows (same run, same disk, the steps taken in turn for each sample so
disk noise hits every row alike; latency as the caller of the synchronous
method sees it, p50 / p95; MB/s from the p50):

* ``baseline: sha256 + write`` -- hash the bytes, write them to a new file (no fsync).
* ``baseline: sha256 + write + fsync`` -- the same, made durable (what any safe store must pay).
* ``baseline: + rename + dir fsync`` -- the store's write protocol by hand (temp file, fsync,
  rename, directory fsync), without metadata: ``put`` minus this is the store's own cost.
* ``put (new bytes)`` -- ``MediaStore.put_bytes`` of bytes not stored yet: temp file, hash,
  fsync, sniff, rename + directory fsync and the metadata row in one SQLite transaction.
* ``put (same bytes again)`` -- deduplicated: hashed and written to a temporary file, then dropped.
* ``baseline: read + sha256`` -- read a file and hash it.
* ``get (verified)`` -- ``MediaStore.get``: metadata lookup, read, re-hash, compare.

GC rows: a store of ``--gc-blobs`` small blobs, half referenced, set up by
writing files and rows in bulk (setting 100k blobs up through ``put`` would
only measure fsync); then one pass that marks the unreferenced half, one
that sweeps it (``min_age=0``), and one on the settled store.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from homeagent.memory.media import MediaStore
from homeagent.memory.media.blobs import fsync_dir

SIZES = (("10 KB", 10 * 1024, 200), ("1 MB", 1024 * 1024, 40), ("20 MB", 20 * 1024 * 1024, 6))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:7.0f} µs" if seconds < 1e-3 else f"{seconds * 1e3:7.2f} ms"


def payload(size: int, i: int) -> bytes:
    """Distinct bytes per ``i`` (a PNG header so sniffing has something to find)."""
    head = b"\x89PNG\r\n\x1a\n" + i.to_bytes(8, "big")
    return head + os.urandom(16) * ((size - len(head)) // 16) + b"\x00" * ((size - len(head)) % 16)


def baseline_write(folder: Path, data: bytes, i: int, *, fsync: bool) -> None:
    hashlib.sha256(data).hexdigest()
    path = folder / f"plain-{i}.bin"
    with open(path, "wb") as fh:
        fh.write(data)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())


def baseline_durable(folder: Path, data: bytes, i: int) -> None:
    """The store's write protocol by hand: temp file, fsync, rename, directory fsync (no metadata)."""
    digest = hashlib.sha256(data).hexdigest()
    tmp = folder / f"tmp-{i}"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / digest)
    fsync_dir(folder)


def baseline_read(path: Path) -> None:
    with open(path, "rb") as fh:
        hashlib.sha256(fh.read()).hexdigest()


def size_rows(store: MediaStore, folder: Path, label: str, size: int, n: int) -> list[tuple[str, str, list[float], int]]:
    datas = [payload(size, i) for i in range(n)]
    plain = folder / f"plain-{label.replace(' ', '')}"
    plain.mkdir()
    digests: list[str] = []
    steps: list[tuple[str, Callable[[int], object]]] = [
        ("baseline: sha256 + write", lambda i: baseline_write(plain, datas[i], i, fsync=False)),
        ("baseline: sha256 + write + fsync", lambda i: baseline_write(plain, datas[i], i + n, fsync=True)),
        ("baseline: + rename + dir fsync", lambda i: baseline_durable(plain, datas[i], i)),
        ("put (new bytes)", lambda i: digests.append(store.put_bytes(datas[i]).info.digest)),
        ("put (same bytes again)", lambda i: store.put_bytes(datas[i])),
        ("baseline: read + sha256", lambda i: baseline_read(plain / f"plain-{i + n}.bin")),
        ("get (verified)", lambda i: store.get(digests[i])),
    ]
    # round-robin: each step's i-th sample is taken next to the others', so disk noise hits all rows alike
    samples: dict[str, list[float]] = {name: [] for name, _ in steps}
    for i in range(n):
        for name, step in steps:
            t0 = time.perf_counter()
            step(i)
            samples[name].append(time.perf_counter() - t0)
    return [(name, label, samples[name], size) for name, _ in steps]


def put_get_rows(folder: Path) -> list[tuple[str, str, list[float], int]]:
    store = MediaStore(folder / "store", max_bytes=64 << 20, cap=0)
    for i in range(256):  # a store in use has all its fan-out folders; creating one costs another fsync
        (store.files.blobs / f"{i:02x}").mkdir(exist_ok=True)
    try:
        return [row for label, size, n in SIZES for row in size_rows(store, folder, label, size, n)]
    finally:
        store.close()


def build_gc_store(root: Path, n: int) -> float:
    """``n`` tiny blobs (files + rows written in bulk), every other one referenced; returns the setup time."""
    t0 = time.perf_counter()
    store = MediaStore(root, cap=0)
    store.close()
    now = time.time()
    blobs, refs = [], []
    for i in range(n):
        data = b"blob %d " % i + b"x" * 64
        digest = hashlib.sha256(data).hexdigest()
        folder = root / "blobs" / digest[:2]
        folder.mkdir(exist_ok=True)
        (folder / digest).write_bytes(data)
        blobs.append((digest, "text/plain", len(data), now, now))
        if i % 2 == 0:
            refs.append(("document", f"doc-{i}", digest, now))
    with sqlite3.connect(root / "media.db") as conn:
        conn.executemany("INSERT INTO blobs(digest, mime, size, created, last_access) VALUES (?,?,?,?,?)", blobs)
        conn.executemany("INSERT INTO refs(owner_kind, owner_id, digest, created) VALUES (?,?,?,?)", refs)
    return time.perf_counter() - t0


def gc_rows(folder: Path, n: int) -> list[tuple[str, float, str]]:
    root = folder / "gc"
    setup = build_gc_store(root, n)
    out = [(f"setup: {n} blobs, 50% referenced (bulk)", setup, "")]
    store = MediaStore(root, cap=0, min_age=3600)
    try:
        for label, min_age in (("gc pass 1: marks the unreferenced half", None),
                               ("gc pass 2: sweeps them (min_age=0)", 0.0),
                               ("gc pass 3: settled store", None)):
            t0 = time.perf_counter()
            report = store.gc(min_age)
            took = time.perf_counter() - t0
            out.append((label, took, f"marked {report.marked}, swept {report.swept}, left {report.present}"))
    finally:
        store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gc-blobs", type=int, default=100_000)
    parser.add_argument("--dir", help="folder on the disk to measure (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        rows = put_get_rows(folder)
        print(f"{'operation':<34} {'size':>6} {'n':>4} {'p50':>10} {'p95':>10} {'MB/s (p50)':>11}")
        for name, label, values, size in rows:
            p50 = statistics.median(values)
            print(f"{name:<34} {label:>6} {len(values):>4} {fmt(p50):>10} {fmt(pct(values, 0.95)):>10} "
                  f"{size / p50 / 1e6:>11.0f}")
        print()
        print(f"{'GC step':<44} {'time':>10}  result")
        for name, took, note in gc_rows(folder, args.gc_blobs):
            print(f"{name:<44} {took:>9.2f}s  {note}")


if __name__ == "__main__":
    main()
