"""``conversations.db``: the web chat's conversations and what each one showed, entry by entry.

Why a store of its own: the context window (L1) is the *model's* recent
past, pruned by relevance and sunk into documents, and the text log keeps
only the final text of each turn. Neither can give back what the chat page
showed: the interrupt typed while a reply streamed, the tool calls with
their arguments and results, the reasoning, the partial text of a reply that
was stopped, a reminder that arrived later. A conversation's transcript is
that record, one row per thing the page showed, in the order it showed them;
the page reads it back a page at a time (cursor paging by entry id, so a
conversation of thousands of messages opens as fast as a short one).

The schema is numbered migrations (``PRAGMA user_version`` says which ran),
as in the memory graph. Every method blocks; the daemon calls them through
:class:`~homeagent.conversations.transcript.TranscriptHistory`, which runs
them in a worker thread.
"""

from __future__ import annotations

import builtins
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from homeagent.msg import Msg
from homeagent.sqlite_tx import immediate
from homeagent.text import scrub_text

log = logging.getLogger("homeagent.conversations")

MAX_TITLE = 200
AUTO_TITLE = 60
MAX_PAGE = 500
KINDS = ("user", "interrupt", "assistant", "proactive")
"""What an entry is: the owner's message, an interrupt typed while a reply ran, the agent's reply to a
message of the conversation, and a message the agent sent by itself (a reminder, a plugin's input)."""

# Append only; never edit or reorder a migration that has shipped.
MIGRATIONS: builtins.list[tuple[int, str, builtins.list[str]]] = [
    (1, "conversations and their entries", [
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            title TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL,
            updated REAL NOT NULL,
            external TEXT UNIQUE
        )""",
        """CREATE TABLE entries (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            ts REAL NOT NULL,
            kind TEXT NOT NULL,
            input_id TEXT NOT NULL DEFAULT '',
            text TEXT NOT NULL DEFAULT '',
            data TEXT NOT NULL DEFAULT '{}',
            pending INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX entries_by_conversation ON entries (conversation, id)",
        "CREATE INDEX entries_pending ON entries (pending) WHERE pending = 1",
        "CREATE INDEX conversations_by_updated ON conversations (updated)",
    ]),
    (2, "one-time imports done", [
        "CREATE TABLE imports (key TEXT PRIMARY KEY, done REAL NOT NULL)",
    ]),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


class ConversationError(ValueError):
    """A request the store refuses (a title too long, an entry of another conversation); the message says why."""


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    created: float
    updated: float
    external: str = ""  # the OpenAI-compatible client's key it was mapped from ("" for the web UI's own)
    entries: int = 0
    match: dict[str, Any] | None = None  # a search hit: the first entry whose text matched

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "title": self.title, "created": self.created, "updated": self.updated,
                               "origin": "openai" if self.external else "web", "entries": self.entries}
        if self.match is not None:
            out["match"] = self.match
        return out


@dataclass(frozen=True)
class Entry:
    id: int
    conversation: int
    ts: float
    kind: str
    text: str = ""
    input_id: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "conversation": self.conversation, "ts": self.ts, "kind": self.kind,
                "text": self.text, "input_id": self.input_id, **self.data}


@dataclass(frozen=True)
class NewEntry:
    """An entry to add (its id and the conversation come from the store)."""

    kind: str
    text: str = ""
    input_id: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    ts: float = 0.0


def clean_title(title: str) -> str:
    """One line, trimmed; a ConversationError past :data:`MAX_TITLE` characters (never cut silently)."""
    text = " ".join(scrub_text(str(title)).split())
    if len(text) > MAX_TITLE:
        raise ConversationError(Msg("a title is at most {limit} characters (this one has {length})", limit=MAX_TITLE,
                                    length=len(text)))
    return text


