"""A client for the daemon's local socket, used by every CLI command."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from homeagent.io.socket_server import MAX_FRAME


class DaemonUnavailable(Exception):
    """No daemon answers on the socket."""


class RemoteError(Exception):
    """The daemon answered an RPC with an error."""


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reader_task: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, path: Path, *, timeout: float = 3.0) -> Client:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=MAX_FRAME), timeout
            )
        except (FileNotFoundError, ConnectionRefusedError, TimeoutError, OSError) as exc:
            raise DaemonUnavailable(
                f"no HomeAgent daemon answers at {path} ({exc.__class__.__name__}); start one with `homeagent run`"
            ) from exc
        client = cls(reader, writer)
        client._reader_task = asyncio.get_running_loop().create_task(client._read())
        hello = await asyncio.wait_for(client.frames.get(), timeout)
        if hello.get("type") != "hello":
            raise DaemonUnavailable(str(hello.get("message") or "daemon refused the connection"))
        return client

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
