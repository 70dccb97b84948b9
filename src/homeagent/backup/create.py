"""``homeagent backup DEST``: a consistent copy of a data directory, taken while the daemon runs.

The copy is made by the CLI process against the files directly, not through
the daemon's socket: it works the same whether or not a daemon runs, a busy
daemon is never paused, and nothing needs flushing first, because everything
the daemon has acknowledged is already on disk (SQLite commits; the context
journal is fsynced before a turn is answered). What the daemon has not written
yet (the text log's buffer of the last second) is not in the backup.

How each kind of file is copied so that the copy is whole:

- SQLite stores (found by their header, wherever they are: ``config.db``,
  ``memory/graph.db``, ``memory/documents.db``, plugin stores) go through
  SQLite's online backup API in one step: a snapshot of one transaction, read
  through the WAL without blocking the daemon's writers.
- ``context.journal`` and then ``context.json`` (replaced atomically by the
  daemon) are read as a pair that always loads as a state the window had, also
  when a compaction runs in between (see ``_copy_context``). A torn last
  journal line is left out.
- Append-only logs (``*.jsonl``: the text log; ``*.log``: the daemon's log)
  are copied up to their last complete line.
- Other files are copied and re-read if they changed during the copy.

Stores are copied in the order memory flows (context, then documents, then the
graph), so an item that moves from one tier to the next during the backup is at
worst in both copies, never in neither. Skipped: the socket, the lock file,
SQLite's ``-wal``/``-shm`` (the backup API reads them), ``*.tmp`` and
``*.corrupt-*`` files (set aside after damage). Path settings that point outside
the data directory are listed in the manifest, not copied.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from homeagent import __version__
from homeagent.backup.archive import is_archive, pack
from homeagent.backup.manifest import (
    DATA_NAME,
    MANIFEST_NAME,
    BackupError,
    FileEntry,
    Manifest,
    fsync_dir,
    hash_chunks,
    read_chunks,
)
from homeagent.config.defaults import DATA_PATH_KEYS
from homeagent.config.values import decode
from homeagent.memory.journal import journal_path, read_journal
from homeagent.paths import DataPaths

SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
#: copy first, in this order: memory flows context -> documents -> graph
FLOW_ORDER = ("memory/context.json", "memory/documents.db", "memory/graph.db")
#: the context window (L1): a snapshot and the journal of changes since (memory/journal.py)
CONTEXT_PAIR = ("memory/context.json", "memory/context.journal")
RETRIES = 20
#: append-only text files the daemon writes while it runs: copied up to their last whole line
LOG_SUFFIXES = (".jsonl", ".log")


@dataclass(frozen=True)
class _Item:
    rel: PurePosixPath
    path: Path
    kind: str


def create_backup(root: Path, dest: Path, *, progress: Callable[[str], None] | None = None) -> Manifest:
    """Copy the data directory ``root`` into the new folder ``dest``; returns the manifest written last.

    Refuses a ``dest`` that exists and is not empty, or that lies inside ``root``.
    On any failure what was written to ``dest`` is removed again.
    """
    root = Path(root).resolve()
    dest = Path(dest).absolute()
    if is_archive(dest):
        return _create_archive(root, dest, progress)
    if not (root / "config.db").is_file():
        raise BackupError(f"{root} is not a HomeAgent data directory (it has no config.db)")
    if dest.resolve() == root or dest.resolve().is_relative_to(root):
        raise BackupError(f"the backup cannot go inside the data directory it copies ({dest})")
    if dest.exists() and not dest.is_dir():
        raise BackupError(f"{dest} exists and is not a folder; name a new folder for the backup")
    created_dest = not dest.exists()
    if not created_dest and any(dest.iterdir()):
        raise BackupError(f"{dest} is not empty; name a new or empty folder (a backup never overwrites)")
    try:
        dest.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(dest, 0o700)  # the copy holds config.db with its API keys
        manifest = Manifest(source=str(root), created=datetime.now(UTC).isoformat(timespec="seconds"),
                            version=__version__)
        items, manifest.skipped = _collect(root)
        manifest.outside = _outside_paths(root)
        data = dest / DATA_NAME
        for item in items:
            if progress:
                progress(str(item.rel))
            try:
                manifest.files.extend(_copy(item, data, manifest.warnings))
            except FileNotFoundError:  # removed since the listing (a rotated log, a finished download)
                manifest.skipped.append({"path": str(item.rel), "reason": "removed during the backup"})
        _write_atomic(dest / MANIFEST_NAME, manifest.to_json())
        fsync_dir(dest)
    except BaseException:
        if created_dest:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for child in dest.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        child.unlink()
        raise
    return manifest


def _create_archive(root: Path, archive: Path, progress: Callable[[str], None] | None) -> Manifest:
    """A backup folder made beside ``archive``, packed into it, then removed."""
    if archive.exists() or archive.is_symlink():
        raise BackupError(f"{archive} exists; name a new file (a backup never overwrites)")
    archive.parent.mkdir(parents=True, exist_ok=True)
    folder = archive.with_name(f".{archive.name}.{os.getpid()}.partial-dir")
    try:
        manifest = create_backup(root, folder, progress=progress)
        pack(folder, archive)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return manifest


# ----------------------------------------------------------------------------- what to copy
def _collect(root: Path) -> tuple[list[_Item], list[dict[str, str]]]:
    items: list[_Item] = []
    skipped: list[dict[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        here = Path(dirpath)
        for name in dirnames:
            if (here / name).is_symlink():
                skipped.append({"path": _rel(root, here / name), "reason": "symbolic link (not followed)"})
        for name in sorted(filenames):
            path = here / name
            rel = _rel(root, path)
            reason = _skip_reason(path, name)
            if reason is not None:
                if reason:
                    skipped.append({"path": rel, "reason": reason})
                continue
            if rel in CONTEXT_PAIR:  # the window's snapshot and journal: one item, copied as a pair
                if not any(item.kind == "context" for item in items):
                    items.append(_Item(PurePosixPath(CONTEXT_PAIR[0]), root / CONTEXT_PAIR[0], "context"))
                continue
            if _is_sqlite(path):
                kind = "sqlite"
            elif name.endswith(LOG_SUFFIXES):
                kind = "log"
            else:
                kind = "file"
            items.append(_Item(PurePosixPath(rel), path, kind))

    def order(item: _Item) -> tuple[int, str]:
        rel = str(item.rel)
        return (FLOW_ORDER.index(rel) if rel in FLOW_ORDER else len(FLOW_ORDER), rel)

    return sorted(items, key=order), skipped


def _skip_reason(path: Path, name: str) -> str | None:
    """Why a file is left out ("" = silently: it is part of something copied another way), or None."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return ""  # gone since the listing (a temporary file)
    if stat.S_ISLNK(st.st_mode):
        return "symbolic link (not followed)"
    if stat.S_ISSOCK(st.st_mode):
        return ""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if name == "daemon.lock":
        return ""
    if ".corrupt-" in name:
        return "set aside as damaged"
    if name.endswith(SQLITE_SIDE_FILES) and _is_sqlite(path.with_name(name.rsplit("-", 1)[0])):
        return ""
    if name.endswith(".tmp"):
        return "temporary file"
    return None


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _outside_paths(root: Path) -> list[dict[str, str]]:
    """Path settings that point outside the data directory: their files are not in the backup."""
    paths = DataPaths(root)
    out: list[dict[str, str]] = []
    try:
        db = _open_ro(root / "config.db")
        try:
            marks = ",".join("?" * len(DATA_PATH_KEYS))
            rows = db.execute(f"SELECT key, value FROM config WHERE key IN ({marks})", DATA_PATH_KEYS).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return out
    for key, raw in sorted(rows):
        value = decode(raw)
        if not isinstance(value, str) or not value.strip():
            continue
        resolved = paths.resolve(value, root)
        if not resolved.resolve().is_relative_to(root):
            out.append({"key": key, "path": str(resolved)})
    return out


