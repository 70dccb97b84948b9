"""Built-in ``files``: read, write, edit and list files inside one folder.

The model gets ``<name>_read``, ``<name>_write``, ``<name>_edit`` and
``<name>_ls`` (``files_*`` for the built-in instance), confined to the folder
in the ``dir`` setting (by default the plugin's own data folder, never ``/``).

Why the confinement is done by hand instead of ``realpath`` + prefix check:
a check on a path and a later ``open`` of the same path are two lookups, and
anything that can create files in the folder (the model through ``cmd_run``,
another program) can swap a directory for a symlink in between. So every
lookup walks the path one component at a time from an open descriptor of the
root (``openat`` with ``O_NOFOLLOW``), keeping the descriptors it walks
through. A symlink is read and followed by the same walk, so one that stays
inside the folder works and one that leads out (directly, through ``..``, an
absolute target or a chain) is refused; a component that changes between the
``stat`` and the ``open`` fails with ELOOP/ENOTDIR instead of escaping.
Only regular files are read or written (no devices, FIFOs or sockets).

Whatever the folder, writes never land where they would give the model new
powers (:class:`WriteGuard`): the plugin and adapter folders (code the daemon
loads) and the rest of the data directory (``config.db``, the ``core.llm``
snapshot, other plugins' data), except the plugin's own data folder and the
knowledge base. The target is checked by name before any folder is created
and again, by the real path of the opened parent folder, before the write.

Writes are atomic: the new content goes to a temporary file in the same
folder, is fsynced, gets the old file's mode, and replaces the old file with
``rename``; ``create`` uses ``link`` so that it never clobbers a file that
appeared meanwhile. All file I/O runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homeagent.paths import DataPaths
from homeagent.sdk.api import PluginSDK
from homeagent.sdk.types import ConfigDef, ToolDef

__all__ = ["Confined", "FilesPlugin", "PathError", "WriteGuard", "create_plugin"]

MAX_LINKS = 40
DEFAULT_LS_LIMIT = 500
MAX_LS_LIMIT = 5000
DEFAULT_READ_LINES = 2000
NEW_FILE_MODE = 0o644
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class PathError(Exception):
    """A path the plugin will not touch; the message is meant for the model."""


def _err(message: str) -> dict[str, Any]:
    return {"isError": True, "content": message}


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "other"


@dataclass(frozen=True)
class Confined:
    """A folder that paths are confined to; every method may raise PathError or OSError.

    ``root`` is the folder as configured; ``real`` is where it really is (its
    symlinks resolved once, when the plugin reads the setting). Both spellings
    are accepted in absolute paths.
    """

    root: Path
    real: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str], *, create: bool = False) -> Confined:
        path = Path(root).expanduser()
        if not path.is_absolute():
            raise PathError(f"the folder {str(root)!r} must be an absolute path")
        if create:
            path.mkdir(parents=True, exist_ok=True)
        if not path.is_dir():
            raise PathError(f"the folder {path} does not exist or is not a directory")
        return cls(path, path.resolve())

    # -- path → components ------------------------------------------------

    def _relative_to_root(self, path: str, original: str) -> list[str]:
        for base in (str(self.real), str(self.root)):
            base = base.rstrip("/") or "/"
            if path == base:
                return []
            prefix = base if base == "/" else base + "/"
            if path.startswith(prefix):
                return path[len(prefix):].split("/")
        raise PathError(f"{original!r} is outside the allowed folder {self.root}")

    def components(self, path: str) -> list[str]:
        """``path`` (relative to the root, or absolute inside it) as components; ``..`` kept for the walk."""
        if not isinstance(path, str):
            raise PathError("a path must be text")
        if "\x00" in path:
            raise PathError("a path cannot contain a NUL character")
        if path.startswith("/"):
            return [p for p in self._relative_to_root(path, path) if p not in ("", ".")]
        return [p for p in path.split("/") if p not in ("", ".")]

    # -- the walk ---------------------------------------------------------

    def walk(self, path: str, *, make_dirs: bool = False) -> tuple[int, str | None]:
        """Resolve ``path`` inside the root without ever leaving it.

        Returns ``(dir_fd, name)``: ``name`` is the final component inside the
        directory ``dir_fd`` (it may not exist; it is never a symlink at the
        time of the walk), or None when the path names a directory reached by
        the walk itself (the root, or a path ending in ``..``). The caller
        closes ``dir_fd``. With ``make_dirs`` missing intermediate folders are
        created.
        """
        todo: deque[str] = deque(self.components(path))
        stack: list[int] = [os.open(self.real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
        links = 0
        shown = path or "."
        try:
            while todo:
                comp = todo.popleft()
                if comp in ("", "."):
                    continue
                if comp == "..":
                    if len(stack) == 1:
                        if links:
                            raise PathError(f"{shown!r} goes through a symbolic link that points outside the "
                                            f"allowed folder {self.root}")
                        raise PathError(f"{shown!r} leads outside the allowed folder {self.root}")
                    os.close(stack.pop())
                    continue
                top = stack[-1]
                try:
                    st = os.stat(comp, dir_fd=top, follow_symlinks=False)
                except FileNotFoundError:
                    if not todo:
                        return self._keep(stack), comp
                    if not make_dirs:
                        raise PathError(f"{shown!r}: folder {comp!r} does not exist") from None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(comp, 0o755, dir_fd=top)
                    todo.appendleft(comp)
                    continue
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_LINKS:
                        raise PathError(f"{shown!r}: too many levels of symbolic links")
                    target = os.readlink(comp, dir_fd=top)
                    if target.startswith("/"):
                        try:
                            parts = self._relative_to_root(target, shown)
                        except PathError:
                            raise PathError(
                                f"{shown!r} goes through a symbolic link that points outside the allowed folder"
                            ) from None
                        while len(stack) > 1:
                            os.close(stack.pop())
                    else:
                        parts = target.split("/")
                    todo.extendleft(reversed(parts))
                    continue
                if not todo:
                    return self._keep(stack), comp
                if not stat.S_ISDIR(st.st_mode):
                    raise PathError(f"{shown!r}: {comp!r} is not a folder")
                try:
                    stack.append(os.open(comp, _DIR_FLAGS, dir_fd=top))
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise PathError(f"{shown!r} changed while it was being opened; try again") from None
                    raise
            return self._keep(stack), None
        except BaseException:
            for fd in stack:
                os.close(fd)
            raise

    @staticmethod
    def _keep(stack: list[int]) -> int:
        """Close every descriptor of the walk but the last, and return that one."""
        for fd in stack[:-1]:
            os.close(fd)
        last = stack[-1]
        stack.clear()
        return last

    def open_dir(self, path: str) -> int:
        """An open descriptor of the folder ``path`` (the caller closes it)."""
        parent, name = self.walk(path)
        if name is None:
            return parent
        try:
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=parent)
            except FileNotFoundError:
                raise PathError(f"{path!r} does not exist") from None
            except OSError as e:
                if e.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise PathError(f"{path!r} is not a folder") from None
                raise
        finally:
            os.close(parent)

    def display(self, path: str) -> str:
        """``path`` as shown back to the model: relative to the root (not normalised through symlinks)."""
        parts: list[str] = []
        for p in self.components(path):
            if p == "..":
                if parts:
                    parts.pop()
            else:
                parts.append(p)
        return "/".join(parts) or "."


@dataclass(frozen=True)
class WriteGuard:
    """Folders the files tools never write into, whatever their root (all paths resolved).

    ``code`` (plugins, adapters) is refused outright; inside ``data`` only
    ``allowed`` folders (the plugin's own data, the knowledge base) may be written.
    """

    code: tuple[Path, ...] = ()
    data: Path | None = None
    allowed: tuple[Path, ...] = ()

    def reason(self, target: Path) -> str | None:
        """Why writing ``target`` (a resolved absolute path) would widen the model's powers, or None."""
        for folder in self.code:
            if target.is_relative_to(folder):
                return f"it is inside {folder}, which holds code the daemon loads"
        if self.data is not None and target.is_relative_to(self.data):
            if not any(target.is_relative_to(a) for a in self.allowed):
                return f"it is inside the daemon's data folder {self.data} (settings, plugins, other plugins' data)"
        return None

    def check_name(self, root: Confined, path: str, shown: str) -> None:
        """Refuse by the path as written, before the walk creates any folder."""
        lexical = Path(os.path.normpath(os.path.join(root.real, *root.components(path))))
        if lexical.is_relative_to(root.real):  # a path that leaves the root is the walk's to refuse
            self._refuse(lexical, shown)

    def check_fd(self, parent: int, name: str, shown: str) -> None:
        """Refuse by where the opened parent folder really is (symlinks followed by the walk)."""
        try:
            real = Path(os.readlink(f"/proc/self/fd/{parent}")) / name
        except OSError:
            return  # no /proc: the name check stands alone
        self._refuse(real, shown)

    def _refuse(self, target: Path, shown: str) -> None:
        why = self.reason(target)
        if why is not None:
            raise PathError(f"{shown!r} cannot be written: {why}. Only the owner may put files there.")


# ---------------------------------------------------------------- file operations


def _not_regular(mode: int, shown: str) -> PathError:
    if stat.S_ISDIR(mode):
        return PathError(f"{shown!r} is a folder; use the ls tool")
    return PathError(f"{shown!r} is a {_kind(mode)}, not a regular file; refused")


def _read_regular(parent: int, name: str, shown: str, max_bytes: int) -> tuple[bytes, os.stat_result]:
    try:
        before = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        raise PathError(f"{shown!r} does not exist") from None
    if not stat.S_ISREG(before.st_mode) and not stat.S_ISLNK(before.st_mode):
        raise _not_regular(before.st_mode, shown)
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise PathError(f"{shown!r} does not exist") from None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.ENODEV):
            raise PathError(f"{shown!r} changed while it was being opened; try again") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(st.st_mode, shown)
        if st.st_size > max_bytes:
            raise PathError(f"{shown!r} is {st.st_size} bytes, more than the limit of {max_bytes} (max_file_bytes)")
        chunks = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise PathError(f"{shown!r} grew past the limit of {max_bytes} bytes while being read")
        return data, st
    finally:
        os.close(fd)


