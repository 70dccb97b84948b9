"""``.hmap`` packages: zip files holding one plugin, checked before a byte is extracted.

A package comes from strangers, so everything is bounded and nothing is
trusted: the file size, the number of entries, the total uncompressed size and
each entry's compression ratio (zip bombs); entry names (no ``..``, absolute
paths, drive letters, backslashes, symlinks, encrypted or duplicate entries);
the manifest (see manifest.py) and that its ``entry`` is in the package.
Extraction goes to a temporary folder next to the target and is renamed into
place, so a failed install leaves nothing behind and an upgrade replaces the
old version in one step (the old one is restored if the swap fails).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from homeagent import __version__
from homeagent.msg import Joined, Msg, message_of
from homeagent.plugins.manifest import MANIFEST_NAME, Manifest, ManifestError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "INSTALL_RECORD",
    "MAX_ENTRIES",
    "MAX_PACKAGE_BYTES",
    "MAX_RATIO",
    "MAX_UNCOMPRESSED_BYTES",
    "PACKAGE_EXT",
    "PackageError",
    "PackageInfo",
    "download_package",
    "entry_present",
    "extract_package",
    "inspect_package",
    "pack_folder",
    "pack_plugin",
    "packable",
    "remove_plugin_dir",
    "sha256_file",
]

PACKAGE_EXT = ".hmap"
MAX_PACKAGE_BYTES = 100 * 1024 * 1024
MAX_UNCOMPRESSED_BYTES = 500 * 1024 * 1024
MAX_ENTRIES = 10_000
MAX_RATIO = 100  # uncompressed / compressed, per entry larger than RATIO_FLOOR
RATIO_FLOOR = 1024 * 1024
INSTALL_RECORD = ".install.json"
_SKIP_NAMES = {".git", ".hg", ".svn", "__pycache__", ".DS_Store", ".pytest_cache", ".mypy_cache", "dist"}


class PackageError(ValueError):
    """A package that cannot be installed; the message says why."""


@dataclass(frozen=True)
class PackageInfo:
    """A package that passed every check."""

    path: Path
    manifest: Manifest
    sha256: str
    size: int
    uncompressed: int
    files: tuple[str, ...]
    prefix: str  # "" or "<top folder>/" when the plugin sits in one folder inside the zip

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.manifest.name,
            "version": self.manifest.version,
            "entry": self.manifest.entry,
            "kind": self.manifest.kind,
            "sha256": self.sha256,
            "size": self.size,
            "uncompressed": self.uncompressed,
            "files": len(self.files),
        }


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _name_problem(name: str) -> str | None:
    if "\x00" in name:
        return Msg("contains a NUL byte")
    if "\\" in name:
        return Msg("contains a backslash")
    if name.startswith("/"):
        return Msg("is an absolute path")
    if len(name) >= 2 and name[1] == ":":
        return Msg("starts with a drive letter")
    if any(part == ".." for part in name.split("/")):
        return Msg("contains '..'")
    return None


def entry_present(files: set[str] | frozenset[str], manifest: Manifest) -> bool:
    """Whether the files (POSIX paths relative to the plugin root) contain what ``entry`` names."""
    entry = manifest.entry
    if manifest.kind == "python" and not entry.endswith(".py"):
        return True  # module:factory may name a bundled module or one installed with pip
    if manifest.kind == "skill":
        return any(f.lower() == "skill.md" for f in files)
    return entry.removeprefix("./") in files


def inspect_package(path: Path, *, host_version: str = __version__) -> PackageInfo:
    """Check ``path`` as a package without extracting it; PackageError says what is wrong."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise PackageError(Msg("cannot read package {path}: {reason}", path=path, reason=e.strerror or e)) from None
    if size > MAX_PACKAGE_BYTES:
        raise PackageError(Msg("package {name} is {mb:.1f} MB; the limit is {limit} MB", name=path.name, mb=size / 1e6,
                               limit=MAX_PACKAGE_BYTES // 2**20))
    if not zipfile.is_zipfile(path):
        raise PackageError(Msg("{name} is not a zip archive (a .hmap package is a zip file)", name=path.name))
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            prefix, files, total = _check_entries(infos)
            skill_only = MANIFEST_NAME not in files
            raw = zf.read(prefix + (_skill_entry(files) if skill_only else MANIFEST_NAME))
    except zipfile.BadZipFile as e:
        raise PackageError(Msg("{name} is a damaged zip archive: {reason}", name=path.name, reason=str(e))) from None
    if skill_only:
        manifest = _skill_manifest(raw, prefix.rstrip("/") or path.stem, _skill_entry(files))
    else:
        try:
            manifest = Manifest.parse(raw, source=f"{path.name}:{MANIFEST_NAME}")
        except ManifestError as e:
            raise PackageError(message_of(e)) from None
    problems = manifest.compatibility_problems(host_version)
    if problems:
        raise PackageError(Joined("; ", problems))
    if not entry_present(frozenset(files), manifest):
        raise PackageError(Msg("{name}: entry {entry!r} named in plugin.json is not in the package", name=path.name,
                               entry=manifest.entry))
    return PackageInfo(path, manifest, sha256_file(path), size, total, tuple(files), prefix)


def _check_entries(infos: list[zipfile.ZipInfo]) -> tuple[str, list[str], int]:
    if len(infos) > MAX_ENTRIES:
        raise PackageError(Msg("package has {n} entries; the limit is {limit}", n=len(infos), limit=MAX_ENTRIES))
    seen: set[str] = set()
    total = 0
    for info in infos:
        name = info.filename
        problem = _name_problem(name)
        if problem:
            raise PackageError(Msg("unsafe entry {name!r}: it {problem}", name=name, problem=problem))
        if _is_symlink(info):
            raise PackageError(Msg("unsafe entry {name!r}: symbolic links are not allowed in a package", name=name))
        if info.flag_bits & 0x1:
            raise PackageError(Msg("entry {name!r} is encrypted; packages must not be encrypted", name=name))
        normal = str(PurePosixPath(name)) + ("/" if name.endswith("/") else "")
        if normal in seen:
            raise PackageError(Msg("entry {name!r} appears twice in the package", name=name))
        seen.add(normal)
        total += info.file_size
        if total > MAX_UNCOMPRESSED_BYTES:
            raise PackageError(Msg("package would unpack to more than {limit} MB (possible zip bomb)",
                                   limit=MAX_UNCOMPRESSED_BYTES // 2**20))
        if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise PackageError(Msg("entry {name!r} expands {ratio}x (limit {limit}x; possible zip bomb)", name=name,
                                   ratio=info.file_size // max(info.compress_size, 1), limit=MAX_RATIO))
    files = [i.filename for i in infos if not i.is_dir()]

    def marks_root(names: list[str]) -> bool:
        return MANIFEST_NAME in names or any("/" not in f and f.lower() == "skill.md" for f in names)

    if marks_root(files):
        prefix = ""
    else:
        tops = {f.split("/", 1)[0] for f in files}
        top = next(iter(tops)) + "/" if len(tops) == 1 else ""
        if not top or not marks_root([f[len(top):] for f in files]):
            raise PackageError(Msg("package has no plugin.json (nor a SKILL.md) at its top level"))
        prefix = top
    return prefix, [f[len(prefix) :] for f in files if f.startswith(prefix)], total


def _skill_entry(files: list[str] | frozenset[str]) -> str:
    return sorted(f for f in files if "/" not in f and f.lower() == "skill.md")[0]


def _skill_manifest(raw: bytes, fallback: str, entry: str) -> Manifest:
    """The manifest a SKILL.md-only plugin gets: named by its frontmatter (else its folder), version 0.0.0."""
    from homeagent.plugins.skills import PLUGIN_NAME, skill_name_of

    fallback = re.sub(r"[^A-Za-z0-9_-]+", "-", fallback).strip("-_")[:64] or "skill"
    if not PLUGIN_NAME.match(fallback):
        fallback = f"skill-{fallback}"[:64]
    return Manifest(name=skill_name_of(raw, fallback), version="0.0.0", entry=entry)


def packable(src: Path) -> Manifest:
    """The manifest of plugin folder ``src``: its plugin.json, or one made for a SKILL.md-only folder."""
    if (src / MANIFEST_NAME).is_file() or not src.is_dir():
        return Manifest.load(src / MANIFEST_NAME)
    entries = [p.name for p in src.iterdir() if p.is_file() and p.name.lower() == "skill.md"]
    if not entries:
        raise PackageError(Msg("{src} has no {manifest} and no SKILL.md: it is not a plugin folder", src=src,
                               manifest=MANIFEST_NAME))
    entry = sorted(entries)[0]
    return _skill_manifest((src / entry).read_bytes(), src.name, entry)


def extract_package(info: PackageInfo, plugins_dir: Path, *, upgrade: bool = False, source: str = "") -> Path:
    """Unpack a checked package to ``plugins_dir/<name>``; returns that folder.

    Refuses to replace an installed plugin unless ``upgrade``; never leaves a
    half-written folder behind.
    """
    name = info.manifest.name
    target = plugins_dir / name
    if target.exists() and not upgrade:
        raise PackageError(Msg("plugin {name!r} is already installed at {target}; use --upgrade to replace it", name=name,
                               target=target))
    plugins_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".install-{name}-", dir=plugins_dir))
    try:
        _extract_into(info, tmp)
        record = {
            "sha256": info.sha256,
            "version": info.manifest.version,
            "source": source,
            "installed_at": time.time(),
        }
        (tmp / INSTALL_RECORD).write_text(json.dumps(record, indent=2), encoding="utf-8")
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".old-{name}-", dir=plugins_dir))
            old.rmdir()
            os.replace(target, old)
            try:
                os.replace(tmp, target)
            except OSError:
                os.replace(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _extract_into(info: PackageInfo, dest: Path) -> None:
    written = 0
    root = dest.resolve()
    with zipfile.ZipFile(info.path) as zf:
        for member in zf.infolist():
            if member.is_dir() or not member.filename.startswith(info.prefix):
                continue
            rel = member.filename[len(info.prefix) :]
            out = (dest / rel).resolve()
            if not out.is_relative_to(root):  # belt and braces after _check_entries
                raise PackageError(Msg("unsafe entry {name!r}: it leaves the plugin folder", name=member.filename))
            out.parent.mkdir(parents=True, exist_ok=True)
            mode = (member.external_attr >> 16) & 0o777
            with zf.open(member) as src, open(out, "wb") as dst:
                while block := src.read(1 << 16):
                    written += len(block)
                    if written > MAX_UNCOMPRESSED_BYTES:
                        raise PackageError(Msg("package unpacks to more than its declared size (possible zip bomb)"))
                    dst.write(block)
            os.chmod(out, 0o755 if mode & 0o111 else 0o644)


async def download_package(
    url: str, dest_dir: Path, *, client: httpx.AsyncClient | None = None, timeout: float = 60.0
) -> Path:
    """Fetch an http(s) URL into ``dest_dir`` with the package size cap; returns the file."""
    import httpx  # only installs from a URL need it

    if not url.startswith(("http://", "https://")):
        raise PackageError(Msg("cannot download {url!r}: only http:// and https:// URLs are supported", url=url))
    os.makedirs(dest_dir, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".download-", suffix=PACKAGE_EXT, dir=dest_dir)
    path = Path(name)
    own = client is None
    http = client or httpx.AsyncClient(follow_redirects=True, timeout=httpx.Timeout(timeout, connect=10.0))
    try:
        with os.fdopen(fd, "wb") as f:
            async with http.stream("GET", url) as response:
                if response.status_code != 200:
                    raise PackageError(Msg("download of {url} failed: HTTP {status}", url=url, status=response.status_code))
                declared = response.headers.get("content-length")
                if declared and declared.isdigit() and int(declared) > MAX_PACKAGE_BYTES:
                    raise PackageError(Msg("{url} is {mb:.1f} MB; the limit is {limit} MB", url=url,
                                           mb=int(declared) / 1e6, limit=MAX_PACKAGE_BYTES // 2**20))
                size = 0
                async for block in response.aiter_bytes():
                    size += len(block)
                    if size > MAX_PACKAGE_BYTES:
                        raise PackageError(Msg("{url} is larger than {limit} MB; download stopped", url=url,
                                               limit=MAX_PACKAGE_BYTES // 2**20))
                    f.write(block)
    except httpx.HTTPError as e:
        _unlink(path)
        raise PackageError(Msg("download of {url} failed: {kind}: {reason}", url=url, kind=type(e).__name__,
                               reason=str(e))) from None
    except BaseException:
        _unlink(path)
        raise
    finally:
        if own:
            await http.aclose()
    return path


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def remove_plugin_dir(plugins_dir: Path, name: str) -> Path:
    """Delete an installed plugin's folder; returns the path removed."""
    target = plugins_dir / name
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise PackageError(Msg("invalid plugin name {name!r}", name=name))
    if not target.is_dir():
        raise PackageError(Msg("plugin {name!r} is not installed in {folder}", name=name, folder=plugins_dir))
    trash = Path(tempfile.mkdtemp(prefix=f".remove-{name}-", dir=plugins_dir))
    trash.rmdir()
    os.replace(target, trash)  # atomic: a reload in between sees it either installed or gone
    if trash.is_symlink():  # a shipped plugin is linked in: remove the link, never what it points to
        trash.unlink()
    else:
        shutil.rmtree(trash, ignore_errors=True)
    return target


def pack_plugin(src: Path, out: Path | None = None) -> tuple[Path, Manifest, str]:
    """Zip plugin folder ``src`` into a ``.hmap``; returns (path, manifest, sha256).

    The folder is checked like an installed package would be (manifest, entry
    present, no symlinks); VCS folders, caches and ``dist/`` are left out.
    Entries get a fixed timestamp so the same folder packs to the same bytes.
    """
    src = src.resolve()
    manifest = packable(src)
    files: list[Path] = []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if any(part in _SKIP_NAMES or part.endswith(".pyc") for part in rel.parts):
            continue
        if path.is_symlink():
            raise PackageError(Msg("{path} is a symbolic link; packages cannot contain links", path=rel))
        if path.is_file():
            files.append(path)
    names = frozenset(str(p.relative_to(src).as_posix()) for p in files)
    if not entry_present(names, manifest):
        raise PackageError(Msg("entry {entry!r} named in plugin.json is not in {src}", entry=manifest.entry, src=src))
    out = (out or Path.cwd() / f"{manifest.name}-{manifest.version}{PACKAGE_EXT}").resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for path in files:
                if path.resolve() == out:
                    continue
                info = zipfile.ZipInfo(path.relative_to(src).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = ((0o755 if os.access(path, os.X_OK) else 0o644) | stat.S_IFREG) << 16
                zf.writestr(info, path.read_bytes())
        if tmp.stat().st_size > MAX_PACKAGE_BYTES:
            raise PackageError(Msg("the package would be larger than {limit} MB", limit=MAX_PACKAGE_BYTES // 2**20))
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return out, manifest, sha256_file(out)


def pack_folder(src: Path, staging: Path) -> Path:
    """``src`` packed into a fresh file under ``staging`` (the caller deletes it after installing)."""
    staging.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, name = tempfile.mkstemp(prefix=".folder-", suffix=PACKAGE_EXT, dir=staging)
    os.close(fd)
    try:
        path, _, _ = pack_plugin(src, Path(name))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return path
