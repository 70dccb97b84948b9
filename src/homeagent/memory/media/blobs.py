"""The bytes of the media store on disk: written atomically, named by their sha256, checked on read.

A blob becomes visible under its digest only by a rename of a complete,
fsynced temporary file (and an fsync of the directory holding it), so no
reader, and no process started after a kill -9 or a power cut, ever sees
half a file under a digest: a half-written blob would poison that digest for
good. A failed write (disk full, the size limit, an empty input) removes its
temporary file before the error leaves. Reads hash what they read and refuse
bytes that do not match their name; the caller then moves the file to
``quarantine/`` where a person can look at it, instead of deleting it.

Layout under the store's folder: ``blobs/<first two hex>/<digest>``,
``tmp/`` (writes in progress), ``quarantine/<digest>.<time>``. Everything
here blocks; the store calls it from a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import time
import uuid
from pathlib import Path

from homeagent.memory.media.errors import MediaError, MediaTooLarge
from homeagent.memory.media.sniff import HEAD_BYTES

__all__ = ["BlobDir", "BlobWriter", "fsync_dir"]

CHUNK = 1 << 20


def fsync_dir(path: Path) -> None:
    """Make a rename or an unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BlobWriter:
    """One blob being written to a temporary file: hashed and size-checked chunk by chunk.

    ``max_bytes`` is enforced as the bytes arrive, so an oversized input is
    refused after ``max_bytes`` + one chunk were read, never after all of it.
    """

    def __init__(self, tmp_dir: Path, max_bytes: int, *, digest: str | None = None) -> None:
        self.max_bytes = max_bytes
        self._known = digest  # the caller hashed these very bytes already (``put_bytes``): not hashed twice
        self.path = tmp_dir / f"{uuid.uuid4().hex}.tmp"
        self.size = 0
        self.head = b""
        self._hash = hashlib.sha256()
        self._finished = False
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)

    def write(self, chunk: bytes) -> None:
        if self._fd is None or self._finished:
            raise MediaError("this blob write was already finished or aborted")
        self.size += len(chunk)
        if self.size > self.max_bytes:
            self.abort()
            raise MediaTooLarge(f"media is larger than the limit of {self.max_bytes} bytes (core.memory.media.max_bytes)")
        if len(self.head) < HEAD_BYTES:
            self.head += chunk[: HEAD_BYTES - len(self.head)]
        if self._known is None:
            self._hash.update(chunk)
        view = memoryview(chunk)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as exc:
            self.abort()
            raise _write_error(exc) from exc

    def finish(self) -> str:
        """End the input and return the digest. An empty blob is refused (and removed).

        The file is not fsynced yet: :meth:`BlobDir.place` does that when the
        bytes turn out to be new, so storing bytes that are already there
        costs no disk flush.
        """
        if self._fd is None or self._finished:
            raise MediaError("this blob write was already finished or aborted")
        if self.size == 0:
            self.abort()
            raise MediaError("the media is empty (0 bytes); nothing was stored")
        self._finished = True
        return self._known or self._hash.hexdigest()

    def sync_and_close(self) -> None:
        """Make the finished temporary file durable before it is renamed into place."""
        if self._fd is None or not self._finished:
            raise MediaError("the blob write is not finished")
        try:
            os.fsync(self._fd)
        except OSError as exc:
            self.abort()
            raise _write_error(exc) from exc
        os.close(self._fd)
        self._fd = None

    def abort(self) -> None:
        """Close and remove the temporary file (idempotent)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _write_error(exc: OSError) -> MediaError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return MediaError(f"could not store the media: {exc.strerror or exc}; nothing was kept")
    return MediaError(f"could not write the media: {exc}; nothing was kept")


class BlobDir:
    """The folders of one store and the file operations on them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs"
        self.tmp = root / "tmp"
        self.quarantine_dir = root / "quarantine"
        for path in (self.root, self.blobs, self.tmp, self.quarantine_dir):
            path.mkdir(parents=True, exist_ok=True)

    def path(self, digest: str) -> Path:
        return self.blobs / digest[:2] / digest

    def writer(self, max_bytes: int, *, digest: str | None = None) -> BlobWriter:
        return BlobWriter(self.tmp, max_bytes, digest=digest)

    def place(self, writer: BlobWriter, digest: str) -> None:
        """Rename the finished temporary file to its digest's name, durably; the caller holds the store's write lock."""
        final = self.path(digest)
        parent = final.parent
        writer.sync_and_close()
        try:
            if not parent.is_dir():
                parent.mkdir(exist_ok=True)
                fsync_dir(self.blobs)
            os.replace(writer.path, final)
            fsync_dir(parent)
        except OSError as exc:
            writer.abort()
            raise _write_error(exc) from exc

    def read_verified(self, digest: str, size: int | None = None) -> bytes:
        """The blob's bytes after checking their sha256; ``MediaCorrupt``-worthy problems raise ``ValueError``.

        ``FileNotFoundError`` when the file is gone; ``ValueError`` naming what
        is wrong when its length or hash does not match.
        """
        path = self.path(digest)
        with open(path, "rb") as fh:
            data = fh.read()
        if size is not None and len(data) != size:
            raise ValueError(f"the file holds {len(data)} bytes, {size} were stored")
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise ValueError(f"its bytes hash to {actual[:12]}…, not to its name")
        return data

    def quarantine(self, digest: str) -> Path | None:
        """Move a damaged blob aside (never delete it); returns where it went, or None when it was gone."""
        dest = self.quarantine_dir / f"{digest}.{time.strftime('%Y%m%d-%H%M%S')}"
        try:
            os.replace(self.path(digest), dest)
        except FileNotFoundError:
            return None
        with contextlib.suppress(OSError):
            fsync_dir(self.path(digest).parent)
        return dest

    def remove(self, digest: str) -> bool:
        try:
            self.path(digest).unlink()
        except FileNotFoundError:
            return False
        return True

    def names(self) -> dict[str, Path]:
        """Every file under ``blobs/`` by name (the orphan check of a GC pass)."""
        out: dict[str, Path] = {}
        with os.scandir(self.blobs) as top:
            for sub in top:
                if not sub.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(sub.path) as entries:
                    for entry in entries:
                        out[entry.name] = Path(entry.path)
        return out

    def stale_temporaries(self, older_than: float) -> list[Path]:
        """Temporary files of writes that died (a writer still going touches its file more recently)."""
        cutoff = time.time() - older_than
        stale = []
        with os.scandir(self.tmp) as entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        stale.append(Path(entry.path))
        return stale