def _existing(parent: int, name: str, shown: str, max_bytes: int) -> tuple[bytes | None, int]:
    """The current content and mode of ``name`` (None, default mode when it does not exist)."""
    try:
        data, st = _read_regular(parent, name, shown, max_bytes)
    except PathError:
        try:
            os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None, NEW_FILE_MODE
        raise
    return data, stat.S_IMODE(st.st_mode)


def _atomic_write(parent: int, name: str, data: bytes, mode: int, *, exclusive: bool) -> None:
    tmp = f".{name[:200]}.{uuid.uuid4().hex[:12]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            os.link(tmp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
            os.unlink(tmp, dir_fd=parent)
        else:
            os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=parent)
        raise
    with contextlib.suppress(OSError):  # some file systems cannot fsync a directory
        os.fsync(parent)


def _decode(data: bytes, shown: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PathError(f"{shown!r} is not UTF-8 text; refusing to change it (that could corrupt it)") from None


def _insert(text: str, content: str, line: int, shown: str) -> str:
    lines = text.splitlines(keepends=True)
    if line < 1 or line > len(lines) + 1:
        raise PathError(f"line {line} is outside {shown!r}, which has {len(lines)} lines (use 1…{len(lines) + 1})")
    if line > 1 and lines and not lines[line - 2].endswith(("\n", "\r")):
        lines[line - 2] += "\n"
    if content and not content.endswith("\n") and line <= len(lines):
        content += "\n"
    lines.insert(line - 1, content)
    return "".join(lines)


def apply_edits(text: str, edits: list[Mapping[str, Any]]) -> str:
    """``text`` with every ``{old, new}`` applied in order; each ``old`` must occur exactly once."""
    for i, edit in enumerate(edits, start=1):
        old = edit.get("old")
        new = edit.get("new")
        if not isinstance(old, str) or not isinstance(new, str):
            raise PathError(f"edit {i}: both 'old' and 'new' must be text")
        if old == "":
            raise PathError(f"edit {i}: 'old' is empty; give the exact text to replace")
        count = text.count(old)
        if count == 0:
            raise PathError(f"edit {i}: 'old' was not found (it must match the file exactly, whitespace included); "
                            "nothing was written")
        if count > 1:
            raise PathError(f"edit {i}: 'old' matches {count} places; include more surrounding text so it matches "
                            "exactly one; nothing was written")
        text = text.replace(old, new, 1)
    return text


# ---------------------------------------------------------------- the plugin


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


class FilesPlugin:
    """The ``files`` tools over one confined folder; settings are read on every call."""

    def __init__(self, name: str, data_dir: Path | None = None) -> None:
        self.name = name
        self._data_dir = data_dir
        self._sdk: PluginSDK | None = None

    # -- settings -----------------------------------------------------------

    def _setting(self, key: str, default: Any) -> Any:
        assert self._sdk is not None
        value = self._sdk.settings.get(key, default)
        return default if value is None else value

    def _int(self, key: str, default: int) -> int:
        try:
            return int(self._setting(key, default))
        except (TypeError, ValueError):
            return default

    def confined(self) -> Confined:
        """The folder as configured now (created when it is the default data folder); does file I/O."""
        assert self._sdk is not None
        configured = str(self._setting("dir", "") or "").strip()
        if not configured:
            return Confined.at(self._sdk.settings.data_dir(), create=True)
        return Confined.at(configured)

    def write_guard(self) -> WriteGuard:
        """Where writes are refused, from the daemon's data folder and the plugin-dir setting; does file I/O."""
        assert self._sdk is not None
        s = self._sdk.settings
        data = self._data_dir or Path(str(s.get_core("core.daemon.data_dir", "") or "")) or None
        code: list[Path] = []
        plugin_dir = str(s.get_core("core.plugin.dir", "") or "").strip()
        allowed = [Path(s.data_dir()).resolve()]
        if data is not None and str(data):
            # path settings are stored relative to the data dir: resolve them the way the daemon does
            paths = DataPaths(Path(data).expanduser().resolve())
            code += [paths.resolve(plugin_dir, paths.plugins).resolve(), paths.plugins, paths.adapters]
            knowledge = str(s.get_core("core.knowledge.path", "") or "")
            allowed.append(paths.resolve(knowledge, paths.knowledge).resolve())
            return WriteGuard(tuple(code), paths.root, tuple(allowed))
        if plugin_dir and Path(plugin_dir).expanduser().is_absolute():
            code.append(Path(plugin_dir).expanduser().resolve())
        return WriteGuard(tuple(code))

    async def _in_thread(self, fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            return fn(self.confined(), *args)

        return await asyncio.to_thread(run)

    async def _writing(self, fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            return fn(self.confined(), self.write_guard(), *args)

        return await asyncio.to_thread(run)

    # -- lifecycle ----------------------------------------------------------

    def start(self, sdk: PluginSDK) -> None:
        self._sdk = sdk
        s = sdk.settings
        s.register_def(ConfigDef(
            key="dir", default="", type="string", category="files", display_name="Folder",
            description="The only folder the files tools may touch (absolute path). Empty: the plugin's own data "
                        "folder. Setting it to / gives the model your whole file system.",
            placeholder="/home/me/notes", owner_only=True,
        ))
        s.register_def(ConfigDef(
            key="max_file_bytes", default=10_000_000, type="int", category="files", display_name="Largest file",
            description="Files larger than this are not read, edited or written (bytes).", min=1024,
        ))
        s.register_def(ConfigDef(
            key="read_only", default=False, type="bool", category="files", display_name="Read only",
            description="Refuse every write and edit.", owner_only=True,
        ))
        n = self.name
        tools: list[tuple[ToolDef, Handler]] = [
            (ToolDef(
                name=f"{n}_read",
                description=f"Read a text file in the {n} folder. Returns lines offset…offset+limit-1 (1-based).",
                parameters=_schema({
                    "path": {"type": "string", "description": "file path, relative to the folder"},
                    "offset": {"type": "integer", "minimum": 0, "description": "first line to return, 1-based (default 1)"},
                    "limit": {"type": "integer", "minimum": 1, "description": f"most lines to return (default {DEFAULT_READ_LINES})"},
                }, ["path"]),
            ), self._read),
            (ToolDef(
                name=f"{n}_write",
                description=f"Write a text file in the {n} folder, atomically. mode: overwrite (default), append, "
                            "insert (before line `line`), create (fails if it exists). Missing folders are created.",
                parameters=_schema({
                    "path": {"type": "string", "description": "file path, relative to the folder"},
                    "content": {"type": "string"},
                    "mode": {"type": "string", "enum": ["overwrite", "append", "insert", "create"]},
                    "line": {"type": "integer", "minimum": 1, "description": "for insert: 1-based line to insert before"},
                }, ["path", "content"]),
                serial=True, parallel_safe=False,
            ), self._write),
            (ToolDef(
                name=f"{n}_edit",
                description=f"Replace text in a file in the {n} folder. Each edit's `old` must occur exactly once; "
                            "if any edit fails, nothing is written.",
                parameters=_schema({
                    "path": {"type": "string"},
                    "edits": {
                        "type": "array", "minItems": 1,
                        "items": {
                            "type": "object",
                            "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                            "required": ["old", "new"],
                        },
                    },
                }, ["path", "edits"]),
                serial=True, parallel_safe=False,
            ), self._edit),
            (ToolDef(
                name=f"{n}_ls",
                description=f"List a folder inside the {n} folder (name, type, size).",
                parameters=_schema({
                    "path": {"type": "string", "description": "folder, relative (default: the folder itself)"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LS_LIMIT,
                              "description": f"most entries (default {DEFAULT_LS_LIMIT})"},
                }, []),
                no_memory=True,
            ), self._ls),
        ]
        for tool, handler in tools:
            sdk.register_tool(tool, _guard(handler))

    def stop(self) -> None:
        self._sdk = None

    # -- tools --------------------------------------------------------------

    async def _read(self, args: dict[str, Any]) -> Any:
        offset = max(1, int(args.get("offset") or 1))
        limit = int(args.get("limit") or DEFAULT_READ_LINES)
        max_bytes = self._int("max_file_bytes", 10_000_000)
        return await self._in_thread(read_text, str(args["path"]), offset, limit, max_bytes)

    async def _write(self, args: dict[str, Any]) -> Any:
        if self._setting("read_only", False):
            return _err(f"the {self.name} folder is read-only (setting read_only)")
        mode = str(args.get("mode") or "overwrite")
        line = args.get("line")
        if mode == "insert" and line is None:
            return _err("mode insert needs `line` (1-based line to insert before)")
        return await self._writing(
            write_text, str(args["path"]), str(args["content"]), mode, int(line or 0),
            self._int("max_file_bytes", 10_000_000),
        )

    async def _edit(self, args: dict[str, Any]) -> Any:
        if self._setting("read_only", False):
            return _err(f"the {self.name} folder is read-only (setting read_only)")
        return await self._writing(edit_text, str(args["path"]), list(args["edits"]),
                                   self._int("max_file_bytes", 10_000_000))

    async def _ls(self, args: dict[str, Any]) -> Any:
        limit = min(MAX_LS_LIMIT, int(args.get("limit") or DEFAULT_LS_LIMIT))
        return await self._in_thread(list_dir, str(args.get("path") or ""), limit)


def _guard(fn: Handler) -> Handler:
    async def call(args: dict[str, Any]) -> Any:
        try:
            return await fn(args)
        except PathError as e:
            return _err(str(e))
        except OSError as e:
            return _err(f"{e.strerror or type(e).__name__}" + (f": {e.filename}" if e.filename else ""))

    return call


# ---------------------------------------------------------------- operations (worker thread)


def read_text(root: Confined, path: str, offset: int, limit: int, max_bytes: int) -> dict[str, Any]:
    shown = root.display(path)
    parent, name = root.walk(path)
    try:
        if name is None:
            raise PathError(f"{shown!r} is a folder; use the ls tool")
        data, st = _read_regular(parent, name, shown, max_bytes)
    finally:
        os.close(parent)
    if b"\x00" in data[:8192]:
        return _err(f"{shown!r} looks like a binary file ({len(data)} bytes); not shown")
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    chosen = lines[offset - 1: offset - 1 + limit]
    return {
        "path": shown,
        "content": "".join(chosen),
        "start_line": offset if chosen else 0,
        "end_line": offset + len(chosen) - 1 if chosen else 0,
        "total_lines": len(lines),
        "truncated": offset - 1 + len(chosen) < len(lines),
        "size": st.st_size,
    }


def write_text(root: Confined, guard: WriteGuard, path: str, content: str, mode: str, line: int,
               max_bytes: int) -> dict[str, Any]:
    shown = root.display(path)
    if mode not in ("overwrite", "append", "insert", "create"):
        raise PathError(f"unknown mode {mode!r}; use overwrite, append, insert or create")
    guard.check_name(root, path, shown)
    parent, name = root.walk(path, make_dirs=True)
    try:
        if name is None:
            raise PathError(f"{shown!r} is a folder, not a file")
        guard.check_fd(parent, name, shown)
        old, file_mode = _existing(parent, name, shown, max_bytes)
        if mode == "create" and old is not None:
            raise PathError(f"{shown!r} already exists (mode create never overwrites)")
        if mode == "append":
            new = (_decode(old, shown) if old is not None else "") + content
        elif mode == "insert":
            if old is None:
                raise PathError(f"{shown!r} does not exist; cannot insert into it")
            new = _insert(_decode(old, shown), content, line, shown)
        else:
            new = content
        data = new.encode("utf-8")
        if len(data) > max_bytes:
            raise PathError(f"the result would be {len(data)} bytes, more than the limit of {max_bytes} (max_file_bytes)")
        try:
            _atomic_write(parent, name, data, file_mode, exclusive=mode == "create")
        except FileExistsError:
            raise PathError(f"{shown!r} already exists (mode create never overwrites)") from None
    finally:
        os.close(parent)
    return {"path": shown, "mode": mode, "bytes": len(data), "created": old is None}


def edit_text(root: Confined, guard: WriteGuard, path: str, edits: list[Mapping[str, Any]],
              max_bytes: int) -> dict[str, Any]:
    shown = root.display(path)
    guard.check_name(root, path, shown)
    parent, name = root.walk(path)
    try:
        if name is None:
            raise PathError(f"{shown!r} is a folder, not a file")
        guard.check_fd(parent, name, shown)
        old, file_mode = _existing(parent, name, shown, max_bytes)
        if old is None:
            raise PathError(f"{shown!r} does not exist")
        new = apply_edits(_decode(old, shown), edits)
        data = new.encode("utf-8")
        if len(data) > max_bytes:
            raise PathError(f"the result would be {len(data)} bytes, more than the limit of {max_bytes} (max_file_bytes)")
        _atomic_write(parent, name, data, file_mode, exclusive=False)
    finally:
        os.close(parent)
    return {"path": shown, "edits": len(edits), "bytes": len(data)}


def list_dir(root: Confined, path: str, limit: int) -> dict[str, Any]:
    shown = root.display(path)
    fd = root.open_dir(path)
    try:
        entries: list[dict[str, Any]] = []
        with os.scandir(fd) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                item: dict[str, Any] = {"name": entry.name, "type": _kind(st.st_mode)}
                if stat.S_ISREG(st.st_mode):
                    item["size"] = st.st_size
                entries.append(item)
    finally:
        os.close(fd)
    entries.sort(key=lambda e: (e["type"] != "dir", e["name"]))
    return {"path": shown, "entries": entries[:limit], "total": len(entries), "truncated": len(entries) > limit}


def create_plugin(name: str, config: Mapping[str, Any]) -> FilesPlugin:
    data_dir = getattr(config.get("services"), "data_dir", None)
    return FilesPlugin(name, Path(data_dir) if data_dir is not None else None)
