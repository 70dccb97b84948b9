"""The WebSocket link to a OneBot v11 implementation, in either direction.

* **Forward** (the plugin connects to the implementation's WebSocket server,
  e.g. NapCat's ``ws://127.0.0.1:3001``): the access token goes in an
  ``Authorization: Bearer`` header; a lost or refused connection is retried
  after 1 s, 2 s, 4 s … up to ``backoff_max`` (with jitter), so an
  implementation that is gone for an hour costs a few dozen attempts, not a
  busy loop. The delay starts over only after a connection has held for a while.
* **Reverse** (the implementation connects to the plugin): the plugin listens
  on loopback by default, checks the token in the header (or the
  ``access_token`` query parameter) in constant time and answers 401/403 to a
  client without the right one.

* **HTTP** (actions as ``POST <api>/<action>`` with the Bearer token, events
  POSTed by the implementation to the plugin and checked against their
  ``X-Signature`` HMAC when a secret is set).

Both WebSocket modes carry events (frames with ``post_type``) and action answers (frames with
``echo``) on one "universal" connection; actions are sent with a fresh
``echo`` and matched by it. A frame that is not JSON, or not an object, is
counted and skipped: one bad frame never ends the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import itertools
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

import aiohttp
from aiohttp import web

MAX_FRAME = 64 * 1024 * 1024
"""Largest WebSocket message read: an event with a 10 MB message (twice: `message` and `raw_message`) fits; its text is cut later."""

STABLE_AFTER = 10.0
"""A connection that held this long resets the reconnect delay."""

EventSink = Callable[[dict[str, Any]], None]
StatusSink = Callable[[str, str], None]
"""``status(state, detail)``: state is connecting, connected, listening or error."""


class NotConnected(RuntimeError):
    """No OneBot connection to send an action on."""


class ActionError(RuntimeError):
    """The implementation answered an action with ``status: failed`` (or a retcode other than 0/1)."""

    def __init__(self, action: str, retcode: Any, status: Any, message: str) -> None:
        self.action, self.retcode, self.status = action, retcode, status
        detail = f": {message}" if message else ""
        super().__init__(f"OneBot action {action} failed (retcode {retcode}, status {status}){detail}")


@dataclass
class LinkStats:
    """What went over the link, for ``qq_status`` and the plugin's health line."""

    frames: int = 0
    malformed: int = 0
    events: int = 0
    actions: int = 0
    action_errors: int = 0
    connects: int = 0
    disconnects: int = 0
    auth_failures: int = 0
    last_error: str = ""
    last_heartbeat: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def backoff_delays(initial: float, cap: float) -> Any:
    """1, 2, 4 … ``cap`` seconds, each ±20% so many clients do not retry in step."""
    for attempt in itertools.count():
        base = min(cap, initial * (2 ** min(attempt, 30)))
        yield min(cap, base * random.uniform(0.8, 1.2))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OneBotLink:
    """One OneBot connection at a time: sends actions, hands events to ``on_event``."""

    def __init__(self, on_event: EventSink, on_status: StatusSink, *, log: logging.Logger) -> None:
        self._on_event = on_event
        self._on_status = on_status
        self.log = log
        self.stats = LinkStats()
        self._ws: aiohttp.ClientWebSocketResponse | web.WebSocketResponse | None = None
        self._http: tuple[aiohttp.ClientSession, str, str] | None = None
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._echo = itertools.count(1)
        self._malformed_logged = 0
        self._up = asyncio.Event()
        self.where = ""

    @property
    def connected(self) -> bool:
        return self._http is not None or (self._ws is not None and not self._ws.closed)

    async def wait_connected(self, timeout: float) -> None:
        """Return once there is a connection, or after ``timeout`` (the send then fails with NotConnected)."""
        if not self.connected:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._up.wait()

    # ---------------------------------------------------------------- actions

    async def call(self, action: str, params: dict[str, Any], *, timeout: float = 10.0) -> Any:
        """Run ``action`` and return its ``data``; ActionError for a failed one, NotConnected without a link."""
        self.stats.actions += 1
        try:
            if self._http is not None:
                answer = await self._http_call(action, params, timeout)
            else:
                answer = await self._ws_call(action, params, timeout)
        except TimeoutError:
            self.stats.action_errors += 1
            raise ActionError(action, None, "timeout", f"no answer within {timeout:g}s") from None
        except (ConnectionError, aiohttp.ClientError) as e:
            self.stats.action_errors += 1
            raise NotConnected(f"the OneBot connection broke while sending {action}: {e}") from None
        retcode = answer.get("retcode")
        if answer.get("status") == "failed" or retcode not in (0, 1, None):
            self.stats.action_errors += 1
            message = answer.get("wording") or answer.get("message") or answer.get("msg") or ""
            raise ActionError(action, retcode, answer.get("status"), str(message))
        return answer.get("data")

    def _not_connected(self) -> NotConnected:
        why = f" (last error: {self.stats.last_error})" if self.stats.last_error else ""
        return NotConnected(f"not connected to a OneBot implementation ({self.where}){why}")

    async def _ws_call(self, action: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        ws = self._ws
        if ws is None or ws.closed:
            raise self._not_connected()
        echo = f"homeagent-{next(self._echo)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[echo] = future
        try:
            await ws.send_str(json.dumps({"action": action, "params": params, "echo": echo}, ensure_ascii=False))
            async with asyncio.timeout(timeout):
                return await future
        finally:
            self._pending.pop(echo, None)

    async def _http_call(self, action: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """An action over the HTTP API: ``POST <api>/<action>``, the HTTP status mapped to a retcode."""
        assert self._http is not None
        session, base, token = self._http
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with session.post(
            f"{base}/{action}", json=params, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            if resp.status in (401, 403):
                self.stats.auth_failures += 1
                reason = (
                    f"{base} rejected the access token (HTTP {resp.status}): set plugin.qq.access_token "
                    "to the token configured in the OneBot implementation"
                )
                self.stats.last_error = reason
                self._on_status("error", reason)
                return {"status": "failed", "retcode": 1400 + resp.status - 400, "message": reason}
            if resp.status != 200:
                return {"status": "failed", "retcode": 1000 + resp.status, "message": f"HTTP {resp.status}"}
            answer = await resp.json(content_type=None)
        if not isinstance(answer, dict):
            return {"status": "failed", "retcode": None, "message": "the answer is not a JSON object"}
        return answer

    # ---------------------------------------------------------------- frames

    def _frame(self, raw: str | bytes) -> None:
        self.stats.frames += 1
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            data = None
        if not isinstance(data, dict):
            self.stats.malformed += 1
            if self._malformed_logged < 20:
                self._malformed_logged += 1
                self.log.warning("skipped a OneBot frame that is not a JSON object: %.80r", raw)
            return
        if "post_type" in data:
            self.stats.events += 1
            if data.get("meta_event_type") == "heartbeat":
                self.stats.last_heartbeat = time.time()
            try:
                self._on_event(data)
            except Exception:
                self.log.exception("handling a OneBot event failed")
            return
        echo = data.get("echo")
        future = self._pending.get(str(echo)) if echo is not None else None
        if future is not None and not future.done():
            future.set_result(data)

    def _attach(self, ws: aiohttp.ClientWebSocketResponse | web.WebSocketResponse, where: str) -> None:
        self._ws = ws
        self._up.set()
        self.stats.connects += 1
        self.stats.last_error = ""
        self._on_status("connected", where)

    def _detach(self, ws: Any, reason: str) -> None:
        if self._ws is ws:
            self._ws = None
            self._up.clear()
            self.stats.disconnects += 1
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError(reason))
        self.stats.last_error = reason

    async def _pump(self, ws: aiohttp.ClientWebSocketResponse | web.WebSocketResponse) -> None:
        async for msg in ws:
            if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                self._frame(msg.data)
            elif msg.type == aiohttp.WSMsgType.ERROR:
                break

    # ---------------------------------------------------------------- forward

    async def run_forward(self, url: str, token: str, *, backoff_initial: float = 1.0, backoff_max: float = 60.0) -> None:
        """Connect to ``url`` and keep reconnecting until cancelled."""
        self.where = url
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        delays = backoff_delays(backoff_initial, backoff_max)
        async with aiohttp.ClientSession() as session:
            while True:
                self._on_status("connecting", url)
                connected_at = 0.0
                try:
                    ws = await asyncio.wait_for(
                        session.ws_connect(url, headers=headers, heartbeat=30.0, max_msg_size=MAX_FRAME, autoping=True),
                        15.0,
                    )
                    async with ws:
                        connected_at = time.monotonic()
                        self._attach(ws, url)
                        try:
                            await self._pump(ws)
                        finally:
                            reason = f"{url} closed the connection (code {ws.close_code})"
                            self._detach(ws, reason)
                    state = "connecting"
                except aiohttp.WSServerHandshakeError as e:
                    if e.status in (401, 403):
                        self.stats.auth_failures += 1
                        reason = (
                            f"{url} rejected the access token (HTTP {e.status}): set plugin.qq.access_token "
                            "to the token configured in the OneBot implementation"
                        )
                    else:
                        reason = f"{url} refused the WebSocket handshake (HTTP {e.status})"
                    self.stats.last_error, state = reason, "error"
                except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
                    reason = f"cannot connect to {url}: {e or type(e).__name__}"
                    self.stats.last_error, state = reason, "error"
                if connected_at and time.monotonic() - connected_at >= STABLE_AFTER:
                    delays = backoff_delays(backoff_initial, backoff_max)
                delay = next(delays)
                self._on_status(state, f"{reason}; retrying in {delay:.1f}s")
                await asyncio.sleep(delay)

    # ---------------------------------------------------------------- reverse

    async def _stay_failed(self, reason: str) -> NoReturn:
        """Report ``reason`` as the link's error and wait to be cancelled (a setting must change first)."""
        self.stats.last_error = reason
        self._on_status("error", reason)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")  # the wait only ends by cancellation

    async def _listen(self, runner: web.AppRunner, host: str, port: int) -> None:
        """Serve ``runner`` on ``host:port``; a port that cannot be bound is reported and waits (see above)."""
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as e:
            await self._stay_failed(f"cannot listen on {host}:{port}: {e}")

    async def run_reverse(self, host: str, port: int, token: str) -> None:
        """Listen on ``host:port`` (any path) for the implementation's reverse WebSocket until cancelled."""
        self.where = f"ws://{host}:{port}/"
        if not token and not _is_loopback(host):
            await self._stay_failed(f"refusing to listen on {host} without an access token; set plugin.qq.access_token")
        app = web.Application()
        app.router.add_get("/{tail:.*}", lambda request: self._accept(request, token))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await self._listen(runner, host, port)
            self._on_status("listening", f"waiting for the OneBot implementation on {self.where}")
            await asyncio.Event().wait()
        finally:
            if self._ws is not None:
                await self._ws.close()
            await runner.cleanup()

    # ---------------------------------------------------------------- HTTP

    async def run_http(self, api_url: str, token: str, host: str, port: int, secret: str) -> None:
        """Actions over the HTTP API at ``api_url``; events POSTed to ``host:port`` (any path), until cancelled.

        Events are checked against their ``X-Signature`` (HMAC-SHA1 of the body
        with ``secret``) when a secret is set; without one only loopback is served.
        """
        base = api_url.rstrip("/")
        self.where = f"{base} (events to http://{host}:{port}/)"
        if not secret and not _is_loopback(host):
            await self._stay_failed(f"refusing to take events on {host} without a secret; set plugin.qq.http_secret")
        app = web.Application(client_max_size=MAX_FRAME)
        app.router.add_post("/{tail:.*}", lambda request: self._post_event(request, secret))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        session = aiohttp.ClientSession()
        try:
            await self._listen(runner, host, port)
            self._http = (session, base, token)
            self._up.set()
            self.stats.connects += 1
            self._on_status("listening", f"actions to {base}/, events on http://{host}:{port}/")
            await asyncio.Event().wait()
        finally:
            self._http = None
            self._up.clear()
            await session.close()
            await runner.cleanup()

    async def _post_event(self, request: web.Request, secret: str) -> web.StreamResponse:
        body = await request.read()
        if secret:
            expected = "sha1=" + hmac.new(secret.encode(), body, "sha1").hexdigest()
            if not hmac.compare_digest(request.headers.get("X-Signature", "").encode(), expected.encode()):
                self.stats.auth_failures += 1
                reason = f"an event POST from {request.remote} had a wrong or no X-Signature; it was turned away"
                self.stats.last_error = reason
                self._on_status("error", reason)
                return web.Response(status=403, text="bad signature")
        self._frame(body)
        return web.Response(status=204)

    async def _accept(self, request: web.Request, token: str) -> web.StreamResponse:
        if token:
            offered = request.headers.get("Authorization", "")
            offered = offered[7:] if offered.startswith("Bearer ") else offered.removeprefix("Token ")
            offered = offered or request.query.get("access_token", "")
            if not hmac.compare_digest(offered.encode(), token.encode()):
                self.stats.auth_failures += 1
                reason = (
                    f"a OneBot client from {request.remote} offered "
                    f"{'a wrong' if offered else 'no'} access token; it was turned away"
                )
                self.stats.last_error = reason
                self._on_status("error", reason)
                return web.Response(status=403 if offered else 401, text="access token required")
        role = request.headers.get("X-Client-Role", "Universal").lower()
        ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=MAX_FRAME)
        await ws.prepare(request)
        where = f"{request.remote} (self id {request.headers.get('X-Self-ID', '?')}, role {role})"
        if role != "event":  # API and Universal clients carry actions
            old = self._ws
            self._attach(ws, where)
            if old is not None and not old.closed:
                await old.close()
        try:
            await self._pump(ws)
        finally:
            self._detach(ws, f"the OneBot client {where} disconnected")
            if not self.connected:
                self._on_status("listening", f"{self.stats.last_error}; waiting on {self.where}")
        return ws
