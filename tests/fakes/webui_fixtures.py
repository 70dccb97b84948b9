"""Helpers for the web UI tests: a started web server on a daemon, signed-in clients, a slow tool."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from homeagent.daemon import Daemon
from homeagent.sdk.types import ToolDef
from homeagent.webui import WebUIServer, start_webui


@dataclass
class Web:
    daemon: Daemon
    server: WebUIServer
    token: str

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, *, auth: bool = True, **kw: Any) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        headers.update(kw.pop("headers", {}))
        # verify=False: plain http anyway, and it skips loading the CA bundle (~0.1 s per client)
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, verify=False, **kw)

    async def browser_client(self) -> tuple[httpx.AsyncClient, str]:
        """A client signed in like a browser (session cookie); returns it and its CSRF token."""
        client = httpx.AsyncClient(base_url=self.url, timeout=30, verify=False)
        response = await client.post("/api/v1/login", json={"token": self.token})
        assert response.status_code == 200, response.text
        return client, response.json()["csrf"]


async def start_web(daemon: Daemon, *, again: bool = False) -> Web:
    """The web UI on ``daemon``'s own wiring (:meth:`Daemon.web_host`), on a free loopback port.

    ``again``: the data directory had a web UI before (a restart), so the token is rotated to be known here.
    """
    server = await start_webui(daemon.web_host(), listen="127.0.0.1:0")
    if again:
        return Web(daemon, server, server.ctx.tokens.rotate())
    assert server.new_token, "a fresh data directory gets a new token"
    return Web(daemon, server, server.new_token)


def add_sleep_tool(daemon: Daemon, seconds: float = 30.0) -> asyncio.Event:
    """A tool ``webtest_sleep`` that takes ``seconds``; the event is set when it starts."""
    started = asyncio.Event()

    async def sleep(_: dict[str, Any]) -> Any:
        started.set()
        await asyncio.sleep(seconds)
        return {"slept": seconds}

    daemon.tools.register(ToolDef(name="webtest_sleep", description="sleeps", plugin="test"), sleep)
    return started
