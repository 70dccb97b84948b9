"""Load: N concurrent socket clients sending turns, some interrupted mid-turn, for a bounded time.

The daemon talks to a fake OpenAI-compatible LLM on loopback (tests/fakes) that
streams every answer slowly (10 pieces, 25 ms apart), so an interrupt finds an
LLM call in flight. Every client runs its own connection: a chat turn, and on
about a third of them an interrupt right behind it (which cancels the LLM call
in flight and retries it with the interrupt's text, or is an ordinary message
if the agent is idle by then). An error is an `error`
frame, a response with `ok: false` that was not an interruption, or a
connection the daemon closed. RSS is read from /proc after a warm-up and again
once the load has drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from bench.campaign.daemon import DaemonProc, configure, settle_footprint
from bench.campaign.report import Row
from tests.fakes.llm_common import Recorded
from tests.fakes.llm_openai import FakeOpenAI, Turn

# one answer: 10 stream events 25 ms apart, ~0.25 s of LLM time a call
SLOW_ANSWER = Turn.slow("Noted, that is a fine thing to like. " * 4, chunks=10, delay=0.025)


class _SlowLLM(FakeOpenAI):
    """The fake server without its request log: thousands of calls must not grow the campaign's own memory."""

    async def record(self, request: web.Request) -> Recorded:
        rec = await super().record(request)
        self.requests.clear()
        return rec


@dataclass
class Tally:
    turns: int = 0
    interrupts: int = 0
    interrupted: int = 0
    errors: int = 0
    samples: list[str] = field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.samples) < 5:
            self.samples.append(what[:200])


async def _client(sock: Path, n: int, until: float, rng: random.Random, tally: Tally) -> None:
    try:
        reader, writer = await asyncio.open_unix_connection(str(sock), limit=16 * 1024 * 1024)
    except OSError as exc:
        tally.error(f"client {n} could not connect: {exc}")
        return
    owed = 0  # responses this client still expects (an interrupt to an idle agent is a turn of its own)

    async def send(frame: dict[str, object]) -> None:
        writer.write(json.dumps(frame).encode() + b"\n")
        await writer.drain()

    async def read_until_response(timeout: float) -> bool:
        nonlocal owed
        while True:
            line = await asyncio.wait_for(reader.readline(), timeout)
            if not line:
                tally.error(f"client {n}: the daemon closed the connection")
                return False
            frame = json.loads(line)
            kind = frame.get("type")
            if kind == "error":
                tally.error(f"client {n}: {frame.get('message')}")
            elif kind == "response":
                owed -= 1
                tally.turns += 1
                if frame.get("interrupted"):
                    tally.interrupted += 1
                elif not frame.get("ok"):
                    tally.error(f"client {n}: turn failed: {str(frame.get('text'))[:100]}")
                return True

    try:
        await reader.readline()  # hello
        i = 0
        while time.monotonic() < until:
            i += 1
            await send({"type": "chat", "text": f"I like load item {n}-{i}"})
            owed += 1
            if rng.random() < 0.33:
                await asyncio.sleep(rng.uniform(0, 0.05))
                await send({"type": "interrupt", "text": f"interrupt {n}-{i}"})
                tally.interrupts += 1
            while owed > 0:
                if not await read_until_response(120):
                    return
                # an interrupt that found the agent idle became a message: its response is owed too
                if owed == 0:
                    break
            await asyncio.sleep(rng.uniform(0, 0.02))
        with contextlib.suppress(TimeoutError):  # responses to interrupts that became messages
            while await read_until_response(1.0):
                pass
    except TimeoutError:
        tally.error(f"client {n}: no response within 120 s")
    except (OSError, ValueError) as exc:
        tally.error(f"client {n}: {exc.__class__.__name__}: {exc}")
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def run(workdir: Path, clients: int, seconds: float, seed: int) -> Row:
    row = Row(f"load: {clients} clients")
    data = workdir / "ld"
    data.mkdir(parents=True)
    configure(data, {})
    started = time.monotonic()
    async with _SlowLLM() as llm:
        llm.default_turn = SLOW_ANSWER
        env = {"HOMEAGENT_LLM_BASE_URL": llm.base_url, "HOMEAGENT_LLM_API_KEY": "sk-campaign-load-0000",
               "HOMEAGENT_LLM_MODEL": "gpt-fake"}
        return await _load(row, DaemonProc(data, env=env), llm, clients, seconds, seed, started)


async def _load(
    row: Row, daemon: DaemonProc, llm: FakeOpenAI, clients: int, seconds: float, seed: int, started: float
) -> Row:
    rng = random.Random(seed)
    tally = Tally()
    await daemon.start()
    try:
        warm = Tally()
        await asyncio.gather(*(_client(daemon.socket, -k, time.monotonic() + 2, rng, warm) for k in range(4)))
        baseline = await settle_footprint(daemon, daemon.footprint(), 2)
        until = time.monotonic() + seconds
        await asyncio.gather(*(_client(daemon.socket, k, until, random.Random(seed + k), tally) for k in range(clients)))
        elapsed = time.monotonic() - until + seconds
        after = await settle_footprint(daemon, baseline)
        alive = await daemon.status_ok()
        # what the turns stored (documents, their index, the context) a fresh daemon loads too: a restart on the
        # same data dir tells that growth from memory the flood left behind
        await daemon.stop()
        await daemon.start()
        await asyncio.gather(*(_client(daemon.socket, -k, time.monotonic() + 2, rng, Tally()) for k in range(4)))
        reloaded = await settle_footprint(daemon, baseline, 2)
    finally:
        await daemon.stop()
    growth = after.rss_mb - baseline.rss_mb
    row.figures = {
        "seconds": round(elapsed, 1),
        "turns": tally.turns,
        "turns/s": round(tally.turns / max(elapsed, 0.001), 1),
        "interrupts sent": tally.interrupts,
        "turns interrupted": tally.interrupted,
        "LLM calls cut by an interrupt": len(llm.disconnects),
        "errors": tally.errors,
        "RSS growth MB": round(growth, 1),
        "RSS of a restart on the same data MB": round(reloaded.rss_mb, 0),
        "before": str(baseline),
        "after": str(after),
    }
    if tally.errors:
        row.fail(f"{tally.errors} errors, e.g. {tally.samples}")
    if growth > 50:
        row.fail(f"RSS grew {growth:.0f} MB (target ≤ 50)")
    if not alive:
        row.fail("the daemon did not answer status after the load")
    row.seconds = time.monotonic() - started
    return row
