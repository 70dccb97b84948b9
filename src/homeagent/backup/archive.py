"""Backups as one ``.tar.gz`` file: the backup folder, packed and unpacked.

The archive holds exactly what a backup folder holds (``data/`` and the
manifest); it is written under a ``.partial`` name and renamed when complete,
so a file with the final name is never cut short by an interrupted backup.
Unpacking uses tarfile's ``data`` filter (no absolute paths, no ``..``, no
links out, no device files), and the manifest is checked afterwards as for a
folder.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from homeagent.backup.manifest import DATA_NAME, MANIFEST_NAME, BackupError, fsync_dir

SUFFIXES = (".tar.gz", ".tgz")


def is_archive(path: Path) -> bool:
    return path.name.endswith(SUFFIXES)


def pack(folder: Path, archive: Path) -> None:
    """Write the backup ``folder`` as the gzip'd tar ``archive`` (the manifest as the last member)."""
    partial = archive.with_name(archive.name + ".partial")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # the archive holds API keys
        with os.fdopen(fd, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz") as tar:
                tar.add(folder / DATA_NAME, arcname=DATA_NAME)
                tar.add(folder / MANIFEST_NAME, arcname=MANIFEST_NAME)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(partial, archive)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    fsync_dir(archive.parent)


@contextlib.contextmanager
def unpacked(archive: Path, near: Path) -> Iterator[Path]:
    """The archive unpacked into a temporary folder in ``near`` (the same disk as the restore), removed afterwards."""
    if not archive.is_file():
        raise BackupError(f"{archive} is not a file")
    near.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".homeagent-unpack-", dir=near))
    try:
        try:
            with tarfile.open(archive, mode="r:gz") as tar:
                tar.extractall(folder, filter="data")
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise BackupError(f"backup {archive} is damaged or truncated ({exc or type(exc).__name__})") from None
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
