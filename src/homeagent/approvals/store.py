"""The owner's ``always`` rules and the decision log, in ``<data>/approvals.db``.

SQLite rather than a settings key: rules are granted one at a time from a
prompt ("Always for this pattern") and removed one at a time, and the log
grows for years; both want rows. The rules are also held in memory, because
the policy reads them on every tool call. Writes are small; callers run them
off the event loop (``asyncio.to_thread``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from homeagent.approvals.policy import ALLOW, Rule

SCHEMA = """
CREATE TABLE IF NOT EXISTS rules (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tool TEXT NOT NULL,
    match TEXT NOT NULL,
    action TEXT NOT NULL DEFAULT 'allow',
    created REAL NOT NULL,
    by TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    request TEXT NOT NULL,
    tool TEXT NOT NULL,
    subject TEXT NOT NULL,
    arguments TEXT NOT NULL,
    user_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    source TEXT NOT NULL,
    decision TEXT NOT NULL,
    by TEXT NOT NULL,
    reason TEXT NOT NULL,
    waited_ms REAL NOT NULL
);
"""
KEEP_DECISIONS = 10_000


class ApprovalStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        self._rules: tuple[Rule, ...] = self._load_rules()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- always rules ---------------------------------------------------------
    def _load_rules(self) -> tuple[Rule, ...]:
        rows = self._db.execute("SELECT id, tool, match, action, created, by FROM rules ORDER BY id").fetchall()
        return tuple(Rule(t, m, a, id=i, source="always", created=c, by=b) for i, t, m, a, c, b in rows)

    def rules(self) -> tuple[Rule, ...]:
        """The current rules (an immutable snapshot; the policy reads it on the hot path)."""
        return self._rules

    def add_rule(self, tool: str, match: str, *, by: str) -> Rule:
        with self._lock:
            existing = next((r for r in self._rules if r.tool == tool and r.match == match), None)
            if existing is not None:
                return existing
            cur = self._db.execute(
                "INSERT INTO rules (tool, match, action, created, by) VALUES (?, ?, ?, ?, ?)",
                (tool, match, ALLOW, time.time(), by),
            )
            self._rules = self._load_rules()
            return next(r for r in self._rules if r.id == cur.lastrowid)

    def remove_rule(self, rule_id: int) -> bool:
        with self._lock:
            removed = self._db.execute("DELETE FROM rules WHERE id = ?", (rule_id,)).rowcount > 0
            self._rules = self._load_rules()
            return removed

    # -- decision log ---------------------------------------------------------
    def log(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO decisions (ts, request, tool, subject, arguments, user_id, channel, source, decision, "
                "by, reason, waited_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (entry["ts"], entry["request"], entry["tool"], entry["subject"],
                 json.dumps(entry["arguments"], ensure_ascii=False), entry["user_id"], entry["channel"],
                 entry["source"], entry["decision"], entry["by"], entry["reason"], entry["waited_ms"]),
            )
            self._db.execute("DELETE FROM decisions WHERE id <= (SELECT MAX(id) FROM decisions) - ?", (KEEP_DECISIONS,))

    def decisions(self, limit: int = 50) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT ts, request, tool, subject, arguments, user_id, channel, source, decision, by, reason, "
                "waited_ms FROM decisions ORDER BY id DESC LIMIT ?", (max(1, min(limit, 1000)),),
            ).fetchall()
        keys = ("ts", "request", "tool", "subject", "arguments", "user_id", "channel", "source", "decision", "by",
                "reason", "waited_ms")
        out = []
        for row in rows:
            item = dict(zip(keys, row, strict=True))
            item["arguments"] = json.loads(item["arguments"])
            out.append(item)
        return out
