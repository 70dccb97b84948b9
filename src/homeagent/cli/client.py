"""A client for the daemon's local socket, used by every CLI command."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

from homeagent.datalock import lock_holder
from homeagent.io.socket_server import MAX_FRAME
from homeagent.paths import DataPaths
from homeagent.startup import START_WAIT


class DaemonUnavailable(Exception):
    """No daemon answers on the socket."""


class _NoAnswer(Exception):
    """Nothing accepted the connection (maybe only not yet)."""


class RemoteError(Exception):
    """The daemon answered an RPC with an error."""


class DaemonStarting(Exception):
    """A daemon holds the data directory but its socket did not answer within the wait.

    Not a :class:`DaemonUnavailable`: commands fall back to changing the data directory
    directly only when no daemon runs; doing so under a starting daemon would write
    behind its back (it has the settings loaded already) and skip its validation.
    """


def connect_to(paths: DataPaths, *, timeout: float = 3.0) -> Awaitable[Client]:
    """Connect to the daemon of a data directory, waiting for one that is still starting."""
    return Client.connect(paths.socket, timeout=timeout, lock=paths.lock)


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reader_task: asyncio.Task[None] | None = None

    @classmethod
    async def connect(
        cls, path: Path, *, timeout: float = 3.0, lock: Path | None = None, start_wait: float = START_WAIT
    ) -> Client:
        """Connect and read the daemon's hello.

        With ``lock`` (the data directory's daemon.lock): when the socket does not answer but a
        daemon holds the lock, it is starting (the socket comes up a moment after the lock), so
        keep trying for up to ``start_wait`` seconds, then raise :class:`DaemonStarting`.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + start_wait
        while True:
            try:
                return await cls._connect_once(path, timeout)
            except _NoAnswer as exc:
                holder = lock_holder(lock) if lock is not None else None
                if holder is None:
                    raise DaemonUnavailable(str(exc)) from exc.__cause__
                if loop.time() >= deadline:
                    raise DaemonStarting(
                        f"the daemon (pid {holder}) holds {lock.parent if lock else path.parent} but its socket "
                        "does not answer yet (still starting, or stopping); try again in a moment"
                    ) from None
                await asyncio.sleep(0.1)

    @classmethod
    async def _connect_once(cls, path: Path, timeout: float) -> Client:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=MAX_FRAME), timeout
            )
        except (FileNotFoundError, ConnectionRefusedError, TimeoutError, OSError) as exc:
            raise _NoAnswer(
                f"no HomeAgent daemon answers at {path} ({exc.__class__.__name__}); start one with `homeagent run`"
            ) from exc
        client = cls(reader, writer)
        client._reader_task = asyncio.get_running_loop().create_task(client._read())
        # Connected: a daemon is there. Its greeting can lag while start-up work holds its event
        # loop, so ``timeout`` (meant to tell "no daemon" quickly) is not the bound here.
        try:
            hello = await asyncio.wait_for(client.frames.get(), max(timeout, START_WAIT))
        except TimeoutError:
            await client.close()
            raise DaemonStarting(
                f"the daemon at {path} accepted the connection but did not answer within {START_WAIT:g}s; "
                "try again in a moment"
            ) from None
        if hello.get("type") != "hello":
            raise DaemonUnavailable(str(hello.get("message") or "daemon refused the connection"))
        return client

    @property
    def reader_done(self) -> bool:
        """True once the connection is gone (the daemon stopped or closed it)."""
        return self._reader_task is not None and self._reader_task.done()

    async def _read(self) -> None:
        try:
            while True:
                line = await self.reader.readline()
                if not line:
                    break
                try:
                    frame = json.loads(line)
                except ValueError:
                    continue
                if frame.get("type") in ("rpc_result", "rpc_error") and frame.get("id") in self._pending:
                    future = self._pending.pop(frame["id"])
                    if not future.done():
                        if frame["type"] == "rpc_result":
                            future.set_result(frame.get("result"))
                        else:
                            future.set_exception(RemoteError(str(frame.get("error"))))
                    continue
                await self.frames.put(frame)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(DaemonUnavailable("the daemon closed the connection"))
            await self.frames.put({"type": "closed"})

    async def send(self, frame: dict[str, Any]) -> None:
        self.writer.write((json.dumps(frame, ensure_ascii=False) + "\n").encode())
        await self.writer.drain()

    async def call(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 30.0) -> Any:
        rpc_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rpc_id] = future
        await self.send({"type": "rpc", "id": rpc_id, "method": method, "params": params or {}})
        return await asyncio.wait_for(future, timeout)

    async def chat(self, text: str) -> AsyncIterator[dict[str, Any]]:
        """Send a message and yield its frames up to and including the response."""
        await self.send({"type": "chat", "text": text})
        while True:
            frame = await self.frames.get()
            yield frame
            if frame.get("type") in ("response", "closed"):
                return

    async def close(self) -> None:
        if self._reader_task:
            self._reader_task.cancel()
            with contextlib.suppress(BaseException):
                await self._reader_task
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
