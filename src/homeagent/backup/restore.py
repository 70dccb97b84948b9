"""``homeagent restore SRC``: a backup becomes a data directory, all or nothing.

Every file is checked against the manifest before anything is written (a
damaged backup is named and nothing happens). The files are then written into a
hidden folder beside the target, checked again as they are written, and the
folder is renamed onto the target in one step. The target must be new or an
empty folder, and no daemon may run on it: a restore never mixes two data
directories and never overwrites one. If a daemon starts on the target while
the restore runs, the final rename fails and the restore is undone.

The restored ``config.db`` may carry absolute paths of the machine it came
from (backups made before paths were stored relative); config migration 2
rewrites them at the first start, so the restored directory uses its own files.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from homeagent.backup.archive import is_archive, unpacked
from homeagent.backup.manifest import (
    DATA_NAME,
    BackupError,
    Manifest,
    fsync_dir,
    hash_chunks,
    read_chunks,
    verify,
)
from homeagent.datalock import lock_holder
from homeagent.paths import DataPaths


def check_backup(backup: Path) -> Manifest:
    """Verify a backup folder or ``.tar.gz`` against its manifest, writing nothing else; returns the manifest."""
    backup = Path(backup).absolute()
    if is_archive(backup):
        with unpacked(backup, near=Path(tempfile.gettempdir())) as folder:
            return verify(folder, shown=backup)
    return verify(backup)


def restore_backup(backup: Path, target: Path) -> Manifest:
    """Restore ``backup`` (a folder or ``.tar.gz``) into the new or empty folder ``target``; returns the manifest."""
    backup = Path(backup).absolute()
    target = Path(target).absolute()
    if is_archive(backup):
        _check_target(target)  # before unpacking what may be gigabytes
        with unpacked(backup, near=target.parent) as folder:
            return _restore_folder(folder, target, shown=backup)
    return _restore_folder(backup, target, shown=backup)


def _restore_folder(backup: Path, target: Path, *, shown: Path) -> Manifest:
    manifest = verify(backup, shown=shown)
    _check_target(target)
    staging = target.parent / f".{target.name}.restoring-{os.getpid()}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir(mode=0o700)
        data = backup / DATA_NAME
        for entry in manifest.files:
            out = staging / entry.path
            out.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                size, digest = hash_chunks(read_chunks(data / entry.path), fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            if (size, digest) != (entry.size, entry.sha256):
                raise BackupError(
                    f"backup {shown} changed while it was restored: {DATA_NAME}/{entry.path} no longer matches "
                    "its manifest; nothing was restored"
                )
            os.chmod(out, entry.mode)
        DataPaths(staging).ensure()  # the folders every data directory has, mode 0700
        _check_target(target)
        try:
            os.rename(staging, target)  # replaces an empty folder in one step, fails on a non-empty one
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise BackupError(f"{target} was filled while the restore ran; nothing was restored") from None
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(target.parent)
    return manifest


def _check_target(target: Path) -> None:
    if target.exists() and not target.is_dir():
        raise BackupError(f"{target} exists and is not a folder; restore into a new or empty folder")
    if not target.exists():
        return
    pid = lock_holder(DataPaths(target).lock)
    if pid is not None:
        raise BackupError(
            f"a HomeAgent daemon (pid {pid}) is running on {target}; stop it (`homeagent stop`) and restore into "
            "a new folder"
        )
    if any(target.iterdir()):
        raise BackupError(
            f"{target} is not empty; restore into a new or empty folder (move the old data directory aside first: "
            "a restore never overwrites one)"
        )

