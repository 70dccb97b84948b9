"""The append-only journal that makes every change to the L1 window durable at once.

``context.json`` is a snapshot: rewriting the whole window for every turn costs
two fsyncs and a rename per change, so it is written only now and then. Every
change in between (an appended event, ids pruned away) is one JSON line in
``context.journal`` next to it, numbered with a sequence number ``s``::

    {"s": 41, "op": "add", "event": {...}}
    {"s": 42, "op": "del", "ids": ["...", "..."]}

Loading is snapshot + replay of the lines whose ``s`` is above the snapshot's
``journal_seq``. A line cut short by a kill -9 in the middle of a write is the
last line and has no newline: it is ignored (and cut off, so the next append
starts on a clean line) with a log line; its change was never acknowledged.

Writers never block the event loop: ``add``/``remove`` only queue a record
(called under the context's lock, so the file order is the order of the
changes), and ``sync`` (in a worker thread) writes everything queued with one
``write`` and one ``fdatasync`` -- concurrent waiters share that one fsync
(group commit). ``wait`` is the coroutine a caller awaits before it tells
anybody the change is done.

Compaction (``RelevanceContext.save_sync``) writes the snapshot atomically
and then ``drop_through(seq)`` removes the lines the snapshot covers; a crash
between the two leaves lines that the snapshot's ``journal_seq`` skips.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from homeagent.text import scrub_text

#: compact when the journal holds this many records or bytes (the snapshot is rewritten and the journal emptied)
MAX_RECORDS = 1000
MAX_BYTES = 4 * 1024 * 1024


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON; a lone surrogate anywhere (a broken decoder upstream) becomes U+FFFD instead of failing.

    With ``ensure_ascii=False`` a surrogate in any string (key or value) stays a raw
    character in the output, so scrubbing the serialised text is the same as
    scrubbing every string first, without walking the value.
    """
    return scrub_text(json.dumps(value, ensure_ascii=False, separators=(",", ":"))).encode("utf-8")


def journal_path(snapshot: Path) -> Path:
    """``context.json`` -> ``context.journal`` (same folder, same stem)."""
    return snapshot.with_suffix(".journal")


@dataclass
class JournalRead:
    """What ``read_journal`` found: the usable records, where the good bytes end, and what was wrong."""

    records: list[dict[str, Any]] = field(default_factory=list)
    good_bytes: int = 0
    torn_bytes: int = 0  # an unterminated last line (a write cut short)
    bad_lines: list[int] = field(default_factory=list)  # line numbers of complete lines that did not parse


def read_journal(data: bytes) -> JournalRead:
    """Parse journal bytes; never raises (a torn last line and broken lines are reported, not fatal)."""
    out = JournalRead()
    pos = 0
    lineno = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            out.torn_bytes = len(data) - pos
            break
        lineno += 1
        line = data[pos:end]
        pos = end + 1
        if not line.strip():
            out.good_bytes = pos
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
            if not isinstance(rec, dict) or not isinstance(rec.get("s"), int) or rec.get("op") not in ("add", "del"):
                raise ValueError("not a journal record")
        except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            out.bad_lines.append(lineno)
        else:
            out.records.append(rec)
        out.good_bytes = pos
    return out


class _Event(Protocol):
    id: str
    ts: float


E = TypeVar("E", bound=_Event)


def replay(
    events: list[E], records: Iterable[dict[str, Any]], after: int, make: Callable[[dict[str, Any]], E]
) -> tuple[list[E], int, int]:
    """Apply the records with ``s > after`` to ``events``; returns (events by time, records applied, unusable records).

    Replaying is idempotent: an ``add`` of an id already present and a ``del``
    of an id not present change nothing, so a record that both the snapshot
    and the journal hold is harmless.
    """
    by_id: dict[str, E] = {e.id: e for e in events}
    applied = unusable = 0
    for rec in records:
        if rec["s"] <= after:
            continue
        try:
            if rec["op"] == "add":
                event = make(rec["event"])
                by_id.setdefault(event.id, event)
            else:
                for event_id in rec["ids"]:
                    by_id.pop(str(event_id), None)
        except (KeyError, TypeError, ValueError):
            unusable += 1
            continue
        applied += 1
    ordered = sorted(by_id.values(), key=lambda e: e.ts)
    return ordered, applied, unusable


