"""L2: the document store that pruned context sinks into and ``doc_query`` consumes from.

Documents live in SQLite (WAL, so the CLI can read and import while the
daemon runs); each row keeps its original timestamp, access counts, its
index terms and its vector (float32 blob, tagged with the embedder's name so
a change of embedder re-embeds instead of mixing vector spaces). Search runs
in memory over a ``HybridIndex`` loaded from those rows on first use, with
the conversation structure on top (``conversation.py``): each document may
be a turn of a conversation, with a ``speaker`` and a ``session``; a turn
that comes without a session joins the one of the turn before it when that
turn is less than ``session_gap`` seconds older (default 30 minutes), else
it starts a new one.

Another process writing the same file (``homeagent memory import`` while the
daemon runs) is noticed through ``PRAGMA data_version``: new rows are picked
up by sequence number, deletions through the ``removed`` log a trigger fills.

Every method here is synchronous and may take milliseconds to seconds
(embedding, SQLite, index load): the event loop uses the ``a*`` wrappers
(``aquery``, ``ainsert``, ``acommit``, ``aremove``, ``astats``,
``afind_cold``, ``acount``), which run them in a worker thread. The
synchronous methods are for worker threads and the CLI.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import json
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from homeagent.memory.cleaners import CleanerChain, normalize_whitespace
from homeagent.memory.conversation import ConversationIndex
from homeagent.memory.embedder import Embedder
from homeagent.memory.lexical import Analyzer
from homeagent.memory.retrieval import HybridIndex, relevance
from homeagent.sqlite_tx import immediate

SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    content      TEXT NOT NULL,
    summary      TEXT NOT NULL DEFAULT '',
    tags         TEXT NOT NULL DEFAULT '[]',
    ts           REAL NOT NULL,
    created      REAL NOT NULL,
    access_count INTEGER NOT NULL DEFAULT 0,
    last_access  REAL,
    source       TEXT NOT NULL DEFAULT '',
    speaker      TEXT NOT NULL DEFAULT '',
    session      TEXT NOT NULL DEFAULT '',
    terms        TEXT NOT NULL DEFAULT '',
    analyzer     TEXT NOT NULL DEFAULT '',
    model        TEXT,
    vec          BLOB
);
CREATE INDEX IF NOT EXISTS docs_created ON docs(created);
CREATE INDEX IF NOT EXISTS docs_ts ON docs(ts);
CREATE TABLE IF NOT EXISTS removed (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    doc_seq INTEGER NOT NULL,
    id      TEXT NOT NULL,
    at      REAL NOT NULL
);
CREATE TRIGGER IF NOT EXISTS docs_removed AFTER DELETE ON docs BEGIN
    INSERT INTO removed(doc_seq, id, at) VALUES (old.seq, old.id, CAST(strftime('%s','now') AS REAL));
END;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

STRUCTURE_COLUMNS = (("speaker", "TEXT NOT NULL DEFAULT ''"), ("session", "TEXT NOT NULL DEFAULT ''"))
"""Columns added after the first release: files written before them are migrated in place."""

SESSION_GAP = 1800.0
"""Silence (seconds) after which a turn without a session starts a new one (``core.memory.session_gap``)."""

REMOVED_LOG_KEEP = 20_000
"""Deletion log rows kept for readers that sync incrementally; an older reader reloads fully."""

BACKFILL_PER_QUERY = 256
"""Stale vectors re-embedded inline per query; a larger backlog is for ``abackfill``."""

_DOC_COLUMNS = "id, content, summary, tags, ts, created, access_count, last_access, source, speaker, session"


@dataclass
class Doc:
    """One document. ``ts`` is the original time of what it records; ``created`` when it entered L2."""

    id: str
    content: str
    summary: str = ""
    tags: list[str] = field(default_factory=list)
    ts: float = 0.0
    created: float = 0.0
    access_count: int = 0
    last_access: float | None = None
    source: str = ""
    speaker: str = ""
    session: str = ""
    score: float = 0.0
    dense: float = 0.0
    lexical: float = 0.0

    @property
    def title(self) -> str:
        """The SDK's ``Doc.Title``: the summary, or the start of the content."""
        return self.summary or excerpt(self.content, 60)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["timestamp"] = iso(self.ts)
        return d


