"""The web UI and HTTP API, served by uvicorn inside the daemon's own event loop.

``start_webui(daemon.web_host())`` binds the listening socket itself, so a taken port
or a refused address is a clear :class:`WebUIError` (the daemon goes on
without the web UI) rather than uvicorn's ``sys.exit``, and port 0 reports
the port it got. uvicorn's signal handling is switched off: the daemon owns
SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request, cookie_parser
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from homeagent.conversations import conversation_of
from homeagent.memory.media import MediaError
from homeagent.msg import Msg
from homeagent.sdk.types import OutputCap
from homeagent.webui.api import CoreAPI
from homeagent.webui.approvals import ApprovalsAPI
from homeagent.webui.auth import (
    CSRF_COOKIE,
    CSRF_HEADER,
    PLUGIN,
    SESSION_COOKIE,
    TOKEN_HASH_KEY,
    LoginLimiter,
    SessionStore,
    TokenStore,
    csrf_ok,
    webui_defs,
)
from homeagent.webui.chat import ChatAPI
from homeagent.webui.common import ApiError, Handler, Op, Principal, WebContext, all_ops
from homeagent.webui.conversation_routes import ConversationRoutes
from homeagent.webui.host import WebHost
from homeagent.webui.lang import localized, request_lang
from homeagent.webui.manage import ManageAPI
from homeagent.webui.media import MediaRoutes, OutgoingFiles
from homeagent.webui.openai_compat import OpenAICompat
from homeagent.webui.openapi import build_openapi
from homeagent.webui.sse import StreamRegistry
from homeagent.webui.turns import TurnSlots

log = logging.getLogger("homeagent.webui")

STATIC_DIR = Path(__file__).parent / "static"
DEFAULT_LISTEN = "127.0.0.1:8780"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Front-end libraries served from node_modules (installed by `npm install`; never copied into the repository).
VENDOR_LIBS = ("marked", "dompurify", "cytoscape")
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
STATIC_TYPES = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".map": "application/json",
}


class WebUIError(Exception):
    """The web UI cannot start; the message says why and what to change."""


# ---------------------------------------------------------------- addresses


def parse_listen(addr: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``; empty host = 127.0.0.1) → (host, port)."""
    text = addr.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise WebUIError(f"webui.listen_addr {addr!r} needs a port, e.g. 127.0.0.1:8780")
    host = host.strip() or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise WebUIError(f"webui.listen_addr {addr!r}: {port_text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise WebUIError(f"webui.listen_addr {addr!r}: port {port} is out of range (0-65535)")
    return host, port


def is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise WebUIError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, _, proto, _, address = infos[0]
    # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY only on such sockets, and without it
    # every keep-alive response waits ~40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, proto or socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(256)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise WebUIError(
                f"cannot listen on {host}:{port}: the port is already in use (another HomeAgent?). "
                "Pick another with `homeagent config set webui.listen_addr 127.0.0.1:PORT`, or run with --no-web."
            ) from None
        raise WebUIError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


# ---------------------------------------------------------------- auth gate


def is_public(method: str, path: str) -> bool:
    if path.startswith(("/static/", "/vendor/")) or path in ("/favicon.ico", "/login"):
        return method in SAFE_METHODS
    return path == "/api/v1/login" and method == "POST"


def wants_json(path: str) -> bool:
    return path.startswith(("/api/", "/v1/", "/files/"))  # /files/: a link the chat made, fetched or opened signed in


def error_body(path: str, status: int, message: str, extra: dict[str, Any] | None = None,
               headers: Headers | None = None) -> dict[str, Any]:
    """The JSON of an error answer; with the request's ``headers``, its messages in the language asked for.

    The OpenAI-compatible routes (``/v1/``) answer in English: their clients are programs.
    """
    if headers is not None and not path.startswith("/v1/"):
        lang = request_lang(headers)
        message, extra = localized(message, lang), localized(extra, lang)
    if path.startswith("/v1/"):  # the shape OpenAI clients parse
        kind = (extra or {}).get("type") or ("authentication_error" if status == 401 else "invalid_request_error")
        return {"error": {"message": message, "type": kind, "param": (extra or {}).get("param"), "code": status}}
    return {"error": message, **(extra or {})}


