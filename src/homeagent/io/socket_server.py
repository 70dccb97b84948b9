"""The local control socket: NDJSON frames over a Unix socket.

Only the user who runs the daemon can connect: the socket file is mode 0600
and every connection's peer uid is checked (SO_PEERCRED). A malformed frame
is answered with an error frame and the connection stays usable: a frame
over ``MAX_FRAME`` bytes (the newline not counted) is skipped up to its
newline and nothing after it is lost; one nested deeper than
``homeagent.text.MAX_DEPTH`` is refused. Text is made storable here, once:
lone UTF-16 surrogates in any string of a frame become U+FFFD.

One client cannot grow the daemon or stall it (per connection, see
:class:`SocketLimits`): RPCs beyond ``max_inflight_rpcs`` in flight are
answered at once with a ``busy`` rpc_error, chat frames beyond
``max_queued_turns`` unfinished turns get a ``busy`` error and a failed
``response``; output is never awaited (a turn streaming to a client that
does not read must not stall the agent for everyone), instead the server
stops reading a client's frames while more than ``pause_reading_bytes`` of
its output sit unread, and disconnects it with an error frame once that
exceeds ``max_unread_bytes``. Interrupt frames (each cancels the LLM call in
flight, and becomes a turn when the agent is idle) are limited to
``INTERRUPT_RATE`` a second per connection.

Client → daemon frames:
  {"type": "chat", "text": "...", "id"?: "...", "media"?: ["<digest>", ...]}
                                                      a message (with media from the media store, at
                                                      most 10); the turn's frames stream back
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homeagent.io.manager import IOManager
from homeagent.ratelimit import TokenBucket
from homeagent.sdk.types import MediaBlock
from homeagent.text import TooDeep, loads, scrub_text

log = logging.getLogger("homeagent.socket")

MAX_FRAME = 4 * 1024 * 1024
RPCMethod = Callable[[dict[str, Any]], Awaitable[Any] | Any]


class RPCError(Exception):
    """Raised by an RPC method to send a clean error message to the client."""


@dataclass(frozen=True)
class SocketLimits:
    """What one connection may hold in the daemon (settings ``core.socket.*``)."""

    max_inflight_rpcs: int = 32
    max_queued_turns: int = 8
    max_unread_bytes: int = 8 * 1024 * 1024
    pause_reading_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        # reading pauses below the cap, else a client would be cut off before it was slowed down
        object.__setattr__(self, "pause_reading_bytes", max(1, min(self.pause_reading_bytes, self.max_unread_bytes // 2)))


# Interrupt frames per second per connection (bursts of INTERRUPT_BURST).
INTERRUPT_RATE = 5.0
INTERRUPT_BURST = 10.0
# After the overflow error frame is queued, a client has this long to read it before the socket is cut.
OVERFLOW_GRACE = 5.0


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limits: SocketLimits) -> None:
        self.reader = reader
        self.writer = writer
        self.limits = limits
        self.attached = False
        self.closed = False
        self.inflight_rpcs = 0
        self.queued_turns = 0
        self.busy_refusals = 0
        self.overflowed = False
        self.interrupts = TokenBucket(INTERRUPT_RATE, INTERRUPT_BURST)
        # drain() then waits while more than pause_reading_bytes are unread: the read loop's back-pressure
        with contextlib.suppress(AttributeError, RuntimeError, ValueError):
            writer.transport.set_write_buffer_limits(high=limits.pause_reading_bytes)

    def unread(self) -> int:
        """Bytes written to this client that it has not read yet (held in the daemon's buffer)."""
        transport = self.writer.transport
        return 0 if transport.is_closing() else transport.get_write_buffer_size()

    async def send(self, frame: dict[str, Any]) -> None:
        """A frame sink: never waits for the client (see :meth:`send_now`)."""
        self.send_now(frame)

    def send_now(self, frame: dict[str, Any]) -> None:
        """Queue ``frame`` for the client; past ``max_unread_bytes`` unread, disconnect it instead."""
        if self.closed:
            return
        try:
            text = json.dumps(frame, ensure_ascii=False, default=str)
        except (ValueError, RecursionError) as exc:  # a circular or absurdly deep RPC result
            text = json.dumps({"type": "error", "message": f"reply could not be encoded: {exc}"})
        # a surrogate stays raw with ensure_ascii=False; replacing it keeps the frame valid UTF-8
        data = (scrub_text(text) + "\n").encode()
        if self.writer.transport.is_closing():
            self.closed = True
            return
        unread = self.unread()
        if unread and unread + len(data) > self.limits.max_unread_bytes:  # (one large reply alone always goes)
            self._overflow()
            return
        try:
            self.writer.write(data)
        except (ConnectionError, RuntimeError):
            self.closed = True

    def _overflow(self) -> None:
        limit = self.limits.max_unread_bytes
        unread = self.unread()
        log.warning("socket client disconnected: %d bytes of its output unread (limit %d bytes)", unread, limit)
        self.closed = True
        self.overflowed = True
        message = (
            f"disconnected: more than {limit} bytes of replies were left unread "
            f"(core.socket.max_unread_bytes); read the daemon's frames as they arrive"
        )
        transport = self.writer.transport
        with contextlib.suppress(Exception):
            transport.write((json.dumps({"type": "error", "message": message, "code": "overflow"}) + "\n").encode())
            transport.close()  # stops reading at once; what is queued (ending with the error) may still be read
        # a client that never reads would keep the buffer forever: cut it after a grace period
        asyncio.get_running_loop().call_later(OVERFLOW_GRACE, transport.abort)

    async def wait_for_reader(self) -> None:
        """Back-pressure: return once the client has read enough of its output to be served more."""
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.writer.drain()

    def turn_sink(self) -> Callable[[dict[str, Any]], Awaitable[None]]:
        """The sink of one chat turn: frees the turn's slot when its ``response`` goes out."""
        done = False

        async def sink(frame: dict[str, Any]) -> None:
            nonlocal done
            if frame.get("type") == "response" and not done:
                done = True
                self.queued_turns -= 1
            self.send_now(frame)

        return sink


class SocketServer:
    def __init__(
        self,
        path: Path,
        io: IOManager,
        *,
        cancel_turn: Callable[[], bool],
        channel: str = "cli",
        limits: Callable[[], SocketLimits] = SocketLimits,
        gate: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.path = path
        self.limits = limits  # read for each new connection, so a changed setting applies to the next one
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
        self.busy_refusals = 0  # of connections already gone
        self.overflow_disconnects = 0

    def add_method(self, name: str, fn: RPCMethod) -> None:
        self.methods[name] = fn

    def remove_method(self, name: str, fn: RPCMethod) -> bool:
        """Remove ``name`` if it is still ``fn`` (a later owner's method of the same name stays); True if removed."""
        if self.methods.get(name) is not fn:
            return False
        del self.methods[name]
        return True

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
        for conn in targets:
            conn.send_now(frame)
        return sum(1 for c in targets if not c.closed)

    def stats(self) -> dict[str, Any]:
        """Connections and what the per-connection limits did (for ``status`` and the flood bench)."""
        conns = [c for c in self._conns if not c.closed]
        return {
            "clients": len(conns),
            "attached": sum(1 for c in conns if c.attached),
            "unread_bytes": sum(c.unread() for c in conns),
            "max_unread_bytes": max((c.unread() for c in conns), default=0),
            "inflight_rpcs": sum(c.inflight_rpcs for c in conns),
            "queued_turns": sum(c.queued_turns for c in conns),
            "busy_refusals": self.busy_refusals + sum(c.busy_refusals for c in self._conns),
            "overflow_disconnects": self.overflow_disconnects + sum(c.overflowed for c in self._conns),
        }

    @property
    def attached_clients(self) -> int:
        return sum(1 for c in self._conns if c.attached and not c.closed)

    # ------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(reader, writer, self.limits())
        if not self._peer_allowed(writer):
            conn.send_now({"type": "error", "message": "permission denied: socket belongs to another user"})
            writer.close()
            return
        self._conns.add(conn)
        try:
            conn.send_now({"type": "hello", "protocol": 1})
            while not conn.closed:
                await conn.wait_for_reader()  # no new frames while the client leaves its replies unread
                if conn.closed:
                    break
                try:
                    # readuntil, not readline: on an over-long line readline has already dropped it
                    # *with* its newline when the newline was buffered, and discarding "the rest"
                    # then ate the next, valid frame. readuntil leaves the buffer as it was.
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as exc:
                    line = exc.partial  # EOF: a last frame without its newline is still a frame
                except asyncio.LimitOverrunError:
                    conn.send_now({"type": "error", "message": f"frame too large (limit {MAX_FRAME} bytes)"})
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
                    conn.send_now({"type": "error", "message": f"frame failed: {type(exc).__name__}: {exc}"})
        finally:
            self._conns.discard(conn)
            self.busy_refusals += conn.busy_refusals
            self.overflow_disconnects += conn.overflowed
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
            conn.send_now({"type": "error", "message": f"malformed frame: {exc}"})
            return
        except RecursionError:  # json's C scanner, in the one case orjson hands it a deep frame
            conn.send_now({"type": "error", "message": "malformed frame: nested too deeply"})
            return
        except (ValueError, UnicodeDecodeError) as exc:
            conn.send_now({"type": "error", "message": f"malformed frame: {exc}"})
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            conn.send_now({"type": "error", "message": "malformed frame: expected a JSON object with a 'type'"})
            return
        kind = frame["type"]
        if kind == "chat":
            text = frame.get("text")
            if not isinstance(text, str):
                conn.send_now({"type": "error", "message": "chat frame needs a string 'text'"})
                return
            digests = frame.get("media") or []
            if not isinstance(digests, list) or len(digests) > 10 or not all(isinstance(d, str) for d in digests):
                conn.send_now({"type": "error", "message": "chat frame: 'media' must be a list of at most 10 digests"})
                return
            limit = conn.limits.max_queued_turns
            if conn.queued_turns >= limit:
                conn.busy_refusals += 1
                message = (
                    f"busy: {conn.queued_turns} turns of this connection are still queued or running "
                    f"(core.socket.max_queued_turns = {limit}); wait for a response before sending more"
                )
                conn.send_now({"type": "error", "message": message, "code": "busy"})
                conn.send_now({"type": "response", "text": "", "ok": False, "interrupted": False, "id": frame.get("id"),
                               "error": message, "code": "busy"})
                return
            conn.queued_turns += 1
            self.io.inject_text("cli", self.channel, text, sink=conn.turn_sink(),
                                media=[MediaBlock(digest=d) for d in digests])
        elif kind == "interrupt":
            # an interrupt cancels the LLM call in flight, and becomes a turn when the agent is idle:
            # a connection gets a human's rate of them, not a flood's
            if not conn.interrupts.take():
                conn.busy_refusals += 1
                conn.send_now({
                    "type": "error",
                    "message": f"busy: more than {INTERRUPT_RATE:g} interrupts a second from this connection; "
                    "this one was dropped",
                    "code": "busy",
                })
                return
            self.io.inject_interrupt_text("cli", self.channel, str(frame.get("text", "")), sink=None)
            conn.send_now({"type": "ack", "of": "interrupt"})
        elif kind == "cancel":
            conn.send_now({"type": "ack", "of": "cancel", "cancelled": self.cancel_turn()})
        elif kind == "attach":
            conn.attached = True
            conn.send_now({"type": "ack", "of": "attach"})
        elif kind == "rpc":
            limit = conn.limits.max_inflight_rpcs
            if conn.inflight_rpcs >= limit:
                conn.busy_refusals += 1
                conn.send_now({
                    "type": "rpc_error",
                    "id": frame.get("id"),
                    "error": f"busy: {limit} RPCs of this connection are still in flight "
                    f"(core.socket.max_inflight_rpcs); wait for their replies before sending more",
                    "code": "busy",
                })
                return
            conn.inflight_rpcs += 1
            task = asyncio.get_running_loop().create_task(self._rpc(conn, frame))
            self._tasks.add(task)

            def finished(task: asyncio.Task[Any]) -> None:
                self._tasks.discard(task)
                conn.inflight_rpcs -= 1

            task.add_done_callback(finished)
        else:
            conn.send_now({"type": "error", "message": f"unknown frame type {kind!r}"})

    async def _rpc(self, conn: _Connection, frame: dict[str, Any]) -> None:
        rpc_id = frame.get("id")
        method = frame.get("method")
        params = frame.get("params") or {}
        if self.gate is not None and isinstance(method, str):
            try:
                await self.gate(method)
            except RPCError as exc:
                conn.send_now({"type": "rpc_error", "id": rpc_id, "error": str(exc)})
                return
        fn = self.methods.get(method) if isinstance(method, str) else None
        if fn is None:
            conn.send_now({"type": "rpc_error", "id": rpc_id, "error": f"unknown method {method!r}"})
            return
        if not isinstance(params, dict):
            conn.send_now({"type": "rpc_error", "id": rpc_id, "error": "params must be an object"})
            return
        try:
            result = fn(params)
            if asyncio.iscoroutine(result):
                result = await result
        except RPCError as exc:
            conn.send_now({"type": "rpc_error", "id": rpc_id, "error": str(exc)})
            return
        except Exception as exc:
            log.exception("rpc %s failed", method)
            conn.send_now({"type": "rpc_error", "id": rpc_id, "error": f"{type(exc).__name__}: {exc}"})
            return
        conn.send_now({"type": "rpc_result", "id": rpc_id, "result": result})
