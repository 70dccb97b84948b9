"""A fake OneBot v11 implementation (what NapCat, Lagrange.OneBot and go-cqhttp speak) on loopback.

It speaks the real wire shapes from the OneBot v11 specification
(botuniverse/onebot-11): events with ``post_type``/``message_type``/``sender``
and segment arrays, actions ``{"action", "params", "echo"}`` answered with
``{"status", "retcode", "data", "echo"}``. It serves the forward WebSocket
(checking the access token in the ``Authorization`` header or the
``access_token`` query, 401/403 otherwise) and can play the reverse client
(:meth:`FakeOneBot.connect_reverse`), and the HTTP API with signed event POSTs
(:meth:`FakeOneBot.post_event`). Tests push events, read the actions the
plugin sent, make an action fail, drop the connection or send garbage.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import time
from typing import Any

import aiohttp
from aiohttp import web

Segment = dict[str, Any]


def text(s: str) -> Segment:
    return {"type": "text", "data": {"text": s}}


def at(qq: int | str) -> Segment:
    return {"type": "at", "data": {"qq": str(qq)}}


class FakeOneBot:
    def __init__(self, *, token: str = "", self_id: int = 2_000_000) -> None:
        self.token = token
        self.self_id = self_id
        self.actions: list[dict[str, Any]] = []
        self.errors: dict[str, tuple[int, str]] = {}
        """action → (retcode, wording): answer it with ``status: failed``."""
        self.auth_failures = 0
        self.connections = 0
        self.messages: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1001)
        self._sockets: set[web.WebSocketResponse | aiohttp.ClientWebSocketResponse] = set()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    # ---------------------------------------------------------------- server

    async def start(self) -> FakeOneBot:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._accept)
        app.router.add_post("/{action}", self._http_action)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def close(self) -> None:
        await self.drop()
        for task in list(self._tasks):
            task.cancel()
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _token_refused(self, request: web.Request) -> web.Response | None:
        if not self.token:
            return None
        auth = request.headers.get("Authorization", "")
        offered = auth.removeprefix("Bearer ") if auth else request.query.get("access_token", "")
        if offered == self.token:
            return None
        self.auth_failures += 1
        await self._notify()
        return web.Response(status=403 if offered else 401, text="token check failed")

    async def _accept(self, request: web.Request) -> web.StreamResponse:
        refused = await self._token_refused(request)
        if refused is not None:
            return refused
        ws = web.WebSocketResponse(max_msg_size=64 * 1024 * 1024)
        await ws.prepare(request)
        await self._serve(ws)
        return ws

    async def connect_reverse(self, url: str, *, token: str = "", role: str = "Universal") -> int:
        """Connect to the plugin's reverse WebSocket server like an implementation would; the HTTP status."""
        if self._client is None:
            self._client = aiohttp.ClientSession()
        headers = {"X-Self-ID": str(self.self_id), "X-Client-Role": role}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            ws = await self._client.ws_connect(url, headers=headers)
        except aiohttp.WSServerHandshakeError as e:
            return e.status
        except (aiohttp.ClientConnectionError, OSError):
            return 0  # nobody listens (yet)
        task = asyncio.create_task(self._serve(ws))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return 101

    async def _serve(self, ws: web.WebSocketResponse | aiohttp.ClientWebSocketResponse) -> None:
        self._sockets.add(ws)
        self.connections += 1
        await self._notify()
        try:
            await ws.send_json(self._meta("lifecycle", sub_type="connect"))
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    await self._action(ws, json.loads(msg.data))
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self._sockets.discard(ws)
            await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _http_action(self, request: web.Request) -> web.StreamResponse:
        """The HTTP API: ``POST /<action>`` with the params as a JSON body."""
        refused = await self._token_refused(request)
        if refused is not None:
            return refused
        params = await request.json() if request.can_read_body else {}
        sink = _Collector()
        await self._action(sink, {"action": request.match_info["action"], "params": params})
        answer = sink.sent[0]
        answer.pop("echo", None)
        if answer.get("retcode") == 1404:
            return web.Response(status=404)
        return web.json_response(answer)

    async def post_event(self, url: str, event: dict[str, Any], *, secret: str = "") -> int:
        """Report an event by HTTP POST (signed with ``secret`` like an implementation would); the HTTP status."""
        if self._client is None:
            self._client = aiohttp.ClientSession()
        body = json.dumps(event, ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json", "X-Self-ID": str(self.self_id)}
        if secret:
            headers["X-Signature"] = "sha1=" + hmac.new(secret.encode(), body, "sha1").hexdigest()
        async with self._client.post(url, data=body, headers=headers) as resp:
            return resp.status

    # ---------------------------------------------------------------- actions

    async def _action(self, ws: Any, req: dict[str, Any]) -> None:
        action, params, echo = req.get("action"), req.get("params") or {}, req.get("echo")
        self.actions.append(req)
        await self._notify()
        if action in self.errors:
            retcode, wording = self.errors[action]
            answer: dict[str, Any] = {"status": "failed", "retcode": retcode, "data": None, "message": wording,
                                      "wording": wording}
        else:
            answer = {"status": "ok", "retcode": 0, "data": self._result(str(action), params)}
            if answer["data"] is _UNKNOWN:
                answer = {"status": "failed", "retcode": 1404, "data": None}
        answer["echo"] = echo
        await ws.send_json(answer)

    def _result(self, action: str, params: dict[str, Any]) -> Any:
        if action in ("send_private_msg", "send_group_msg", "send_msg"):
            mid = next(self._ids)
            self.messages[mid] = {"message_id": mid, "message": params.get("message"), "time": int(time.time()),
                                  "message_type": "group" if "group_id" in params else "private",
                                  "sender": {"user_id": self.self_id, "nickname": "bot"}}
            return {"message_id": mid}
        if action == "get_msg":
            found = self.messages.get(int(params.get("message_id", 0)))
            return found if found is not None else _UNKNOWN
        if action == "delete_msg":
            return None
        if action == "get_group_member_info":
            return {"group_id": params.get("group_id"), "user_id": params.get("user_id"), "nickname": "Ada",
                    "card": "Ada (ops)", "role": "admin", "title": "", "level": "5", "join_time": 1700000000,
                    "last_sent_time": 1700000100, "sex": "unknown", "age": 0, "area": "", "unfriendly": False,
                    "title_expire_time": 0, "card_changeable": True}
        if action == "get_login_info":
            return {"user_id": self.self_id, "nickname": "bot"}
        if action in ("upload_group_file", "upload_private_file"):
            return None
        return _UNKNOWN

    async def wait_for(self, predicate: Any, timeout: float = 20.0) -> Any:
        """Wait until ``predicate()`` is truthy (re-checked after every connection change and action)."""
        async with asyncio.timeout(timeout):
            async with self._changed:
                while not (found := predicate()):
                    await self._changed.wait()
                return found

    async def wait_action(self, action: str, *, after: int = 0, timeout: float = 20.0) -> dict[str, Any]:
        """The first ``action`` request received after the first ``after`` actions."""
        return await self.wait_for(lambda: next((a for a in self.actions[after:] if a.get("action") == action), None),
                                   timeout)

    async def wait_connected(self, timeout: float = 20.0) -> None:
        await self.wait_for(lambda: bool(self._sockets), timeout)

    # ---------------------------------------------------------------- events

    async def send(self, event: dict[str, Any]) -> None:
        for ws in list(self._sockets):
            await ws.send_json(event)

    async def send_raw(self, data: str) -> None:
        for ws in list(self._sockets):
            await ws.send_str(data)

    async def drop(self) -> None:
        """Close every connection, as an implementation restarting would."""
        for ws in list(self._sockets):
            await ws.close()

    def _meta(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"time": int(time.time()), "self_id": self.self_id, "post_type": "meta_event",
                "meta_event_type": kind, **fields}

    def heartbeat(self) -> dict[str, Any]:
        return self._meta("heartbeat", status={"online": True, "good": True}, interval=15000)

    def private_message(self, user_id: int, message: list[Segment] | str, *, nickname: str = "Ada") -> dict[str, Any]:
        mid = next(self._ids)
        event = {"time": int(time.time()), "self_id": self.self_id, "post_type": "message",
                 "message_type": "private", "sub_type": "friend", "message_id": mid, "user_id": user_id,
                 "message": [text(message)] if isinstance(message, str) else message,
                 "raw_message": message if isinstance(message, str) else "", "font": 0,
                 "sender": {"user_id": user_id, "nickname": nickname, "sex": "unknown", "age": 0}}
        self.messages[mid] = {**event, "real_id": mid}
        return event

    def group_message(self, group_id: int, user_id: int, message: list[Segment] | str, *,
                      nickname: str = "Ada", card: str = "") -> dict[str, Any]:
        mid = next(self._ids)
        event = {"time": int(time.time()), "self_id": self.self_id, "post_type": "message",
                 "message_type": "group", "sub_type": "normal", "message_id": mid, "group_id": group_id,
                 "user_id": user_id, "anonymous": None,
                 "message": [text(message)] if isinstance(message, str) else message,
                 "raw_message": "", "font": 0,
                 "sender": {"user_id": user_id, "nickname": nickname, "card": card, "role": "member"}}
        self.messages[mid] = {**event, "real_id": mid}
        return event


_UNKNOWN: Any = object()


class _Collector:
    """Stands in for a WebSocket when an action arrives over HTTP: keeps the answer."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send_json(self, data: dict[str, Any]) -> None:
        self.sent.append(data)
