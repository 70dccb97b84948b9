"""Shared machinery for the fake LLM servers: scripted turns, recording, disconnect detection.

A test scripts what the server answers, in order::

    async with FakeOpenAI() as fake:
        fake.script(Turn.text("hello", chunks=3), Turn.error(429, retry_after=1))
        ... point a provider at fake.base_url ...
        assert fake.requests[0].body["model"] == "gpt-test"

Each wire format (OpenAI, Anthropic, Gemini, Ollama) renders the same Turn in
its own format; see the llm_*.py modules.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Turn:
    """One scripted answer. Build it with the class-method helpers."""

    content: str = ""
    reasoning: str = ""
    calls: list[tuple[str, Any]] = field(default_factory=list)  # (name, args dict or raw str)
    chunks: int = 1  # content (and reasoning) are split into this many stream events
    delay: float = 0.0  # seconds between stream events (and before a non-stream reply)
    first_delay: float = 0.0  # seconds before the first byte of the body
    usage: dict[str, int] | None = None  # prompt, completion, cached, reasoning
    finish_reason: str | None = None
    status: int = 200
    message: str = ""  # error message for status >= 400
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # raw error body override
    cut_at: int | None = None  # stream: drop the connection after this many events
    end_early: int | None = None  # stream: end cleanly (no finish/[DONE]) after this many events
    bad_json: bool = False  # the body / first stream line is not JSON
    fragments: int = 3  # tool-call arguments are split into this many pieces

    # -------------------------------------------------------------- helpers
    @classmethod
    def text(
        cls,
        text: str,
        *,
        chunks: int = 1,
        delay: float = 0.0,
        reasoning: str = "",
        usage: dict[str, int] | None = None,
        **kw: Any,
    ) -> Turn:
        """A plain answer, streamed in ``chunks`` pieces with ``delay`` seconds between them."""
        return cls(content=text, chunks=chunks, delay=delay, reasoning=reasoning, usage=usage, **kw)

    @classmethod
    def tool_calls(cls, calls: list[tuple[str, Any]], *, text: str = "", fragments: int = 3, **kw: Any) -> Turn:
        """Tool calls (parallel when several); arguments are streamed in ``fragments`` pieces each."""
        return cls(content=text, calls=list(calls), fragments=fragments, **kw)

    @classmethod
    def error(
        cls,
        status: int,
        *,
        retry_after: float | str | None = None,
        message: str = "",
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Turn:
        hdrs = dict(headers or {})
        if retry_after is not None:
            hdrs["Retry-After"] = str(retry_after)
        return cls(status=status, message=message or f"scripted HTTP {status}", headers=hdrs, body=body)

    @classmethod
    def cut_after(cls, n_chunks: int, text: str = "partial answer that never finishes", chunks: int = 6) -> Turn:
        """Stream ``n_chunks`` events, then drop the connection."""
        return cls(content=text, chunks=chunks, cut_at=n_chunks)

    @classmethod
    def slow(cls, text: str = "slow " * 20, *, chunks: int = 20, delay: float = 0.05, **kw: Any) -> Turn:
        return cls(content=text, chunks=chunks, delay=delay, **kw)

    @classmethod
    def malformed(cls) -> Turn:
        """A 200 answer whose body (or first stream line) is not JSON."""
        return cls(content="x", bad_json=True)

    # usage helpers -----------------------------------------------------------
    def usage_numbers(self) -> dict[str, int]:
        u = dict(self.usage or {})
        u.setdefault("prompt", 11)
        u.setdefault("completion", max(1, len(self.content) // 4 + 1))
        u.setdefault("cached", 0)
        u.setdefault("reasoning", 0)
        return u

    def pieces(self, text: str) -> list[str]:
        if not text:
            return []
        n = max(1, min(self.chunks, len(text)))
        size = -(-len(text) // n)
        return [text[i : i + size] for i in range(0, len(text), size)]

    def arg_pieces(self, args: Any) -> list[str]:
        raw = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        n = max(1, min(self.fragments, len(raw) or 1))
        size = -(-len(raw) // n) if raw else 1
        return [raw[i : i + size] for i in range(0, len(raw), size)] or [""]


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw: bytes
    body: Any
    at: float


class Disconnected(Exception):
    pass


class FakeLLMServer:
    """Base class: an aiohttp server on 127.0.0.1, port 0, answering scripted turns in order."""

    def __init__(self) -> None:
        self._turns: deque[Turn] = deque()
        self.requests: list[Recorded] = []
        self.default_turn: Turn | None = None
        self.disconnects: list[float] = []
        self.disconnected = asyncio.Event()
        self.stream_finished: list[float] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ------------------------------------------------------------- lifecycle
    def routes(self) -> list[web.RouteDef]:  # pragma: no cover - overridden
        raise NotImplementedError

    async def __aenter__(self) -> FakeLLMServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(self.routes())
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --------------------------------------------------------------- scripting
    def script(self, *turns: Turn) -> None:
        self._turns.extend(turns)

    @property
    def pending(self) -> int:
        return len(self._turns)

    def next_turn(self) -> Turn | None:
        if self._turns:
            return self._turns.popleft()
        return self.default_turn

    async def record(self, request: web.Request) -> Recorded:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        rec = Recorded(
            request.method,
            request.path,
            dict(request.query),
            {k.lower(): v for k, v in request.headers.items()},
            raw,
            body,
            time.monotonic(),
        )
        self.requests.append(rec)
        return rec

    # ------------------------------------------------------------- streaming
    @staticmethod
    def closed(request: web.Request) -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()

    async def pause(self, request: web.Request, seconds: float) -> None:
        """Sleep, but notice a client disconnect within ~5 ms."""
        end = time.monotonic() + seconds
        while True:
            if self.closed(request):
                self.mark_disconnect()
                raise Disconnected()
            left = end - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(0.005, left))

    def mark_disconnect(self) -> None:
        self.disconnects.append(time.monotonic())
        self.disconnected.set()

    async def start_stream(self, request: web.Request, turn: Turn, content_type: str) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": content_type, **turn.headers})
        await resp.prepare(request)
        return resp

    async def send_events(
        self, request: web.Request, resp: web.StreamResponse, turn: Turn, events: list[bytes], tail: list[bytes]
    ) -> web.StreamResponse:
        """Write events with the turn's delays; honour cut_after / end_early; record disconnects."""
        try:
            if turn.first_delay:
                await self.pause(request, turn.first_delay)
            sent = 0
            for event in events:
                if turn.cut_at is not None and sent >= turn.cut_at:
                    transport = request.transport
                    if transport is not None:
                        transport.abort()
                    return resp
                if turn.end_early is not None and sent >= turn.end_early:
                    await resp.write_eof()
                    return resp
                if sent and turn.delay:
                    await self.pause(request, turn.delay)
                if self.closed(request):
                    self.mark_disconnect()
                    return resp
                await resp.write(event)
                sent += 1
            for event in tail:
                await resp.write(event)
            await resp.write_eof()
            self.stream_finished.append(time.monotonic())
        except (Disconnected, ConnectionResetError, ConnectionError):
            if not self.disconnected.is_set():
                self.mark_disconnect()
        return resp

    async def watch_disconnect(self, request: web.Request, seconds: float) -> None:
        try:
            await self.pause(request, seconds)
        except Disconnected:
            pass

    @staticmethod
    def sse(doc: Any) -> bytes:
        text = doc if isinstance(doc, str) else json.dumps(doc, ensure_ascii=False)
        return f"data: {text}\n\n".encode()

    def no_turn(self) -> web.Response:
        return web.json_response(
            {"error": {"message": "fake server: no scripted turn left", "type": "test"}}, status=500
        )


IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
IMAGE_MAGIC = {"image/png": b"\x89PNG", "image/jpeg": b"\xff\xd8\xff", "image/gif": b"GIF8", "image/webp": b"RIFF"}


class BadImage(ValueError):
    """An image block the real API would refuse (HTTP 400)."""


def decode_image(mime: str, data: Any) -> tuple[str, bytes]:
    """Check one base64 image as the providers do: a type they accept, valid base64, bytes of that type."""
    if mime not in IMAGE_TYPES:
        raise BadImage(f"image media type {mime!r} is not supported")
    if not isinstance(data, str) or not data:
        raise BadImage("image data must be a non-empty base64 string")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadImage("image data is not valid base64") from None
    if not raw.startswith(IMAGE_MAGIC[mime]):
        raise BadImage(f"image data does not match its media type {mime}")
    return mime, raw


def data_url_image(url: Any) -> tuple[str, bytes]:
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        raise BadImage("image_url.url must be a data:<mime>;base64,<data> URL here")
    head, _, data = url.partition(";base64,")
    return decode_image(head[5:], data)


AUDIO_MAGIC = {"wav": (b"RIFF", b"WAVE"), "mp3": (b"ID3", b"")}


def decode_audio(fmt: Any, data: Any) -> tuple[str, bytes]:
    """Check one base64 audio clip as the providers do: a format they take (wav, mp3), valid base64, those bytes."""
    if fmt not in AUDIO_MAGIC:
        raise BadImage(f"audio format {fmt!r} is not supported (wav, mp3)")
    try:
        raw = base64.b64decode(str(data), validate=True)
    except (binascii.Error, ValueError):
        raise BadImage("audio data is not valid base64") from None
    head, kind = AUDIO_MAGIC[fmt]
    if not raw.startswith(head) or (kind and raw[8:12] != kind):
        raise BadImage(f"audio data is not {fmt}")
    return fmt, raw
