"""The media store: bytes kept by their sha256, metadata and references in SQLite, two-phase GC, a size cap.

What it promises, and how:

- **Same bytes, one copy.** A blob's name is its digest; putting bytes that
  are stored already only touches their metadata.
- **No half blob, ever.** Bytes reach their name by fsync + rename (see
  ``blobs.py``), and that rename happens inside the SQLite write transaction
  that records them, so a GC pass (which takes the same write lock, in this
  process or in the CLI's) never sees a file without its row or removes a
  file a put is reviving.
- **No silent rot.** Every read re-hashes the bytes; a mismatch is an error
  naming the digest, the file moves to ``quarantine/`` and the entry is
  marked so; nothing else is affected.
- **A referenced blob is never deleted.** References are ``(owner_kind,
  owner_id, digest)`` rows (owner kinds ``context``, ``document``,
  ``graph_sentence``), added and removed idempotently. GC is two-phase: a
  mark pass stamps blobs that nothing references, a sweep evicts those whose
  stamp is older than ``min_age`` and checks, in the same transaction that
  evicts them, that they still have no reference; adding a reference clears
  the stamp, and so does storing the same bytes again (a fresh use
  restarts the grace). The size cap evicts unreferenced blobs, least recently used
  first, and leaves alone one used in the last :data:`CAP_GRACE` seconds
  (the caller that just stored it is about to reference it).
- **The description outlives the bytes.** Eviction removes the file and
  keeps the row (state ``evicted``), so a marker in a document or a graph
  sentence still resolves to its type and description, and ``show`` says
  what happened. Storing the same bytes again brings the entry back.

Every method here blocks (SQLite, file I/O, hashing); the event loop uses
the ``a*`` wrappers, which run them in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import AsyncIterable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from homeagent.memory.media.blobs import CHUNK, BlobDir, BlobWriter
from homeagent.memory.media.errors import MediaCorrupt, MediaError, MediaGone, MediaTooLarge, UnknownMedia
from homeagent.memory.media.sniff import sniff_mime
from homeagent.msg import Msg
from homeagent.sqlite_tx import immediate

__all__ = [
    "CAP_GRACE",
    "DEFAULT_CAP",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MIN_AGE",
    "OWNER_KINDS",
    "GCReport",
    "MediaInfo",
    "MediaStore",
    "PutResult",
]

log = logging.getLogger("homeagent.memory.media")

OWNER_KINDS = ("context", "document", "graph_sentence")
DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_CAP = 1024 * 1024 * 1024
DEFAULT_MIN_AGE = 24 * 3600.0
CAP_GRACE = 300.0
"""Seconds after its last use during which the size cap does not evict an unreferenced blob."""
TOUCH_EVERY = 60.0
"""A read records its time at most this often per blob (a write transaction per read would be waste)."""
STALE_TMP = 3600.0
"""A temporary file this old belongs to a write that died; GC removes it."""
SWEEP_BATCH = 500
MIN_PREFIX = 8

_HEX = re.compile(r"[0-9a-f]+")

SCHEMA = """
CREATE TABLE IF NOT EXISTS blobs (
    digest      TEXT PRIMARY KEY,
    mime        TEXT NOT NULL,
    size        INTEGER NOT NULL,
    created     REAL NOT NULL,
    last_access REAL NOT NULL,
    source      TEXT NOT NULL DEFAULT '',
    description TEXT NOT NULL DEFAULT '',
    state       TEXT NOT NULL DEFAULT 'present',
    state_at    REAL,
    marked_at   REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS blobs_lru ON blobs(state, last_access);
CREATE INDEX IF NOT EXISTS blobs_created ON blobs(created);
CREATE INDEX IF NOT EXISTS blobs_marked ON blobs(marked_at) WHERE marked_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS refs (
    owner_kind TEXT NOT NULL,
    owner_id   TEXT NOT NULL,
    digest     TEXT NOT NULL,
    created    REAL NOT NULL,
    PRIMARY KEY (owner_kind, owner_id, digest)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_digest ON refs(digest);
CREATE TABLE IF NOT EXISTS totals (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    present_bytes INTEGER NOT NULL,
    present_count INTEGER NOT NULL
);
INSERT OR IGNORE INTO totals VALUES (1, 0, 0);
CREATE TRIGGER IF NOT EXISTS blobs_ins AFTER INSERT ON blobs WHEN new.state = 'present' BEGIN
    UPDATE totals SET present_bytes = present_bytes + new.size, present_count = present_count + 1;
END;
CREATE TRIGGER IF NOT EXISTS blobs_upd AFTER UPDATE OF state, size ON blobs BEGIN
    UPDATE totals SET
        present_bytes = present_bytes - (CASE WHEN old.state = 'present' THEN old.size ELSE 0 END)
                                      + (CASE WHEN new.state = 'present' THEN new.size ELSE 0 END),
        present_count = present_count - (old.state = 'present') + (new.state = 'present');
END;
CREATE TRIGGER IF NOT EXISTS blobs_del AFTER DELETE ON blobs WHEN old.state = 'present' BEGIN
    UPDATE totals SET present_bytes = present_bytes - old.size, present_count = present_count - 1;
END;
"""

_COLUMNS = "digest, mime, size, created, last_access, source, description, state, state_at, marked_at"
_WITH_REFS = f"{_COLUMNS}, (SELECT count(*) FROM refs r WHERE r.digest = blobs.digest)"

Limit = int | Callable[[], int]
Age = float | Callable[[], float]


@dataclass(frozen=True)
class MediaInfo:
    """One entry's metadata; ``state`` is ``present``, ``evicted``, ``quarantined`` or ``missing``."""

    digest: str
    mime: str
    size: int
    created: float
    last_access: float
    source: str = ""
    description: str = ""
    state: str = "present"
    state_at: float | None = None
    marked_at: float | None = None
    refs: int = 0

    @property
    def short(self) -> str:
        return self.digest[:12]

    @property
    def present(self) -> bool:
        return self.state == "present"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["short"] = self.short
        return out


@dataclass(frozen=True)
class PutResult:
    info: MediaInfo
    new: bool
    """False when the same bytes were stored already (only their metadata was touched)."""


@dataclass
class GCReport:
    refs_dropped: int = 0
    marked: int = 0
    unmarked: int = 0
    swept: int = 0
    swept_bytes: int = 0
    cap_evicted: int = 0
    cap_evicted_bytes: int = 0
    adopted: int = 0
    quarantined: int = 0
    missing: int = 0
    temporaries_removed: int = 0
    present: int = 0
    present_bytes: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _call(value: Any) -> Any:
    return value() if callable(value) else value


class MediaStore:
    """Content-addressed media under one folder: ``media.db`` plus ``blobs/``, ``tmp/``, ``quarantine/``."""

    def __init__(
        self,
        root: Path | str,
        *,
        max_bytes: Limit = DEFAULT_MAX_BYTES,
        cap: Limit = DEFAULT_CAP,
        min_age: Age = DEFAULT_MIN_AGE,
        clock: Callable[[], float] = time.time,
        busy_timeout_ms: int = 5000,
    ) -> None:
        self.root = Path(root)
        self.files = BlobDir(self.root)
        self.path = self.root / "media.db"
        self._max_bytes = max_bytes
        self._cap = cap
        self._min_age = min_age
        self._clock = clock
        self._lock = threading.RLock()
        self._closed = False
        self._conn = sqlite3.connect(
            self.path, timeout=busy_timeout_ms / 1000, check_same_thread=False, isolation_level=None
        )
        try:
            self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(SCHEMA)
        except BaseException:
            self._conn.close()
            raise

    # -- settings --------------------------------------------------------------------
    @property
    def max_bytes(self) -> int:
        return int(_call(self._max_bytes))

    @property
    def cap(self) -> int:
        return int(_call(self._cap))

    @property
    def min_age(self) -> float:
        return float(_call(self._min_age))

    # -- plumbing --------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(sqlite3.Error):
                    self._conn.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """The store's write lock: this process's threads and other processes (BEGIN IMMEDIATE) wait for it."""
        with self._lock:
            if self._closed:
                raise MediaError("the media store is closed")
            with immediate(self._conn) as conn:
                yield conn

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            if self._closed:
                raise MediaError("the media store is closed")
            return self._conn.execute(sql, params).fetchall()

    @staticmethod
    def _info(row: Sequence[Any]) -> MediaInfo:
        return MediaInfo(*row)

    # -- addressing ------------------------------------------------------------------
    def resolve(self, ref: str) -> str:
        """The full digest for a full or short (at least 8 hex) one, ``sha256:`` optional.

        Unknown, ambiguous or malformed → :class:`UnknownMedia` saying which.
        """
        text = str(ref).strip().lower().removeprefix("sha256:")
        if not text or not _HEX.fullmatch(text) or len(text) > 64:
            raise UnknownMedia(Msg("{ref!r} is not a media digest (hex sha256, at least {min} characters)", ref=ref,
                                   min=MIN_PREFIX))
        if len(text) < MIN_PREFIX:
            raise UnknownMedia(Msg("digest {ref!r} is too short: give at least {min} hex characters", ref=ref, min=MIN_PREFIX))
        if len(text) == 64:
            rows = self._read("SELECT digest FROM blobs WHERE digest = ?", (text,))
        else:
            upper = text[:-1] + chr(ord(text[-1]) + 1)
            rows = self._read("SELECT digest FROM blobs WHERE digest >= ? AND digest < ? LIMIT 2", (text, upper))
        if not rows:
            raise UnknownMedia(Msg("no stored media has the digest {digest}", digest=text))
        if len(rows) > 1:
            raise UnknownMedia(Msg("digest {digest} matches more than one media item; give more of it", digest=text))
        return str(rows[0][0])

    def info(self, ref: str) -> MediaInfo:
        digest = self.resolve(ref)
        rows = self._read(f"SELECT {_WITH_REFS} FROM blobs WHERE digest = ?", (digest,))
        if not rows:
            raise UnknownMedia(Msg("no stored media has the digest {digest}", digest=digest))
        return self._info(rows[0])

    def infos(self, refs: Sequence[str]) -> list[MediaInfo]:
        """Metadata for each digest in order (duplicates once); the first unknown one raises."""
        out: dict[str, MediaInfo] = {}
        for ref in refs:
            info = self.info(ref)
            out.setdefault(info.digest, info)
        return list(out.values())

    # -- writes ----------------------------------------------------------------------
    def begin(self) -> BlobWriter:
        """A temporary blob to write chunks into; hand it to :meth:`commit` (or ``abort`` it)."""
        return self.files.writer(self.max_bytes)

    def commit(self, writer: BlobWriter, *, claimed_mime: str = "", source: str = "", description: str = "") -> PutResult:
        """Finish ``writer`` and record it: sniff the type, place the bytes, upsert the row, keep to the cap."""
        digest = writer.finish()
        mime = sniff_mime(writer.head, claimed_mime)
        if claimed_mime and mime != claimed_mime.split(";", 1)[0].strip().lower():
            log.info("media %s: claimed type %s, content is %s", digest[:12], claimed_mime, mime)
        description = " ".join(description.split())
        now = self._clock()
        try:
            with self._tx() as conn:
                row = conn.execute("SELECT state FROM blobs WHERE digest = ?", (digest,)).fetchone()
                new = not (row and row[0] == "present" and self.files.path(digest).is_file())
                if new:
                    self.files.place(writer, digest)
                else:
                    writer.abort()
                conn.execute(
                    "INSERT INTO blobs(digest, mime, size, created, last_access, source, description, state) "
                    "VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, 'present') ON CONFLICT(digest) DO UPDATE SET "
                    "state = 'present', state_at = NULL, mime = ?2, size = ?3, last_access = ?4, "
                    "source = CASE WHEN blobs.source = '' THEN ?5 ELSE blobs.source END, "
                    "description = CASE WHEN blobs.description = '' THEN ?6 ELSE blobs.description END, "
                    "marked_at = NULL",
                    (digest, mime, writer.size, now, source, description),
                )
        except BaseException:
            writer.abort()
            raise
        self.enforce_cap(protect=(digest,))
        return PutResult(self.info(digest), new)

    def put_bytes(self, data: bytes, *, claimed_mime: str = "", source: str = "", description: str = "") -> PutResult:
        if not data:
            raise MediaError("the media is empty (0 bytes); nothing was stored")
        if len(data) > self.max_bytes:
            raise MediaTooLarge(
                f"media of {len(data)} bytes is larger than the limit of {self.max_bytes} (core.memory.media.max_bytes)"
            )
        digest = hashlib.sha256(data).hexdigest()
        touched = self._touch_if_present(digest, description)
        if touched is not None:
            return PutResult(touched, False)
        writer = self.files.writer(self.max_bytes, digest=digest)
        try:
            writer.write(data)
        except BaseException:
            writer.abort()
            raise
        return self.commit(writer, claimed_mime=claimed_mime, source=source, description=description)

    def _touch_if_present(self, digest: str, description: str) -> MediaInfo | None:
        """Bytes stored already (row and file): record the use (and a first description) without writing them."""
        rows = self._read("SELECT state FROM blobs WHERE digest = ?", (digest,))
        if not rows or rows[0][0] != "present" or not self.files.path(digest).is_file():
            return None
        description = " ".join(description.split())
        with self._tx() as conn:
            cur = conn.execute(
                "UPDATE blobs SET last_access = ?, marked_at = NULL, "
                "description = CASE WHEN description = '' THEN ? ELSE description END "
                "WHERE digest = ? AND state = 'present'",
                (self._clock(), description, digest),
            )
        return self.info(digest) if cur.rowcount == 1 else None

    def put_file(
        self, path: Path | str, *, claimed_mime: str = "", source: str = "", description: str = ""
    ) -> PutResult:
        """Store a file, refusing an oversized or empty one before reading it (and a growing one while reading)."""
        limit = self.max_bytes
        try:
            fh = open(path, "rb")
        except OSError as exc:
            raise MediaError(f"cannot read {path}: {exc.strerror or exc}") from exc
        with fh:
            st = os.fstat(fh.fileno())
            if stat.S_ISREG(st.st_mode) and st.st_size == 0:
                raise MediaError(f"{path} is empty (0 bytes); nothing was stored")
            if stat.S_ISREG(st.st_mode) and st.st_size > limit:
                raise MediaTooLarge(
                    f"{path} is {st.st_size} bytes, larger than the limit of {limit} (core.memory.media.max_bytes)"
                )
            writer = self.files.writer(limit)
            try:
                while chunk := fh.read(CHUNK):
                    writer.write(chunk)
            except OSError as exc:
                writer.abort()
                raise MediaError(f"cannot read {path}: {exc.strerror or exc}") from exc
            except BaseException:
                writer.abort()
                raise
        return self.commit(writer, claimed_mime=claimed_mime, source=source, description=description)

    async def aput_stream(
        self, chunks: AsyncIterable[bytes], *, claimed_mime: str = "", source: str = "", description: str = ""
    ) -> PutResult:
        """Store bytes as they arrive (an upload); over the limit is refused at the chunk that crosses it."""
        writer = await asyncio.to_thread(self.begin)
        try:
            async for chunk in chunks:
                if chunk:
                    await asyncio.to_thread(writer.write, chunk)
        except BaseException:
            await asyncio.to_thread(writer.abort)
            raise
        return await asyncio.to_thread(
            self.commit, writer, claimed_mime=claimed_mime, source=source, description=description
        )

    def describe(self, ref: str, description: str) -> MediaInfo:
        """Replace the description (the text that markers carry).

        Storing bytes again only fills an empty description: a file name that
        comes with a re-upload must not replace what someone wrote.
        """
        digest = self.resolve(ref)
        with self._tx() as conn:
            conn.execute("UPDATE blobs SET description = ? WHERE digest = ?", (" ".join(description.split()), digest))
        return self.info(digest)

    # -- reads -----------------------------------------------------------------------
    def get(self, ref: str) -> bytes:
        """The bytes, verified against their digest. Damaged bytes are quarantined and raise :class:`MediaCorrupt`."""
        info = self.info(ref)
        if not info.present:
            raise self._gone(info)
        try:
            data = self.files.read_verified(info.digest, info.size)
        except FileNotFoundError:
            self._set_state(info.digest, "missing")
            log.error("media %s: its file is missing from %s", info.short, self.files.blobs)
            raise MediaGone(Msg(
                "media {short} ({mime}) is missing from disk; its description is kept: {description}",
                short=info.short, mime=info.mime, description=info.description or Msg("(none)"),
            )) from None
        except ValueError as exc:
            raise self._quarantine(info, str(exc)) from None
        now = self._clock()
        if now - info.last_access >= TOUCH_EVERY:
            with contextlib.suppress(sqlite3.OperationalError):  # busy: the time of use is a hint
                with self._tx() as conn:
                    conn.execute("UPDATE blobs SET last_access = ? WHERE digest = ?", (now, info.digest))
        return data

    def _gone(self, info: MediaInfo) -> MediaGone:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.state_at)) if info.state_at else "?"
        why = {
            "evicted": Msg("was evicted by the media GC on {when}; store the file again to bring it back", when=when),
            "quarantined": Msg("was damaged on disk and moved to {folder} on {when}",
                               folder=self.files.quarantine_dir, when=when),
            "missing": Msg("is missing from disk"),
        }.get(info.state) or Msg("is {state}", state=info.state)
        return MediaGone(Msg(
            "the bytes of media {short} ({mime}) {why}; its description is kept: {description}",
            short=info.short, mime=info.mime, why=why, description=info.description or Msg("(none)"),
        ))

    def _set_state(self, digest: str, state: str) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE blobs SET state = ?, state_at = ?, marked_at = NULL WHERE digest = ?",
                (state, self._clock(), digest),
            )

    def _quarantine(self, info: MediaInfo, reason: str) -> MediaCorrupt:
        with self._tx() as conn:
            dest = self.files.quarantine(info.digest)
            conn.execute(
                "UPDATE blobs SET state = 'quarantined', state_at = ?, marked_at = NULL WHERE digest = ?",
                (self._clock(), info.digest),
            )
        where = Msg("moved to {dest}", dest=dest) if dest else Msg("the file was gone")
        log.error("media %s is damaged (%s); %s (%d references)", info.short, reason, where, info.refs)
        return MediaCorrupt(Msg(
            "media {short} is damaged on disk ({reason}); {where}. Its description is kept: {description}",
            short=info.short, reason=reason, where=where, description=info.description or Msg("(none)"),
        ))

    def entries(self, *, limit: int = 50, offset: int = 0, state: str | None = None) -> list[MediaInfo]:
        """Newest first, with reference counts."""
        where, params = ("WHERE state = ?", [state]) if state else ("", [])
        rows = self._read(
            f"SELECT {_WITH_REFS} FROM blobs {where} ORDER BY created DESC, digest LIMIT ? OFFSET ?",
            (*params, max(0, limit), max(0, offset)),
        )
        return [self._info(r) for r in rows]

    def refs_of(self, ref: str) -> list[dict[str, Any]]:
        digest = self.resolve(ref)
        rows = self._read(
            "SELECT owner_kind, owner_id, created FROM refs WHERE digest = ? ORDER BY created", (digest,)
        )
        return [{"owner_kind": k, "owner_id": o, "created": c} for k, o, c in rows]

    def stats(self) -> dict[str, Any]:
        states = dict(self._read("SELECT state, count(*) FROM blobs GROUP BY state"))
        (present_bytes, present_count), = self._read("SELECT present_bytes, present_count FROM totals")
        (refs,), = self._read("SELECT count(*) FROM refs")
        return {
            "present": present_count,
            "present_bytes": present_bytes,
            "states": states,
            "references": refs,
            "cap": self.cap,
            "max_bytes": self.max_bytes,
            "min_age": self.min_age,
            "path": str(self.root),
        }

    # -- references ------------------------------------------------------------------
    def add_refs(self, owner_kind: str, owner_id: str, refs: Sequence[str]) -> list[str]:
        """Reference each digest from ``(owner_kind, owner_id)``; returns the digests newly referenced.

        All or nothing: an unknown digest, or one whose bytes are gone, raises
        and no reference is added. Adding an existing reference is a no-op.
        """
        if owner_kind not in OWNER_KINDS:
            raise MediaError(f"unknown owner kind {owner_kind!r}; one of {', '.join(OWNER_KINDS)}")
        if not owner_id:
            raise MediaError("a media reference needs an owner id")
        digests = list(dict.fromkeys(self.resolve(r) for r in refs))
        now = self._clock()
        added: list[str] = []
        with self._tx() as conn:
            for digest in digests:
                row = conn.execute(f"SELECT {_WITH_REFS} FROM blobs WHERE digest = ?", (digest,)).fetchone()
                if row is None:
                    raise UnknownMedia(Msg("no stored media has the digest {digest}", digest=digest))
                info = self._info(row)
                if not info.present:
                    raise self._gone(info)
                cur = conn.execute(
                    "INSERT OR IGNORE INTO refs(owner_kind, owner_id, digest, created) VALUES (?, ?, ?, ?)",
                    (owner_kind, owner_id, digest, now),
                )
                if cur.rowcount == 1:
                    added.append(digest)
                conn.execute("UPDATE blobs SET marked_at = NULL WHERE digest = ? AND marked_at IS NOT NULL", (digest,))
        return added

    def remove_refs(self, owner_kind: str, owner_id: str, refs: Sequence[str] | None = None) -> int:
        """Drop references of an owner (all of them when ``refs`` is None); returns how many went. Idempotent.

        A digest that no longer resolves is skipped: there is nothing to remove.
        """
        digests: list[str] = []
        for ref in refs or ():
            with contextlib.suppress(UnknownMedia):
                digests.append(self.resolve(ref))
        with self._tx() as conn:
            if refs is None:
                cur = conn.execute("DELETE FROM refs WHERE owner_kind = ? AND owner_id = ?", (owner_kind, owner_id))
                return cur.rowcount
            n = 0
            for digest in digests:
                n += conn.execute(
                    "DELETE FROM refs WHERE owner_kind = ? AND owner_id = ? AND digest = ?",
                    (owner_kind, owner_id, digest),
                ).rowcount
            return n

    def ref_owners(self, created_before: float) -> dict[str, list[str]]:
        """Owners (by kind) of references at least as old as ``created_before``: what the owner check looks at."""
        out: dict[str, list[str]] = {}
        for kind, owner in self._read(
            "SELECT DISTINCT owner_kind, owner_id FROM refs WHERE created <= ? ORDER BY owner_kind, owner_id",
            (created_before,),
        ):
            out.setdefault(kind, []).append(owner)
        return out

    def drop_owners(self, owner_kind: str, owner_ids: Sequence[str], created_before: float) -> int:
        """Remove the references of owners that are gone (only those made before ``created_before``)."""
        with self._tx() as conn:
            return sum(
                conn.execute(
                    "DELETE FROM refs WHERE owner_kind = ? AND owner_id = ? AND created <= ?",
                    (owner_kind, owner_id, created_before),
                ).rowcount
                for owner_id in owner_ids
            )

    def lost_metadata(self) -> bool:
        """No entry at all, yet files under ``blobs/``: ``media.db`` was lost (deleted, or set aside as corrupt)."""
        (count,), = self._read("SELECT count(*) FROM blobs")
        return count == 0 and bool(self.files.names())

    def rebuild_refs(self, owners: Sequence[Any]) -> tuple[int, int, list[str]]:
        """References from owners that name media (``repair.Marked``): ``(added, described, unresolved)``.

        Each digest (full, or the 12 hex of a marker) that resolves to an item
        whose bytes are here gets a reference from its owner; an item without a
        description (an adopted one) takes the marker's. Digests that resolve to
        nothing (the bytes were lost with the metadata) are listed, not guessed.
        """
        added = described = 0
        unresolved: dict[str, None] = {}
        found: list[tuple[str, str, str, str]] = []  # (owner kind, owner id, digest, description)
        for owner in owners:
            for ref, description in owner.references():
                try:
                    found.append((owner.owner_kind, owner.owner_id, self.resolve(ref), description))
                except UnknownMedia:
                    unresolved[ref[:12]] = None
        now = self._clock()
        for i in range(0, len(found), SWEEP_BATCH):  # one commit per reference took 4× as long (bench_media)
            with self._tx() as conn:
                for kind, owner_id, digest, description in found[i : i + SWEEP_BATCH]:
                    row = conn.execute("SELECT state, description FROM blobs WHERE digest = ?", (digest,)).fetchone()
                    if row is None or row[0] != "present":  # evicted or damaged: nothing to keep
                        continue
                    added += conn.execute(
                        "INSERT OR IGNORE INTO refs(owner_kind, owner_id, digest, created) VALUES (?, ?, ?, ?)",
                        (kind, owner_id, digest, now),
                    ).rowcount
                    conn.execute("UPDATE blobs SET marked_at = NULL WHERE digest = ? AND marked_at IS NOT NULL",
                                 (digest,))
                    if description and not row[1]:
                        conn.execute("UPDATE blobs SET description = ? WHERE digest = ?", (description, digest))
                        described += 1
        return added, described, list(unresolved)

    # -- GC --------------------------------------------------------------------------
    def mark(self) -> tuple[int, int]:
        """Phase one: stamp unreferenced blobs that have no stamp, clear stamps of referenced ones."""
        now = self._clock()
        with self._tx() as conn:
            marked = conn.execute(
                "UPDATE blobs SET marked_at = ? WHERE state = 'present' AND marked_at IS NULL "
                "AND NOT EXISTS (SELECT 1 FROM refs r WHERE r.digest = blobs.digest)",
                (now,),
            ).rowcount
            unmarked = conn.execute(
                "UPDATE blobs SET marked_at = NULL WHERE marked_at IS NOT NULL "
                "AND EXISTS (SELECT 1 FROM refs r WHERE r.digest = blobs.digest)"
            ).rowcount
        return marked, unmarked

    def sweep(self, min_age: float | None = None) -> tuple[int, int]:
        """Phase two: evict blobs stamped at least ``min_age`` ago that are still unreferenced."""
        age = self.min_age if min_age is None else min_age
        cutoff = self._clock() - age
        count = size = 0
        while True:
            with self._tx() as conn:
                rows = conn.execute(
                    "SELECT digest, size FROM blobs WHERE marked_at IS NOT NULL AND marked_at <= ? "
                    "AND state = 'present' AND NOT EXISTS (SELECT 1 FROM refs r WHERE r.digest = blobs.digest) "
                    "LIMIT ?",
                    (cutoff, SWEEP_BATCH),
                ).fetchall()
                self._evict(conn, rows)
            count += len(rows)
            size += sum(r[1] for r in rows)
            if len(rows) < SWEEP_BATCH:
                return count, size

    def _evict(self, conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> None:
        """Remove the files and record it, inside the caller's write transaction."""
        now = self._clock()
        for digest, _ in rows:
            self.files.remove(digest)
        conn.executemany(
            "UPDATE blobs SET state = 'evicted', state_at = ?, marked_at = NULL WHERE digest = ?",
            [(now, r[0]) for r in rows],
        )

    def enforce_cap(self, *, protect: Sequence[str] = ()) -> tuple[int, int]:
        """Evict unreferenced blobs, least recently used first, until the stored bytes fit the cap (0 = no cap)."""
        cap = self.cap
        if cap <= 0:
            return 0, 0
        (total,), = self._read("SELECT present_bytes FROM totals")
        if total <= cap:
            return 0, 0
        grace_from = self._clock() - CAP_GRACE
        count = size = 0
        with self._tx() as conn:
            (total,), = conn.execute("SELECT present_bytes FROM totals").fetchall()
            victims: list[tuple[str, int]] = []
            cur = conn.execute(
                "SELECT digest, size FROM blobs WHERE state = 'present' AND last_access < ? "
                "AND NOT EXISTS (SELECT 1 FROM refs r WHERE r.digest = blobs.digest) ORDER BY last_access",
                (grace_from,),
            )
            for digest, blob_size in cur:
                if total <= cap:
                    break
                if digest in protect:
                    continue
                victims.append((digest, blob_size))
                total -= blob_size
            cur.close()
            self._evict(conn, victims)
            count, size = len(victims), sum(v[1] for v in victims)
        if total > cap:
            log.warning(
                "media store holds %d bytes, over its cap of %d: the rest is referenced or in use", total, cap
            )
        return count, size

    def reconcile(self) -> tuple[int, int, int, int]:
        """Repair what a crash can leave: files without a row, rows without a file, dead temporaries.

        Returns ``(orphans adopted, orphans quarantined, entries found missing,
        temporaries removed)``. A file under ``blobs/`` without a row (a put
        killed between its rename and its commit, or a ``media.db`` that was
        set aside as corrupt) is adopted when its bytes hash to its name, with
        source ``recovered``, and quarantined when they do not: bytes are never
        deleted on a guess. A row whose file is gone becomes ``evicted`` when
        nothing references it (a sweep died between removing the file and
        recording it) and ``missing`` when something does (logged: bytes were
        lost outside the store).
        """
        adopted = damaged = missing = 0
        now = self._clock()
        with self._tx() as conn:
            present = dict(
                conn.execute(
                    "SELECT digest, EXISTS (SELECT 1 FROM refs r WHERE r.digest = blobs.digest) "
                    "FROM blobs WHERE state = 'present'"
                ).fetchall()
            )
            files = self.files.names()
            for name, path in files.items():
                if name in present or not (len(name) == 64 and _HEX.fullmatch(name)):
                    continue
                try:
                    data = self.files.read_verified(name)
                except FileNotFoundError:
                    continue
                except ValueError as exc:
                    dest = self.files.quarantine(name)
                    log.error("media: stray file %s does not match its name (%s); moved to %s", path, exc, dest)
                    damaged += 1
                    continue
                mtime = path.stat().st_mtime
                conn.execute(
                    "INSERT INTO blobs(digest, mime, size, created, last_access, source, state) "
                    "VALUES (?1, ?2, ?3, ?4, ?5, 'recovered', 'present') ON CONFLICT(digest) DO UPDATE SET "
                    "state = 'present', state_at = NULL, size = ?3, last_access = ?5, marked_at = NULL",
                    (name, sniff_mime(data[:4096]), len(data), mtime, now),
                )
                adopted += 1
            for digest, referenced in present.items():
                if digest in files:
                    continue
                missing += 1
                state = "missing" if referenced else "evicted"
                if referenced:
                    log.error("media %s is referenced but its file is gone", digest[:12])
                conn.execute(
                    "UPDATE blobs SET state = ?, state_at = ?, marked_at = NULL WHERE digest = ?", (state, now, digest)
                )
        temporaries = 0
        for path in self.files.stale_temporaries(STALE_TMP):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                temporaries += 1
        if adopted:
            log.warning("media: adopted %d files that had no metadata (source 'recovered')", adopted)
        return adopted, damaged, missing, temporaries

    def gc(self, min_age: float | None = None) -> GCReport:
        """Mark, sweep (after ``min_age``), repair, and keep to the cap; a report of each step's count."""
        started = time.perf_counter()
        report = GCReport()
        report.marked, report.unmarked = self.mark()
        report.swept, report.swept_bytes = self.sweep(min_age)
        report.adopted, report.quarantined, report.missing, report.temporaries_removed = self.reconcile()
        report.cap_evicted, report.cap_evicted_bytes = self.enforce_cap()
        (report.present_bytes, report.present), = self._read("SELECT present_bytes, present_count FROM totals")
        report.seconds = round(time.perf_counter() - started, 3)
        if report.missing:
            report.notes.append(f"{report.missing} entries had lost their file (see the log)")
        if report.adopted or report.quarantined:
            report.notes.append(
                f"{report.adopted} files without metadata adopted, {report.quarantined} damaged ones quarantined"
            )
        return report

    # -- async wrappers for the event loop ------------------------------------------
    async def aput_bytes(self, data: bytes, **kw: Any) -> PutResult:
        return await asyncio.to_thread(self.put_bytes, data, **kw)

    async def aput_file(self, path: Path | str, **kw: Any) -> PutResult:
        return await asyncio.to_thread(self.put_file, path, **kw)

    async def adescribe(self, ref: str, description: str) -> MediaInfo:
        return await asyncio.to_thread(self.describe, ref, description)

    async def aget(self, ref: str) -> bytes:
        return await asyncio.to_thread(self.get, ref)

    async def ainfo(self, ref: str) -> MediaInfo:
        return await asyncio.to_thread(self.info, ref)

    async def ainfos(self, refs: Sequence[str]) -> list[MediaInfo]:
        return await asyncio.to_thread(self.infos, refs)

    async def alist(self, **kw: Any) -> list[MediaInfo]:
        return await asyncio.to_thread(lambda: self.entries(**kw))

    async def arefs_of(self, ref: str) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.refs_of, ref)

    async def astats(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.stats)

    async def aadd_refs(self, owner_kind: str, owner_id: str, refs: Sequence[str]) -> list[str]:
        return await asyncio.to_thread(self.add_refs, owner_kind, owner_id, refs)

    async def aremove_refs(self, owner_kind: str, owner_id: str, refs: Sequence[str] | None = None) -> int:
        return await asyncio.to_thread(self.remove_refs, owner_kind, owner_id, refs)

    async def aref_owners(self, created_before: float) -> dict[str, list[str]]:
        return await asyncio.to_thread(self.ref_owners, created_before)

    async def adrop_owners(self, owner_kind: str, owner_ids: Sequence[str], created_before: float) -> int:
        return await asyncio.to_thread(self.drop_owners, owner_kind, owner_ids, created_before)

    def now(self) -> float:
        return self._clock()

    async def agc(self, min_age: float | None = None) -> GCReport:
        return await asyncio.to_thread(self.gc, min_age)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)
