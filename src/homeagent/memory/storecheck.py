"""Corrupt SQLite stores at start: set the file aside and start fresh, instead of a traceback.

A ``graph.db`` or ``documents.db`` that a disk error, a bad copy or a stray
write turned into garbage used to stop the daemon with sqlite's "file is not
a database"; the user could not start it without deleting the file by hand,
and might delete the one copy that a recovery tool could still read. Here the
file (with its ``-wal`` and ``-shm``) is renamed ``<name>.corrupt-<time>``,
nothing is deleted, and the caller gets one line saying what happened and what
was kept, for the log and the notes ``homeagent run`` prints (the same way
``context.json`` is handled in ``memory/context.py``).

The check is cheap: ``PRAGMA quick_check`` (a fraction of a second on a
150 MB file; skipped above :data:`QUICK_CHECK_MAX_BYTES`, where only the
schema is read) and the error sqlite raises on first read. Only corruption
(``SQLITE_CORRUPT``, ``SQLITE_NOTADB``) sets a file aside: a locked or
unreadable file is somebody else's problem and must never be moved.
Everything here blocks; call it in a worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path

__all__ = ["QUICK_CHECK_MAX_BYTES", "check_store", "is_corruption", "set_aside"]

log = logging.getLogger("homeagent.memory")

QUICK_CHECK_MAX_BYTES = 1 << 30
"""Above this size only the schema is read at start (quick_check reads every page)."""

_SIDE_FILES = ("-wal", "-shm")
_HEADER = b"SQLite format 3\x00"


def is_corruption(exc: BaseException) -> bool:
    """Whether ``exc`` says the file itself is damaged (not locked, not missing, not a permission problem)."""
    if not isinstance(exc, sqlite3.DatabaseError) or isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    message = str(exc).lower()
    return "not a database" in message or "malformed" in message


def _problem(path: Path) -> str | None:
    """Why ``path`` is not a usable database, or None when it reads fine.

    The header is read first, without sqlite: closing a connection to a file
    that is not a database still deletes its ``-wal``, the one part of it that
    may hold the user's last writes.
    """
    with open(path, "rb") as fh:
        header = fh.read(len(_HEADER))
    if header != _HEADER:
        return "file is not a database"
    try:
        conn = sqlite3.connect(path, timeout=5)
    except sqlite3.Error as exc:
        return str(exc) if is_corruption(exc) else None
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if path.stat().st_size <= QUICK_CHECK_MAX_BYTES:
            rows = conn.execute("PRAGMA quick_check(3)").fetchall()
            if [r[0] for r in rows] != ["ok"]:
                return "; ".join(str(r[0]) for r in rows)
        return None
    except sqlite3.Error as exc:
        if is_corruption(exc):
            return str(exc)
        log.warning("could not check %s (%s); opening it anyway", path, exc)
        return None
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.close()


def set_aside(path: Path, label: str, reason: str, *, kept: str) -> str:
    """Rename ``path`` and its -wal/-shm to ``<name>.corrupt-<time>[-wal|-shm]``; return the one-line note.

    The -wal keeps its suffix after the new name, so sqlite (or a recovery tool)
    opening the set-aside copy still finds the writes it holds.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.replace(path, dest)
    for suffix in _SIDE_FILES:
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.replace(side, dest.with_name(dest.name + suffix))
    note = (
        f"{label} {path} was corrupt ({reason}); set aside as {dest.name} and started empty; {kept} kept"
    )
    log.error("%s", note)
    return note


def check_store(path: Path, label: str, *, kept: str) -> str | None:
    """Check ``path`` before it is opened; set it aside when corrupt and return the note, else None.

    A missing file is a new store. A zero-byte file is one too (sqlite makes
    it a fresh database), but it may mean a lost store, so the log says so.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size == 0:
        log.warning("%s %s is empty (0 bytes); starting it as a new store", label, path)
        return None
    reason = _problem(path)
    if reason is None:
        return None
    return set_aside(path, label, reason, kept=kept)
