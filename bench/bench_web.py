"""Benchmarks for the web UI and HTTP API, each against a baseline measured in the same run.

    .venv/bin/python bench/bench_web.py            # full
    .venv/bin/python bench/bench_web.py --quick    # fewer rounds

Tables:
1. time to first streamed token: POST /api/v1/chat/stream over one keep-alive HTTP connection
   versus the local Unix socket (``{"type":"chat"}``), rounds interleaved; the difference is
   what the web layer adds (target < 5 ms). Once with the offline provider, once with an
   OpenAI-compatible server on loopback (the fake from tests/fakes) streaming 8 chunks;
2. SSE fan-out: N events published on the event bus, time until every one of 100 SSE
   clients has all of them, versus 100 in-process bus subscribers;
3. chat page DOMContentLoaded in headless chromium (warm cache), versus the sign-in page.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.fakes: the fake LLM server

from homeagent.cli.client import Client  # noqa: E402
from homeagent.daemon import Daemon  # noqa: E402
from homeagent.paths import DataPaths  # noqa: E402
from homeagent.webui import WebUIServer, start_webui  # noqa: E402


def ms(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    return statistics.median(values) * 1000, values[min(len(values) - 1, int(len(values) * 0.95))] * 1000


class RawHTTP:
    """One keep-alive HTTP/1.1 connection, reading SSE by hand (no client library overhead)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: str, host: str) -> None:
        self.reader, self.writer, self.token, self.host = reader, writer, token, host

    @classmethod
    async def connect(cls, server: WebUIServer, token: str) -> RawHTTP:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        return cls(reader, writer, token, f"{server.host}:{server.port}")  # the web UI answers only its own names

    async def stream_chat(self, text: str) -> tuple[float, float]:
        """(seconds to the first content_delta, seconds to the response frame)."""
        body = json.dumps({"text": text}).encode()
        started = time.perf_counter()
        self.writer.write(
            f"POST /api/v1/chat/stream HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await self.writer.drain()
        first = 0.0
        while True:  # chunked transfer encoding: size line, data, CRLF
            line = await self.reader.readline()
            if line.startswith(b"HTTP/") or b":" in line or line == b"\r\n":
                continue
            size = int(line.strip() or b"0", 16)
            if size == 0:
                await self.reader.readline()
                return first, time.perf_counter() - started
            chunk = await self.reader.readexactly(size + 2)
            if not first and b'"content_delta"' in chunk:
                first = time.perf_counter() - started

    async def close(self) -> None:
        self.writer.close()


async def ttft(daemon: Daemon, server: WebUIServer, token: str, rounds: int, label: str) -> list[tuple[str, ...]]:
    web = await RawHTTP.connect(server, token)
    sock = await Client.connect(daemon.paths.socket)
    web_first: list[float] = []
    sock_first: list[float] = []
    for i in range(rounds + 5):
        await asyncio.sleep(0.02)  # each turn starts on an idle agent (the last one's bookkeeping is done)
        w, _ = await web.stream_chat(f"bench web {i}")
        await asyncio.sleep(0.02)
        started = time.perf_counter()
        s = 0.0
        async for frame in sock.chat(f"bench socket {i}"):
            if not s and frame["type"] == "content_delta":
                s = time.perf_counter() - started
            if frame["type"] == "response":
                break
        if i >= 5:  # warm-up rounds left out
            web_first.append(w)
            sock_first.append(s)
    await web.close()
    await sock.close()
    wm, wp = ms(web_first)
    sm, sp = ms(sock_first)
    return [
        (label, "socket (baseline)", f"{sm:.2f}", f"{sp:.2f}", "1.00"),
        (label, "web /api/v1/chat/stream", f"{wm:.2f}", f"{wp:.2f}", f"{wm / sm:.2f}"),
        (label, "web adds (median)", f"{wm - sm:+.2f}", "", ""),
    ]


async def ttft_with_llm(rounds: int) -> list[tuple[str, ...]]:
    """The same against an OpenAI-compatible server on loopback that streams 8 chunks 2 ms apart."""
    from tests.fakes.llm_openai import FakeOpenAI, Turn

    async with FakeOpenAI() as fake:
        fake.default_turn = Turn.text("one two three four five six seven eight", chunks=8, delay=0.002)
        env = {"HOMEAGENT_LLM_BASE_URL": fake.base_url, "HOMEAGENT_LLM_API_KEY": "sk-bench", "HOMEAGENT_LLM_MODEL": "m"}
        with mock.patch.dict(os.environ, env):  # the daemon reads its LLM from the environment
            with tempfile.TemporaryDirectory() as tmp:
                data = Path(tmp) / "d"
                data.mkdir()
                daemon = Daemon(DataPaths(data), web=False)
                await daemon.start()
                server = await start_webui(daemon.web_host(), listen="127.0.0.1:0")
                try:
                    return await ttft(daemon, server, server.new_token or "", rounds, "LLM over HTTP")
                finally:
                    await server.close()
                    await daemon.stop()


async def fanout(daemon: Daemon, server: WebUIServer, token: str, clients: int, events: int) -> list[tuple[str, ...]]:
    bus = daemon.events
    # baseline: in-process subscribers
    subs = [bus.subscribe(["bench"], maxsize=events + 10, name="bench") for _ in range(clients)]

    async def drain(sub: Any) -> None:
        for _ in range(events):
            await sub.get()

    started = time.perf_counter()
    tasks = [asyncio.create_task(drain(s)) for s in subs]
    for i in range(events):
        bus.publish("bench", {"i": i, "text": "x" * 200})
    await asyncio.gather(*tasks)
    base = time.perf_counter() - started
    for s in subs:
        s.close()

    async def sse_client(ready: asyncio.Event, counter: list[int]) -> None:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(
            f"GET /api/v1/events?types=bench&since=now HTTP/1.1\r\nHost: {server.host}:{server.port}\r\n"
            f"Authorization: Bearer {token}\r\n\r\n".encode()
        )
        await writer.drain()
        got = 0
        tail = b""
        hello = False
        while got < events:  # count events in raw chunks: the client side must cost little
            chunk = await reader.read(1 << 16)
            if not chunk:
                raise ConnectionError("the server closed the stream")
            data = tail + chunk
            if not hello and b"event: hello" in data:
                hello = True
                counter[0] += 1
                if counter[0] == clients:
                    ready.set()
            got += data.count(b"\nevent: bench\n") - tail.count(b"\nevent: bench\n")
            tail = data[-16:]
        writer.close()

    ready = asyncio.Event()
    counter = [0]
    readers = [asyncio.create_task(sse_client(ready, counter)) for _ in range(clients)]
    await asyncio.wait_for(ready.wait(), 30)
    started = time.perf_counter()
    publish_cost = 0.0
    for i in range(events):
        t0 = time.perf_counter()
        bus.publish("bench", {"i": i, "text": "x" * 200})
        publish_cost += time.perf_counter() - t0
        if i % 20 == 0:
            await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*readers), 120)
    web = time.perf_counter() - started
    total = clients * events
    return [
        (f"{clients} bus subscribers (baseline)", f"{base * 1000:.1f}", f"{total / base:,.0f}", "1.00", ""),
        (
            f"{clients} SSE clients",
            f"{web * 1000:.1f}",
            f"{total / web:,.0f}",
            f"{web / base:.1f}",
            f"{publish_cost / events * 1e6:.1f}",
        ),
    ]


