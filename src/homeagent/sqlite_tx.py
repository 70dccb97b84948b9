"""One SQLite write transaction, the way every store here takes it.

``BEGIN IMMEDIATE`` takes the write lock at the start, so a writer waits for
another (up to the connection's busy timeout) instead of failing half way
with "database is locked" when it upgrades a read; any exception rolls back.
The connections are opened with ``isolation_level=None`` (autocommit), so
this is the only place a transaction begins.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