# ----------------------------------------------------------------------------- copying
def _copy(item: _Item, data: Path, warnings: list[str]) -> list[FileEntry]:
    target = data / item.rel
    target.parent.mkdir(parents=True, exist_ok=True)
    if item.kind == "context":
        return _copy_context(item, data)
    mode = stat.S_IMODE(item.path.stat().st_mode)
    if item.kind == "sqlite":
        return [_copy_sqlite(item, target, mode)]
    if item.kind == "log":
        content = item.path.read_bytes()
        return [_write_entry(item.rel, target, "log", [content[: content.rfind(b"\n") + 1]], mode)]
    return [_copy_file(item, target, mode, warnings)]


def _copy_sqlite(item: _Item, target: Path, mode: int) -> FileEntry:
    try:
        source = _open_ro(item.path)
        try:
            copy = sqlite3.connect(target)
            try:
                source.backup(copy)  # one step: a snapshot of a single read transaction
                check = copy.execute("PRAGMA quick_check").fetchone()
            finally:
                copy.close()
        finally:
            source.close()
    except sqlite3.Error as exc:
        raise BackupError(f"cannot back up the store {item.rel}: {exc}") from None
    if check is None or check[0] != "ok":
        raise BackupError(f"the copy of the store {item.rel} fails SQLite's check ({check[0] if check else '?'})")
    return _write_entry(item.rel, target, "sqlite", None, mode)


