"""The scripted fake OpenAI server of the tests, for benchmarks: in this process or in its own.

A real LLM API runs on another machine: its work overlaps the daemon's instead
of taking turns with it on one event loop. Run in a child process, the fake
gets that right (the two share the machine's cores, not a thread), so a
benchmark's "the daemon's own time" no longer includes the fake server's
scheduling against it. In-process mode is kept to compare with older runs.

Both kinds have the same async API: ``script(*turns)``, ``bodies(n)`` (the last
``n`` request bodies, raw) and ``base_url``. The child is driven over two
loopback routes only the benchmark knows; it exits when its stdin closes, so it
never outlives the benchmark.

    python -m bench.fake_llm_proc   # prints its base URL, serves until stdin closes
"""

from __future__ import annotations

import asyncio
import pickle
import sys
from typing import Any

import httpx
from aiohttp import web

from tests.fakes.llm_openai import FakeOpenAI, Turn

SCRIPT_ROUTE = "/_bench/script"
BODIES_ROUTE = "/_bench/bodies"


class ControlledFake(FakeOpenAI):
    """FakeOpenAI plus the two control routes (turns in, request bodies out, pickled)."""

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.post(SCRIPT_ROUTE, self._script), web.get(BODIES_ROUTE, self._bodies)]

    async def _script(self, request: web.Request) -> web.Response:
        self.script(*pickle.loads(await request.read()))  # our own parent, on loopback
        return web.Response(text="ok")

    async def _bodies(self, request: web.Request) -> web.Response:
        count = int(request.query.get("n", "1"))
        raw = [r.raw for r in self.requests[-count:]]
        del self.requests[:-16]  # a long run keeps only what it may still ask for
        return web.Response(body=pickle.dumps(raw))


class LocalFake:
    """The fake on this process's event loop (how the benchmarks ran before)."""

    def __init__(self) -> None:
        self._fake = ControlledFake()

    async def __aenter__(self) -> LocalFake:
        await self._fake.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._fake.__aexit__(*exc)

    @property
    def base_url(self) -> str:
        return self._fake.base_url

    async def script(self, *turns: Turn) -> None:
        self._fake.script(*turns)

    async def bodies(self, count: int) -> list[bytes]:
        return [r.raw for r in self._fake.requests[-count:]]


class RemoteFake:
    """The fake in a child process, driven over its control routes."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._client: httpx.AsyncClient | None = None
        self.base_url = ""

    async def __aenter__(self) -> RemoteFake:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.fake_llm_proc", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        assert self._proc.stdout is not None
        line = (await self._proc.stdout.readline()).decode()
        if not line.startswith("http://127.0.0.1:"):
            self._proc.kill()
            raise RuntimeError(f"the fake LLM process did not start (it printed {line!r})")
        self.base_url = line.strip()
        self._client = httpx.AsyncClient(base_url=self.base_url.removesuffix("/v1"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                await asyncio.wait_for(self._proc.wait(), 10)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()

    async def script(self, *turns: Turn) -> None:
        assert self._client is not None
        (await self._client.post(SCRIPT_ROUTE, content=pickle.dumps(list(turns)))).raise_for_status()

    async def bodies(self, count: int) -> list[bytes]:
        assert self._client is not None
        response = await self._client.get(BODIES_ROUTE, params={"n": count})
        response.raise_for_status()
        found: list[bytes] = pickle.loads(response.content)  # our own child, on loopback
        return found


def fake_llm(remote: bool) -> Any:
    return RemoteFake() if remote else LocalFake()


async def _serve() -> None:
    async with ControlledFake() as fake:
        print(fake.base_url, flush=True)
        await asyncio.to_thread(sys.stdin.read)  # until the parent closes our stdin (or dies)


if __name__ == "__main__":
    asyncio.run(_serve())
