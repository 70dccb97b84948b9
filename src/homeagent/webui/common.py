"""What every part of the web API shares: the context object, errors, JSON bodies, route declarations.

Routes are declared as :class:`Op` values (method, path, handler and what the
OpenAPI schema says about them), so the router and the published schema are
built from one list and cannot drift apart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from homeagent.msg import Msg
from homeagent.text import TooDeep, loads
from homeagent.webui.auth import LoginLimiter, Session, SessionStore, TokenStore
from homeagent.webui.hosts import HostCheck
from homeagent.webui.sse import StreamRegistry

if TYPE_CHECKING:
    from homeagent.config import ConfigRegistry
    from homeagent.memory.media import MediaInfo, PutResult
    from homeagent.webui.host import WebHost
    from homeagent.webui.turns import TurnSlots

Handler = Callable[[Request], Awaitable[Response]]
MAX_JSON_BYTES = 1024 * 1024


class ApiError(Exception):
    """An error answered as ``{"error": message, ...extra}`` with ``status``.

    ``message`` (and any text in ``extra``) may be a :class:`~homeagent.msg.Msg`: the
    error handler renders it in the request's language (``webui/lang.py``); plain
    text is answered as it is.
    """

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra
        self.headers: dict[str, str] = {}

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message, **self.extra}, status_code=self.status, headers=self.headers)


@dataclass
class Principal:
    """Who made a request: the API token, or a browser session."""

    kind: str  # "token" | "session"
    session: Session | None = None

    @property
    def key(self) -> str:
        """Scopes per-client state (chat de-duplication) so nothing leaks between sessions."""
        return f"session:{self.session.id}" if self.session is not None else "token"


class MediaLibrary(Protocol):
    """What the web UI uses of the media store: keep uploads, list and show entries, serve verified bytes."""

    async def aput_file(self, path: Path | str, **kw: Any) -> PutResult: ...

    async def aput_bytes(self, data: bytes, **kw: Any) -> PutResult: ...

    async def alist(self, **kw: Any) -> list[MediaInfo]: ...

    async def ainfo(self, ref: str) -> MediaInfo: ...

    async def arefs_of(self, ref: str) -> list[dict[str, Any]]: ...

    async def aget(self, ref: str) -> bytes: ...

    async def astats(self) -> dict[str, Any]: ...


@dataclass
class WebContext:
    """State of one web server, handed to every route module (no globals).

    ``daemon`` is the typed :class:`~homeagent.webui.host.WebHost` the daemon built: the only way routes
    reach a subsystem.
    """

    daemon: WebHost
    tokens: TokenStore
    sessions: SessionStore
    limiter: LoginLimiter
    streams: StreamRegistry
    uploads_dir: Path
    turns: TurnSlots
    hosts: HostCheck = field(default_factory=HostCheck)
    started: float = field(default_factory=time.time)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def config(self) -> ConfigRegistry:
        return self.daemon.config

    @property
    def media(self) -> MediaLibrary | None:
        """The media store, when core.memory.media.enabled (and it opened)."""
        return self.daemon.media

    def files_root(self) -> Path:
        """The folder the file tools reach: ``plugin.files.dir``, else the files plugin's data folder."""
        paths = self.daemon.paths
        return paths.resolve(str(self.config.get("plugin.files.dir") or ""), paths.plugin_data("files"))

    def workspace(self) -> Path:
        """Where commands run: ``core.agent.workdir``, else the cmd plugin's data folder."""
        paths = self.daemon.paths
        return paths.resolve(str(self.config.get("core.agent.workdir") or ""), paths.plugin_data("cmd"))

    def chat_uploads(self) -> Path:
        """Where chat uploads go: inside the files folder, so the model reads one with ``files_read uploads/NAME``
        (``uploads_dir``, in the data dir the file tools never reach, only stages plugin packages)."""
        return self.files_root() / "uploads"

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        """A task the server owns (cancelled on close)."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task


@dataclass(frozen=True)
class Op:
    """One API operation: routing plus what the OpenAPI schema says about it."""

    method: str
    path: str
    handler: Handler
    summary: str
    tag: str
    body: dict[str, Any] | None = None  # JSON Schema of a JSON request body
    form: dict[str, Any] | None = None  # JSON Schema of a multipart body
    query: tuple[str, ...] = ()
    stream: bool = False  # answers text/event-stream
    returns: str = "object"  # the JSON type of a successful answer ("array" for lists)


def principal_of(request: Request) -> Principal:
    principal = request.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):  # the auth middleware always sets it on protected routes
        raise ApiError(401, Msg("authentication required"))
    return principal


async def read_body(request: Request, *, limit: int = MAX_JSON_BYTES) -> bytes:
    """The whole request body; 413 as soon as it passes ``limit`` bytes (nothing more is buffered)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise ApiError(413, Msg("request body too large (limit {limit} bytes)", limit=limit))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, Msg("request body too large (limit {limit} bytes)", limit=limit))
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, *, limit: int = MAX_JSON_BYTES) -> Any:
    """The request's JSON body; 413 past ``limit`` bytes, 400 with the parser's message when malformed."""
    raw = await read_body(request, limit=limit)
    if not raw.strip():
        raise ApiError(400, Msg("a JSON body is required"))
    return parse_json(raw)