class AuthGate:
    """Every request is authenticated here, except the login page, the sign-in call and static files."""

    def __init__(self, app: ASGIApp, ctx: WebContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _security_headers(send)
        path: str = scope["path"]
        method: str = scope["method"]
        headers = Headers(scope=scope)
        host = headers.get("host")
        if not self.ctx.hosts.allows(host):
            message = localized(self.ctx.hosts.refusal(host or ""), request_lang(headers))
            log.warning("web UI: refused a request for Host %r (not an address of this server)", (host or "")[:200])
            response: Response = (
                JSONResponse(error_body(path, 421, message), status_code=421)
                if wants_json(path)
                else PlainTextResponse(message, status_code=421)
            )
            await response(scope, receive, send)
            return
        if is_public(method, path):
            await self.app(scope, receive, send)
            return
        principal = self.authenticate(headers)
        if principal is None:
            await self._deny(scope, receive, send, path, headers)
            return
        if principal.session is not None and method not in SAFE_METHODS:
            problem = self._csrf_problem(headers, principal)
            if problem is not None:
                response = JSONResponse(error_body(path, 403, problem, headers=headers), status_code=403)
                await response(scope, receive, send)
                return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    def authenticate(self, headers: Headers) -> Principal | None:
        auth = headers.get("authorization", "")
        api_key = headers.get("x-api-key")
        if auth or api_key:
            scheme, _, value = auth.partition(" ")
            token = api_key if api_key else (value.strip() if scheme.lower() == "bearer" else "")
            return Principal("token") if self.ctx.tokens.check(token) else None
        cookies = cookie_parser(headers.get("cookie", ""))
        session = self.ctx.sessions.get(cookies.get(SESSION_COOKIE))
        return Principal("session", session) if session is not None else None

    def _csrf_problem(self, headers: Headers, principal: Principal) -> Msg | None:
        assert principal.session is not None
        origin = headers.get("origin")
        if origin and origin != "null":
            host = headers.get("host", "")
            if origin.split("://", 1)[-1] != host:
                return Msg("cross-origin write refused")
        cookies = cookie_parser(headers.get("cookie", ""))
        if not csrf_ok(principal.session, headers.get(CSRF_HEADER), cookies.get(CSRF_COOKIE)):
            return Msg("missing or wrong CSRF token (send the homeagent_csrf cookie's value as X-CSRF-Token)")
        return None

    async def _deny(self, scope: Scope, receive: Receive, send: Send, path: str, headers: Headers) -> None:
        response: Response
        if wants_json(path):
            response = JSONResponse(
                error_body(path, 401, Msg("authentication required: send Authorization: Bearer <token> or sign in"),
                           headers=headers),
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="homeagent"'},
            )
        else:
            from urllib.parse import quote

            response = RedirectResponse(f"/login?next={quote(path, safe='/')}", status_code=303)
        await response(scope, receive, send)


def _security_headers(send: Send) -> Send:
    extra = [
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
        (b"content-security-policy", PAGE_CSP.encode()),
    ]

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":  # a response's own stricter header (a file's sandbox) stays alone
            own = [(bytes(k).lower(), v) for k, v in message.get("headers", [])]
            names = {k for k, _ in own}
            message = {**message, "headers": [*own, *(h for h in extra if h[0] not in names)]}
        await send(message)

    return wrapped


# ---------------------------------------------------------------- pages and files


def vendor_roots() -> dict[str, Path]:
    """Where each front-end library is installed (missing ones are left out: the UI degrades)."""
    candidates = [Path(__file__).resolve().parents[3] / "node_modules", Path.cwd() / "node_modules"]
    env = os.environ.get("HOMEAGENT_NODE_MODULES")
    if env:
        candidates.insert(0, Path(env))
    roots: dict[str, Path] = {}
    for lib in VENDOR_LIBS:
        for base in candidates:
            if (base / lib / "package.json").is_file():
                roots[lib] = (base / lib).resolve()
                break
    return roots


def _safe_file(root: Path, rel: str) -> Path | None:
    """``root/rel`` if it is a file inside ``root`` (no traversal, no hidden parts)."""
    if not rel or "\x00" in rel or any(part in ("", ".", "..") or part.startswith(".") for part in rel.split("/")):
        return None
    path = (root / rel).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path


def _file(path: Path, *, cache: str = "no-cache") -> Response:
    media = STATIC_TYPES.get(path.suffix.lower(), "application/octet-stream")
    return FileResponse(path, media_type=media, headers={"Cache-Control": cache})


class Pages:
    def __init__(self, vendor: dict[str, Path] | None = None) -> None:
        self.vendor = vendor_roots() if vendor is None else vendor
        self.static_root = STATIC_DIR.resolve()

    async def index(self, request: Request) -> Response:
        return FileResponse(
            self.static_root / "index.html", media_type="text/html", headers={"Cache-Control": "no-store"}
        )

    async def login(self, request: Request) -> Response:
        return FileResponse(
            self.static_root / "login.html", media_type="text/html", headers={"Cache-Control": "no-store"}
        )

    async def static(self, request: Request) -> Response:
        path = await asyncio.to_thread(_safe_file, self.static_root, str(request.path_params["path"]))
        if path is None:
            return PlainTextResponse("not found", status_code=404)
        return _file(path)

    async def vendor_file(self, request: Request) -> Response:
        root = self.vendor.get(str(request.path_params["lib"]))
        if root is None:
            return PlainTextResponse("library not installed (run `npm install`)", status_code=404)
        path = await asyncio.to_thread(_safe_file, root, str(request.path_params["path"]))
        if path is None:
            return PlainTextResponse("not found", status_code=404)
        return _file(path, cache="public, max-age=86400")

    async def favicon(self, request: Request) -> Response:
        return _file(self.static_root / "logo.svg")


# ---------------------------------------------------------------- the app


def _router(ops: list[Op]) -> list[Route]:
    by_path: dict[str, dict[str, Handler]] = {}
    for op in ops:
        by_path.setdefault(op.path, {})[op.method] = op.handler
    routes = []
    for path, table in by_path.items():
        if "GET" in table:
            table.setdefault("HEAD", table["GET"])

        def endpoint(table: dict[str, Handler]) -> Callable[[Request], Awaitable[Response]]:
            async def dispatch(request: Request) -> Response:
                return await table[request.method](request)

            return dispatch

        routes.append(Route(path, endpoint(table), methods=list(table)))
    return routes


def build_app(ctx: WebContext, *, vendor: dict[str, Path] | None = None) -> tuple[Starlette, list[Op]]:
    pages = Pages(vendor)
    chat = ChatAPI(ctx)
    groups = [CoreAPI(ctx).ops(), chat.ops(), ConversationRoutes(ctx, chat).ops(), ManageAPI(ctx).ops(),
              MediaRoutes(ctx).ops(), OutgoingFiles(ctx).ops(), OpenAICompat(ctx).ops(), ApprovalsAPI(ctx).ops()]
    ops = all_ops(groups)
    schema: dict[str, Any] = {}

    async def openapi(request: Request) -> Response:
        return JSONResponse(schema)

    ops.append(Op("GET", "/api/v1/openapi.json", openapi, "This OpenAPI document", "meta"))
    schema.update(build_openapi(ops))

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return JSONResponse(
            error_body(request.url.path, exc.status, exc.message, exc.extra, headers=request.headers),
            status_code=exc.status,
            headers=exc.headers,
        )

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if wants_json(request.url.path):
            return JSONResponse(
                error_body(request.url.path, exc.status_code, str(exc.detail)),
                status_code=exc.status_code,
                headers=exc.headers,
            )
        return PlainTextResponse(str(exc.detail), status_code=exc.status_code, headers=exc.headers)

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("web request %s %s failed", request.method, request.url.path, exc_info=exc)
        body = error_body(request.url.path, 500, Msg("internal error: {kind}", kind=type(exc).__name__),
                          headers=request.headers)
        return JSONResponse(body, status_code=500)

    routes = [
        Route("/", pages.index, methods=["GET", "HEAD"]),
        Route("/login", pages.login, methods=["GET", "HEAD"]),
        Route("/favicon.ico", pages.favicon, methods=["GET", "HEAD"]),
        Route("/static/{path:path}", pages.static, methods=["GET", "HEAD"]),
        Route("/vendor/{lib}/{path:path}", pages.vendor_file, methods=["GET", "HEAD"]),
        *_router(ops),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(AuthGate, ctx=ctx)],
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: server_error},
    )
    return app, ops


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its signal handlers (the daemon owns SIGINT/SIGTERM) that stops as soon as asked."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.exit_requested = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        # uvicorn polls should_exit every 0.1 s; wait on an event instead, still ticking once a second
        # (the tick refreshes the Date header)
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.exit_requested.wait()

    def request_exit(self) -> None:
        self.should_exit = True
        self.exit_requested.set()


