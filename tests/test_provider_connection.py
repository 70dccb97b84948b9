"""Streamed replies give their connection back to the pool: no new TCP (or TLS) handshake per LLM call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import ChatRequest
from homeagent.providers.lua_provider import LuaAdaptedProvider

CHUNK = 'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":%s}]}\n\n'


class SSEServer:
    """An OpenAI-style streaming endpoint that notes which client port each request came from."""

    def __init__(self, *, linger_after_done: float = 0.0) -> None:
        self.linger = linger_after_done
        self.peers: list[tuple[str, int]] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def __aenter__(self) -> SSEServer:
        app = web.Application()
        app.router.add_post("/chat/completions", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        assert request.transport is not None
        self.peers.append(request.transport.get_extra_info("peername"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write((CHUNK % ("hello", "null")).encode())
        await resp.write((CHUNK % ("", '"stop"')).encode())
        await resp.write(b"data: [DONE]\n\n")
        if self.linger:  # a server that keeps the body open after its end marker
            await asyncio.sleep(self.linger)
        await resp.write_eof()
        return resp


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as c:
        yield c


def provider(base_url: str, client: aiohttp.ClientSession, tmp_path: Path) -> LuaAdaptedProvider:
    loader = AdapterLoader(user_dir=tmp_path)
    return LuaAdaptedProvider("src", base_url, "sk-conn-test", "m-1", lambda: loader.get("openai"),
                              http_client=client, adapter_name="openai")


async def reply(p: LuaAdaptedProvider) -> str:
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    return "".join([c.content async for c in p.chat_stream(request)])


async def test_streamed_calls_reuse_one_connection(client: aiohttp.ClientSession, tmp_path: Path) -> None:
    async with SSEServer() as server:
        p = provider(server.base_url, client, tmp_path)
        assert [await reply(p) for _ in range(5)] == ["hello"] * 5
    assert len(server.peers) == 5
    assert len(set(server.peers)) == 1, f"a new connection per call: {server.peers}"


async def test_a_server_lingering_after_its_end_marker_does_not_hold_the_reply(
    client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    async with SSEServer(linger_after_done=1.5) as server:
        p = provider(server.base_url, client, tmp_path)
        started = time.perf_counter()
        assert await reply(p) == "hello"
        assert time.perf_counter() - started < 1.0
        assert await reply(p) == "hello"  # the abandoned connection is not reused half-read
