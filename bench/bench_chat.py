"""The web chat as a user meets it, each number against a baseline measured in the same run.

    .venv/bin/python bench/bench_chat.py            # full
    .venv/bin/python bench/bench_chat.py --quick    # fewer rounds

Tables:
1. chat page DOMContentLoaded in headless chromium (warm cache) versus the sign-in page;
2. time to first token through the browser: the chat page's own send (Enter in a conversation), until the
   first reply text is in the bubble, and the same browser's fetch of the stream until its first
   ``content_delta`` frame, versus the local Unix socket (the CLI's path), rounds interleaved, the LLM an
   OpenAI-compatible fake on loopback streaming 8 chunks 2 ms apart;
3. the event stream with 100 open SSE clients: N events until every client has all of them, versus 100
   in-process bus subscribers;
4. recording a message in its conversation before the turn is queued, versus a bare hop to a worker thread;
5. opening a conversation of 5,000 messages: the page (navigation until its newest 50 messages are drawn)
   and the API page it reads, versus a conversation of 10 messages, and versus reading all 5,000 entries
   at once (what a page without paging would have to load).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.fakes (the fake LLM) and bench.bench_web

from bench.bench_web import CHROMIUM, fanout, ms, page_load, table  # noqa: E402
from homeagent.cli.client import Client  # noqa: E402
from homeagent.conversations import NewEntry  # noqa: E402
from homeagent.daemon import Daemon  # noqa: E402
from homeagent.paths import DataPaths  # noqa: E402
from homeagent.webui import WebUIServer, start_webui  # noqa: E402

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]

# In the page: send `text` the way the user does (the chat's own form), and time until the reply's first text
# is in its bubble and until the reply is done. The clock starts as the form is submitted.
UI_SEND = """async (text) => {
  const list = document.getElementById('messages');
  const before = list.querySelectorAll('.msg.assistant').length;
  return await new Promise((resolve) => {
    let t0 = 0, first = 0;
    const check = () => {
      const msgs = list.querySelectorAll('.msg.assistant');
      if (msgs.length <= before) return;
      const last = msgs[msgs.length - 1];
      if (!first && last.querySelector('.content').textContent.trim()) first = performance.now() - t0;
      if (first && last.classList.contains('done')) { obs.disconnect(); resolve([first, performance.now() - t0]); }
    };
    const obs = new MutationObserver(check);
    obs.observe(list, { subtree: true, childList: true, characterData: true, attributes: true });
    document.getElementById('chat-input').value = text;
    t0 = performance.now();
    document.getElementById('chat-form').requestSubmit();
  });
}"""

# In the page: the same browser's fetch of /api/v1/chat/stream, until the first content_delta frame.
FETCH_SEND = """async ([text, conversation]) => {
  const csrf = document.cookie.split('; ').find((c) => c.startsWith('homeagent_csrf=')).split('=')[1];
  const t0 = performance.now();
  const res = await fetch('/api/v1/chat/stream', { method: 'POST', credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': decodeURIComponent(csrf) },
    body: JSON.stringify({ text, conversation }) });
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '', first = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    if (!first && buffer.includes('"content_delta"')) first = performance.now() - t0;
  }
  return [first, performance.now() - t0];
}"""

# In the page: from the navigation's start until the newest page of the conversation is drawn.
OPENED = """(n) => new Promise((resolve) => {
  const done = () => document.querySelectorAll('#messages .msg').length >= n
    && !document.querySelector('#messages .msg.streaming');
  const tick = () => done() ? resolve(performance.now()) : requestAnimationFrame(tick);
  tick();
})"""


async def socket_ttft(client: Client, text: str) -> float:
    started = time.perf_counter()
    first = 0.0
    async for frame in client.chat(text):
        if not first and frame["type"] == "content_delta":
            first = time.perf_counter() - started
        if frame["type"] == "response":
            break
    return first


async def browser_ttft(daemon: Daemon, server: WebUIServer, token: str, rounds: int) -> list[tuple[str, ...]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        context = await browser.new_context()
        await context.request.post(server.url + "api/v1/login", data={"token": token})
        conv = (await daemon.conversations.create("bench")).id
        fetch_conv = (await daemon.conversations.create("bench fetch")).id
        page = await context.new_page()
        await page.goto(server.url + f"#/chat/{conv}")
        await page.wait_for_selector("#chat-input")
        sock = await Client.connect(daemon.paths.socket)
        ui: list[float] = []
        fetched: list[float] = []
        base: list[float] = []
        try:
            for i in range(rounds + 5):
                await asyncio.sleep(0.02)  # each turn starts on an idle agent
                first, _ = await page.evaluate(UI_SEND, f"bench ui {i}")
                await asyncio.sleep(0.02)
                got, _ = await page.evaluate(FETCH_SEND, [f"bench fetch {i}", fetch_conv])
                await asyncio.sleep(0.02)
                s = await socket_ttft(sock, f"bench socket {i}")
                if i >= 5:  # warm-up rounds left out
                    ui.append(first / 1000)
                    fetched.append(got / 1000)
                    base.append(s)
        finally:
            await sock.close()
            await browser.close()
    sm, sp = ms(base)
    rows = [("local socket, the CLI's path (baseline)", f"{sm:.2f}", f"{sp:.2f}", "1.00")]
    for label, values in (("browser fetch of /api/v1/chat/stream, first frame", fetched),
                          ("chat page: Enter until the text is in the bubble", ui)):
        med, p95 = ms(values)
        rows.append((label, f"{med:.2f}", f"{p95:.2f}", f"{med / sm:.2f}"))
    return rows


async def open_conversation(daemon: Daemon, server: WebUIServer, token: str, rounds: int) -> list[tuple[str, ...]]:
    import httpx
    from playwright.async_api import async_playwright

    store = daemon.conversations.store
    small = (await daemon.conversations.create("ten")).id
    big = (await daemon.conversations.create("five thousand")).id

    def fill() -> None:
        store.import_entries(small, [NewEntry("user" if i % 2 == 0 else "assistant", f"short message {i}")
                                     for i in range(10)])
        store.import_entries(big, [NewEntry("user" if i % 2 == 0 else "assistant",
                                            f"message {i}: " + "some words of a reply, " * 8) for i in range(5000)])

    await asyncio.to_thread(fill)
    rows: list[tuple[str, ...]] = []
    api: dict[str, list[float]] = {"10": [], "5000": [], "all": []}
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {token}"},
                                 timeout=60, trust_env=False) as c:
        for i in range(rounds + 2):
            for key, path in (("10", f"/api/v1/conversations/{small}/entries?limit=50"),
                              ("5000", f"/api/v1/conversations/{big}/entries?limit=50"),
                              ("all", f"/api/v1/conversations/{big}/entries?limit=500")):
                if key == "all":  # every entry, 500 at a time: what opening it without paging would read
                    started = time.perf_counter()
                    before = ""
                    while True:
                        page = (await c.get(path + before)).json()
                        if not page["more"]:
                            break
                        before = f"&before={page['before']}"
                    elapsed = time.perf_counter() - started
                else:
                    started = time.perf_counter()
                    (await c.get(path)).raise_for_status()
                    elapsed = time.perf_counter() - started
                if i >= 2:
                    api[key].append(elapsed)
    base = ms(api["10"])[0]
    for key, label in (("10", "API: newest page of a 10-message chat (baseline)"),
                       ("5000", "API: newest page (50) of a 5,000-message chat"),
                       ("all", "API: all 5,000 entries (no paging)")):
        med, p95 = ms(api[key])
        rows.append((label, f"{med:.2f}", f"{p95:.2f}", f"{med / base:.2f}"))

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        context = await browser.new_context()
        await context.request.post(server.url + "api/v1/login", data={"token": token})
        page = await context.new_page()
        shown: dict[int, list[float]] = {small: [], big: []}
        for i in range(rounds + 1):
            for conv, count in ((small, 10), (big, 50)):
                await page.goto("about:blank")
                await page.goto(server.url + f"#/chat/{conv}")
                at = await page.evaluate(OPENED, count)
                if i:  # the first round warms the cache
                    shown[conv].append(at / 1000)
        await browser.close()
    page_base = ms(shown[small])[0]
    for conv, label in ((small, "page: a 10-message chat drawn (baseline)"),
                        (big, "page: a 5,000-message chat, newest 50 drawn")):
        med, p95 = ms(shown[conv])
        rows.append((label, f"{med:.1f}", f"{p95:.1f}", f"{med / page_base:.2f}"))
    return rows


async def recording(rounds: int) -> list[tuple[str, ...]]:
    """What recording a message costs before its turn is queued: ``TranscriptHistory.begin`` (the message and its
    pending reply, one SQLite transaction in a worker thread) against the bare hop to a worker thread."""
    from homeagent.conversations import ConversationStore, TranscriptHistory
    from homeagent.io.manager import InputMessage

    class NoWindow:
        async def aforget_inputs(self, input_ids: Any) -> int:
            return 0

    with tempfile.TemporaryDirectory() as tmp:
        history = await TranscriptHistory.open(ConversationStore(Path(tmp) / "conversations.db"), NoWindow())
        conv = (await history.create("bench")).id
        hop: list[float] = []
        begin: list[float] = []
        for i in range(rounds + 20):
            started = time.perf_counter()
            await asyncio.to_thread(lambda: None)
            h = time.perf_counter() - started
            started = time.perf_counter()
            await history.begin(conv, InputMessage(f"message {i}", "webui", "webui"))
            b = time.perf_counter() - started
            if i >= 20:
                hop.append(h)
                begin.append(b)
        await history.close()
    hm, hp = ms(hop)
    bm, bp = ms(begin)
    return [("a hop to a worker thread (baseline)", f"{hm:.3f}", f"{hp:.3f}", "1.00"),
            ("TranscriptHistory.begin: message + pending reply", f"{bm:.3f}", f"{bp:.3f}", f"{bm / hm:.1f}")]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds = 20 if args.quick else 100
    if not CHROMIUM.exists():
        print("bench_chat needs Debian's chromium at /usr/bin/chromium")
        return
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
                token = server.new_token or ""
                try:
                    table("DOMContentLoaded, headless chromium, warm cache", ("page", "median ms", "p95 ms", "ratio"),
                          await page_load(server, token, 5 if args.quick else 15))
                    table(f"Time to first token, fake LLM on loopback ({rounds} rounds, interleaved)",
                          ("path", "median ms", "p95 ms", "ratio"),
                          await browser_ttft(daemon, server, token, rounds))
                    events = 100 if args.quick else 500
                    table(f"SSE: {events} events to 100 open clients",
                          ("receivers", "all delivered ms", "deliveries/s", "ratio", "publish µs/event"),
                          await fanout(daemon, server, token, 100, events))
                    table("Recording a message before its turn is queued", ("what", "median ms", "p95 ms", "ratio"),
                          await recording(100 if args.quick else 500))
                    table(f"Opening a conversation ({10 if args.quick else 30} rounds)",
                          ("what", "median ms", "p95 ms", "ratio"),
                          await open_conversation(daemon, server, token, 10 if args.quick else 30))
                finally:
                    await server.close()
                    await daemon.stop()


if __name__ == "__main__":
    asyncio.run(main())