def auto_title(text: str) -> str:
    """A title from a first message: its first non-empty line, cut at :data:`AUTO_TITLE` characters."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("[file uploaded")), "")
    line = " ".join(line.split())
    return line if len(line) <= AUTO_TITLE else line[: AUTO_TITLE - 1].rstrip() + "…"


def _like(query: str) -> str:
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _snippet(text: str, query: str, width: int = 80) -> str:
    at = text.lower().find(query.lower())
    if at < 0:
        return text[:width]
    start = max(0, at - width // 3)
    cut = text[start:start + width]
    return ("…" if start else "") + cut + ("…" if start + width < len(text) else "")


class ConversationStore:
    """One SQLite file; thread-safe (one connection under a lock); every method blocks."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=10)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a committed entry survives the process being killed (kill -9); only a power
            # cut can lose the last ones. One fsync per entry would cost more than the entry.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except BaseException:
            self._db.close()
            raise

    def _migrate(self) -> None:
        with immediate(self._db):
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise ConversationError(
                    f"{self.path} has schema version {version}, newer than this HomeAgent understands "
                    f"({SCHEMA_VERSION}); upgrade HomeAgent instead of opening it with an older one"
                )
            for number, description, statements in MIGRATIONS:
                if number <= version:
                    continue
                log.info("conversations %s: migration %d (%s)", self.path.name, number, description)
                for statement in statements:
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number}")

    def schema_version(self) -> int:
        with self._lock:
            return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -------------------------------------------------------------- conversations
    _CONV = ("SELECT c.id, c.title, c.created, c.updated, COALESCE(c.external, ''), "
             "(SELECT COUNT(*) FROM entries e WHERE e.conversation = c.id) FROM conversations c")

    @staticmethod
    def _conv(row: Sequence[Any], match: dict[str, Any] | None = None) -> Conversation:
        return Conversation(int(row[0]), str(row[1]), float(row[2]), float(row[3]), str(row[4]), int(row[5]), match)

    def create(self, title: str = "", *, external: str | None = None, now: float | None = None) -> Conversation:
        title = clean_title(title)
        ts = time.time() if now is None else now
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO conversations (title, created, updated, external) VALUES (?, ?, ?, ?)",
                (title, ts, ts, external),
            )
            return Conversation(int(cur.lastrowid or 0), title, ts, ts, external or "", 0)

    def get(self, conversation: int) -> Conversation | None:
        with self._lock:
            row = self._db.execute(self._CONV + " WHERE c.id = ?", (conversation,)).fetchone()
        return self._conv(row) if row else None

    def by_external(self, key: str) -> Conversation | None:
        with self._lock:
            row = self._db.execute(self._CONV + " WHERE c.external = ?", (key,)).fetchone()
        return self._conv(row) if row else None

    def for_external(self, key: str, title: str) -> tuple[Conversation, bool]:
        """The conversation mapped from ``key``, made (titled ``title``) when there is none; (it, whether new)."""
        with self._lock:
            row = self._db.execute(self._CONV + " WHERE c.external = ?", (key,)).fetchone()
            if row:
                return self._conv(row), False
            ts = time.time()
            title = auto_title(title)
            cur = self._db.execute(
                "INSERT INTO conversations (title, created, updated, external) VALUES (?, ?, ?, ?)",
                (title, ts, ts, key),
            )
            return Conversation(int(cur.lastrowid or 0), title, ts, ts, key, 0), True

    def latest(self, *, web_only: bool = True) -> Conversation | None:
        """The conversation used last (the web UI's own unless ``web_only`` is False)."""
        where = " WHERE c.external IS NULL" if web_only else ""
        with self._lock:
            row = self._db.execute(self._CONV + where + " ORDER BY c.updated DESC, c.id DESC LIMIT 1").fetchone()
        return self._conv(row) if row else None

    def list(self, query: str = "", *, limit: int = 100) -> builtins.list[Conversation]:
        """Conversations, the most recently used first; with ``query``, those whose title or any entry's text
        contains it (case-insensitive for ASCII), each with its first matching entry."""
        limit = max(1, min(limit, 1000))
        with self._lock:
            if not query:
                recent = self._db.execute(self._CONV + " ORDER BY c.updated DESC, c.id DESC LIMIT ?", (limit,))
                return [self._conv(r) for r in recent.fetchall()]
            pattern = _like(query)
            rows = self._db.execute(
                self._CONV + " WHERE c.title LIKE ?1 ESCAPE '\\' OR EXISTS (SELECT 1 FROM entries e WHERE "
                "e.conversation = c.id AND e.text LIKE ?1 ESCAPE '\\') ORDER BY c.updated DESC, c.id DESC LIMIT ?2",
                (pattern, limit),
            ).fetchall()
            out = []
            for row in rows:
                hit = self._db.execute(
                    "SELECT id, text FROM entries WHERE conversation = ? AND text LIKE ? ESCAPE '\\' ORDER BY id "
                    "LIMIT 1", (row[0], pattern),
                ).fetchone()
                match = {"entry": int(hit[0]), "text": _snippet(str(hit[1]), query)} if hit else None
                out.append(self._conv(row, match))
            return out

    def rename(self, conversation: int, title: str) -> Conversation | None:
        title = clean_title(title)
        with self._lock:
            changed = self._db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation))
            if not changed.rowcount:
                return None
            row = self._db.execute(self._CONV + " WHERE c.id = ?", (conversation,)).fetchone()
        return self._conv(row)

    def delete(self, conversation: int) -> builtins.list[Entry] | None:
        """Remove a conversation and its entries; the entries it had (None: there was no such conversation)."""
        with self._lock, immediate(self._db):
            if self._db.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation,)).fetchone() is None:
                return None
            gone = self._entries("WHERE conversation = ? ORDER BY id", (conversation,))
            self._db.execute("DELETE FROM entries WHERE conversation = ?", (conversation,))
            self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation,))
            return gone

    # -------------------------------------------------------------- entries
    def _entries(self, where: str, params: Sequence[Any]) -> builtins.list[Entry]:
        rows = self._db.execute(
            f"SELECT id, conversation, ts, kind, text, input_id, data FROM entries {where}", params
        ).fetchall()
        return [Entry(int(r[0]), int(r[1]), float(r[2]), str(r[3]), str(r[4]), str(r[5]), json.loads(r[6]))
                for r in rows]

    def add(self, conversation: int, entries: Iterable[NewEntry]) -> builtins.list[Entry]:
        """Append entries to a conversation (one transaction); the first user message titles an untitled one.

        A ConversationError when the conversation does not exist (deleted while a turn of it ran).
        """
        with self._lock, immediate(self._db):
            row = self._db.execute("SELECT title FROM conversations WHERE id = ?", (conversation,)).fetchone()
            if row is None:
                raise ConversationError(f"no conversation {conversation}")
            return self._append(conversation, str(row[0]), entries)

    def _append(self, conversation: int, title: str, entries: Iterable[NewEntry]) -> builtins.list[Entry]:
        """``add``'s writes, in the caller's transaction."""
        now = time.time()
        added: builtins.list[Entry] = []
        last = now
        for item in entries:
            if item.kind not in KINDS:
                raise ConversationError(f"an entry's kind is one of {', '.join(KINDS)}, not {item.kind!r}")
            ts = item.ts or now
            text = scrub_text(item.text)
            data = json.dumps(item.data, ensure_ascii=False, default=str)
            cur = self._db.execute(
                "INSERT INTO entries (conversation, ts, kind, input_id, text, data, pending) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conversation, ts, item.kind, item.input_id, text, scrub_text(data), int(bool(item.data.get("pending")))),
            )
            added.append(Entry(int(cur.lastrowid or 0), conversation, ts, item.kind, text, item.input_id,
                               dict(item.data)))
            last = max(last, ts)
            if not title and item.kind == "user":
                title = auto_title(text)
                if title:
                    self._db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation))
        self._db.execute("UPDATE conversations SET updated = MAX(updated, ?) WHERE id = ?", (last, conversation))
        return added

    def imported(self, key: str) -> bool:
        """Whether the one-time import ``key`` has run (see :meth:`import_once`)."""
        with self._lock:
            return self._db.execute("SELECT 1 FROM imports WHERE key = ?", (key,)).fetchone() is not None

    def import_once(self, key: str, title: str, entries: Sequence[NewEntry]) -> Conversation | None:
        """A conversation of ``entries`` the first time ``key`` is seen; None ever after, even once the owner
        deleted it (what an upgrade brings over from before conversations existed, brought over once)."""
        with self._lock, immediate(self._db):
            if self._db.execute("SELECT 1 FROM imports WHERE key = ?", (key,)).fetchone() is not None:
                return None
            self._db.execute("INSERT INTO imports (key, done) VALUES (?, ?)", (key, time.time()))
            if not entries:
                return None
            first = min(e.ts for e in entries if e.ts) if any(e.ts for e in entries) else time.time()
            title = clean_title(title)
            cur = self._db.execute("INSERT INTO conversations (title, created, updated) VALUES (?, ?, ?)",
                                   (title, first, first))
            conversation = int(cur.lastrowid or 0)
            self._append(conversation, title, entries)
            self._db.execute("UPDATE conversations SET updated = ? WHERE id = ?",
                             (max(e.ts or first for e in entries), conversation))
        return self.get(conversation)

    def page(self, conversation: int, *, before: int | None = None, limit: int = 50) -> tuple[builtins.list[Entry], bool]:
        """Up to ``limit`` entries older than entry ``before`` (the newest without it), oldest first, and
        whether older ones remain: the cursor for the next page is the first entry's id."""
        limit = max(1, min(limit, MAX_PAGE))
        with self._lock:
            if before is None:
                found = self._entries("WHERE conversation = ? ORDER BY id DESC LIMIT ?", (conversation, limit + 1))
            else:
                found = self._entries("WHERE conversation = ? AND id < ? ORDER BY id DESC LIMIT ?",
                                      (conversation, before, limit + 1))
        more = len(found) > limit
        return list(reversed(found[:limit])), more

    def entries(self, conversation: int) -> builtins.list[Entry]:
        """Every entry of a conversation, oldest first (exports)."""
        with self._lock:
            return self._entries("WHERE conversation = ? ORDER BY id", (conversation,))

    def entry(self, conversation: int, entry_id: int) -> Entry | None:
        with self._lock:
            found = self._entries("WHERE conversation = ? AND id = ?", (conversation, entry_id))
        return found[0] if found else None

    def last_of(self, conversation: int, kind: str) -> Entry | None:
        with self._lock:
            found = self._entries("WHERE conversation = ? AND kind = ? ORDER BY id DESC LIMIT 1", (conversation, kind))
        return found[0] if found else None

    def update(self, entry_id: int, text: str, data: dict[str, Any]) -> bool:
        """Fill in an entry that was pending (a reply, once its turn ends); False when it is gone (deleted)."""
        payload = scrub_text(json.dumps(data, ensure_ascii=False, default=str))
        with self._lock, immediate(self._db):
            row = self._db.execute("SELECT conversation FROM entries WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                return False
            self._db.execute("UPDATE entries SET text = ?, data = ?, pending = 0 WHERE id = ?",
                             (scrub_text(text), payload, entry_id))
            self._db.execute("UPDATE conversations SET updated = MAX(updated, ?) WHERE id = ?", (time.time(), row[0]))
            return True

    def abandon_pending(self) -> int:
        """Replies still pending when the daemon starts: their turns ended with the last run (a crash, kill -9).
        Each is marked stopped (``lost``), keeping whatever it had; how many there were."""
        with self._lock, immediate(self._db):
            rows = self._db.execute("SELECT id, data FROM entries WHERE pending = 1").fetchall()
            for entry_id, raw in rows:
                data = {**json.loads(raw), "stopped": True, "lost": True}
                data.pop("pending", None)
                self._db.execute("UPDATE entries SET data = ?, pending = 0 WHERE id = ?",
                                 (json.dumps(data, ensure_ascii=False), entry_id))
        return len(rows)

    def truncate(self, conversation: int, from_entry: int) -> builtins.list[Entry]:
        """Drop entry ``from_entry`` and every later one of the conversation; the dropped entries."""
        with self._lock, immediate(self._db):
            gone = self._entries("WHERE conversation = ? AND id >= ? ORDER BY id", (conversation, from_entry))
            self._db.execute("DELETE FROM entries WHERE conversation = ? AND id >= ?", (conversation, from_entry))
            return gone

    def import_entries(self, conversation: int, rows: Iterable[NewEntry], *, batch: int = 1000) -> int:
        """Bulk append (benchmarks, imports): batches of ``batch`` per transaction; how many were written."""
        pending: builtins.list[NewEntry] = []
        written = 0
        for item in rows:
            pending.append(item)
            if len(pending) >= batch:
                written += len(self.add(conversation, pending))
                pending = []
        if pending:
            written += len(self.add(conversation, pending))
        return written
