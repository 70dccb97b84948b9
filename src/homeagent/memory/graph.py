"""The long-term memory graph (L3): entities, relations and the sentences they came from.

Why it is shaped this way:

* Facts change ("I moved to Shanghai"). A new fact that contradicts a current
  one is not a reason to forget the old one: the old relation is *retired*
  (``valid_to``/``retired_at`` set) so "where did I live last year" stays
  answerable, while recall shows current facts by default. Contradiction is
  decided per relation type: single-valued relations (``SINGLE_VALUED``, e.g.
  ``lives_in``) hold one object per subject at a time, multi-valued ones
  (``likes``) accumulate. Only relations on the same subject and relation are
  candidates, so nothing unrelated is ever retired.
* Two clocks (bitemporal): ``valid_from``/``valid_to`` say when a fact was
  true in the world; ``recorded_at``/``retired_at`` say when we believed it.
  A superseded fact ends its validity; a corrected (``memory_edit``) or purged
  fact is retracted: it leaves the record but was never valid.
* Every write goes through one writer thread in one ``BEGIN IMMEDIATE``
  transaction, so concurrent commits from the memory loops and a user turn
  serialise without lost updates; other processes (the CLI) are handled by
  ``busy_timeout`` plus a retry loop, and a batch is applied whole or not at
  all. Reads run in their own threads on their own connections (WAL lets them
  proceed while a write is open), so the event loop never touches SQLite.
* Names are matched exactly (after NFKC + case folding), through aliases,
  and by substring through an FTS5 index of character bigrams, so a 2-character
  Chinese keyword matches without ``LIKE '%…%'`` scans and SQL wildcards in
  names (``%``, ``_``) are just characters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from homeagent.memory.graph_model import (
    MAX_SENTENCE_CHARS,
    MAX_TRIPLES_PER_COMMIT,
    OBJECT_TYPES,
    RETIRE_EDITED,
    RETIRE_MERGED,
    RETIRE_PURGED,
    RETIRE_SUPERSEDED,
    SINGLE_VALUED,
    CommitReport,
    Entity,
    GraphBusy,
    GraphError,
    RawBatch,
    RawRecord,
    Recall,
    Relation,
    Triple,
    clean_name,
    iso,
    name_bigrams,
    norm_name,
    norm_relation,
    sentence_hash,
    split_keywords,
)
from homeagent.memory.graph_read import aliases_of, chunks, entities_by_id, recall_in, sentences_by_id, with_aliases
from homeagent.memory.graph_schema import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger("homeagent.memory.graph")

T = TypeVar("T")

_LOCKED = ("database is locked", "database table is locked", "database is busy")


def _is_locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and any(m in str(exc).lower() for m in _LOCKED)


# --------------------------------------------------------------------------- the store
class GraphDB:
    """The graph on one SQLite file. Every public method is a coroutine; SQLite runs in threads.

    Use ``await GraphDB.open(path)`` (runs migrations) and ``await close()``.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        single_valued: Iterable[str] = SINGLE_VALUED,
        readers: int = 2,
        busy_timeout_ms: int = 5_000,
        lock_retry_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.single_valued = frozenset(norm_relation(r) for r in single_valued)
        self._busy_ms = busy_timeout_ms
        self._lock_retry_s = lock_retry_s
        self._clock = clock
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="graph-writer")
        self._readers = ThreadPoolExecutor(max_workers=max(1, readers), thread_name_prefix="graph-reader")
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        self.generation = 0
        """Bumped after every write; the indexer re-syncs when it changes."""
        self.structure_generation = 0
        """Bumped when entities disappear (merge, delete, hard purge); the indexer reloads its vectors."""
        self.last_write: float | None = None

    @classmethod
    async def open(cls, path: Path | str, *, create: bool = True, **kwargs: Any) -> GraphDB:
        path = Path(path)
        if not create and not path.exists():
            raise FileNotFoundError(f"no memory graph at {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        graph = cls(path, **kwargs)
        try:
            await graph._write(graph._migrate, bump=False)
        except BaseException:
            await graph.close()
            raise
        return graph

    # ------------------------------------------------------------- threads and connections
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=self._busy_ms / 1000
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_ms)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute("PRAGMA cache_size = -32768")
            conn.execute("PRAGMA mmap_size = 268435456")
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _run_tx(self, fn: Callable[[sqlite3.Connection], T], mode: str) -> T:
        conn = self._conn()
        deadline = time.monotonic() + self._lock_retry_s
        delay = 0.05
        while True:
            try:
                conn.execute(f"BEGIN {mode}")
                try:
                    result = fn(conn)
                    conn.execute("COMMIT")
                    return result
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise GraphBusy(
                        f"{self.path.name} stayed locked by another process for {self._lock_retry_s:.0f} s; "
                        "nothing was written"
                    ) from exc
                log.debug("graph database busy (%s); retrying in %.2f s", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, bump: bool = True, structural: bool = False) -> T:
        if self._closed:
            raise GraphError("the memory graph is closed")
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._writer, self._run_tx, fn, "IMMEDIATE")
        if bump:
            self.generation += 1
            self.last_write = self._clock()
        if structural:
            self.structure_generation += 1
        return result

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise GraphError("the memory graph is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._run_tx, fn, "DEFERRED")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._shutdown)

    def _shutdown(self) -> None:
        self._readers.shutdown(wait=True)
        with contextlib.suppress(Exception):
            self._writer.submit(self._checkpoint).result(timeout=10)
        self._writer.shutdown(wait=True)
        with self._conns_lock:
            for conn in self._conns:
                with contextlib.suppress(Exception):
                    conn.close()
            self._conns.clear()

    def _checkpoint(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    # ------------------------------------------------------------- migrations
    def _migrate(self, conn: sqlite3.Connection) -> int:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise GraphError(
                f"{self.path} has schema version {version}, newer than this HomeAgent understands "
                f"({SCHEMA_VERSION}); upgrade HomeAgent instead of opening it with an older one"
            )
        for number, description, statements in MIGRATIONS:
            if number <= version:
                continue
            log.info("memory graph %s: migration %d (%s)", self.path.name, number, description)
            for statement in statements:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        return version

    async def schema_version(self) -> int:
        return await self._read(lambda c: int(c.execute("PRAGMA user_version").fetchone()[0]))

    # ------------------------------------------------------------- entity helpers (writer thread)
    def _resolve(self, conn: sqlite3.Connection, name: str) -> int | None:
        norm = norm_name(name)
        row = conn.execute("SELECT id FROM entities WHERE norm = ?", (norm,)).fetchone()
        if row:
            return int(row[0])
        row = conn.execute("SELECT entity_id FROM aliases WHERE alias_norm = ?", (norm,)).fetchone()
        return int(row[0]) if row else None

    def _must_resolve(self, conn: sqlite3.Connection, name: str) -> int:
        eid = self._resolve(conn, name)
        if eid is None:
            raise GraphError(f"no entity named {clean_name(name)[:80]!r}")
        return eid

    def _upsert_entity(
        self, conn: sqlite3.Connection, name: str, type_: str, now: float, *, force_type: bool = False
    ) -> tuple[int, bool]:
        eid = self._resolve(conn, name)
        if eid is not None:
            if type_:
                if force_type:
                    conn.execute(
                        "UPDATE entities SET mention_count = mention_count + 1, updated_at = ?, type = ? WHERE id = ?",
                        (now, type_, eid),
                    )
                else:
                    conn.execute(
                        "UPDATE entities SET mention_count = mention_count + 1, updated_at = ?, "
                        "type = CASE WHEN type = '' THEN ? ELSE type END WHERE id = ?",
                        (now, type_, eid),
                    )
            else:
                conn.execute(
                    "UPDATE entities SET mention_count = mention_count + 1, updated_at = ? WHERE id = ?", (now, eid)
                )
            return eid, False
        display = clean_name(name)
        norm = display.casefold()
        cur = conn.execute(
            "INSERT INTO entities(name, norm, type, mention_count, created_at, updated_at) VALUES (?, ?, ?, 1, ?, ?)",
            (display, norm, type_, now, now),
        )
        eid = int(cur.lastrowid or 0)
        tokens = name_bigrams(norm)
        if tokens:
            conn.execute("INSERT INTO entity_fts(rowid, tokens) VALUES (?, ?)", (eid, " ".join(tokens)))
        return eid, True

    def _delete_entity_row(self, conn: sqlite3.Connection, eid: int) -> None:
        conn.execute("DELETE FROM entities WHERE id = ?", (eid,))
        conn.execute("DELETE FROM aliases WHERE entity_id = ?", (eid,))
        conn.execute("DELETE FROM entity_fts WHERE rowid = ?", (eid,))

    def _sentence_id(self, conn: sqlite3.Connection, text: str | None, media: Sequence[str], now: float) -> int | None:
        if not text:
            return None
        digest = sentence_hash(text)
        row = conn.execute("SELECT id, media FROM sentences WHERE hash = ?", (digest,)).fetchone()
        if row:
            if media:
                merged = sorted(set(json.loads(row[1] or "[]")) | set(media))
                conn.execute("UPDATE sentences SET media = ? WHERE id = ?", (json.dumps(merged), row[0]))
            return int(row[0])
        cur = conn.execute(
            "INSERT INTO sentences(text, hash, media, created_at) VALUES (?, ?, ?, ?)",
            (text, digest, json.dumps(sorted(set(media))) if media else None, now),
        )
        return int(cur.lastrowid or 0)

    # ------------------------------------------------------------- commit
    def _validate(self, triples: Sequence[Triple]) -> list[tuple[Triple, str, str, str]]:
        if len(triples) > MAX_TRIPLES_PER_COMMIT:
            raise GraphError(f"{len(triples)} triples in one commit; the limit is {MAX_TRIPLES_PER_COMMIT}")
        checked: list[tuple[Triple, str, str, str]] = []
        problems: list[str] = []
        for i, t in enumerate(triples):
            try:
                subject = clean_name(t.subject, "subject")
                relation = norm_relation(t.relation)
                obj = clean_name(t.object, "object")
                if t.sentence is not None and len(t.sentence) > MAX_SENTENCE_CHARS:
                    raise GraphError(f"sentence is {len(t.sentence)} characters; the limit is {MAX_SENTENCE_CHARS}")
                if not 0.0 <= float(t.confidence) <= 1.0:
                    raise GraphError(f"confidence {t.confidence} is outside 0..1")
                checked.append((t, subject, relation, obj))
            except GraphError as exc:
                problems.append(f"triple {i + 1}: {exc}")
        if problems:
            raise GraphError("nothing was committed: " + "; ".join(problems[:5]) + (" …" if len(problems) > 5 else ""))
        return checked

    async def commit(self, triples: Sequence[Triple | Mapping[str, Any]], *, source: str = "") -> CommitReport:
        """Upsert ``triples`` atomically: all of them or (on any bad one) none, with a message naming it."""
        parsed = [t if isinstance(t, Triple) else Triple.from_dict(t, source=source) for t in triples]
        checked = self._validate(parsed)
        if not checked:
            return CommitReport()
        return await self._write(lambda c: self._commit_tx(c, checked, source))

    def _commit_tx(
        self, conn: sqlite3.Connection, checked: list[tuple[Triple, str, str, str]], source: str
    ) -> CommitReport:
        now = self._clock()
        report = CommitReport()
        ids: dict[str, int] = {}  # norm -> entity id, valid inside this transaction
        bumps: dict[int, list[Any]] = {}  # entity id -> [mentions, type, force]

        def entity(display: str, type_: str, force: bool) -> int:
            norm = display.casefold()
            eid = ids.get(norm)
            if eid is None:
                row = conn.execute(
                    "SELECT id FROM entities WHERE norm = ?1 UNION ALL "
                    "SELECT entity_id FROM aliases WHERE alias_norm = ?1 LIMIT 1",
                    (norm,),
                ).fetchone()
                if row:
                    eid = int(row[0])
                else:
                    cur = conn.execute(
                        "INSERT INTO entities(name, norm, type, mention_count, created_at, updated_at) "
                        "VALUES (?, ?, ?, 0, ?, ?)",
                        (display, norm, type_, now, now),
                    )
                    eid = int(cur.lastrowid or 0)
                    tokens = name_bigrams(norm)
                    if tokens:
                        conn.execute("INSERT INTO entity_fts(rowid, tokens) VALUES (?, ?)", (eid, " ".join(tokens)))
                    report.entities_created += 1
                ids[norm] = eid
            bump = bumps.setdefault(eid, [0, "", False])
            bump[0] += 1
            if type_ and (force or not bump[2]):
                bump[1], bump[2] = type_, force
            return eid

        for t, subject, relation, obj in checked:
            sid = entity(
                subject, t.subject_type or ("Person" if relation in OBJECT_TYPES else ""), bool(t.subject_type)
            )
            oid = entity(obj, t.object_type or OBJECT_TYPES.get(relation, ""), bool(t.object_type))
            sentence_id = self._sentence_id(conn, (t.sentence or "").strip() or None, t.media, now)
            valid_from = t.valid_from if t.valid_from is not None else now
            src = t.source or source
            single = t.single if t.single is not None else relation in self.single_valued
            same: int | None = None
            newer: tuple[int, float] | None = None
            rivals: list[tuple[int, str]] = []
            if single:
                for rid, roid, rvf, oname in conn.execute(
                    "SELECT r.id, r.object_id, r.valid_from, e.name FROM relations r JOIN entities e ON e.id = r.object_id "
                    "WHERE r.subject_id = ? AND r.relation = ? AND r.retired_at IS NULL",
                    (sid, relation),
                ).fetchall():
                    if roid == oid:
                        same = int(rid)
                    elif rvf is not None and rvf > valid_from:
                        newer = (int(rid), float(rvf))
                    else:
                        rivals.append((int(rid), str(oname)))
            else:
                # One statement for the common case: insert, or reinforce the current copy.
                rid, mentions = conn.execute(
                    "INSERT INTO relations(subject_id, relation, object_id, confidence, sentence_id, scene, source, "
                    "valid_from, recorded_at, last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9) "
                    "ON CONFLICT(subject_id, relation, object_id) WHERE retired_at IS NULL DO UPDATE SET "
                    "mention_count = mention_count + 1, last_seen = ?9, confidence = MAX(confidence, ?4), "
                    "sentence_id = COALESCE(sentence_id, ?5), scene = COALESCE(scene, ?6), "
                    "valid_from = MIN(COALESCE(valid_from, ?8), ?8) RETURNING id, mention_count",
                    (sid, relation, oid, t.confidence, sentence_id, t.scene, src, valid_from, now),
                ).fetchone()
                if mentions > 1:
                    report.reinforced += 1
                else:
                    report.added += 1
                report.relation_ids.append(int(rid))
                continue
            if same is not None:
                conn.execute(
                    "UPDATE relations SET mention_count = mention_count + 1, last_seen = ?, "
                    "confidence = MAX(confidence, ?), sentence_id = COALESCE(sentence_id, ?), "
                    "scene = COALESCE(scene, ?), valid_from = MIN(COALESCE(valid_from, ?), ?) WHERE id = ?",
                    (now, t.confidence, sentence_id, t.scene, valid_from, valid_from, same),
                )
                report.reinforced += 1
                report.relation_ids.append(same)
                continue
            if newer is not None:
                # An older fact arriving late (e.g. archived from a cold document): history, not news.
                cur = conn.execute(
                    "INSERT INTO relations(subject_id, relation, object_id, confidence, sentence_id, scene, source, "
                    "valid_from, valid_to, recorded_at, retired_at, retired_by, retire_reason, last_seen) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        *(sid, relation, oid, t.confidence, sentence_id, t.scene, src, valid_from, newer[1], now, now),
                        *(newer[0], RETIRE_SUPERSEDED, now),
                    ),
                )
                report.historical += 1
                report.relation_ids.append(int(cur.lastrowid or 0))
                continue
            cur = conn.execute(
                "INSERT INTO relations(subject_id, relation, object_id, confidence, sentence_id, scene, source, "
                "valid_from, recorded_at, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (sid, relation, oid, t.confidence, sentence_id, t.scene, src, valid_from, now, now),
            )
            new_id = int(cur.lastrowid or 0)
            for rid, oname in rivals:
                conn.execute(
                    "UPDATE relations SET retired_at = ?, valid_to = ?, retired_by = ?, retire_reason = ? WHERE id = ?",
                    (now, valid_from, new_id, RETIRE_SUPERSEDED, rid),
                )
                report.superseded.append(f"{subject} --{relation}--> {oname}")
                log.info("memory: %s --%s--> %s superseded by %s", subject, relation, oname, obj)
            report.added += 1
            report.relation_ids.append(new_id)
        conn.executemany(
            "UPDATE entities SET mention_count = mention_count + ?1, updated_at = ?2, "
            "type = CASE WHEN ?3 = '' THEN type WHEN ?4 THEN ?3 WHEN type = '' THEN ?3 ELSE type END WHERE id = ?5",
            [(b[0], now, b[1], int(b[2]), eid) for eid, b in bumps.items()],
        )
        return report

    # ------------------------------------------------------------- recall
    async def recall(
        self,
        query: Sequence[str] | str,
        depth: int = 2,
        *,
        entity_ids: Sequence[int] = (),
        relation_ids: Sequence[int] = (),
        include_history: bool = False,
        as_of: float | None = None,
        sort: str = "relevance",
        max_seeds: int = 10,
        fanout: int = 20,
        max_relations: int = 100,
    ) -> Recall:
        """Entities matching ``query`` (exact, alias, substring) plus ``entity_ids``, then BFS ``depth`` hops.

        ``relation_ids`` are relations that matched the query themselves (the
        indexer's relation search, best first): they come first in the result
        with ``hop`` 0, and their endpoints join the seeds after the keyword
        matches. Only those that pass the same filter as the walk are used, so
        a relation retired since it was indexed seeds nothing.

        Current facts only, unless ``include_history`` (also retired ones) or
        ``as_of`` (the facts that were valid at that time, retractions left out).
        """
        if isinstance(query, str):
            query = split_keywords(query)
        keywords = [k for k in (_safe_norm(q) for q in query) if k]
        depth = max(0, min(int(depth), 4))
        if sort not in ("relevance", "recent"):
            raise GraphError("sort must be 'relevance' or 'recent'")
        return await self._read(
            lambda c: recall_in(
                c, keywords, list(entity_ids), depth, include_history, as_of, sort, max_seeds, fanout, max_relations,
                list(relation_ids),
            )
        )  # fmt: skip

    async def entity(self, name: str) -> Entity | None:
        """One entity by name or alias, with its aliases."""

        def run(conn: sqlite3.Connection) -> Entity | None:
            eid = self._resolve(conn, name)
            if eid is None:
                return None
            ent = entities_by_id(conn, [eid]).get(eid)
            return with_aliases(ent, aliases_of(conn, [eid]).get(eid, ())) if ent else None

        return await self._read(run)

    async def history(self, subject: str, relation: str | None = None) -> list[Relation]:
        """Every relation (current and retired) with ``subject`` as subject, newest first."""
        result = await self.recall(
            [subject], depth=1, include_history=True, max_seeds=1, fanout=500, max_relations=2000
        )
        if not result.seeds:
            return []
        sid = result.seeds[0].id
        rel = norm_relation(relation) if relation else None
        out = [r for r in result.relations if r.subject_id == sid and (rel is None or r.relation == rel)]
        out.sort(key=lambda r: (-(r.valid_from or 0), -r.recorded_at))
        return out

    # ------------------------------------------------------------- maintenance operations
    async def merge_entities(self, source: str, target: str) -> int:
        """Fold ``source`` into ``target``: its relations move, its name becomes an alias. Returns moved relations."""
        return await self._write(lambda c: self._merge_tx(c, source, target), structural=True)

    def _merge_tx(self, conn: sqlite3.Connection, source: str, target: str) -> int:
        sid = self._must_resolve(conn, source)
        tid = self._must_resolve(conn, target)
        if sid == tid:
            raise GraphError(
                f"cannot merge {clean_name(source)[:80]!r} into {clean_name(target)[:80]!r}: they are the same entity"
            )
        now = self._clock()
        src_row = conn.execute("SELECT name, norm, type, mention_count FROM entities WHERE id = ?", (sid,)).fetchone()
        moved = 0
        rows = conn.execute(
            "SELECT id, subject_id, relation, object_id, retired_at, mention_count FROM relations "
            "WHERE subject_id = ?1 OR object_id = ?1",
            (sid,),
        ).fetchall()
        # Retire the source's current copies first so the unique index never sees two current duplicates.
        for rid, subj, rel, obj, retired, mentions in rows:
            new_s = tid if subj == sid else subj
            new_o = tid if obj == sid else obj
            if retired is None:
                if new_s == new_o:
                    conn.execute(
                        "UPDATE relations SET retired_at = ?, retire_reason = ? WHERE id = ?", (now, RETIRE_MERGED, rid)
                    )
                    conn.execute("UPDATE relations SET subject_id = ?, object_id = ? WHERE id = ?", (new_s, new_o, rid))
                    continue
                dup = conn.execute(
                    "SELECT id FROM relations WHERE subject_id = ? AND relation = ? AND object_id = ? "
                    "AND retired_at IS NULL AND id != ?",
                    (new_s, rel, new_o, rid),
                ).fetchone()
                if dup:
                    conn.execute(
                        "UPDATE relations SET mention_count = mention_count + ?, last_seen = ? WHERE id = ?",
                        (mentions, now, dup[0]),
                    )
                    conn.execute(
                        "UPDATE relations SET retired_at = ?, retired_by = ?, retire_reason = ?, subject_id = ?, "
                        "object_id = ? WHERE id = ?",
                        (now, dup[0], RETIRE_MERGED, new_s, new_o, rid),
                    )
                    continue
            conn.execute("UPDATE relations SET subject_id = ?, object_id = ? WHERE id = ?", (new_s, new_o, rid))
            moved += 1
        conn.execute(
            "UPDATE entities SET mention_count = mention_count + ?, updated_at = ?, "
            "type = CASE WHEN type = '' THEN ? ELSE type END WHERE id = ?",
            (src_row[3], now, src_row[2], tid),
        )
        conn.execute("UPDATE aliases SET entity_id = ? WHERE entity_id = ?", (tid, sid))
        self._delete_entity_row(conn, sid)
        conn.execute(
            "INSERT INTO aliases(alias_norm, alias, entity_id) VALUES (?, ?, ?) "
            "ON CONFLICT(alias_norm) DO UPDATE SET entity_id = excluded.entity_id",
            (src_row[1], src_row[0], tid),
        )
        conn.execute("DELETE FROM merge_blocks WHERE a_norm = ? OR b_norm = ?", (src_row[1], src_row[1]))
        log.info("memory: merged entity %r into #%d (%d relations moved)", src_row[0], tid, moved)
        return moved

    async def add_alias(self, name: str, alias: str) -> None:
        """Let ``alias`` name the entity ``name`` too (a chat account linked to a person: daemon._carry_over)."""

        def run(conn: sqlite3.Connection) -> None:
            eid = self._must_resolve(conn, name)
            display = clean_name(alias, "alias")
            other = self._resolve(conn, display)
            if other is not None and other != eid:
                raise GraphError(f"{display!r} already names another entity; merge them instead")
            if other is None:
                conn.execute(
                    "INSERT INTO aliases(alias_norm, alias, entity_id) VALUES (?, ?, ?)",
                    (display.casefold(), display, eid),
                )

        await self._write(run)

    async def live_sentences(self, hashes: Sequence[str]) -> set[str]:
        """Which sentence keys (:func:`sentence_hash`) some relation, current or retired, still comes from.

        The media GC asks this before it drops a ``graph_sentence`` reference:
        a sentence whose relations were all deleted (hard purge, entity
        deletion) no longer holds its media.
        """

        def run(conn: sqlite3.Connection) -> set[str]:
            by_id: dict[int, str] = {}
            unique = list(dict.fromkeys(hashes))
            for i in range(0, len(unique), 500):
                chunk = unique[i : i + 500]
                marks = ",".join("?" * len(chunk))
                by_id.update(conn.execute(f"SELECT id, hash FROM sentences WHERE hash IN ({marks})", chunk).fetchall())
            if not by_id:
                return set()
            # relations has no index on sentence_id: one scan for all of them, not one per sentence
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS media_sentence_ids (id INTEGER PRIMARY KEY)")
            conn.execute("DELETE FROM media_sentence_ids")
            conn.executemany("INSERT INTO media_sentence_ids VALUES (?)", [(k,) for k in by_id])
            used = conn.execute(
                "SELECT DISTINCT r.sentence_id FROM relations r JOIN media_sentence_ids m ON m.id = r.sentence_id"
            ).fetchall()
            conn.execute("DELETE FROM media_sentence_ids")
            return {by_id[r[0]] for r in used}

        return await self._read(run)

    async def marked_sentences(self) -> list[tuple[str, str, str | None]]:
        """``(key, text, media)`` of every sentence that lists media or may hold a marker: what the media
        store's repair references again after its ``media.db`` was lost."""

        def run(conn: sqlite3.Connection) -> list[tuple[str, str, str | None]]:
            rows = conn.execute(
                "SELECT hash, text, media FROM sentences WHERE (media IS NOT NULL AND media NOT IN ('', '[]')) "
                "OR instr(text, '[') > 0"
            ).fetchall()
            return [(str(h), str(t), m if m is None else str(m)) for h, t, m in rows]

        return await self._read(run)

    async def purge(self, criteria: Mapping[str, str], mode: str = "soft") -> int:
        """Retire (soft) or delete (hard) the relations matching every given criterion; returns how many.

        Criteria: ``subject_contains``, ``relation_type``, ``target_contains``
        (substring matches, case-insensitive; ``%`` and ``_`` are plain characters).
        """
        if mode not in ("soft", "hard"):
            raise GraphError("mode must be 'soft' or 'hard'")
        known = {"subject_contains", "relation_type", "target_contains"}
        unknown = set(criteria) - known
        if unknown:
            raise GraphError(f"unknown purge criteria: {', '.join(sorted(unknown))}; use {', '.join(sorted(known))}")
        crit = {k: v for k, v in criteria.items() if isinstance(v, str) and v.strip()}
        if not crit:
            raise GraphError("purge needs at least one of subject_contains, relation_type, target_contains")
        where = ["1 = 1"]
        params: list[Any] = []
        if "subject_contains" in crit:
            where.append("instr(s.norm, ?) > 0")
            params.append(norm_name(crit["subject_contains"]))
        if "relation_type" in crit:
            where.append("r.relation = ?")
            params.append(norm_relation(crit["relation_type"]))
        if "target_contains" in crit:
            where.append("instr(o.norm, ?) > 0")
            params.append(norm_name(crit["target_contains"]))
        if mode == "soft":
            where.append("r.retired_at IS NULL")
        sql = (
            "SELECT r.id FROM relations r JOIN entities s ON s.id = r.subject_id "
            f"JOIN entities o ON o.id = r.object_id WHERE {' AND '.join(where)}"
        )

        def run(conn: sqlite3.Connection) -> int:
            ids = [int(r[0]) for r in conn.execute(sql, params)]
            now = self._clock()
            for chunk in chunks(ids, 500):
                marks = ",".join("?" * len(chunk))
                if mode == "soft":
                    conn.execute(
                        f"UPDATE relations SET retired_at = ?, retire_reason = ? WHERE id IN ({marks})",
                        [now, RETIRE_PURGED, *chunk],
                    )
                else:
                    conn.execute(f"DELETE FROM relations WHERE id IN ({marks})", chunk)
            log.info("memory: purge %s %s matched %d relations", mode, crit, len(ids))
            return len(ids)

        return await self._write(run, structural=mode == "hard")

    async def edit(
        self,
        old_subject: str,
        old_relation: str,
        old_object: str,
        *,
        new_subject: str | None = None,
        new_relation: str | None = None,
        new_object: str | None = None,
    ) -> Relation:
        """Correct a recorded fact: the old one is retracted (``edited``), the corrected one keeps its validity start."""
        if not any(v and str(v).strip() for v in (new_subject, new_relation, new_object)):
            raise GraphError("memory_edit needs at least one of new_subject, new_relation, new_object")

        def run(conn: sqlite3.Connection) -> int:
            sid = self._must_resolve(conn, old_subject)
            oid = self._must_resolve(conn, old_object)
            rel = norm_relation(old_relation)
            row = conn.execute(
                "SELECT id, confidence, sentence_id, scene, source, valid_from FROM relations "
                "WHERE subject_id = ? AND relation = ? AND object_id = ? AND retired_at IS NULL",
                (sid, rel, oid),
            ).fetchone()
            if row is None:
                raise GraphError(
                    f"no current fact {clean_name(old_subject)[:60]} --{rel}--> {clean_name(old_object)[:60]}"
                )
            now = self._clock()
            ns, _ = self._upsert_entity(conn, new_subject, "", now) if new_subject else (sid, False)
            no, _ = self._upsert_entity(conn, new_object, "", now) if new_object else (oid, False)
            nr = norm_relation(new_relation) if new_relation else rel
            if (ns, nr, no) == (sid, rel, oid):
                raise GraphError("the edit changes nothing")
            conn.execute(
                "UPDATE relations SET retired_at = ?, retire_reason = ? WHERE id = ?", (now, RETIRE_EDITED, row[0])
            )
            dup = conn.execute(
                "SELECT id FROM relations WHERE subject_id = ? AND relation = ? AND object_id = ? AND retired_at IS NULL",
                (ns, nr, no),
            ).fetchone()
            if dup:
                conn.execute("UPDATE relations SET retired_by = ? WHERE id = ?", (dup[0], row[0]))
                return int(dup[0])
            cur = conn.execute(
                "INSERT INTO relations(subject_id, relation, object_id, confidence, sentence_id, scene, source, "
                "valid_from, recorded_at, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (ns, nr, no, row[1], row[2], row[3], row[4] or "edit", row[5], now, now),
            )
            new_id = int(cur.lastrowid or 0)
            conn.execute("UPDATE relations SET retired_by = ? WHERE id = ?", (new_id, row[0]))
            return new_id

        new_id = await self._write(run)
        return (await self.relations_by_id([new_id]))[0]

    async def relations_by_id(self, ids: Sequence[int]) -> list[Relation]:
        def run(conn: sqlite3.Connection) -> list[Relation]:
            out: list[Relation] = []
            for chunk in chunks(list(ids), 500):
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(
                    "SELECT id, subject_id, relation, object_id, confidence, sentence_id, scene, source, valid_from, "
                    f"valid_to, recorded_at, retired_at, retire_reason, mention_count FROM relations WHERE id IN ({marks})",
                    chunk,
                ).fetchall()
                ents = entities_by_id(conn, {r[1] for r in rows} | {r[3] for r in rows})
                sents = sentences_by_id(conn, {r[5] for r in rows if r[5] is not None})
                for row in rows:
                    s, o = ents.get(row[1]), ents.get(row[3])
                    if s and o:
                        out.append(
                            Relation(
                                id=row[0],
                                subject=s.name,
                                relation=row[2],
                                object=o.name,
                                subject_id=row[1],
                                object_id=row[3],
                                confidence=row[4],
                                sentence=sents.get(row[5]),
                                scene=row[6],
                                source=row[7],
                                valid_from=row[8],
                                valid_to=row[9],
                                recorded_at=row[10],
                                retired_at=row[11],
                                retire_reason=row[12],
                                mention_count=row[13],
                            )
                        )
            return out

        return await self._read(run)

    async def delete_entity(self, name: str) -> dict[str, Any]:
        """Remove an entity, its aliases and every relation (current and past) that mentions it."""

        def run(conn: sqlite3.Connection) -> dict[str, Any]:
            eid = self._must_resolve(conn, name)
            display = conn.execute("SELECT name FROM entities WHERE id = ?", (eid,)).fetchone()[0]
            cur = conn.execute("DELETE FROM relations WHERE subject_id = ?1 OR object_id = ?1", (eid,))
            self._delete_entity_row(conn, eid)
            log.info("memory: deleted entity %r and %d relations", display, cur.rowcount)
            return {"deleted": display, "relations_deleted": cur.rowcount}

        return await self._write(run, structural=True)

    async def block_merge(self, entity_a: str, entity_b: str, rounds: int) -> dict[str, Any]:
        """Keep the merge loop from proposing ``entity_a``/``entity_b`` for ``rounds`` heartbeats."""
        a, b = sorted((norm_name(entity_a), norm_name(entity_b)))
        if a == b:
            raise GraphError("entity_a and entity_b are the same name")
        rounds = int(rounds)
        if rounds < 0:
            raise GraphError("rounds must be 0 or more (0 lifts the block)")

        def run(conn: sqlite3.Connection) -> None:
            if rounds == 0:
                conn.execute("DELETE FROM merge_blocks WHERE a_norm = ? AND b_norm = ?", (a, b))
            else:
                conn.execute(
                    "INSERT INTO merge_blocks(a_norm, b_norm, rounds) VALUES (?, ?, ?) "
                    "ON CONFLICT(a_norm, b_norm) DO UPDATE SET rounds = excluded.rounds",
                    (a, b, rounds),
                )

        await self._write(run)
        return {"entity_a": entity_a, "entity_b": entity_b, "rounds": rounds}

    async def merge_blocked(self) -> set[tuple[str, str]]:
        return await self._read(lambda c: {(a, b) for a, b in c.execute("SELECT a_norm, b_norm FROM merge_blocks")})

    async def tick_merge_blocks(self) -> None:
        """One merge heartbeat: every block loses a round; exhausted blocks lapse."""

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE merge_blocks SET rounds = rounds - 1")
            conn.execute("DELETE FROM merge_blocks WHERE rounds <= 0")

        await self._write(run, bump=False)

    # ------------------------------------------------------------- statistics and listings
    async def introspect(self, *, hot: int = 10) -> dict[str, Any]:
        def run(conn: sqlite3.Connection) -> dict[str, Any]:
            one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
            stats: dict[str, Any] = {
                "entities": one("SELECT count(*) FROM entities"),
                "relations": one("SELECT count(*) FROM relations WHERE retired_at IS NULL"),
                "retired_relations": one("SELECT count(*) FROM relations WHERE retired_at IS NOT NULL"),
                "aliases": one("SELECT count(*) FROM aliases"),
                "sentences": one("SELECT count(*) FROM sentences"),
                "pending_raw_records": one("SELECT count(*) FROM raw_records WHERE distilled_at IS NULL"),
                "merge_blocks": one("SELECT count(*) FROM merge_blocks"),
                "schema_version": one("PRAGMA user_version"),
            }
            stats["hot_entities"] = [
                {"name": n, "type": t, "mention_count": m}
                for n, t, m in conn.execute(
                    "SELECT name, type, mention_count FROM entities ORDER BY mention_count DESC LIMIT ?", (hot,)
                )
            ]
            stats["relation_types"] = {
                rel: n
                for rel, n in conn.execute(
                    "SELECT relation, count(*) AS n FROM relations WHERE retired_at IS NULL "
                    "GROUP BY relation ORDER BY n DESC LIMIT 15"
                )
            }
            return stats

        stats = await self._read(run)
        with contextlib.suppress(OSError):
            stats["db_bytes"] = self.path.stat().st_size + _size(self.path.with_name(self.path.name + "-wal"))
        if self.last_write is not None:
            stats["last_write"] = iso(self.last_write)
        return stats

    async def hot_entities(self, limit: int = 10) -> list[Entity]:
        def run(conn: sqlite3.Connection) -> list[Entity]:
            return [
                Entity(int(r[0]), r[1], r[2], int(r[3]), r[4], r[5])
                for r in conn.execute(
                    "SELECT id, name, type, mention_count, created_at, updated_at FROM entities "
                    "ORDER BY mention_count DESC LIMIT ?",
                    (limit,),
                )
            ]

        return await self._read(run)

    async def all_entities(self, *, limit: int = 100_000) -> list[Entity]:
        def run(conn: sqlite3.Connection) -> list[Entity]:
            return [
                Entity(int(r[0]), r[1], r[2], int(r[3]), r[4], r[5])
                for r in conn.execute(
                    "SELECT id, name, type, mention_count, created_at, updated_at FROM entities "
                    "ORDER BY mention_count DESC LIMIT ?",
                    (limit,),
                )
            ]

        return await self._read(run)

    async def entities_of_type(self, entity_type: str, *, limit: int = 10_000) -> list[Entity]:
        """Entities of one type (``Person``), most mentioned first."""

        def run(conn: sqlite3.Connection) -> list[Entity]:
            return [
                Entity(int(r[0]), r[1], r[2], int(r[3]), r[4], r[5])
                for r in conn.execute(
                    "SELECT id, name, type, mention_count, created_at, updated_at FROM entities "
                    "WHERE type = ? ORDER BY mention_count DESC, name LIMIT ?",
                    (entity_type, limit),
                )
            ]

        return await self._read(run)

    async def current_relations(self, *, limit: int = 500, offset_id: int = 0) -> list[Relation]:
        """Current relations in id order, a page at a time (the review loop walks them)."""
        ids = await self._read(
            lambda c: [
                int(r[0])
                for r in c.execute(
                    "SELECT id FROM relations WHERE retired_at IS NULL AND id > ? ORDER BY id LIMIT ?",
                    (offset_id, limit),
                )
            ]
        )
        return sorted(await self.relations_by_id(ids), key=lambda r: r.id)

    async def retire(self, relation_ids: Sequence[int], reason: str = RETIRE_EDITED) -> int:
        """Retract relations by id (the review loop's verdict); returns how many were current."""

        def run(conn: sqlite3.Connection) -> int:
            now = self._clock()
            n = 0
            for chunk in chunks(list(relation_ids), 500):
                marks = ",".join("?" * len(chunk))
                n += conn.execute(
                    f"UPDATE relations SET retired_at = ?, retire_reason = ? WHERE retired_at IS NULL AND id IN ({marks})",
                    [now, reason, *chunk],
                ).rowcount
            return n

        return await self._write(run)

    async def relation_signatures(self, *, after_id: int = 0) -> dict[int, tuple[int, int, int | None]]:
        """``id -> (subject_id, object_id, sentence_id)`` of every current relation (with ``id > after_id``).

        What a relation is found by (its type, its endpoints' names, its
        sentence) is fixed by these ids (a merge moves endpoints in place; an
        edit or a new type is a new row), so the indexer diffs this map, a few
        integers per relation, instead of re-reading every relation's text.
        """
        return await self._read(
            lambda c: {
                int(i): (int(s), int(o), None if t is None else int(t))
                for i, s, o, t in c.execute(
                    "SELECT id, subject_id, object_id, sentence_id FROM relations WHERE id > ? AND retired_at IS NULL",
                    (after_id,),
                )
            }
        )

    # ------------------------------------------------------------- entity embeddings (for the indexer)
    async def unembedded_entities(self, limit: int) -> list[tuple[int, str]]:
        return await self._read(
            lambda c: [
                (int(i), n)
                for i, n in c.execute(
                    "SELECT id, name FROM entities WHERE embedding IS NULL ORDER BY mention_count DESC LIMIT ?",
                    (limit,),
                )
            ]
        )

    async def store_embeddings(self, model: str, rows: Sequence[tuple[int, np.ndarray]]) -> None:
        payload = [(np.asarray(v, dtype=np.float32).tobytes(), model, int(i)) for i, v in rows]
        await self._write(
            lambda c: c.executemany("UPDATE entities SET embedding = ?, embed_model = ? WHERE id = ?", payload),
            bump=False,
        )

    async def forget_embeddings_not_from(self, model: str) -> int:
        """Clear vectors made by another model (scores across models are meaningless)."""
        return await self._write(
            lambda c: (
                c.execute(
                    "UPDATE entities SET embedding = NULL, embed_model = NULL "
                    "WHERE embedding IS NOT NULL AND embed_model IS NOT ?",
                    (model,),
                ).rowcount
            ),
            bump=False,
        )

    async def load_embeddings(self, model: str, dim: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
        def run(conn: sqlite3.Connection) -> tuple[np.ndarray, np.ndarray]:
            ids: list[int] = []
            vecs: list[bytes] = []
            for eid, blob in conn.execute(
                "SELECT id, embedding FROM entities WHERE embedding IS NOT NULL AND embed_model = ? "
                "ORDER BY mention_count DESC LIMIT ?",
                (model, limit),
            ):
                if len(blob) == dim * 4:
                    ids.append(int(eid))
                    vecs.append(blob)
            mat = (
                np.frombuffer(b"".join(vecs), dtype=np.float32).reshape(len(ids), dim)
                if ids
                else np.zeros((0, dim), np.float32)
            )
            return np.asarray(ids, dtype=np.int64), mat.copy()

        return await self._read(run)

    # ------------------------------------------------------------- raw records (rule distiller input)
    async def add_raw_record(
        self, content: str, *, role: str, session: str = "", speaker: str = "", ts: float | None = None
    ) -> int:
        stamp = self._clock() if ts is None else ts
        return await self._write(
            lambda c: int(
                c.execute(
                    "INSERT INTO raw_records(session, role, speaker, content, ts) VALUES (?, ?, ?, ?, ?)",
                    (session, role, speaker, content, stamp),
                ).lastrowid
                or 0
            ),
            bump=False,
        )

    async def raw_records(self, *, limit: int = 10_000) -> list[RawRecord]:
        """The kept raw messages, oldest first (distilled or not)."""
        return await self._read(
            lambda c: [
                RawRecord(*row)
                for row in c.execute(
                    "SELECT id, role, speaker, content, ts FROM raw_records ORDER BY id LIMIT ?", (limit,)
                )
            ]
        )

    async def distill_raw_records(
        self,
        to_triples: Callable[[Sequence[RawRecord]], list[Triple]],
        *,
        batch: int,
        expire_before: float,
        source: str,
        now: float,
    ) -> RawBatch:
        """One distiller step in one write transaction: up to ``batch`` undistilled records → ``to_triples`` →
        committed facts; those records are marked distilled and records older than ``expire_before`` deleted.

        ``to_triples`` runs on the graph's writer thread inside the transaction: it must be pure and quick
        (rule extraction), so that the facts and the "distilled" marks land together or not at all.
        """

        def run(conn: sqlite3.Connection) -> RawBatch:
            rows = [
                RawRecord(*row)
                for row in conn.execute(
                    "SELECT id, role, speaker, content, ts FROM raw_records WHERE distilled_at IS NULL "
                    "ORDER BY id LIMIT ?",
                    (batch,),
                )
            ]
            out = RawBatch(records=len(rows), triples=to_triples(rows))
            if out.triples:
                out.commit = self._commit_tx(conn, self._validate(out.triples), source)
            if rows:
                conn.executemany("UPDATE raw_records SET distilled_at = ? WHERE id = ?", [(now, r.id) for r in rows])
            out.expired = conn.execute("DELETE FROM raw_records WHERE ts < ?", (expire_before,)).rowcount
            return out

        return await self._write(run)

    async def loop_state(self, name: str) -> Any:
        row = await self._read(lambda c: c.execute("SELECT value FROM loop_state WHERE name = ?", (name,)).fetchone())
        return json.loads(row[0]) if row else None

    async def set_loop_state(self, name: str, value: Any) -> None:
        text = json.dumps(value, ensure_ascii=False)
        await self._write(
            lambda c: c.execute(
                "INSERT INTO loop_state(name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                (name, text),
            ),
            bump=False,
        )


def _safe_norm(keyword: Any) -> str | None:
    try:
        return norm_name(keyword)
    except GraphError:
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
