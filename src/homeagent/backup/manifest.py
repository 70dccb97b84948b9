"""The backup manifest: what a backup holds, and the check that it is whole.

A backup is a folder: ``homeagent-backup.json`` (this manifest) beside ``data/``,
a copy of the data directory. The manifest is written last, so a backup that
was cut short has none and is refused. It lists every file with its size,
sha256 and mode; restore re-reads every byte against it before writing
anything, so a truncated or changed file is named instead of restored.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

MANIFEST_NAME = "homeagent-backup.json"
DATA_NAME = "data"
FORMAT = "homeagent-backup"
FORMAT_VERSION = 1
CHUNK = 1 << 20


class BackupError(Exception):
    """A backup or restore that was refused or failed; the message names the file and what to do."""


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the data directory, '/'-separated
    kind: str  # sqlite | context | journal | log | file
    size: int
    sha256: str
    mode: int = 0o600


@dataclass
class Manifest:
    source: str
    created: str
    version: str
    files: list[FileEntry] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    outside: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "homeagent_version": self.version,
            "created": self.created,
            "source": self.source,
            "files": [asdict(f) for f in self.files],
            "skipped": self.skipped,
            "outside": self.outside,
            "warnings": self.warnings,
        }
        return json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, where: Path) -> Manifest:
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BackupError(f"{where}: the manifest is not readable JSON ({exc}); the backup is damaged") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise BackupError(f"{where}: not a HomeAgent backup manifest")
        if doc.get("format_version") != FORMAT_VERSION:
            raise BackupError(
                f"{where}: backup format {doc.get('format_version')!r} is not supported by this version "
                f"(it reads format {FORMAT_VERSION}); restore it with the HomeAgent that made it"
            )
        try:
            files = [
                FileEntry(
                    path=str(safe_relpath(str(f["path"]))),
                    kind=str(f["kind"]),
                    size=int(f["size"]),
                    sha256=str(f["sha256"]),
                    mode=int(f.get("mode", 0o600)) & 0o777,
                )
                for f in doc["files"]
            ]
            return cls(
                source=str(doc.get("source", "")),
                created=str(doc.get("created", "")),
                version=str(doc.get("homeagent_version", "")),
                files=files,
                skipped=list(doc.get("skipped", [])),
                outside=list(doc.get("outside", [])),
                warnings=[str(w) for w in doc.get("warnings", [])],
            )
        except BackupError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise BackupError(f"{where}: the manifest is malformed ({type(exc).__name__}: {exc})") from None


def safe_relpath(text: str) -> PurePosixPath:
    """A manifest path that stays inside the folder it is joined to (no absolute path, no ``..``)."""
    path = PurePosixPath(text)
    if not text or path.is_absolute() or "\\" in text or any(part in ("", ".", "..") for part in text.split("/")):
        raise BackupError(f"unsafe path in the manifest: {text!r}")
    return path


def hash_chunks(chunks: Iterable[bytes], out: int | None = None) -> tuple[int, str]:
    """(size, sha256) of ``chunks``, written to the file descriptor ``out`` on the way when given."""
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
        if out is not None:
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
    return size, digest.hexdigest()


def read_chunks(path: Path) -> Iterable[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(backup: Path, shown: Path | None = None) -> Manifest:
    where = backup / MANIFEST_NAME
    if not backup.is_dir():
        raise BackupError(f"{backup} is not a backup folder or .tar.gz (`homeagent backup DEST` makes one)")
    real = where
    if shown is not None:  # a .tar.gz unpacked into ``backup``: name what the user gave
        where, backup = shown / MANIFEST_NAME, shown
    try:
        data = real.read_bytes()
    except FileNotFoundError:
        raise BackupError(
            f"{backup} has no {MANIFEST_NAME}: it is not a HomeAgent backup, or the backup was interrupted "
            "(the manifest is written last)"
        ) from None
    except OSError as exc:
        raise BackupError(f"{where}: cannot read the manifest ({exc})") from None
    return Manifest.from_json(data, where)


def verify(backup: Path, shown: Path | None = None) -> Manifest:
    """The manifest of ``backup`` after every file it lists was read back and matched; else BackupError naming the file.

    ``shown`` is the name the user gave (a ``.tar.gz`` unpacked into ``backup``).
    """
    manifest = read_manifest(backup, shown)
    data = backup / DATA_NAME
    name = shown or backup
    for entry in manifest.files:
        path = data / entry.path
        try:
            size, digest = hash_chunks(read_chunks(path))
        except FileNotFoundError:
            raise BackupError(f"backup {name} is damaged: {DATA_NAME}/{entry.path} is missing") from None
        except OSError as exc:
            raise BackupError(f"backup {name} is damaged: {DATA_NAME}/{entry.path} cannot be read ({exc})") from None
        if size != entry.size:
            raise BackupError(
                f"backup {name} is damaged: {DATA_NAME}/{entry.path} has {size} bytes, the manifest says "
                f"{entry.size} (truncated or changed after the backup)"
            )
        if digest != entry.sha256:
            raise BackupError(
                f"backup {name} is damaged: {DATA_NAME}/{entry.path} does not match its sha256 in the manifest "
                "(changed or corrupted after the backup)"
            )
    return manifest
