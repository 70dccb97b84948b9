"""The local control socket: NDJSON frames over a Unix socket.

Only the user who runs the daemon can connect: the socket file is mode 0600
and every connection's peer uid is checked (SO_PEERCRED). A malformed frame
is answered with an error frame and the connection stays usable: a frame
over ``MAX_FRAME`` bytes (the newline not counted) is skipped up to its
newline and nothing after it is lost; one nested deeper than
``homeagent.text.MAX_DEPTH`` is refused. Text is made storable here, once:
lone UTF-16 surrogates in any string of a frame become U+FFFD.

Client → daemon frames:
  {"type": "chat", "text": "...", "id"?: "..."}       a message; the turn's frames stream back
  {"type": "interrupt", "text": "..."}                interrupt text for the running turn
  {"type": "cancel"}                                  stop the running turn
  {"type": "attach"}                                  also receive proactive output (channel "cli")
  {"type": "rpc", "id": 1, "method": "...", "params": {...}}
Daemon → client frames:
  reasoning_delta, content_delta (reset after an interrupt), tool_call, response, error,
  rpc_result / rpc_error, output (proactive sends), hello.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from homeagent.io.manager import IOManager
from homeagent.text import TooDeep, loads, scrub_text

log = logging.getLogger("homeagent.socket")

MAX_FRAME = 4 * 1024 * 1024
RPCMethod = Callable[[dict[str, Any]], Awaitable[Any] | Any]


class RPCError(Exception):
    """Raised by an RPC method to send a clean error message to the client."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.attached = False
        self._write_lock = asyncio.Lock()
        self.closed = False

    async def send(self, frame: dict[str, Any]) -> None:
        if self.closed:
            return
        try:
            text = json.dumps(frame, ensure_ascii=False, default=str)
        except (ValueError, RecursionError) as exc:  # a circular or absurdly deep RPC result
            text = json.dumps({"type": "error", "message": f"reply could not be encoded: {exc}"})
        # a surrogate stays raw with ensure_ascii=False; replacing it keeps the frame valid UTF-8
        data = (scrub_text(text) + "\n").encode()
        async with self._write_lock:
            try:
                self.writer.write(data)
                await self.writer.drain()
            except (ConnectionError, RuntimeError):
                self.closed = True