CHROMIUM = Path("/usr/bin/chromium")


async def page_load(server: WebUIServer, token: str, rounds: int) -> list[tuple[str, ...]]:
    if not await asyncio.to_thread(CHROMIUM.exists):
        return [("chromium not installed", "", "", "")]
    from playwright.async_api import async_playwright

    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    rows = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=args)
        context = await browser.new_context()
        await context.request.post(server.url + "api/v1/login", data={"token": token})
        page = await context.new_page()
        results: dict[str, list[float]] = {}
        for name, url, ready in (
            ("sign-in page (baseline)", server.url + "login", "#token"),
            ("chat page", server.url + "#/chat", "#chat-input"),
        ):
            values = []
            for i in range(rounds + 1):
                await page.goto("about:blank")
                await page.goto(url)
                await page.wait_for_selector(ready)
                dcl = await page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
                if i:  # first round warms the cache
                    values.append(dcl / 1000)
            results[name] = values
        base = statistics.median(results["sign-in page (baseline)"])
        for name, values in results.items():
            med, p95 = ms(values)
            rows.append((name, f"{med:.1f}", f"{p95:.1f}", f"{statistics.median(values) / base:.2f}"))
        await browser.close()
    return rows


def table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds = 20 if args.quick else 100
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "d"
        data.mkdir()
        daemon = Daemon(DataPaths(data), web=False)
        await daemon.start()
        server = await start_webui(daemon.web_host(), listen="127.0.0.1:0")
        token = server.new_token or ""
        try:
            rows = await ttft(daemon, server, token, rounds, "offline provider")
            rows += await ttft_with_llm(rounds)
            table(
                f"Time to first streamed token ({rounds} rounds each)",
                ("provider", "path", "median ms", "p95 ms", "ratio"),
                rows,
            )
            events = 100 if args.quick else 500
            table(
                f"SSE fan-out: {events} events to 100 clients",
                ("receivers", "all delivered ms", "deliveries/s", "ratio", "publish µs/event"),
                await fanout(daemon, server, token, 100, events),
            )
            table(
                "DOMContentLoaded, headless chromium, warm cache",
                ("page", "median ms", "p95 ms", "ratio"),
                await page_load(server, token, 5 if args.quick else 15),
            )
        finally:
            await server.close()
            await daemon.stop()


if __name__ == "__main__":
    asyncio.run(main())