class ContextJournal:
    """The journal file of one context window; ``add``/``remove`` queue, ``sync``/``wait`` make durable."""

    def __init__(
        self,
        path: Path,
        *,
        log: logging.Logger | None = None,
        read_only: bool = False,
        max_records: int = MAX_RECORDS,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.path = path
        self.log = log or logging.getLogger(__name__)
        self.read_only = read_only
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.seq = 0  # the last number handed out
        self.durable_seq = 0  # every record up to this one is on disk
        self.records = 0  # records in the file (for the compaction threshold)
        self.size = 0  # bytes in the file
        self.syncs = 0
        self._buf_lock = threading.Lock()  # the queue and seq
        self._write_lock = threading.Lock()  # the file
        self._queue: list[tuple[int, dict[str, Any]]] = []
        self._offsets: list[tuple[int, int]] = []  # (seq, start offset) of lines written by this process
        self._fd: int | None = None
        self._closed = False

    # -- loading ---------------------------------------------------------------------
    def load(self) -> JournalRead:
        """Read the journal at start; cut off a torn last line (unless read-only) and log what was skipped."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return JournalRead()
        except OSError as exc:
            self.log.error("context: journal %s unreadable (%s); changes since the last snapshot are lost", self.path, exc)
            return JournalRead()
        found = read_journal(data)
        if found.torn_bytes:
            # read-only readers (the CLI) may just see the daemon in the middle of a write
            self.log.log(
                logging.DEBUG if self.read_only else logging.WARNING,
                "context: ignored a torn last line of %s (%d bytes, a write cut short by a crash; never acknowledged)",
                self.path.name,
                found.torn_bytes,
            )
            if not self.read_only:
                with open(self.path, "r+b") as fh:
                    fh.truncate(found.good_bytes)
                    fh.flush()
                    os.fsync(fh.fileno())
        if found.bad_lines:
            self.log.error(
                "context: skipped %d unreadable lines of %s (line %s%s)",
                len(found.bad_lines),
                self.path.name,
                ", ".join(map(str, found.bad_lines[:5])),
                ", …" if len(found.bad_lines) > 5 else "",
            )
        top = max((r["s"] for r in found.records), default=0)
        self.seq = self.durable_seq = max(self.seq, top)
        self.records = len(found.records)
        self.size = found.good_bytes
        return found

    def load_onto(self, events: list[E], snap_seq: int, make: Callable[[dict[str, Any]], E]) -> tuple[list[E], int]:
        """Snapshot ``events`` (holding records up to ``snap_seq``) + this journal; returns (events by time, replayed)."""
        found = self.load()
        self.resume_after(snap_seq)
        newer = [r for r in found.records if r["s"] > snap_seq]
        if newer and min(r["s"] for r in newer) > snap_seq + 1:
            self.log.error(
                "context: the journal starts at change %d but the snapshot holds only up to %d "
                "(it was restored from a backup); the changes in between are lost",
                min(r["s"] for r in newer),
                snap_seq,
            )
        ordered, applied, unusable = replay(events, newer, snap_seq, make)
        if unusable:
            self.log.error("context: %d journal records of %s were malformed and skipped", unusable, self.path.name)
        if applied:
            self.log.info(
                "context: replayed %d journal records onto %d snapshot events (%d events now)",
                applied,
                len(events),
                len(ordered),
            )
        return ordered, applied

    def resume_after(self, seq: int) -> None:
        """Number new records after ``seq`` too (the snapshot's ``journal_seq``)."""
        with self._buf_lock:
            self.seq = max(self.seq, seq)
            self.durable_seq = max(self.durable_seq, seq)

    # -- queueing (cheap, no I/O; the caller holds the context lock) -------------------
    def _put(self, record: dict[str, Any]) -> int:
        with self._buf_lock:
            if self.read_only:
                return self.seq
            if self._closed:  # the window was snapshotted at close; a late change is not journaled
                self.log.warning("context: change after close not journaled (%s)", record.get("op"))
                return self.seq
            self.seq += 1
            record["s"] = self.seq
            self._queue.append((self.seq, record))
            return self.seq

    def add(self, event: dict[str, Any]) -> int:
        """Queue an appended event (its ``to_dict()``); returns its sequence number."""
        return self._put({"op": "add", "event": event})

    def remove(self, ids: Sequence[str]) -> int:
        """Queue the removal of events (pruned into L2); returns its sequence number."""
        return self._put({"op": "del", "ids": list(ids)})

    def pending(self) -> bool:
        return self.durable_seq < self.seq

    def needs_compaction(self) -> bool:
        return self.records >= self.max_records or self.size >= self.max_bytes

    # -- writing (worker threads) --------------------------------------------------------
    def _open(self) -> int:
        if self._fd is None:
            created = not self.path.exists()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            self.size = os.fstat(self._fd).st_size
            if created:
                _fsync_dir(self.path.parent)
        return self._fd

    def _write_queued(self) -> int:
        """Write (not fsync) everything queued; returns the highest seq written. Caller holds the write lock."""
        with self._buf_lock:
            if not self._queue:
                return self.seq
        fd = self._open()  # before taking the batch: a failure here leaves the queue as it was
        with self._buf_lock:
            batch, self._queue = self._queue, []
            top = self.seq
        try:
            lines = [json_line(rec) for _, rec in batch]
        except BaseException:
            with self._buf_lock:
                self._queue[:0] = batch
            raise
        start = self.size
        offsets: list[tuple[int, int]] = []
        pos = start
        for (seq, _), line in zip(batch, lines, strict=True):
            offsets.append((seq, pos))
            pos += len(line)
        data = memoryview(b"".join(lines))
        try:
            while data:
                n = os.write(fd, data)
                data = data[n:]
        except BaseException:
            # leave no half line behind and keep the records for the next attempt
            try:
                os.ftruncate(fd, start)
            except OSError as exc:
                self.log.error("context: could not cut back %s after a failed write (%s)", self.path, exc)
            with self._buf_lock:
                self._queue[:0] = batch
            raise
        self.size = pos
        self.records += len(batch)
        self._offsets.extend(offsets)
        return top

    def sync(self) -> int:
        """Write and fdatasync everything queued so far (blocking: call from a worker thread); returns the durable seq."""
        with self._write_lock:
            if not self.pending():
                return self.durable_seq
            top = self._write_queued()
            if self._fd is not None:
                os.fdatasync(self._fd)
                self.syncs += 1
            with self._buf_lock:
                self.durable_seq = max(self.durable_seq, top)
            return self.durable_seq

    async def wait(self, seq: int | None = None) -> None:
        """Return once the record ``seq`` (default: everything queued so far) is on disk; fsync runs in a thread."""
        target = self.seq if seq is None else seq
        while self.durable_seq < target:
            await asyncio.to_thread(self.sync)

    def drop_through(self, seq: int) -> None:
        """Remove the lines up to ``seq`` (a snapshot now holds them); later lines are kept, durably.

        Lines from before this process started are always covered: the first
        snapshot of a run holds everything that was replayed at load.
        """
        if self.read_only:
            return
        with self._write_lock:
            top = self._write_queued()
            keep_from = next((off for s, off in self._offsets if s > seq), None)
            if keep_from is None:
                if self._fd is None and not self.path.exists():
                    return
                fd = self._open()
                os.ftruncate(fd, 0)
                os.fdatasync(fd)
                self.size = self.records = 0
                self._offsets = []
            else:
                fd = self._open()
                tail = os.pread(fd, self.size - keep_from, keep_from)
                tmp = self.path.with_name(self.path.name + ".tmp")
                tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    view = memoryview(tail)
                    while view:
                        view = view[os.write(tfd, view) :]
                    os.fsync(tfd)
                finally:
                    os.close(tfd)
                os.replace(tmp, self.path)
                _fsync_dir(self.path.parent)
                os.close(fd)
                self._fd = None
                kept = [(s, off - keep_from) for s, off in self._offsets if s > seq]
                self._offsets = kept
                self.records = len(kept)
                self._open()
            with self._buf_lock:  # the snapshot holds everything up to seq, the file everything else written
                self.durable_seq = max(self.durable_seq, seq, top)

    def close(self) -> None:
        """Write what is queued, fsync, close the file; later ``add``/``remove`` are logged and dropped."""
        with self._write_lock:
            if self.pending() and not self.read_only:
                top = self._write_queued()
                if self._fd is not None:
                    os.fdatasync(self._fd)
                with self._buf_lock:
                    self.durable_seq = max(self.durable_seq, top)
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            with self._buf_lock:
                self._closed = True


def json_line(record: dict[str, Any]) -> bytes:
    """One journal line: JSON (no raw newlines inside: json escapes them) + ``\\n``."""
    return encode_json(record) + b"\n"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
