"""The data-directory lock: two daemons never run on one data directory.

A ``flock`` on ``<data>/daemon.lock`` belongs to the open file, so the kernel
drops it when the process dies, even by ``kill -9``: there is never a stale lock
to clean up. The file holds the owner's pid only so that the refusal can name
it; the lock itself, not the file's content or existence, is what counts.
``restore`` uses :func:`lock_holder` to refuse a directory a daemon runs on.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path


class AlreadyRunning(Exception):
    pass


def _read_pid(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
    except OSError:
        return "?"


class DataDirLock:
    """An exclusive lock on the data directory, held for the daemon's whole life."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:  # taken early by `homeagent run`, before the slow imports
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            pid = _read_pid(fd)
            os.close(fd)
            raise AlreadyRunning(
                f"another HomeAgent daemon (pid {pid}) is already running on {self.path.parent}; "
                "stop it with `homeagent stop` or use another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def lock_holder(path: Path) -> str | None:
    """The pid (as text, ``"?"`` if unknown) of the daemon holding ``path``, or None when nobody holds it.

    Never creates the file: probing a directory must not change it.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return _read_pid(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
