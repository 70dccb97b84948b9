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

Turn rows (``--turns N``, 0 to skip): the added latency of one 1 MB image in a turn. A real
``TurnRunner`` with the media turn path and a real store, the OpenAI adapter and the scripted
fake OpenAI server in a child process (bench/fake_llm_proc.py), a one-word reply; the same
turn with and without the image, alternated. ``by digest`` is how web uploads and ``ask
--image`` arrive (stored before the turn: the turn reads and re-checks it), ``as bytes`` how a
plugin's ``inject_input_media`` does (the turn stores it). Beside them, in the same run: ``read +
sha256`` of the same bytes (the floor any verified read pays) and ``prepare`` alone (store
read/put, base64, the content parts), and each adapter's ``build_request`` with and without
the image (what Lua adds to reshape a 1.4 MB data URL).

GC rows: a store of ``--gc-blobs`` small blobs, half referenced, set up by
writing files and rows in bulk (setting 100k blobs up through ``put`` would
only measure fsync); then one pass that marks the unreferenced half, one
that sweeps it (``min_age=0``), and one on the settled store.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from homeagent.agent.media_input import MediaTurnPath
from homeagent.agent.memory_port import RecentTurns
from homeagent.agent.process import TurnRunner
from homeagent.agent.prompt import PromptBuilder
from homeagent.agent.stages import StageHost
from homeagent.agent.tools import ToolRegistry
from homeagent.events import EventBus
from homeagent.io.manager import InputMessage
from homeagent.memory.media import MediaStore
from homeagent.memory.media.blobs import fsync_dir
from homeagent.memory.media.repair import Marked, repair
from homeagent.providers.adapter import RequestContext, request_parts
from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.lua_provider import LuaAdaptedProvider
from homeagent.providers.manager import ProviderManager
from homeagent.sdk.types import MediaBlock

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
    return out + repair_rows(root, n)


class _Listed:
    """A marker source over a ready list (the bench measures the store's side, not the memory scans)."""

    def __init__(self, marked: list[Marked]) -> None:
        self.items = marked

    async def marked(self) -> list[Marked]:
        return self.items


def repair_rows(root: Path, n: int) -> list[tuple[str, float, str]]:
    """media.db lost next to the referenced half: adopt the files again (baseline: a GC pass's reconcile on a
    fresh db, which adopts them too) and rebuild the references from one marker per document."""
    marked = []
    for i in range(0, n, 2):
        digest = hashlib.sha256(b"blob %d " % i + b"x" * 64).hexdigest()
        marked.append(Marked("document", f"doc-{i}", f"note {i}\n[text/plain {digest[:12]}] blob {i}"))
    out = []
    for label, sources in (("media.db lost: reconcile only (baseline)", []), ("media.db lost: repair", [_Listed(marked)])):
        for name in ("media.db", "media.db-wal", "media.db-shm"):
            (root / name).unlink(missing_ok=True)
        store = MediaStore(root, cap=0)
        try:
            t0 = time.perf_counter()
            report = asyncio.run(repair(store, sources))
            took = time.perf_counter() - t0
        finally:
            store.close()
        out.append((label, took, f"adopted {report.adopted}, references {report.references_added}, "
                                 f"descriptions {report.described}"))
    return out


async def turn_rows(folder: Path, n: int) -> list[tuple[str, list[float]]]:
    from bench.fake_llm_proc import RemoteFake
    from tests.fakes.llm_openai import Turn

    store = MediaStore(folder / "turns", cap=0, min_age=3600)
    images = [payload(1024 * 1024, 10_000 + i) for i in range(2 * n + 2)]
    stored = [store.put_bytes(images[i], source="bench").info.digest for i in range(n + 1)]
    loader = AdapterLoader()
    rows: dict[str, list[float]] = {k: [] for k in (
        "turn, text only", "turn + 1 MB image by digest", "turn + 1 MB image as bytes",
        "baseline: read + sha256 (1 MB)", "prepare: image by digest", "prepare: image as bytes")}
    try:
        async with RemoteFake() as fake:
            provider = LuaAdaptedProvider("bench", fake.base_url, "sk-bench", "gpt-bench", lambda: loader.get("openai"),
                                          adapter_name="openai", vision=True)
            manager = ProviderManager([provider])
            path = MediaTurnPath(store, manager.sees_images)
            runner = TurnRunner(stages=StageHost(), tools=ToolRegistry(), run_llm=manager.run,
                                prompt=PromptBuilder(identity=lambda: "You are a bench."), memory=RecentTurns(),
                                events=EventBus(), media=path)

            async def turn(media: list[MediaBlock]) -> float:
                await fake.script(Turn.text("ok"))
                t0 = time.perf_counter()
                result = await runner.run(InputMessage("what is in this picture?", "bench", "bench", media=media))
                took = time.perf_counter() - t0
                assert result.ok, result.error
                return took

            await turn([])  # warm: connection, adapter, caches
            await turn([MediaBlock(digest=stored[-1])])
            for i in range(n):
                rows["turn, text only"].append(await turn([]))
                rows["turn + 1 MB image by digest"].append(await turn([MediaBlock(digest=stored[i])]))
                rows["turn + 1 MB image as bytes"].append(await turn([MediaBlock(mime="image/png",
                                                                                data=images[n + 1 + i])]))
                files_path = store.files.blobs / stored[i][:2] / stored[i]
                t0 = time.perf_counter()
                hashlib.sha256(files_path.read_bytes()).hexdigest()
                rows["baseline: read + sha256 (1 MB)"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await path.prepare("x", [MediaBlock(digest=stored[i])])
                rows["prepare: image by digest"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await path.prepare("x", [MediaBlock(data=images[i] + b"p")])
                rows["prepare: image as bytes"].append(time.perf_counter() - t0)
            await manager.aclose()
        url = "data:image/png;base64," + base64.b64encode(images[0]).decode()
        for name in ("openai", "anthropic", "gemini", "ollama"):
            adapter = loader.get(name)
            ctx = await adapter.context(RequestContext(model="m", stream=True, thinking=False))
            for label, content in (("text only", "what is in this picture?"),
                                   ("+ 1 MB image", [{"type": "text", "text": "what is in this picture?"},
                                                     {"type": "image_url", "image_url": {"url": url}}])):
                times = []
                for i in range(n):
                    req = {"model": "m", "stream": True, "thinking": False, "messages": [
                        {"role": "system", "content": "You are a bench."},
                        {"role": "user", "content": content if isinstance(content, str) else
                         [{**content[0], "text": f"{i} what is in this picture?"}, content[1]]}]}
                    t0 = time.perf_counter()
                    await adapter.build_request(request_parts(req), ctx)
                    times.append(time.perf_counter() - t0)
                rows[f"build_request {name}, {label}"] = times
    finally:
        store.close()
    return list(rows.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gc-blobs", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=20, help="samples of the turn rows (0: skip them)")
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
        if args.turns:
            print()
            print(f"{'turn (one 1 MB image)':<44} {'n':>4} {'p50':>10} {'p95':>10}")
            for name, values in asyncio.run(turn_rows(folder, args.turns)):
                print(f"{name:<44} {len(values):>4} {fmt(statistics.median(values)):>10} {fmt(pct(values, 0.95)):>10}")
        print()
        print(f"{'GC step':<44} {'time':>10}  result")
        for name, took, note in gc_rows(folder, args.gc_blobs):
            print(f"{name:<44} {took:>9.2f}s  {note}")


if __name__ == "__main__":
    main()