@dataclass
class DocDraft:
    """A document to insert; ``vector`` may carry a precomputed embedding of its index text.

    A draft with a ``speaker`` is a conversation turn: without a ``session``
    it is given one by time gap. A draft with neither is a note on its own.
    """

    content: str
    summary: str = ""
    tags: Sequence[str] = ()
    ts: float | None = None
    id: str | None = None
    source: str = ""
    vector: np.ndarray | None = None
    index_text: str | None = None
    speaker: str = ""
    session: str = ""


def iso(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def excerpt(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def content_id(*parts: str) -> str:
    h = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return h[:24]


@dataclass
class Recalled:
    """A document recalled for the prompt, with the turns around it so it can be read alone."""

    doc: Doc
    before: list[Doc] = field(default_factory=list)
    after: list[Doc] = field(default_factory=list)


NEAR_DUPLICATE = 0.8
"""Word-set Jaccard at or above which two texts say the same (the user asking one question again)."""

QUESTION_PENALTY = 0.2
"""Taken off a question's score when recalling for the prompt: the statement that answers should win."""



def _said(d: Doc, width: int) -> str:
    text = excerpt(d.summary or d.content, width)
    return f"{d.speaker}: {text}" if d.speaker else text


def render_injection(
    items: Sequence[Doc | Recalled], *, header: str = "【相关记忆文档】", width: int = 160, context_width: int = 80
) -> str:
    """The system-prompt block for automatically recalled documents ("" when there are none).

    Each item shows its date, who said it and, for conversation turns, the
    turn before and after it, so the model can read it without the rest of
    the conversation.
    """
    if not items:
        return ""
    lines = [header]
    for item in items:
        rec = item if isinstance(item, Recalled) else Recalled(item)
        d = rec.doc
        when = datetime.fromtimestamp(d.ts).strftime("%Y-%m-%d %H:%M") if d.ts else "?"
        lines.append(f"- [{when}] {_said(d, width)} (id {d.id})")
        around = [f"before: {_said(b, context_width)}" for b in rec.before]
        around += [f"after: {_said(a, context_width)}" for a in rec.after]
        if around:
            lines.append("  " + " | ".join(around))
    return "\n".join(lines)


def _is_question(text: str) -> bool:
    return text.rstrip().endswith(("?", "？"))


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


class DocumentStore:
    """L2 documents over one SQLite file; implements the SDK's DocMemoryAPI via the ``a*`` methods."""

    def __init__(
        self,
        db_path: Path | str,
        embedder: Embedder | None,
        *,
        cleaners: CleanerChain | None = None,
        analyzer: Analyzer | None = None,
        log: logging.Logger | None = None,
        exact_limit: int = 20_000,
        busy_timeout_ms: int = 5000,
        min_score: float | None = None,
        persist_vectors: bool = True,
        session_gap: float = SESSION_GAP,
    ) -> None:
        self.path = Path(db_path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder
        self.cleaners = cleaners
        self.analyzer = analyzer or Analyzer()
        self.log = log or logging.getLogger(__name__)
        self._exact_limit = exact_limit
        # False for readers with possibly another embedder (CLI search): re-embedded
        # vectors then stay in memory instead of replacing the daemon's.
        self.persist_vectors = persist_vectors
        # Below this fused score a hit is noise; the embedder knows its own scale.
        self.min_score = (
            min_score
            if min_score is not None
            else (float(getattr(embedder, "relevance_floor", 0.3)) if embedder is not None else 0.1)
        )
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            self.path, timeout=busy_timeout_ms / 1000, check_same_thread=False, isolation_level=None
        )
        self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes; WAL checkpoints fsync
        self._conn.executescript(SCHEMA)
        self._migrate()
        self.session_gap = session_gap
        self._index: HybridIndex | None = None
        self._conv: ConversationIndex | None = None
        self._seq_of: dict[str, int] = {}
        self._max_seq = 0
        self._max_removed = 0
        self._data_version = -1
        self._pending_vectors: list[int] = []
        self._closed = False

    def _migrate(self) -> None:
        """Add the columns newer versions use to a file an older version wrote."""
        have = {row[1] for row in self._conn.execute("PRAGMA table_info(docs)")}
        for name, decl in STRUCTURE_COLUMNS:
            if name not in have:
                self._conn.execute(f"ALTER TABLE docs ADD COLUMN {name} {decl}")

    @property
    def model_name(self) -> str:
        return self.embedder.name if self.embedder is not None else ""

    # -- lifecycle -------------------------------------------------------------------
    def load(self) -> None:
        """Build the in-memory index (first use does it anyway); re-embeds up to 2000 stale vectors."""
        with self._lock:
            self._ensure_loaded()
            assert self._conv is not None
            self._conv.refresh()  # windows and sessions now, not in the first turn's recall
        if self._pending_vectors:
            self.backfill_vectors(max_items=2000)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(sqlite3.Error):
                    self._conn.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("document store is closed")

    def _sync_if_loaded(self) -> None:
        self._check_open()
        if self._index is not None:
            self._sync()

    def _ensure_loaded(self) -> None:
        self._check_open()
        if self._index is None:
            self._full_load()
        else:
            self._sync()

    def _full_load(self) -> None:
        t0 = time.perf_counter()
        self._index = HybridIndex(self.embedder.dim if self.embedder else None, exact_limit=self._exact_limit)
        self._conv = ConversationIndex(self.analyzer, self._index.lexical, self._index.vectors)
        self._seq_of = {}
        self._pending_vectors = []
        self._max_seq = 0
        self._data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        row = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM removed").fetchone()
        self._max_removed = int(row[0])
        self._add_rows_after(0)
        if len(self._seq_of) > 1000:
            self.log.info(
                "documents: loaded %d documents in %.1f s (%d need new vectors)",
                len(self._seq_of),
                time.perf_counter() - t0,
                len(self._pending_vectors),
            )

    def _add_rows_after(self, seq: int) -> None:
        assert self._index is not None
        model = self.model_name
        dim = self.embedder.dim if self.embedder else 0
        assert self._conv is not None
        cur = self._conn.execute(
            "SELECT seq, id, terms, analyzer, model, vec, ts, speaker, session FROM docs WHERE seq > ? ORDER BY seq",
            (seq,),
        )
        retokenize: list[int] = []
        batch: list[tuple[str, list[str], np.ndarray | None]] = []
        while True:
            rows = cur.fetchmany(2048)
            if not rows:
                break
            for s, doc_id, terms, analyzer_version, vec_model, blob, ts, speaker, session in rows:
                self._max_seq = max(self._max_seq, s)
                if self._seq_of.get(doc_id) == s:
                    continue
                self._seq_of[doc_id] = s
                self._conv.add(doc_id, session=session, ts=ts, seq=s, speaker=speaker)
                vec = None
                if blob is not None and vec_model == model and dim and len(blob) == 4 * dim:
                    vec = np.frombuffer(blob, dtype="<f4").astype(np.float32)
                elif dim:
                    self._pending_vectors.append(s)
                if analyzer_version != self.analyzer.version:
                    retokenize.append(s)
                batch.append((doc_id, terms.split(" ") if terms else [], vec))
            self._index.add_many(batch)
            batch = []
        if retokenize:
            self._retokenize(retokenize)

    def _retokenize(self, seqs: list[int]) -> None:
        assert self._index is not None
        for i in range(0, len(seqs), 500):
            chunk = seqs[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._conn.execute(
                f"SELECT seq, id, content, summary FROM docs WHERE seq IN ({marks})", chunk
            ).fetchall()
            updates = []
            for s, doc_id, content, summary in rows:
                tokens = self.analyzer.tokens(self.index_text(content, summary))
                self._index.lexical.add(doc_id, tokens)
                if self._conv is not None:
                    self._conv.reindex(doc_id)
                updates.append((" ".join(tokens), self.analyzer.version, s))
            with self._tx():
                self._conn.executemany("UPDATE docs SET terms = ?, analyzer = ? WHERE seq = ?", updates)

    def _sync(self) -> None:
        """Pick up other processes' inserts and deletions (cheap when nothing changed)."""
        assert self._index is not None
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if version == self._data_version:
            return
        self._data_version = version
        trimmed = self._conn.execute("SELECT value FROM meta WHERE key = 'removed_trimmed_below'").fetchone()
        if trimmed and int(trimmed[0]) > self._max_removed + 1:
            self._full_load()
            return
        for rseq, doc_seq, doc_id in self._conn.execute(
            "SELECT seq, doc_seq, id FROM removed WHERE seq > ? ORDER BY seq", (self._max_removed,)
        ).fetchall():
            self._max_removed = max(self._max_removed, rseq)
            if self._seq_of.get(doc_id) == doc_seq:
                self._forget([doc_id])
        self._add_rows_after(self._max_seq)

    def _tx(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return immediate(self._conn)

    # -- text ------------------------------------------------------------------------
    def index_text(self, content: str, summary: str = "") -> str:
        """What is embedded and indexed for a document: cleaned summary + content (originals are kept)."""
        text = f"{summary}\n{content}" if summary and summary not in content else content
        return self.cleaners.clean(text) if self.cleaners else normalize_whitespace(text)

    def _embed(self, texts: list[str]) -> list[np.ndarray | None]:
        if self.embedder is None or not texts:
            return [None] * len(texts)
        try:
            mat = self.embedder.embed(texts)
        except Exception as exc:  # keep the lexical half working
            self.log.warning("documents: embedding failed (%s: %s); lexical index only", type(exc).__name__, exc)
            return [None] * len(texts)
        return [mat[i] for i in range(len(texts))]

    # -- writes ----------------------------------------------------------------------
    def insert_many(self, drafts: Sequence[DocDraft]) -> list[tuple[str, bool]]:
        """Insert documents; an id that exists is left as it is. Returns ``(id, inserted)`` per draft."""
        now = time.time()
        ids = [d.id or f"doc-{uuid.uuid4().hex[:16]}" for d in drafts]
        with self._lock:
            self._check_open()
            existing = self._existing(ids)
        todo: list[int] = []
        seen: set[str] = set(existing)
        for i, doc_id in enumerate(ids):  # first occurrence of each new id
            if doc_id not in seen:
                seen.add(doc_id)
                todo.append(i)
        texts = {i: drafts[i].index_text or self.index_text(drafts[i].content, drafts[i].summary) for i in todo}
        need_vec = [i for i in todo if drafts[i].vector is None]
        vecs: dict[int, np.ndarray | None] = {i: drafts[i].vector for i in todo}
        for i, v in zip(need_vec, self._embed([texts[i] for i in need_vec]), strict=True):
            vecs[i] = v
        tokens = {i: self.analyzer.tokens(texts[i]) for i in todo}
        model = self.model_name
        stamps: dict[int, float] = {i: now if drafts[i].ts is None else float(drafts[i].ts or 0.0) for i in todo}
        with self._lock:
            self._sync_if_loaded()
            added: list[tuple[str, list[str], np.ndarray | None]] = []
            placed: list[tuple[str, str, float, int, str]] = []
            inserted: set[int] = set()
            with self._tx():
                sessions = self._sessions_for(drafts, todo, stamps)
                for i in todo:
                    d = drafts[i]
                    vec = vecs[i]
                    blob = np.asarray(vec, dtype="<f4").tobytes() if vec is not None else None
                    cur = self._conn.execute(
                        "INSERT OR IGNORE INTO docs (id, content, summary, tags, ts, created, source, speaker, session,"
                        " terms, analyzer, model, vec) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (
                            ids[i],
                            d.content,
                            d.summary,
                            json.dumps(list(d.tags), ensure_ascii=False),
                            stamps[i],
                            now,
                            d.source,
                            d.speaker,
                            sessions[i],
                            " ".join(tokens[i]),
                            self.analyzer.version,
                            model if vec is not None else None,
                            blob,
                        ),
                    )
                    if cur.rowcount == 1:
                        inserted.add(i)
                        seq = int(cur.lastrowid or 0)
                        self._seq_of[ids[i]] = seq
                        added.append((ids[i], tokens[i], vec))
                        placed.append((ids[i], sessions[i], stamps[i], seq, d.speaker))
            self._after_own_write()
            if self._index is not None and self._conv is not None:
                self._index.add_many(added)
                for doc_id, session, ts, seq, speaker in placed:
                    self._conv.add(doc_id, session=session, ts=ts, seq=seq, speaker=speaker)
        return [(doc_id, i in inserted) for i, doc_id in enumerate(ids)]

    def _sessions_for(self, drafts: Sequence[DocDraft], todo: Sequence[int], stamps: dict[int, float]) -> dict[int, str]:
        """The session of each draft: its own, or by time gap for turns (drafts with a speaker) without one.

        Called inside the insert transaction, so two writers cannot both open a
        session for the same gap.
        """
        out: dict[int, str] = {}
        batch: list[tuple[float, str]] = []  # (ts, session) of this batch's turns, sorted
        for i in sorted(todo, key=lambda j: stamps[j]):
            d = drafts[i]
            if d.session or not d.speaker:
                out[i] = d.session
                if d.session and d.speaker:
                    bisect.insort(batch, (stamps[i], d.session))
                continue
            ts = stamps[i]
            prev = self._conn.execute(
                "SELECT ts, session FROM docs WHERE ts <= ? AND speaker != '' AND session != ''"
                " ORDER BY ts DESC LIMIT 1",
                (ts,),
            ).fetchone()
            pos = bisect.bisect_right(batch, (ts, "\uffff"))
            if pos and (prev is None or batch[pos - 1][0] >= prev[0]):
                prev = batch[pos - 1]
            if prev is not None and ts - float(prev[0]) <= self.session_gap:
                session = str(prev[1])
            else:
                session = f"auto-{datetime.fromtimestamp(ts).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
            out[i] = session
            bisect.insort(batch, (ts, session))
        return out

    def _after_own_write(self) -> None:
        """Skip re-reading our own rows on the next sync, if no other process wrote meanwhile."""
        if self._conn.execute("PRAGMA data_version").fetchone()[0] == self._data_version:
            self._max_seq = max(self._max_seq, self._seq_of_max())
            row = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM removed").fetchone()
            self._max_removed = max(self._max_removed, int(row[0]))

    def _seq_of_max(self) -> int:
        row = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM docs").fetchone()
        return int(row[0])

    def _existing(self, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        unique = list(dict.fromkeys(ids))
        for i in range(0, len(unique), 500):
            chunk = unique[i : i + 500]
            marks = ",".join("?" * len(chunk))
            found.update(r[0] for r in self._conn.execute(f"SELECT id FROM docs WHERE id IN ({marks})", chunk))
        return found

    def insert(
        self,
        content: str,
        summary: str = "",
        tags: Sequence[str] = (),
        ts: float | None = None,
        *,
        id: str | None = None,
        source: str = "",
        vector: np.ndarray | None = None,
    ) -> str:
        """Insert one document and return its id (an existing id is kept unchanged)."""
        if not content or not content.strip():
            raise ValueError("a document needs non-empty content")
        draft = DocDraft(content, summary, tags, ts, id, source, vector)
        return self.insert_many([draft])[0][0]

    def commit(self, content: str, summary: str = "", tags: Sequence[str] = (), ts: float | None = None) -> str:
        """``doc_commit``: a document the model chose to keep."""
        return self.insert(content, summary, tags, ts, source="doc_commit")

    def remove(self, doc_id: str) -> bool:
        with self._lock:
            self._sync_if_loaded()
            with self._tx():
                n = self._conn.execute("DELETE FROM docs WHERE id = ?", (doc_id,)).rowcount
            self._after_own_write()
            self._forget([doc_id])
            self._trim_removed_log()
            return n == 1

    def remove_many(self, ids: Sequence[str]) -> list[str]:
        """Delete documents in one transaction; returns the ids that were there (``doc_query`` after L1 holds them)."""
        with self._lock:
            self._sync_if_loaded()
            unique = list(dict.fromkeys(ids))
            with self._tx():
                taken = [i for i in unique if self._conn.execute("DELETE FROM docs WHERE id = ?", (i,)).rowcount == 1]
            self._after_own_write()
            self._forget(unique)
            self._trim_removed_log()
            return taken

    def _forget(self, ids: Sequence[str]) -> None:
        for doc_id in ids:
            self._seq_of.pop(doc_id, None)
            if self._index is not None:
                self._index.remove(doc_id)
            if self._conv is not None:
                self._conv.remove(doc_id)

    def _trim_removed_log(self) -> None:
        row = self._conn.execute("SELECT MAX(seq) FROM removed").fetchone()
        top = int(row[0] or 0)
        if top % 1000 or top <= REMOVED_LOG_KEEP:
            return
        below = top - REMOVED_LOG_KEEP
        with self._tx():
            self._conn.execute("DELETE FROM removed WHERE seq < ?", (below,))
            self._conn.execute(
                "INSERT INTO meta(key, value) VALUES ('removed_trimmed_below', ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(below),),
            )

    def backfill_vectors(self, max_items: int | None = None, batch: int = 256) -> int:
        """Embed documents whose vector is missing or from another embedder; returns how many."""
        if self.embedder is None:
            return 0
        done = 0
        while self._pending_vectors and (max_items is None or done < max_items):
            with self._lock:
                chunk = self._pending_vectors[:batch]
                del self._pending_vectors[:batch]
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT seq, id, content, summary FROM docs WHERE seq IN ({marks})", chunk
                ).fetchall()
            vecs = self._embed([self.index_text(c, s) for _, _, c, s in rows])
            with self._lock:
                vectors = self._index.vectors if self._index is not None else None
                updates = []
                for (seq, doc_id, _, _), vec in zip(rows, vecs, strict=True):
                    if vec is None:
                        continue
                    updates.append((self.model_name, np.asarray(vec, dtype="<f4").tobytes(), seq))
                    if vectors is not None and self._seq_of.get(doc_id) == seq:
                        vectors.add(doc_id, vec)
                if self.persist_vectors and updates:
                    with self._tx():
                        self._conn.executemany("UPDATE docs SET model = ?, vec = ? WHERE seq = ?", updates)
            done += len(rows)
        return done

    # -- reads -----------------------------------------------------------------------
    def _search(self, text: str, k: int, min_score: float | None) -> list[tuple[str, float, float, float]]:
        if self._pending_vectors:  # rows another process wrote with another embedder (bounded per query)
            self.backfill_vectors(max_items=BACKFILL_PER_QUERY)
        qtext = self.index_text(text)
        tokens = self.analyzer.tokens(qtext)
        qvec = self._embed([qtext])[0] if qtext else None
        with self._lock:
            self._ensure_loaded()
            assert self._conv is not None
            hits = self._conv.search(tokens, qvec, k, min_score=self.min_score if min_score is None else min_score)
        return [(h.key, h.score, h.dense, h.lexical) for h in hits]

    def _fetch(self, ids: Sequence[str]) -> dict[str, Doc]:
        out: dict[str, Doc] = {}
        for i in range(0, len(ids), 500):
            chunk = list(ids[i : i + 500])
            marks = ",".join("?" * len(chunk))
            for row in self._conn.execute(f"SELECT {_DOC_COLUMNS} FROM docs WHERE id IN ({marks})", chunk):
                out[row[0]] = _row_to_doc(row)
        return out

    def query(self, text: str, k: int = 3, *, touch: bool = True, min_score: float | None = None) -> list[Doc]:
        """Top ``k`` documents for ``text`` scoring at least ``min_score`` (default: ``self.min_score``).

        Read-only for the documents (nothing is removed); ``touch`` counts the
        access. The CLI passes ``touch=False, min_score=float("-inf")``.
        """
        if k <= 0 or not text or not text.strip():
            return []
        hits = self._search(text, k, min_score)
        if not hits:
            return []
        with self._lock:
            docs = self._fetch([h[0] for h in hits])
            if touch and docs:
                now = time.time()
                with self._tx():
                    self._conn.executemany(
                        "UPDATE docs SET access_count = access_count + 1, last_access = ? WHERE id = ?",
                        [(now, doc_id) for doc_id in docs],
                    )
                for touched in docs.values():
                    touched.access_count += 1
                    touched.last_access = now
        out = []
        for doc_id, score, dense, lexical in hits:
            d = docs.get(doc_id)
            if d is not None:
                d.score, d.dense, d.lexical = score, dense, lexical
                out.append(d)
        return out

    def recall(self, text: str, k: int = 3, *, touch: bool = True) -> list[Recalled]:
        """What the agent's prompt shows for ``text``: the top ``k`` useful documents with their neighbours.

        Useful means: relevant by its own text (not only through its
        neighbours), not the input itself nor an earlier copy of it (the user
        asking the same question again), not a near-duplicate of a document
        already chosen, and a question ranks below the statement that answers
        it. Counts the access of the chosen documents (``touch``).
        """
        if k <= 0 or not text or not text.strip():
            return []
        hits = self._search(text, 4 * k + 4, None)
        if not hits:
            return []
        query_tokens = self.analyzer.tokens(self.index_text(text))
        query_words = set(query_tokens)
        query_plain = normalize_whitespace(text).casefold()
        with self._lock:
            docs = self._fetch([h[0] for h in hits])
            lexical = self._index.lexical if self._index is not None else None
            hits = [h for h in hits if h[0] in docs]
            own = self._own_relevance(query_tokens, hits)

            def useful(h: tuple[str, float, float, float]) -> float:
                return h[1] - (QUESTION_PENALTY if _is_question(docs[h[0]].content) else 0.0)

            # A turn that matches only through its neighbours is left out: the one that says it is shown instead,
            # with them around it; "OK." between two copies of the question helps nobody.
            ranked = sorted((h for h in hits if own.get(h[0], 0.0) >= self.min_score), key=lambda h: -useful(h))
            chosen: list[tuple[Doc, set[str]]] = []
            for doc_id, score, dense, lex in ranked:
                d = docs[doc_id]
                words = {t for t, _ in lexical.term_counts(doc_id)} if lexical is not None else set()
                if normalize_whitespace(d.content).casefold() == query_plain or _jaccard(words, query_words) >= NEAR_DUPLICATE:
                    continue
                if any(_jaccard(words, other) >= NEAR_DUPLICATE for _, other in chosen):
                    continue
                d.score, d.dense, d.lexical = score, dense, lex
                chosen.append((d, words))
                if len(chosen) == k:
                    break
            around: dict[str, tuple[list[str], list[str]]] = {}
            if self._conv is not None:
                around = {d.id: self._conv.neighbours(d.id, 1, 1) for d, _ in chosen}
            context = self._fetch([n for before, after in around.values() for n in (*before, *after)])
            if touch and chosen:
                now = time.time()
                with self._tx():
                    self._conn.executemany(
                        "UPDATE docs SET access_count = access_count + 1, last_access = ? WHERE id = ?",
                        [(now, d.id) for d, _ in chosen],
                    )
        out = []
        for d, _ in chosen:
            before, after = around.get(d.id, ([], []))
            out.append(
                Recalled(d, [context[n] for n in before if n in context], [context[n] for n in after if n in context])
            )
        return out

    def _own_relevance(self, tokens: Sequence[str], hits: Sequence[tuple[str, float, float, float]]) -> dict[str, float]:
        """Each hit's absolute relevance from its own text alone (its cosine and its own words)."""
        if self._index is None or not hits:
            return {}
        keys = [h[0] for h in hits]
        bound = self._index.lexical.query_bound(tokens) if tokens else 0.0
        share = self._index.lexical.score_array(tokens, keys) / bound if bound > 0 else np.zeros(len(keys))
        rel = relevance(share, np.asarray([h[2] for h in hits], dtype=np.float32))
        return dict(zip(keys, rel.tolist(), strict=True))

    def consume(self, text: str, k: int = 3, *, min_score: float | None = None) -> list[Doc]:
        """``doc_query``: return the top ``k`` documents and remove them from L2.

        The caller re-inserts each into L1 as a ``cold_storage`` event with its
        original ``ts``. Two consumers racing for one document: only one gets it.
        """
        if k <= 0 or not text or not text.strip():
            return []
        hits = self._search(text, k, min_score)
        if not hits:
            return []
        with self._lock:
            docs = self._fetch([h[0] for h in hits])
            taken: list[str] = []
            with self._tx():
                for doc_id in docs:
                    if self._conn.execute("DELETE FROM docs WHERE id = ?", (doc_id,)).rowcount == 1:
                        taken.append(doc_id)
            self._after_own_write()
            self._forget(list(docs))
            self._trim_removed_log()
        out = []
        for doc_id, score, dense, lexical in hits:
            d = docs.get(doc_id)
            if d is not None and doc_id in taken:
                d.score, d.dense, d.lexical = score, dense, lexical
                d.access_count += 1
                d.last_access = time.time()
                out.append(d)
        return out

    def get(self, doc_id: str) -> Doc | None:
        with self._lock:
            return self._fetch([doc_id]).get(doc_id)

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM docs").fetchone()[0])

    def find_cold(self, age_hours: float = 72, max_access: int = 2, limit: int = 100) -> list[Doc]:
        """Documents in L2 for longer than ``age_hours``, accessed at most ``max_access`` times and not lately."""
        cutoff = time.time() - age_hours * 3600
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_DOC_COLUMNS} FROM docs WHERE created < ? AND access_count <= ?"
                " AND (last_access IS NULL OR last_access < ?) ORDER BY created LIMIT ?",
                (cutoff, max_access, cutoff, limit),
            ).fetchall()
        return [_row_to_doc(r) for r in rows]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            c = self._conn
            count, oldest, newest, accessed = c.execute(
                "SELECT COUNT(*), MIN(ts), MAX(ts), COALESCE(SUM(access_count), 0) FROM docs"
            ).fetchone()
            models = dict(c.execute("SELECT COALESCE(model, '(none)'), COUNT(*) FROM docs GROUP BY model").fetchall())
            sources = dict(c.execute("SELECT source, COUNT(*) FROM docs GROUP BY source").fetchall())
            cutoff = time.time() - 72 * 3600
            cold = c.execute(
                "SELECT COUNT(*) FROM docs WHERE created < ? AND access_count <= 2"
                " AND (last_access IS NULL OR last_access < ?)",
                (cutoff, cutoff),
            ).fetchone()[0]
        size = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file())
        return {
            "documents": count,
            "oldest": iso(oldest),
            "newest": iso(newest),
            "accesses": accessed,
            "cold": cold,
            "vectors_by_model": models,
            "sources": sources,
            "embedder": self.model_name,
            "pending_vectors": len(self._pending_vectors),
            "db_bytes": size,
            "path": str(self.path),
        }

    def iter_docs(self, batch: int = 1000) -> Iterator[Doc]:
        """Every document in insertion order (for export); reads in short transactions."""
        last = 0
        while True:
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT seq, {_DOC_COLUMNS} FROM docs WHERE seq > ? ORDER BY seq LIMIT ?", (last, batch)
                ).fetchall()
            if not rows:
                return
            for row in rows:
                last = row[0]
                yield _row_to_doc(row[1:])

    def recent(self, limit: int = 20) -> list[Doc]:
        """The ``limit`` newest documents, newest first (the memory browser's first page; no access is counted)."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_DOC_COLUMNS} FROM docs ORDER BY seq DESC LIMIT ?", (max(0, int(limit)),)
            ).fetchall()
        return [_row_to_doc(r) for r in rows]

    # -- async API (DocMemoryAPI) -----------------------------------------------------
    async def astart(self) -> None:
        """Load the index and warm jieba in a worker thread (call once at daemon start)."""
        await asyncio.to_thread(self.analyzer.warmup)
        await asyncio.to_thread(self.load)

    async def abackfill(self, batch: int = 256) -> int:
        done = 0
        while self._pending_vectors:
            n = await asyncio.to_thread(self.backfill_vectors, batch, batch)
            if n == 0:
                break
            done += n
        return done

    async def aquery(self, text: str, k: int = 3, *, touch: bool = True, min_score: float | None = None) -> list[Doc]:
        return await asyncio.to_thread(self.query, text, k, touch=touch, min_score=min_score)

    async def arecall(self, text: str, k: int = 3, *, touch: bool = True) -> list[Recalled]:
        return await asyncio.to_thread(self.recall, text, k, touch=touch)

    async def ainsert(self, doc: Doc | DocDraft) -> str:
        """DocMemoryAPI ``Insert``: a ``Doc`` (its id, content, summary, tags, ts) or a ``DocDraft``."""
        if isinstance(doc, Doc):
            draft = DocDraft(
                doc.content, doc.summary, doc.tags, doc.ts or None, doc.id or None, doc.source,
                speaker=doc.speaker, session=doc.session,
            )
        else:
            draft = doc
        if not draft.content or not draft.content.strip():
            raise ValueError("a document needs non-empty content")
        result = await asyncio.to_thread(self.insert_many, [draft])
        return result[0][0]

    async def ainsert_many(self, drafts: Sequence[DocDraft]) -> list[tuple[str, bool]]:
        return await asyncio.to_thread(self.insert_many, drafts)

    async def acommit(self, content: str, summary: str = "", tags: Sequence[str] = (), ts: float | None = None) -> str:
        return await asyncio.to_thread(self.commit, content, summary, tags, ts)

    async def aremove(self, doc_id: str) -> bool:
        return await asyncio.to_thread(self.remove, doc_id)

    def existing(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are documents now (the media GC asks whether a reference's owner still exists)."""
        with self._lock:
            self._check_open()
            return self._existing(ids)

    async def aexisting(self, ids: Sequence[str]) -> set[str]:
        return await asyncio.to_thread(self.existing, ids)

    async def astats(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.stats)

    async def afind_cold(self, age_hours: float = 72, max_access: int = 2, limit: int = 100) -> list[Doc]:
        return await asyncio.to_thread(self.find_cold, age_hours, max_access, limit)

    async def acount(self) -> int:
        return await asyncio.to_thread(self.count)

    async def arecent(self, limit: int = 20) -> list[Doc]:
        return await asyncio.to_thread(self.recent, limit)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


def _row_to_doc(row: Sequence[Any]) -> Doc:
    doc_id, content, summary, tags, ts, created, access_count, last_access, source, speaker, session = row
    try:
        tag_list = [str(t) for t in json.loads(tags)] if tags else []
    except (ValueError, TypeError):
        tag_list = []
    return Doc(doc_id, content, summary, tag_list, ts, created, access_count, last_access, source, speaker, session)