class SocketServer:
    def __init__(
        self,
        path: Path,
        io: IOManager,
        *,
        cancel_turn: Callable[[], bool],
        channel: str = "cli",
        gate: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.path = path
        # awaited before an RPC's method is looked up: a starting daemon holds early calls until
        # the method's subsystem is up (and raises RPCError when that takes too long)
        self.gate = gate
        self.io = io
        self.cancel_turn = cancel_turn
        self.channel = channel
        self.methods: dict[str, RPCMethod] = {}
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[_Connection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    def add_method(self, name: str, fn: RPCMethod) -> None:
        self.methods[name] = fn

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        old_umask = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._handle, path=str(self.path), limit=MAX_FRAME)
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.closed = True
            conn.writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def broadcast(self, frame: dict[str, Any]) -> int:
        """Send a frame to every attached client (proactive output); returns how many got it."""
        targets = [c for c in self._conns if c.attached and not c.closed]
        await asyncio.gather(*(c.send(frame) for c in targets))
        return len(targets)

    @property
    def attached_clients(self) -> int:
        return sum(1 for c in self._conns if c.attached and not c.closed)

    # ------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(reader, writer)
        if not self._peer_allowed(writer):
            await conn.send({"type": "error", "message": "permission denied: socket belongs to another user"})
            writer.close()
            return
        self._conns.add(conn)
        try:
            await conn.send({"type": "hello", "protocol": 1})
            while not conn.closed:
                try:
                    # readuntil, not readline: on an over-long line readline has already dropped it
                    # *with* its newline when the newline was buffered, and discarding "the rest"
                    # then ate the next, valid frame. readuntil leaves the buffer as it was.
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as exc:
                    line = exc.partial  # EOF: a last frame without its newline is still a frame
                except asyncio.LimitOverrunError:
                    await conn.send({"type": "error", "message": f"frame too large (limit {MAX_FRAME} bytes)"})
                    await self._discard_line(reader)
                    continue
                except ConnectionError:
                    break
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    await self._dispatch(conn, line)
                except Exception as exc:  # a bug for one frame must not cost the client its connection
                    log.exception("socket frame failed")
                    await conn.send({"type": "error", "message": f"frame failed: {type(exc).__name__}: {exc}"})
        finally:
            self._conns.discard(conn)
            conn.closed = True
            with contextlib.suppress(Exception):
                writer.close()

    async def _discard_line(self, reader: asyncio.StreamReader) -> None:
        """Drop the over-long line at the head of the buffer, up to and including its newline.

        Called right after ``readuntil`` raised ``LimitOverrunError``, which consumed
        nothing: each pass drops what ``exc.consumed`` says holds no newline, until the
        newline arrives within the limit and ends the line. What follows it is kept.
        """
        while True:
            try:
                await reader.readuntil(b"\n")
                return
            except asyncio.LimitOverrunError as exc:
                await reader.readexactly(exc.consumed)
            except asyncio.IncompleteReadError:
                return

    def _peer_allowed(self, writer: asyncio.StreamWriter) -> bool:
        sock = writer.get_extra_info("socket")
        if sock is None or not hasattr(socket, "SO_PEERCRED"):
            return True
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return False
        _, uid, _ = struct.unpack("3i", creds)
        return uid in (os.getuid(), 0)

    async def _dispatch(self, conn: _Connection, line: bytes) -> None:
        try:
            frame = loads(line)
        except TooDeep as exc:
            await conn.send({"type": "error", "message": f"malformed frame: {exc}"})
            return
        except RecursionError:  # json's C scanner, in the one case orjson hands it a deep frame
            await conn.send({"type": "error", "message": "malformed frame: nested too deeply"})
            return
        except (ValueError, UnicodeDecodeError) as exc:
            await conn.send({"type": "error", "message": f"malformed frame: {exc}"})
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            await conn.send({"type": "error", "message": "malformed frame: expected a JSON object with a 'type'"})
            return
        kind = frame["type"]
        if kind == "chat":
            text = frame.get("text")
            if not isinstance(text, str):
                await conn.send({"type": "error", "message": "chat frame needs a string 'text'"})
                return
            self.io.inject_text("cli", self.channel, text, sink=conn.send)
        elif kind == "interrupt":
            self.io.inject_interrupt_text("cli", self.channel, str(frame.get("text", "")), sink=None)
            await conn.send({"type": "ack", "of": "interrupt"})
        elif kind == "cancel":
            await conn.send({"type": "ack", "of": "cancel", "cancelled": self.cancel_turn()})
        elif kind == "attach":
            conn.attached = True
            await conn.send({"type": "ack", "of": "attach"})
        elif kind == "rpc":
            task = asyncio.get_running_loop().create_task(self._rpc(conn, frame))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            await conn.send({"type": "error", "message": f"unknown frame type {kind!r}"})

    async def _rpc(self, conn: _Connection, frame: dict[str, Any]) -> None:
        rpc_id = frame.get("id")
        method = frame.get("method")
        params = frame.get("params") or {}
        if self.gate is not None and isinstance(method, str):
            try:
                await self.gate(method)
            except RPCError as exc:
                await conn.send({"type": "rpc_error", "id": rpc_id, "error": str(exc)})
                return
        fn = self.methods.get(method) if isinstance(method, str) else None
        if fn is None:
            await conn.send({"type": "rpc_error", "id": rpc_id, "error": f"unknown method {method!r}"})
            return
        if not isinstance(params, dict):
            await conn.send({"type": "rpc_error", "id": rpc_id, "error": "params must be an object"})
            return
        try:
            result = fn(params)
            if asyncio.iscoroutine(result):
                result = await result
        except RPCError as exc:
            await conn.send({"type": "rpc_error", "id": rpc_id, "error": str(exc)})
            return
        except Exception as exc:
            log.exception("rpc %s failed", method)
            await conn.send({"type": "rpc_error", "id": rpc_id, "error": f"{type(exc).__name__}: {exc}"})
            return
        await conn.send({"type": "rpc_result", "id": rpc_id, "result": result})