def _open_ro(path: Path) -> sqlite3.Connection:
    """A connection that only reads; one that leaves no ``-wal``/``-shm`` behind where there were none.

    A ``mode=ro`` connection cannot remove the side files it had to create, so it
    is used only when they exist already (a daemon runs, or was killed); else a
    plain connection that is told to refuse writes, which removes them at close.
    """
    if Path(f"{path}-wal").exists():
        db = sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?mode=ro", uri=True, timeout=10)
    else:  # mode=rw: a store that vanished meanwhile is an error, never created empty in the source
        db = sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?mode=rw", uri=True, timeout=10)
        db.execute("PRAGMA query_only = 1")
    db.execute("PRAGMA busy_timeout = 10000")
    return db


def _copy_context(item: _Item, data: Path) -> list[FileEntry]:
    """The context snapshot and its journal as one consistent state, without pausing the daemon.

    The journal is read first, then the snapshot. Without a compaction in
    between, the snapshot is the one the journal continues; with one, the newer
    snapshot holds every record the journal copy has (its ``journal_seq`` is at
    least their number), so replay skips them. Either way the pair loads as a
    state the window really had. (The other order can leave a gap: an old
    snapshot and a journal emptied by a compaction in between.) A torn last
    line of the journal, a write in progress, is left out.
    """
    snapshot, snap_rel = item.path, item.rel
    journal, journal_rel = journal_path(snapshot), snap_rel.with_suffix(".journal")
    mode = 0o600  # as the daemon writes them: the conversation is private
    try:
        tail: bytes | None = journal.read_bytes()
    except FileNotFoundError:
        tail = None
    try:
        snap: bytes | None = snapshot.read_bytes()
    except FileNotFoundError:
        snap = None
    entries = []
    if snap is not None:
        entries.append(_write_entry(snap_rel, data / snap_rel, "context", [snap], mode))
    if tail is not None:
        good = read_journal(tail).good_bytes
        entries.append(_write_entry(journal_rel, data / journal_rel, "journal", [tail[:good]], mode))
    return entries


def _copy_file(item: _Item, target: Path, mode: int, warnings: list[str]) -> FileEntry:
    """Copy a file, again if it changed meanwhile; one that never holds still is kept with a warning."""
    for _ in range(RETRIES):
        before = item.path.stat()
        entry = _write_entry(item.rel, target, "file", read_chunks(item.path), mode)
        after = item.path.stat()
        if (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns):
            return entry
        time.sleep(0.05)
    warnings.append(f"{item.rel} kept changing while it was copied; its copy may be torn")
    return entry


def _write_entry(rel: PurePosixPath, target: Path, kind: str, chunks: Iterable[bytes] | None, mode: int) -> FileEntry:
    """Write ``chunks`` to ``target`` (or hash it as it is when None), fsync, and describe it."""
    if chunks is None:
        fd = os.open(target, os.O_RDONLY)
        try:
            size, digest = hash_chunks(read_chunks(target))
            os.fsync(fd)
        finally:
            os.close(fd)
    else:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            size, digest = hash_chunks(chunks, fd)
            os.fsync(fd)
        finally:
            os.close(fd)
    os.chmod(target, mode & 0o777)
    return FileEntry(path=str(rel), kind=kind, size=size, sha256=digest, mode=mode & 0o777)


def _write_atomic(path: Path, content: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        hash_chunks([content], fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)

