"""Plugin child processes: starting them, watching them, and making sure none outlives the daemon.

* One ledger (:class:`Supervisor`) holds every child. The daemon stops it
  after the plugin registry and before the subsystems plugins use, so no
  child is left talking to a closed store.
* One task per child waits for the process itself to be reaped, never for
  stdout EOF: a plugin that started a browser or a helper leaves that
  grandchild holding the same stdout, and EOF would never come. (asyncio's
  ``Process.wait()`` on 3.11 also waits for the pipes to close, so the wait
  is on the subprocess protocol's ``process_exited``, which asyncio's child
  watcher fires from its ``waitpid``.) When it fires, whatever is left of
  the child's process group (those grandchildren) is killed, then the
  owner's ``on_exit`` runs.
* Each child gets its own session and process group (``start_new_session``)
  so a single ``killpg`` reaches everything it started, and on Linux
  ``PR_SET_PDEATHSIG`` = SIGKILL (via ``prctl`` in a ``preexec_fn``) so that
  a daemon killed with SIGKILL still takes its children along.
* The child's stdout is read by a subprocess protocol that hands bytes
  straight to the connection (no reader task in between: that is most of a
  round trip's latency); stderr lines go to the plugin's log, tagged,
  level-detected (``ERROR …``, ``WARNING …``), rate-limited, and the last
  ones are kept for crash reports.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from homeagent.plugins.proc.limits import ResourceLimits

__all__ = ["Child", "ChildExit", "Supervisor", "describe_exit"]

log = logging.getLogger("homeagent.plugins.proc")

PR_SET_PDEATHSIG = 1
_STDERR_LINE_MAX = 4000
_STDERR_TAIL = 30
_STDERR_RATE = 200  # lines logged per second per child; the rest are counted
_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "WARN": logging.WARNING,
           "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}


def _pdeathsig_preexec(parent: int) -> Callable[[], None] | None:
    """A preexec_fn that makes the child die with its parent (Linux), or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the daemon died between fork and prctl
            os._exit(1)

    return preexec


def _child_preexec(parent: int, limits: ResourceLimits | None) -> Callable[[], None] | None:
    """Die with the daemon, then the resource limits: everything the child needs set before exec."""
    steps = [step for step in (_pdeathsig_preexec(parent), limits.preexec() if limits else None) if step is not None]
    if not steps:
        return None
    if len(steps) == 1:
        return steps[0]

    def preexec() -> None:
        for step in steps:
            step()

    return preexec


def describe_exit(code: int) -> str:
    """``0`` → "exited normally"; ``-9`` → "was killed by SIGKILL"; ``3`` → "exited with code 3"."""
    if code == 0:
        return "exited normally"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


@dataclass(frozen=True)
class ChildExit:
    """How a child ended."""

    code: int
    reason: str
    stderr_tail: tuple[str, ...]


class _StderrLog:
    """A child's stderr as log lines: level-detected, rate-limited, tail kept."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._partial = b""
        self.tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self._window = 0.0
        self._count = 0
        self.suppressed = 0

    def feed(self, data: bytes) -> None:
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        if len(self._partial) > _STDERR_LINE_MAX:
            lines.append(self._partial)
            self._partial = b""
        for raw in lines:
            self._line(raw[:_STDERR_LINE_MAX].decode("utf-8", "replace").rstrip())

    def flush(self) -> None:
        if self._partial:
            self._line(self._partial[:_STDERR_LINE_MAX].decode("utf-8", "replace").rstrip())
            self._partial = b""

    def _line(self, text: str) -> None:
        if not text:
            return
        self.tail.append(text)
        now = time.monotonic()
        if now - self._window >= 1.0:
            if self.suppressed:
                self._log.warning("[stderr] … %d lines not logged (more than %d a second)", self.suppressed, _STDERR_RATE)
            self._window, self._count, self.suppressed = now, 0, 0
        self._count += 1
        if self._count > _STDERR_RATE:
            self.suppressed += 1
            return
        word = text.split(" ", 1)[0].rstrip(":")
        self._log.log(_LEVELS.get(word, logging.INFO), "[stderr] %s", text)


class _ChildProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The process itself: its exit, and its stderr as log lines."""

    def __init__(self, stderr: _StderrLog, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=2**16, loop=loop)
        self._stderr = stderr
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        # Called as soon as the child watcher has reaped the process. Process.wait()
        # (3.11) also waits for every pipe to close, which a grandchild holding
        # stdout would delay forever; this does not.
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if fd == 2:
            self._stderr.feed(data.encode() if isinstance(data, str) else data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 2:
            self._stderr.flush()
        super().pipe_connection_lost(fd, exc)


class _StdoutProtocol(asyncio.Protocol):
    """The protocol pipe from the child, read directly by the loop.

    (The subprocess transport's own pipes hand each chunk over with an extra
    ``call_soon``; reading the pipe ourselves saves that loop pass per frame.)
    """

    def __init__(self, on_stdout: Callable[[bytes], None]) -> None:
        self._on_stdout = on_stdout

    def data_received(self, data: bytes) -> None:
        try:
            self._on_stdout(data)
        except Exception:
            log.exception("handling plugin output failed")

    def eof_received(self) -> bool:
        return False


@dataclass(eq=False)
class Child:
    """One running plugin process and its protocol pipes."""

    name: str
    argv: tuple[str, ...]
    process: asyncio.subprocess.Process
    transport: asyncio.SubprocessTransport
    stdin: asyncio.WriteTransport
    stdout: asyncio.ReadTransport
    stdin_fd: int
    stdout_fd: int
    stderr: _StderrLog
    on_stdout: Callable[[bytes], None]
    started_at: float = field(default_factory=time.time)
    exit: ChildExit | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.exit is None

    # -- pipes ----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self.stdin.is_closing():
            self.stdin.write(data)

    def backlog(self) -> int:
        return 0 if self.stdin.is_closing() else self.stdin.get_write_buffer_size()

    def pause_reading(self, pause: bool) -> None:
        if self.stdout.is_closing():
            return
        if pause:
            self.stdout.pause_reading()
        else:
            self.stdout.resume_reading()

    def fd(self, which: int) -> int | None:
        """The raw fd of the child's stdin (0) or stdout (1), while open (for synchronous calls)."""
        if which == 0:
            return None if self.stdin.is_closing() else self.stdin_fd
        return None if self.stdout.is_closing() else self.stdout_fd

    def close_stdin(self) -> None:
        if not self.stdin.is_closing():
            self.stdin.close()

    def _drain_and_close(self) -> None:
        """After the exit: deliver what the child wrote before it died, then stop reading."""
        if not self.stdout.is_closing():
            while True:
                try:
                    data = os.read(self.stdout_fd, 1 << 18)
                except (BlockingIOError, InterruptedError, OSError):
                    break
                if not data:
                    break
                try:
                    self.on_stdout(data)
                except Exception:
                    log.exception("handling plugin output failed")
        self.stdout.close()
        self.stdin.close()

    # -- signals --------------------------------------------------------------

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the child's whole process group (itself and what it started)."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    async def terminate(self, grace: float) -> ChildExit | None:
        """SIGTERM the group, then SIGKILL after ``grace`` seconds; returns how it ended."""
        if self.running:
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), grace)
        if self.running:
            self.signal_group(signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), 5.0)
        return self.exit

    def kill(self) -> None:
        self.signal_group(signal.SIGKILL)


