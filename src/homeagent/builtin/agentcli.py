"""Built-in ``agentcli``: interactive terminals (PTY) the agent drives with tools.

Some programs only talk to a terminal (REPLs, ``ssh``, installers that ask
questions, TUIs). ``cmd_run`` cannot drive them; this plugin gives the model a
real PTY per terminal: ``terminal_create`` starts a command on it,
``terminal_write`` types text and named keys, ``terminal_read`` returns what
the program printed, and new output is pushed to the agent as an input
(``[终端 X 有新输出]``) so it need not poll.

Everything runs on the event loop without blocking: the PTY master is
non-blocking and watched with ``loop.add_reader``; writes that would block
wait for writability. Each terminal's command starts in its own session with
the PTY as controlling terminal (so ctrl_c reaches the foreground job), and
closing, timing out or stopping the plugin kills every process of that session
— including background jobs a shell moved to their own process group.

Terminals start in the workspace (``core.agent.workdir``, else this plugin's
data folder). With the daemon's sandbox (:mod:`homeagent.confine`) the
command runs under bubblewrap: read-only system, the workspace read-write, no
data dir, network per ``core.sandbox.network``; the PTY stays its controlling
terminal, so ctrl_c still reaches the foreground job. Without it (bubblewrap
missing, or ``core.sandbox.mode`` off) the terminal runs as the daemon's user
and ``terminal_create`` says so.

A terminal closes after ``timeout`` (default ``default_timeout``, 5m) without
the agent touching it (create/write/read/resize). Output is kept in a ring of
``BUFFER_CHARS`` characters per terminal; ANSI escape sequences are stripped
from what the model reads.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import fcntl
import logging
import os
import re
import shlex
import signal
import struct
import termios
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from homeagent.childenv import scrubbed_env
from homeagent.config.values import format_duration, parse_duration
from homeagent.confine import Confinement, SandboxUnavailable
from homeagent.sdk.api import PluginSDK
from homeagent.sdk.types import ConfigDef, ToolDef

__all__ = ["BUFFER_CHARS", "KEYS", "AgentCLIPlugin", "Terminal", "create_plugin", "session_pids"]

log = logging.getLogger("homeagent.plugin.agentcli")

BUFFER_CHARS = 128 * 1024
TAIL_CHARS = 200
MAX_INPUT_CHARS = 64 * 1024
MAX_READ_WAIT = 30.0
WRITE_TIMEOUT = 5.0
SETTLE = 0.15  # seconds of quiet that end a terminal_read wait

_FKEYS = ["\x1bOP", "\x1bOQ", "\x1bOR", "\x1bOS", "\x1b[15~", "\x1b[17~", "\x1b[18~", "\x1b[19~",
          "\x1b[20~", "\x1b[21~", "\x1b[23~", "\x1b[24~"]

KEYS: dict[str, str] = {
    "enter": "\r", "tab": "\t", "escape": "\x1b", "backspace": "\x7f", "delete": "\x1b[3~",
    "up": "\x1b[A", "down": "\x1b[B", "right": "\x1b[C", "left": "\x1b[D",
    "home": "\x1b[H", "end": "\x1b[F", "page_up": "\x1b[5~", "page_down": "\x1b[6~",
    **{f"ctrl_{c}": chr(i + 1) for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")},
    **{f"alt_{c}": "\x1b" + c for c in "abcdefghijklmnopqrstuvwxyz"},
    **{f"f{i + 1}": seq for i, seq in enumerate(_FKEYS)},
}

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\x1b[()][0-9A-Za-z]")


def clean(text: str) -> str:
    """Terminal output as plain text: escape sequences gone, CRLF folded, stray CRs and BELs dropped."""
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\x07", "")
    return "\n".join(line.rsplit("\r", 1)[-1] if "\r" in line else line for line in text.split("\n"))


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _err(message: str) -> dict[str, Any]:
    return {"isError": True, "content": message}


def session_pids(sid: int) -> list[int]:
    """Every live process in session ``sid`` (Linux /proc); blocking, call in a thread."""
    out: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        # fields[0]=state, [1]=ppid, [2]=pgrp, [3]=session
        if len(fields) > 3 and fields[3] == str(sid) and fields[0] != "Z":
            out.append(int(entry))
    return out


def _kill_session(sid: int) -> None:
    """SIGKILL the process group ``sid`` and everything else still in that session (blocking)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL)
    for _ in range(3):
        pids = session_pids(sid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


class Terminal:
    """One PTY and the process session running on it."""

    def __init__(self, tid: str, command: str, argv: list[str], rows: int, cols: int, timeout: float) -> None:
        self.id = tid
        self.command = command
        self.argv = argv
        self.rows = rows
        self.cols = cols
        self.timeout = timeout
        self.created = time.time()
        self.touched = time.monotonic()
        self.proc: asyncio.subprocess.Process | None = None
        self.master = -1
        self.buffer = ""
        self.unread = 0  # characters at the end of ``buffer`` the agent has not read (clear=true)
        self.dropped = False  # unread output fell off the ring since the last read
        self.pending = 0  # bytes received since the last notification
        self.last_notify = 0.0
        self.closed = False
        self.exit_code: int | None = None
        self.sandbox = ""  # how it is confined, as shown to the model
        self.output = asyncio.Event()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._tasks: list[asyncio.Task[Any]] = []
        self._notify_handle: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else -1

    def feed(self, data: bytes) -> None:
        text = self._decoder.decode(data)
        if not text:
            return
        self.buffer += text
        self.unread += len(text)
        if len(self.buffer) > BUFFER_CHARS:
            cut = len(self.buffer) - BUFFER_CHARS
            self.buffer = self.buffer[cut:]
            if self.unread > len(self.buffer):
                self.unread = len(self.buffer)
                self.dropped = True
        self.output.set()

    def set_size(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.rows, self.cols = rows, cols

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "command": self.command, "pid": self.pid, "running": self.running,
            "rows": self.rows, "cols": self.cols, "unread_chars": self.unread,
            "idle": format_duration(round(time.monotonic() - self.touched)),
            "timeout": format_duration(round(self.timeout)),
        }
        if self.exit_code is not None:
            out["exit_code"] = self.exit_code
        return out


class AgentCLIPlugin:
    def __init__(self, name: str, sandbox: Confinement | None = None) -> None:
        self.name = name
        self._sdk: PluginSDK | None = None
        self._sandbox = sandbox
        self._terms: dict[str, Terminal] = {}
        self._next = 1
        self._reaper: asyncio.Task[None] | None = None

    # -- settings -----------------------------------------------------------------

    def _get(self, key: str, default: Any) -> Any:
        assert self._sdk is not None
        value = self._sdk.settings.get(key, default)
        return default if value is None or value == "" else value

    def _seconds(self, key: str, default: float) -> float:
        value = self._get(key, default)
        try:
            return float(value) if isinstance(value, int | float) else parse_duration(str(value))
        except ValueError:
            return default

    # -- lifecycle ----------------------------------------------------------------

    async def start(self, sdk: PluginSDK) -> None:
        self._sdk = sdk
        s = sdk.settings
        s.register_def(ConfigDef(key="default_timeout", default="5m", type="duration", category="agentcli",
                                 display_name="Idle timeout",
                                 description="A terminal the agent has not used for this long is closed.", min=1))
        s.register_def(ConfigDef(key="notify_bytes", default=2048, type="int", category="agentcli",
                                 display_name="Notify after bytes",
                                 description="Tell the agent about new output at once when this much has arrived.",
                                 min=1))
        s.register_def(ConfigDef(key="notify_interval", default="2s", type="duration", category="agentcli",
                                 display_name="Notify interval",
                                 description="Otherwise, at most one new-output notice per terminal this often."))
        s.register_def(ConfigDef(key="max_terminals", default=8, type="int", category="agentcli",
                                 display_name="Most open terminals", description="How many terminals may be open.",
                                 min=1))
        key_names = ", ".join(["enter", "tab", "escape", "ctrl_a…ctrl_z", "alt_a…alt_z", "f1…f12", "up", "down",
                               "left", "right", "home", "end", "backspace", "delete", "page_up", "page_down"])
        tools: list[tuple[ToolDef, Any]] = [
            (ToolDef("terminal_create",
                     "Open an interactive terminal (PTY) running a command (default: a shell). Returns its id "
                     "(term_N). New output is announced to you as '[终端 term_N 有新输出]'. Closed after `timeout` "
                     "without use.",
                     {"type": "object", "properties": {
                         "command": {"type": "string", "description": "command line; default $SHELL or /bin/sh"},
                         "timeout": {"type": ["string", "number"], "description": "idle timeout, e.g. 5m (default)"},
                         "rows": {"type": "integer", "minimum": 2, "maximum": 500},
                         "cols": {"type": "integer", "minimum": 10, "maximum": 1000}},
                      "additionalProperties": False}), self._create),
            (ToolDef("terminal_write",
                     "Type into a terminal: `input` is sent exactly as given (no newline added), then `key` "
                     f"(one of: {key_names}). To run a command, pass input plus key=enter.",
                     {"type": "object", "properties": {
                         "id": {"type": "string"}, "input": {"type": "string"},
                         "key": {"type": "string", "enum": sorted(KEYS)}},
                      "required": ["id"], "additionalProperties": False}), self._write),
            (ToolDef("terminal_read",
                     "Read a terminal's output. clear=true (default): only what is new since the last read; "
                     "clear=false: the whole buffer. wait: up to this many seconds for output to arrive and settle.",
                     {"type": "object", "properties": {
                         "id": {"type": "string"}, "clear": {"type": "boolean"},
                         "wait": {"type": "number", "minimum": 0, "maximum": MAX_READ_WAIT}},
                      "required": ["id"], "additionalProperties": False}), self._read),
            (ToolDef("terminal_resize", "Change a terminal's size (rows × cols).",
                     {"type": "object", "properties": {
                         "id": {"type": "string"}, "rows": {"type": "integer", "minimum": 2, "maximum": 500},
                         "cols": {"type": "integer", "minimum": 10, "maximum": 1000}},
                      "required": ["id"], "additionalProperties": False}), self._resize),
            (ToolDef("terminal_close", "Close a terminal and kill everything running in it.",
                     {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"],
                      "additionalProperties": False}), self._close_tool),
            (ToolDef("terminal_list", "List open terminals.", {"type": "object", "properties": {}}), self._list),
        ]
        for tool, handler in tools:
            tool.no_memory = True
            sdk.register_tool(tool, handler)
        self._reaper = asyncio.get_running_loop().create_task(self._reap_idle(), name=f"{self.name}-idle")

    async def stop(self) -> None:
        task, self._reaper = self._reaper, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        terms, self._terms = list(self._terms.values()), {}
        await asyncio.gather(*(self._close(t) for t in terms), return_exceptions=True)

    # -- notifications ------------------------------------------------------------

    def _inject(self, text: str) -> None:
        if self._sdk is None:
            return
        try:
            self._sdk.inject_text_no_memory("agentcli", "agentcli", text)
        except Exception:
            log.exception("agentcli: could not notify the agent")

    def _tail(self, t: Terminal) -> str:
        return clean(t.buffer[-(TAIL_CHARS * 4):])[-TAIL_CHARS:]

    def _notify_output(self, t: Terminal) -> None:
        if t._notify_handle is not None:
            t._notify_handle.cancel()
            t._notify_handle = None
        if t.closed or t.pending == 0 or t.unread == 0:
            t.pending = 0
            return
        t.pending = 0
        t.last_notify = time.monotonic()
        self._inject(f"[终端 {t.id} 有新输出]\n{self._tail(t)}")

    def _on_output(self, t: Terminal, n: int) -> None:
        t.pending += n
        enough = t.pending >= int(self._get("notify_bytes", 2048))
        if t._notify_handle is not None:
            if not enough:
                return
            t._notify_handle.cancel()
        interval = self._seconds("notify_interval", 2.0)
        due = t.last_notify + interval - time.monotonic()
        if enough or due <= 0:
            # a short delay lets a burst of output arrive in one notice
            due = 0.05 if due <= 0 else 0.0
        loop = asyncio.get_running_loop()
        t._notify_handle = loop.call_later(max(due, 0.0), self._notify_output, t)

    # -- PTY plumbing -------------------------------------------------------------

    def _on_readable(self, t: Terminal) -> None:
        try:
            data = os.read(t.master, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: every slave end is closed
            data = b""
        if not data:
            self._stop_reading(t)
            return
        t.feed(data)
        self._on_output(t, len(data))

    def _stop_reading(self, t: Terminal) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(t.master)

    def _workspace(self) -> str:
        """The folder terminals start in and the only one the sandbox lets them write (created if the default)."""
        assert self._sdk is not None
        configured = str(self._sdk.settings.get_core("core.agent.workdir", "") or "").strip()
        if configured:
            path = Path(configured).expanduser()
            if not path.is_dir():
                raise OSError(errno.ENOENT, f"the working directory {configured} (core.agent.workdir) does not exist")
        else:
            path = self._sdk.settings.data_dir()
            path.mkdir(parents=True, exist_ok=True)
        return os.path.realpath(path)

    async def _spawn(self, t: Terminal) -> None:
        workspace = await asyncio.to_thread(self._workspace)
        argv = list(t.argv)
        if self._sandbox is not None:
            launch = self._sandbox.wrap(argv, cwd=workspace, writable=[workspace], home="/tmp")
            argv, t.sandbox = launch.argv, launch.label
        else:
            t.sandbox = "none (no sandbox configured)"
        master, slave = os.openpty()
        t.master = master
        try:
            os.set_blocking(master, False)
            t.set_size(t.rows, t.cols)
            env = scrubbed_env()  # no LLM keys or tokens for whatever runs in the terminal
            env.setdefault("TERM", "xterm-256color")
            env["COLUMNS"], env["LINES"] = str(t.cols), str(t.rows)

            def make_controlling() -> None:  # runs in the child after setsid()
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)

            if t.sandbox.startswith("bwrap"):
                env.pop("TMPDIR", None)  # the sandbox has its own /tmp
            t.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=workspace,
                start_new_session=True, preexec_fn=make_controlling,
            )
        except BaseException:
            os.close(slave)
            os.close(master)
            t.master = -1
            raise
        os.close(slave)
        asyncio.get_running_loop().add_reader(master, self._on_readable, t)
        t._tasks.append(asyncio.get_running_loop().create_task(self._watch_exit(t), name=f"agentcli-{t.id}-exit"))

    async def _watch_exit(self, t: Terminal) -> None:
        assert t.proc is not None
        t.exit_code = await t.proc.wait()
        await asyncio.sleep(0.05)  # let the last output arrive
        if t.closed:
            return
        t.output.set()
        if t._notify_handle is not None:
            t._notify_handle.cancel()
            t._notify_handle = None
        tail = self._tail(t) if t.pending and t.unread else ""
        t.pending = 0
        log.info("terminal %s: process exited with %s", t.id, t.exit_code)
        self._inject(f"[终端 {t.id} 中的进程已退出]" + (f"\n{tail}" if tail else ""))

    async def _close(self, t: Terminal) -> None:
        if t.closed:
            return
        t.closed = True
        if t._notify_handle is not None:
            t._notify_handle.cancel()
        if t.master >= 0:
            self._stop_reading(t)
        if t.proc is not None:
            await asyncio.to_thread(_kill_session, t.proc.pid)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t.proc.wait(), 5)
        for task in t._tasks:
            task.cancel()
        await asyncio.gather(*t._tasks, return_exceptions=True)
        if t.master >= 0:
            with contextlib.suppress(OSError):
                os.close(t.master)
            t.master = -1

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            now = time.monotonic()
            for t in list(self._terms.values()):
                if now - t.touched >= t.timeout:
                    self._terms.pop(t.id, None)
                    try:
                        await self._close(t)
                    except Exception:
                        log.exception("terminal %s: closing after timeout failed", t.id)
                    self._inject(f"[终端 {t.id} 已超时关闭（空闲 {format_duration(round(t.timeout))}）]")

    async def _write_all(self, t: Terminal, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WRITE_TIMEOUT
        view = memoryview(data)
        while view:
            try:
                n = os.write(t.master, view)
                view = view[n:]
                continue
            except BlockingIOError:
                pass
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(t.master, _resolve, ready)
            try:
                async with asyncio.timeout(max(deadline - loop.time(), 0.0)):
                    await ready
            except TimeoutError:
                raise TimeoutError(f"the program in {t.id} is not reading its input") from None
            finally:
                loop.remove_writer(t.master)

    # -- tools --------------------------------------------------------------------

    def _term(self, args: dict[str, Any]) -> Terminal | dict[str, Any]:
        tid = str(args.get("id", "")).strip()
        if tid.isdigit():
            tid = f"term_{tid}"
        t = self._terms.get(tid)
        if t is None:
            known = ", ".join(self._terms) or "none"
            return _err(f"no terminal {tid!r} (open: {known})")
        t.touched = time.monotonic()
        return t

    async def _create(self, args: dict[str, Any]) -> Any:
        limit = int(self._get("max_terminals", 8))
        if len(self._terms) >= limit:
            return _err(f"{len(self._terms)} terminals are open (max_terminals={limit}); close one first")
        command = str(args.get("command") or "").strip() or os.environ.get("SHELL") or "/bin/sh"
        try:
            argv = shlex.split(command)
        except ValueError as e:
            return _err(f"command {command!r} cannot be parsed: {e}")
        if not argv:
            return _err("command is empty")
        raw_timeout = args.get("timeout")
        if raw_timeout in (None, ""):
            timeout = self._seconds("default_timeout", 300.0)
        else:
            try:
                timeout = float(raw_timeout) if isinstance(raw_timeout, int | float) else parse_duration(str(raw_timeout))
            except ValueError as e:
                return _err(f"timeout: {e}")
            if timeout <= 0:
                return _err("timeout must be more than 0")
        rows, cols = int(args.get("rows") or 24), int(args.get("cols") or 80)
        tid = f"term_{self._next}"
        t = Terminal(tid, command, argv, rows, cols, timeout)
        try:
            await self._spawn(t)
        except SandboxUnavailable as e:
            return _err(str(e))
        except OSError as e:
            reason = "not found" if e.errno == errno.ENOENT else (e.strerror or str(e))
            return _err(f"cannot start {argv[0]!r}: {reason}")
        self._next += 1
        self._terms[tid] = t
        log.info("terminal %s: started %r (pid %s)", tid, command, t.pid)
        self._inject(f"[终端 {tid} 已启动]")
        return {"id": tid, "command": command, "pid": t.pid, "rows": rows, "cols": cols,
                "timeout": format_duration(round(timeout)), "sandbox": t.sandbox}

    async def _write(self, args: dict[str, Any]) -> Any:
        t = self._term(args)
        if isinstance(t, dict):
            return t
        text = str(args.get("input") or "")
        key = str(args.get("key") or "").strip().lower()
        if not text and not key:
            return _err("give input, key, or both")
        if key and key not in KEYS:
            return _err(f"unknown key {key!r}; known: enter, tab, escape, ctrl_a…ctrl_z, alt_a…alt_z, f1…f12, "
                        "up, down, left, right, home, end, backspace, delete, page_up, page_down")
        if len(text) > MAX_INPUT_CHARS:
            return _err(f"input is longer than {MAX_INPUT_CHARS} characters")
        if not t.running:
            return _err(f"the process in {t.id} has exited (exit code {t.exit_code}); read its output or close it")
        try:
            await self._write_all(t, (text + (KEYS[key] if key else "")).encode())
        except (TimeoutError, OSError) as e:
            return _err(str(e))
        return {"status": "ok", "id": t.id, "written_chars": len(text), "key": key or None}

    async def _read(self, args: dict[str, Any]) -> Any:
        t = self._term(args)
        if isinstance(t, dict):
            return t
        clear = args.get("clear", True) is not False
        wait = min(float(args.get("wait") or 0), MAX_READ_WAIT)
        if wait > 0 and t.running:
            await self._settle(t, wait)
            t.touched = time.monotonic()
        raw = t.buffer[len(t.buffer) - t.unread:] if clear else t.buffer
        out: dict[str, Any] = {"id": t.id, "output": clean(raw), "running": t.running}
        if t.dropped and clear:
            out["truncated"] = True
        if t.exit_code is not None:
            out["exit_code"] = t.exit_code
        if clear:
            t.unread = 0
            t.dropped = False
            t.pending = 0
        return out

    @staticmethod
    async def _settle(t: Terminal, wait: float) -> None:
        """Wait (at most ``wait`` s) for output to arrive, then until it has been quiet for SETTLE s."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                if t.unread == 0:
                    t.output.clear()
                    await t.output.wait()
                while t.running:
                    t.output.clear()
                    try:
                        async with asyncio.timeout(SETTLE):
                            await t.output.wait()
                    except TimeoutError:
                        return

    async def _resize(self, args: dict[str, Any]) -> Any:
        t = self._term(args)
        if isinstance(t, dict):
            return t
        rows, cols = int(args.get("rows") or t.rows), int(args.get("cols") or t.cols)
        try:
            t.set_size(rows, cols)
        except OSError as e:
            return _err(f"resize failed: {e}")
        if t.running:  # the kernel signals the foreground group; tell the session leader too
            with contextlib.suppress(ProcessLookupError):
                os.kill(t.pid, signal.SIGWINCH)
        return {"status": "ok", "id": t.id, "rows": rows, "cols": cols}

    async def _close_tool(self, args: dict[str, Any]) -> Any:
        t = self._term(args)
        if isinstance(t, dict):
            return t
        self._terms.pop(t.id, None)
        await self._close(t)
        return {"status": "closed", "id": t.id, "exit_code": t.exit_code}

    async def _list(self, args: dict[str, Any]) -> Any:
        return {"terminals": [t.describe() for t in self._terms.values()]}


def create_plugin(name: str, config: Mapping[str, Any], *, sandbox: Confinement | None = None) -> AgentCLIPlugin:
    """The factory; the daemon binds ``sandbox`` with functools.partial (see builtin.catalog)."""
    return AgentCLIPlugin(name, sandbox)