async def read_optional_object(request: Request) -> dict[str, Any]:
    """A JSON object body where the body may be left out (``{}`` then)."""
    raw = await read_body(request)
    if not raw.strip():
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise ApiError(400, Msg("expected a JSON object, got {kind}", kind=type(body).__name__))
    return body


def parse_json(raw: bytes) -> Any:
    """JSON bytes, or ApiError 400 with the parser's reason."""
    try:
        # lone surrogates become U+FFFD here, once, for every JSON body (chat, OpenAI-compatible, management)
        return loads(raw)
    except TooDeep as exc:
        raise ApiError(400, Msg("malformed JSON: {reason}", reason=str(exc))) from None
    except RecursionError:
        raise ApiError(400, Msg("malformed JSON: nested too deeply")) from None
    except UnicodeDecodeError:
        raise ApiError(400, Msg("malformed JSON: the body is not UTF-8")) from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, Msg("malformed JSON: {reason} at line {line} column {column}", reason=exc.msg, line=exc.lineno,
                                 column=exc.colno)) from None
    except ValueError as exc:  # NaN, Infinity, a number out of range: refused by loads with its reason
        raise ApiError(400, Msg("malformed JSON: {reason}", reason=str(exc))) from None


async def read_object(request: Request) -> dict[str, Any]:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(400, Msg("expected a JSON object, got {kind}", kind=type(body).__name__))
    return body


def field_str(body: dict[str, Any], name: str, *, required: bool = True, max_len: int = 1_000_000) -> str:
    value = body.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ApiError(400, Msg("field {name!r} must be a string", name=name), field=name)
    if required and not value.strip():
        raise ApiError(400, Msg("field {name!r} must not be empty", name=name), field=name)
    if len(value) > max_len:
        raise ApiError(413, Msg("field {name!r} is too long (limit {limit} characters)", name=name, limit=max_len), field=name)
    return value


def query_int(request: Request, name: str, default: int, *, lo: int = 0, hi: int = 1_000_000) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, Msg("query parameter {name!r} must be a whole number", name=name)) from None
    return max(lo, min(hi, value))


def path_id(request: Request, name: str = "id") -> int:
    """A row id from the path: ASCII digits only (``str.isdigit`` also takes "²", which ``int`` refuses), and at
    most 18 of them, so it fits SQLite's 64-bit integers (a longer one raised OverflowError: a 500)."""
    raw = str(request.path_params.get(name, ""))
    if not (raw.isascii() and raw.isdigit()):
        raise ApiError(400, Msg("{name} must be a whole number", name=name))
    if len(raw) > 18:
        raise ApiError(400, Msg("{name} is out of range (18 digits at most)", name=name))
    return int(raw)


def jsonable(value: Any) -> Any:
    """Objects with ``to_dict`` (preferred: their public shape), dataclasses, paths and sets made JSON-able."""
    if hasattr(value, "to_dict") and callable(value.to_dict) and not isinstance(value, type):
        return jsonable(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def ok(data: Any = None, status: int = 200) -> JSONResponse:
    return JSONResponse(jsonable(data if data is not None else {"ok": True}), status_code=status)


def all_ops(groups: Iterable[list[Op]]) -> list[Op]:
    return [op for group in groups for op in group]