class WebUIServer:
    def __init__(self, daemon: WebHost, *, listen: str | None = None, vendor: dict[str, Path] | None = None) -> None:
        self.daemon = daemon
        self.listen = listen
        self.url = ""
        self.host = ""
        self.port = 0
        self.new_token: str | None = None
        config = daemon.config
        for definition in webui_defs():
            config.register_def(definition, plugin=PLUGIN)
        self.ctx = WebContext(
            daemon=daemon,
            tokens=TokenStore(config),
            sessions=SessionStore(lambda: config.get_int("plugin.webui.session_ttl_hours", 24) * 3600.0),
            limiter=LoginLimiter(),
            streams=StreamRegistry(),
            uploads_dir=daemon.paths.root / "uploads",
            turns=TurnSlots(lambda: config.get_int("plugin.webui.max_concurrent_turns", 8)),
        )
        self.app, self.ops = build_app(self.ctx, vendor=vendor)
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._undo: list[Callable[[], None]] = []

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        config = self.daemon.config
        host, port = parse_listen(self.listen or config.get_str("webui.listen_addr", DEFAULT_LISTEN))
        if not is_loopback(host):
            if not config.get_bool("webui.allow_remote", False):
                raise WebUIError(
                    f"refusing to serve the web UI on {host}: it is not a loopback address. "
                    "Set webui.allow_remote=true to allow it (anyone who can reach the port can try to sign in), "
                    "or use 127.0.0.1."
                )
            log.warning(
                "web UI listens on non-loopback address %s:%d (webui.allow_remote=true); "
                "put it behind TLS if the network is not yours",
                host,
                port,
            )
        sock = await asyncio.to_thread(_bind, host, port)
        self.host, self.port = host, int(sock.getsockname()[1])
        self.url = _url(host, self.port)
        self._configure_hosts()
        self.new_token = self.ctx.tokens.ensure()
        uv_config = uvicorn.Config(
            self.app,
            log_config=None,
            access_log=False,
            lifespan="off",
            ws="none",
            server_header=False,
            proxy_headers=False,
            timeout_graceful_shutdown=2,
            timeout_keep_alive=30,
        )
        self._server = _EmbeddedServer(uv_config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]), name="webui-server")
        while not self._server.started:
            if self._task.done():
                sock.close()
                exc = self._task.exception() if not self._task.cancelled() else None
                raise WebUIError(f"the web server stopped while starting: {exc!r}")
            await asyncio.sleep(0.005)
        self._wire()
        log.info("web UI on %s", self.url)

    def _configure_hosts(self) -> None:
        allowed = self.daemon.config.get_str("webui.allowed_hosts", "").split(",")
        self.ctx.hosts.configure(self.host, self.port, loopback=is_loopback(self.host), allowed=allowed)

    def _wire(self) -> None:
        daemon = self.daemon
        token_key = f"plugin.{PLUGIN}.{TOKEN_HASH_KEY}"

        def on_change(key: str, _: Any) -> None:
            if key == "webui.allowed_hosts":
                self._configure_hosts()
            if key == token_key:
                dropped = self.ctx.sessions.clear()
                if dropped:
                    log.info("API token changed: %d browser session(s) signed out", dropped)

        self._undo.append(daemon.config.on_change(on_change))
        try:
            self._undo.append(
                daemon.channels.register(
                    "webui",
                    self._channel_output,
                    caps=OutputCap.TEXT | OutputCap.FILE | OutputCap.IMAGE,
                    description="The browser web UI: shows the message in every open chat page.",
                    plugin="webui",
                    meta_help="type file or image: the payload is a media digest (as in a marker), a data URL "
                              "or an absolute file path; the file is kept in the media store and the chat "
                              "links /files/<digest>. meta {\"name\": \"report.pdf\"} names the download.",
                    types=["text", "file", "image"],
                )
            )
        except ValueError as exc:  # a second web server on the same daemon: the first keeps the channel
            log.warning("web UI output channel not registered: %s", exc)
        socket = daemon.socket
        if "webui.token" not in socket.methods:
            rpc: dict[str, Callable[[dict[str, Any]], Any]] = {
                "webui.token": self._rpc_rotate,
                "webui.info": lambda _: {"url": self.url},
            }
            for name, fn in rpc.items():
                socket.add_method(name, fn)

            def remove_rpc() -> None:
                for name, fn in rpc.items():
                    socket.remove_method(name, fn)

            self._undo.append(remove_rpc)

    async def _channel_output(self, payload: str, meta: dict[str, Any], type_: str) -> Any:
        event: dict[str, Any] = {"channel": "webui", "text": payload, "meta": meta, "type": type_,
                                 "kind": "channel_output"}
        if type_ in ("file", "image"):  # the browser gets the bytes from the media store, at /files/<digest>
            try:
                event["file"] = await OutgoingFiles(self.ctx).keep(payload, meta)
            except (MediaError, ValueError, OSError) as exc:
                return {"isError": True, "content": f"the file was not sent to the web UI: {exc}"}
            event["text"] = event["file"]["name"]
        # the chat's transcript keeps it as the agent's, in the conversation it was meant for (the turn's scope
        # in meta.group_id; without one, the web conversation used last)
        data = {k: v for k, v in (("file", event.get("file")), ("type", type_ if type_ != "text" else None),
                                  ("reply_to", meta.get("reply_to")), ("source", meta.get("source"))) if v}
        try:
            entry = await self.daemon.conversations.proactive(
                conversation_of(str(meta.get("group_id") or "")), str(event["text"]), data
            )
            event["conversation"], event["entry"] = entry.conversation, entry.id
        except Exception:  # the message still reaches the open pages
            log.exception("web UI: recording a message sent to the chat failed")
        self.daemon.events.publish("agent_output", event)
        out = {"status": "sent", "channel": "webui", "open_streams": len(self.ctx.streams)}
        if "file" in event:
            out.update(url=event["file"]["url"], marker=event["file"]["marker"])
        return out

    def _rpc_rotate(self, _: dict[str, Any]) -> dict[str, Any]:
        token = self.ctx.tokens.rotate()
        self.ctx.sessions.clear()
        log.info("API token rotated via the control socket; browser sessions signed out")
        return {"token": token, "url": self.url}

    def new_token_message(self) -> str | None:
        """The one-time notice with a newly created token (None if the token existed); forgets the token."""
        token, self.new_token = self.new_token, None
        return token_message(token, self.url) if token else None

    async def close(self) -> None:
        for undo in reversed(self._undo):
            with contextlib.suppress(Exception):
                undo()
        self._undo.clear()
        self.ctx.streams.close_all()
        if self._server is not None and self._task is not None:
            self._server.request_exit()
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 5)
            except (TimeoutError, Exception):
                self._server.force_exit = True
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
        for task in list(self.ctx.tasks):
            task.cancel()
        if self.ctx.tasks:
            await asyncio.gather(*self.ctx.tasks, return_exceptions=True)
        self._server = None
        self._task = None


def token_message(token: str, url: str) -> str:
    return (
        f"  web UI token (shown once; only its hash is stored): {token}\n"
        f"  sign in at {url}login — `homeagent webui token` makes a new one if you lose it"
    )


async def start_webui(daemon: WebHost, *, listen: str | None = None, vendor: dict[str, Path] | None = None) -> WebUIServer:
    """Start the web UI on the parts of the daemon it uses (``Daemon.web_host()``); raises WebUIError (nothing left running).

    ``listen`` overrides ``webui.listen_addr``; ``vendor`` maps front-end library names to their
    folders (default: found in node_modules; ``{}`` serves none, as without ``npm install``).
    """
    server = WebUIServer(daemon, listen=listen, vendor=vendor)
    await server.start()
    return server


def new_token_message(server: WebUIServer | None) -> str | None:
    """What `homeagent run` prints once when a token was just created (None otherwise)."""
    return server.new_token_message() if server is not None else None