class Supervisor:
    """Every plugin child of the daemon: spawn, one wait per child, stop them all."""

    def __init__(self, *, kill_grace: float = 2.0) -> None:
        self.kill_grace = kill_grace
        self._children: set[Child] = set()
        self._waiters: set[asyncio.Task[None]] = set()
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False

    @property
    def children(self) -> list[Child]:
        return sorted(self._children, key=lambda c: c.started_at)

    async def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cwd: Path | None,
        env: Mapping[str, str],
        on_stdout: Callable[[bytes], None],
        on_exit: Callable[[Child, ChildExit], None],
        logger: logging.Logger,
        limits: ResourceLimits | None = None,
    ) -> Child:
        """Start ``argv`` with piped stdio; ``on_exit`` runs once, after the process has been reaped.

        ``limits`` are set in the child before exec (memory and CPU-time rlimits).
        """
        if self._closed:
            raise RuntimeError("the plugin supervisor is shut down")
        loop = asyncio.get_running_loop()
        stderr = _StderrLog(logger)
        child_in, parent_in = os.pipe()  # parent ends are close-on-exec: only the child's ends are inherited
        parent_out, child_out = os.pipe()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _ChildProtocol(stderr, loop),
                *argv,
                stdin=child_in,
                stdout=child_out,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(cwd) if cwd is not None else None,
                env=dict(env),
                start_new_session=True,
                preexec_fn=_child_preexec(os.getpid(), limits),
            )
        except BaseException:
            for fd in (parent_in, parent_out):
                os.close(fd)
            raise
        finally:
            os.close(child_in)
            os.close(child_out)
        protocol = cast(_ChildProtocol, protocol)
        out_pipe, _ = await loop.connect_read_pipe(lambda: _StdoutProtocol(on_stdout), os.fdopen(parent_out, "rb", buffering=0))
        in_pipe, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(parent_in, "wb", buffering=0))
        stdout = cast(asyncio.ReadTransport, out_pipe)  # (uvloop's transports are not subclasses)
        stdin = cast(asyncio.WriteTransport, in_pipe)
        process = asyncio.subprocess.Process(transport, protocol, loop)
        child = Child(name, tuple(argv), process, transport, stdin, stdout, parent_in, parent_out, stderr, on_stdout)
        self._children.add(child)
        waiter = loop.create_task(self._wait(child, protocol, on_exit), name=f"plugin-wait:{name}:{process.pid}")
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)
        log.debug("plugin %s: started pid %d: %s", name, process.pid, " ".join(argv))
        return child

    async def _wait(self, child: Child, protocol: _ChildProtocol, on_exit: Callable[[Child, ChildExit], None]) -> None:
        await protocol.exited
        code = child.transport.get_returncode()
        if code is None:  # cannot happen after process_exited; be safe rather than hang
            code = await child.process.wait()
        child.signal_group(signal.SIGKILL)  # grandchildren still holding its pipes
        child._drain_and_close()
        child.stderr.flush()
        reason = describe_exit(code)
        child.exit = ChildExit(code, reason, tuple(child.stderr.tail))
        child.exited.set()
        self._children.discard(child)
        with contextlib.suppress(Exception):
            child.transport.close()
        try:
            on_exit(child, child.exit)
        except Exception:
            log.exception("plugin %s: exit handler failed", child.name)

    def detach(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the supervisor keeps alive (restarts, reloads a plugin asked for)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def stop_all(self) -> None:
        """Terminate every child still running (SIGTERM, then SIGKILL after the grace period)."""
        children = list(self._children)
        if children:
            log.info("stopping %d plugin process(es)", len(children))
            await asyncio.gather(*(c.terminate(self.kill_grace) for c in children), return_exceptions=True)

    async def close(self) -> None:
        """Stop every child and refuse new ones; the daemon calls this after the registry has stopped."""
        self._closed = True
        for task in list(self._background):
            task.cancel()
        await self.stop_all()
        if self._waiters:
            await asyncio.wait(list(self._waiters), timeout=5.0)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
