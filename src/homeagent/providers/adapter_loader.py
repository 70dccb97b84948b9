"""Finds adapter files (the user's folder first, then the built-in ones), loads each into its own
sandbox and reloads it when the file changes.

Loading checks the script's shape (which fields, of which Lua types) and gives a
declared ``request_format`` its Lua transform, so every mistake is reported with
the file's name when the file is read, not in the middle of a request.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from homeagent.lua.runtime import HttpPolicy, LuaError, LuaSandbox
from homeagent.msg import Msg
from homeagent.providers.adapter import Adapter, AdapterError, chunkname

__all__ = ["BUILTIN_DIR", "AdapterInfo", "AdapterLoader"]

BUILTIN_DIR = Path(__file__).parent / "adapters"
COMPAT_LIB = "_openai_compat.lua"


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    path: str
    builtin: bool
    overrides_builtin: bool
    version: str
    error: str


@dataclass
class _Entry:
    path: Path
    builtin: bool
    mtime_ns: int
    size: int
    adapter: Adapter | None
    error: AdapterError | None


class AdapterLoader:
    """Finds adapters by name: the user's folder first, then the built-in ones.

    :meth:`get` checks the file's mtime and size (a ``stat`` per candidate
    file) and reloads a changed file; a newly added user file overrides the
    built-in of the same name, and removing it falls back again. A broken file
    raises :class:`AdapterError` (with file and line) until it is fixed.

    The check runs at most once per ``recheck_seconds`` for each adapter (the
    daemon uses 1 s): every LLM call asks for its adapter, and the stats cost
    ~30 µs a call, while an edited file only needs to be noticed within a
    moment. 0 checks on every call. :meth:`forget` drops the remembered
    answers, for callers that just wrote a file.
    """

    def __init__(
        self,
        builtin_dir: Path | str | None = None,
        user_dir: Path | str | None = None,
        *,
        max_memory: int = 64 * 1024 * 1024,
        instruction_budget: int = 2_000_000,
        http_client: httpx.AsyncClient | None = None,
        http_policy: HttpPolicy | None = None,
        logger: logging.Logger | None = None,
        recheck_seconds: float = 0.0,
    ) -> None:
        self.user_dir = Path(user_dir) if user_dir else None
        self.builtin_dir = Path(builtin_dir) if builtin_dir else BUILTIN_DIR
        self.max_memory = max_memory
        self.instruction_budget = instruction_budget
        self.http_client = http_client
        self.http_policy = http_policy or HttpPolicy()
        self.log = logger or logging.getLogger("homeagent.providers.adapters")
        self._entries: dict[str, _Entry] = {}
        self._compat_source: tuple[int, str] | None = None
        self.recheck_seconds = max(0.0, float(recheck_seconds))
        # key -> (monotonic time of the last file check, what it gave)
        self._checked: dict[str, tuple[float, Adapter | AdapterError]] = {}

    def forget(self) -> None:
        """Check the files again on the next :meth:`get` (after writing or removing one)."""
        self._checked.clear()

    def _recent(self, key: str) -> Adapter | None:
        hit = self._checked.get(key) if self.recheck_seconds else None
        if hit is None or time.monotonic() - hit[0] >= self.recheck_seconds:
            return None
        if isinstance(hit[1], AdapterError):
            raise hit[1]
        return hit[1]

    def _remember(self, key: str, found: Callable[[], Adapter]) -> Adapter:
        if not self.recheck_seconds:
            return found()
        try:
            adapter = found()
        except AdapterError as exc:
            self._checked[key] = (time.monotonic(), exc)
            raise
        self._checked[key] = (time.monotonic(), adapter)
        return adapter

    # ---------------------------------------------------------------- discovery
    def _candidates(self, name: str) -> Iterator[tuple[Path, bool]]:
        if self.user_dir is not None:
            yield self.user_dir / f"{name}.lua", False
        yield self.builtin_dir / f"{name}.lua", True

    def names(self) -> list[str]:
        found: set[str] = set()
        for folder in (self.builtin_dir, self.user_dir):
            if folder is not None and folder.is_dir():
                found.update(p.stem for p in folder.glob("*.lua") if not p.name.startswith("_"))
        return sorted(found)

    def exists(self, name: str) -> bool:
        return _valid_name(name) and any(path.is_file() for path, _ in self._candidates(name))

    # ------------------------------------------------------------------ loading
    def get(self, name: str) -> Adapter:
        """The current adapter called ``name`` (reloaded if its file changed)."""
        key = f"name:{name}"
        return self._recent(key) or self._remember(key, lambda: self._find(name, key))

    def _find(self, name: str, key: str) -> Adapter:
        if not _valid_name(name):
            raise AdapterError(Msg("invalid adapter name {name!r}", name=name))
        for path, builtin in self._candidates(name):
            try:
                st = path.stat()
            except OSError:
                continue
            return self._load_cached(key, path, builtin, st)
        raise AdapterError(Msg("adapter '{name}' not found (available: {names})", name=name,
                               names=", ".join(self.names()) or Msg("none")))

    def load_path(self, path: Path | str) -> Adapter:
        """The adapter in an explicit file (``adapter_path``), reloaded if it changed."""
        key = f"path:{path}"
        return self._recent(key) or self._remember(key, lambda: self._load_path(Path(path).expanduser()))

    def _load_path(self, p: Path) -> Adapter:
        try:
            st = p.stat()
        except OSError as exc:
            raise AdapterError(Msg("adapter file {path} cannot be read: {reason}", path=p, reason=exc.strerror),
                               path=str(p)) from None
        builtin = p.resolve().parent == self.builtin_dir.resolve()
        return self._load_cached(f"path:{p.resolve()}", p, builtin, st)

    def check_file(self, path: Path | str) -> Adapter:
        """Load a file as an adapter to validate it; nothing is kept (raises AdapterError)."""
        p = Path(path)
        try:
            st = p.stat()
        except OSError as exc:
            raise AdapterError(Msg("adapter file {path} cannot be read: {reason}", path=p, reason=exc.strerror),
                               path=str(p)) from None
        return self._load_file(p, False, st.st_mtime_ns)

    def _load_cached(self, key: str, path: Path, builtin: bool, st: os.stat_result) -> Adapter:
        entry = self._entries.get(key)
        if entry is not None and entry.path == path and entry.mtime_ns == st.st_mtime_ns and entry.size == st.st_size:
            if entry.adapter is not None:
                return entry.adapter
            assert entry.error is not None
            raise entry.error
        adapter: Adapter | None = None
        error: AdapterError | None = None
        try:
            adapter = self._load_file(path, builtin, st.st_mtime_ns)
            verb = "reloaded" if entry is not None else "loaded"
            self.log.info("adapter %s %s from %s (version %s)", adapter.name, verb, path, adapter.version)
        except AdapterError as exc:
            error = exc
            self.log.error("adapter %s rejected: %s", path, exc)
        self._entries[key] = _Entry(path, builtin, st.st_mtime_ns, st.st_size, adapter, error)
        if adapter is None:
            assert error is not None
            raise error
        return adapter

    def _compat(self) -> str:
        path = self.builtin_dir / COMPAT_LIB
        st = path.stat()
        if self._compat_source is None or self._compat_source[0] != st.st_mtime_ns:
            self._compat_source = (st.st_mtime_ns, path.read_text(encoding="utf-8"))
        return self._compat_source[1]

    def _load_file(self, path: Path, builtin: bool, mtime_ns: int) -> Adapter:
        chunk = chunkname(path, builtin)
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise AdapterError(f"{chunk}: cannot read: {exc}", path=str(path)) from None
        sandbox = LuaSandbox(
            f"adapter:{path.stem}",
            max_memory=self.max_memory,
            instruction_budget=self.instruction_budget,
            http=self.http_policy,
            http_client=self.http_client,
            logger=logging.getLogger(f"homeagent.adapters.{path.stem}"),
        )
        try:
            compat_globals: dict[str, Any] = {}
            if (self.builtin_dir / COMPAT_LIB).is_file():
                compat_globals["openai_compat"] = sandbox.load(self._compat(), f"adapters/{COMPAT_LIB}")
            table = sandbox.load(source, chunk, globals=compat_globals)
        except LuaError as exc:
            message = exc.message if chunk in exc.message else f"{chunk}: {exc.message}"
            raise AdapterError(message, path=str(path), location=exc.location) from None
        _check_shape(sandbox, table, chunk, path)
        if table["request_format"] is not None:
            _declared_request(sandbox, table, compat_globals, chunk, path)
        try:
            return Adapter(sandbox, table, path, builtin=builtin, mtime_ns=mtime_ns)
        except LuaError as exc:
            raise AdapterError(f"{chunk}: {exc.message}", path=str(path)) from None

    def info(self) -> list[AdapterInfo]:
        """Every adapter name with where it comes from and whether it loads."""
        out: list[AdapterInfo] = []
        for name in self.names():
            builtin_file = (self.builtin_dir / f"{name}.lua").is_file()
            user_file = self.user_dir is not None and (self.user_dir / f"{name}.lua").is_file()
            try:
                adapter = self.get(name)
                out.append(AdapterInfo(name, str(adapter.path), adapter.builtin, bool(user_file and builtin_file),
                                       adapter.version, ""))
            except AdapterError as exc:
                path = (self.user_dir / f"{name}.lua") if (user_file and self.user_dir) else self.builtin_dir / f"{name}.lua"
                out.append(AdapterInfo(name, str(path), not user_file, bool(user_file and builtin_file), "", str(exc)))
        return out


def _valid_name(name: str) -> bool:
    return bool(name) and all(c.isalnum() or c in "-_." for c in name) and not name.startswith(".")


def _check_shape(sandbox: LuaSandbox, table: Any, chunk: str, path: Path) -> None:
    lua_type = sandbox.lua_type
    if lua_type(table) != "table":
        raise AdapterError(Msg("{chunk}: the script must return a table (got {kind})", chunk=chunk, kind=lua_type(table)),
                           path=str(path))
    declared = table["request_format"] is not None
    rules = {
        "transform_request": ("nil",) if declared else ("function",),
        "request_format": ("string", "nil"),
        "request_options": ("table", "nil"),
        "transform_response": ("function",),
        "transform_stream_chunk": ("function", "nil"),
        "endpoint": ("string", "function"),
        "headers": ("table", "function", "nil"),
        "name": ("string", "nil"),
        "version": ("string", "number", "nil"),
        "needs_api_key": ("boolean", "nil"),
        "stream_format": ("string", "nil"),  # read by earlier versions (a host fast path); now ignored
    }
    for key, allowed in rules.items():
        actual = lua_type(table[key])
        if actual not in allowed:
            if key == "transform_request" and declared:
                raise AdapterError(Msg("{chunk}: give either 'transform_request' or 'request_format', not both", chunk=chunk),
                                   path=str(path))
            want = " or ".join(a for a in allowed if a != "nil")
            if actual == "nil":
                raise AdapterError(Msg("{chunk}: field '{key}' is missing, expected a {want}", chunk=chunk, key=key,
                                       want=want), path=str(path))
            raise AdapterError(Msg("{chunk}: field '{key}' is a {actual}, expected a {want}", chunk=chunk, key=key,
                                   actual=actual, want=want), path=str(path))


REQUEST_FORMATS = ("openai",)  # values of an adapter's `request_format` field
# request_options: what openai_compat.request takes (name -> the Lua type it must have)
_REQUEST_OPTIONS = {"stream_usage": "boolean", "strip": "set", "max_tokens_field": "string", "extra": "boolean",
                    "drop_extra": "set"}


def _declared_request(sandbox: LuaSandbox, table: Any, compat_globals: dict[str, Any], chunk: str,
                      path: Path) -> None:
    """Checks ``request_format`` / ``request_options`` and gives the adapter the Lua transform they
    stand for, ``openai_compat.request(req, request_options)``: one implementation of the OpenAI
    body, the same one the shipped OpenAI-style adapters call."""
    fmt = table["request_format"]
    if fmt not in REQUEST_FORMATS:
        raise AdapterError(Msg("{chunk}: field 'request_format' is {fmt!r}, expected one of: {known}", chunk=chunk,
                               fmt=fmt, known=", ".join(REQUEST_FORMATS)), path=str(path))
    if "openai_compat" not in compat_globals:
        raise AdapterError(Msg("{chunk}: 'request_format' needs {lib}, which is missing", chunk=chunk, lib=COMPAT_LIB),
                           path=str(path))
    options = table["request_options"]
    for key, value in (options.items() if options is not None else ()):
        want = _REQUEST_OPTIONS.get(key) if isinstance(key, str) else None
        if want is None:
            raise AdapterError(Msg("{chunk}: request_options.{key} is not an option; known: {known}", chunk=chunk,
                                   key=key, known=", ".join(_REQUEST_OPTIONS)), path=str(path))
        if want == "set":
            ok = sandbox.lua_type(value) == "table" and all(
                isinstance(k, str) and v is True for k, v in value.items())
            if not ok:
                raise AdapterError(Msg("{chunk}: request_options.{key} must be a table of names set to true, "
                                       "e.g. {{reasoning_content = true}}", chunk=chunk, key=key), path=str(path))
        elif not isinstance(value, bool if want == "boolean" else str) or (want == "string" and not value):
            raise AdapterError(Msg("{chunk}: request_options.{key} must be a {want}", chunk=chunk, key=key, want=want),
                               path=str(path))
    make = sandbox.load("return function(t) local o = t.request_options "
                        "t.transform_request = function(req) return openai_compat.request(req, o) end end",
                        "homeagent/request_format", globals=compat_globals)
    sandbox.call(make, table)


