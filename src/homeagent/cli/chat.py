"""``homeagent chat``: an interactive client with streamed replies.

Reasoning is shown dimmed as it streams, then the answer; tool calls appear as
one line each (see :mod:`homeagent.cli.render`); a tool call that needs your
approval is asked inline (y once, a always, anything else denies). Lines
starting with ``/`` are commands (/help lists them).

While a reply streams the terminal still takes input: ``!text`` sends text as
an interrupt (it reaches the model before its next call), ``/cancel`` (or
Ctrl-C) stops the reply, and anything else is queued and sent when the reply
ends. At the prompt, Ctrl-C only clears the line (quit with /exit or Ctrl-D).

The prompt has readline's line editing and a history kept across sessions in
``<data dir>/chat_history`` (mode 0600: what you typed is as private as your
memory). Input during a reply is read from the terminal in its ordinary line
mode instead, so the two never read the terminal at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from homeagent.cli.client import Client, DaemonStarting, DaemonUnavailable, RemoteError, connect_to
from homeagent.cli.render import ReplyPrinter, Style
from homeagent.cli.turnstop import TurnStopper
from homeagent.paths import DataPaths

HELP = """commands:
  /status                     daemon status
  /settings [prefix]          list settings
  /settings set KEY VALUE     change a setting
  /llm                        LLM sources
  /llm use NAME               prefer a source
  /plugin list|info NAME      plugins
  /memory search TEXT         search memory
  /knowledge [search TEXT]    knowledge base
  /clear                      clear the screen
  /reconnect                  connect again (after the daemon was restarted)
  /exit, /quit, Ctrl-D        leave
while a reply streams:
  !TEXT                       send TEXT as an interrupt: the model reads it before its next step
  /cancel, Ctrl-C             stop the reply
  anything else               queued, sent when the reply ends"""

PROMPT = "you> "
HISTORY_FILE = "chat_history"
HISTORY_LENGTH = 1000
CLEAR_SCREEN = "\033[H\033[2J"


SECRET_WORDS = ("key", "token", "secret", "passw", "credential", "cookie", "auth")


def looks_secret(line: str) -> bool:
    """``/settings set …api_key sk-…``: a value that must not sit in a history file."""
    parts = line.split()
    return parts[:2] == ["/settings", "set"] and len(parts) > 2 and any(w in parts[2].lower() for w in SECRET_WORDS)


class History:
    """readline's editing and a persistent, owner-only input history (a no-op without readline or a terminal)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.readline: Any = None
        if not sys.stdin.isatty():
            return
        try:
            import readline
        except ImportError:  # a Python built without it: plain input() still works
            return
        self.readline = readline
        readline.set_history_length(HISTORY_LENGTH)
        with contextlib.suppress(OSError):
            if path.exists():
                readline.read_history_file(str(path))

    def add(self, line: str) -> None:
        """Remember a line typed outside readline (during a reply), so the up arrow finds it too."""
        if self.readline is not None and line and not looks_secret(line):
            self.readline.add_history(line)

    def forget_if_secret(self, line: str) -> None:
        """readline already recorded the line just typed: drop it again if it sets a secret."""
        if self.readline is None or not looks_secret(line):
            return
        last = self.readline.get_current_history_length() - 1
        if last >= 0 and self.readline.get_history_item(last + 1) == line:
            self.readline.remove_history_item(last)

    def save(self) -> None:
        if self.readline is None:
            return
        try:
            # created owner-only before anything is written; an existing file is tightened too
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
            os.chmod(self.path, 0o600)
            self.readline.write_history_file(str(self.path))
        except OSError as exc:
            print(f"(input history not saved: {exc})", file=sys.stderr)


class ChatSession:
    def __init__(self, paths: DataPaths) -> None:
        self.paths = paths
        self.client: Client | None = None
        self.style = Style(sys.stdout)
        self.history = History(paths.root / HISTORY_FILE)
        self.queued: list[str] = []
        self.busy = False
        self.printer: ReplyPrinter | None = None
        self.stopper: TurnStopper | None = None  # of the reply that streams
        self._typed = b""
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------ connection
    async def connect(self) -> None:
        self.client = await connect_to(self.paths)
        await self.client.send({"type": "attach"})

    async def reconnect(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None
        try:
            await self.connect()
        except (DaemonUnavailable, DaemonStarting) as exc:
            print(f"{self.style.red}{exc}{self.style.reset}")
            return
        print(f"{self.style.dim}connected to HomeAgent at {self.paths.socket}{self.style.reset}")

    def _connected(self) -> Client | None:
        """The client, or None (and a hint) when the daemon went away since the last line."""
        client = self.client
        if client is not None and client.reader_done:
            self.client = None
            client = None
        if client is None:
            print(f"{self.style.red}not connected: the daemon went away; /reconnect once it runs again{self.style.reset}")
        return client

    def _send_soon(self, frame: dict[str, Any]) -> None:
        if self.client is None:
            return
        task = asyncio.get_running_loop().create_task(self.client.send(frame))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ loop
    async def run(self) -> int:
        await self.connect()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        print(f"{self.style.dim}connected to HomeAgent at {self.paths.socket}; /help for commands{self.style.reset}")
        try:
            while True:
                if self.queued:
                    line = self.queued.pop(0)
                    print(f"{PROMPT}{line}")
                else:
                    try:
                        line = await loop.run_in_executor(None, input, PROMPT)
                    except EOFError:
                        print()
                        return 0
                    self.history.forget_if_secret(line)
                if not await self.handle(line.strip()):
                    return 0
        finally:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGINT)
            self.history.save()
            if self.client is not None:
                await self.client.close()

    async def handle(self, text: str) -> bool:
        """One line typed at the prompt; False to leave."""
        if not text:
            self._drain_proactive()
            return True
        if text in ("/exit", "/quit"):
            return False
        if text == "/help":
            print(HELP)
        elif text == "/clear":
            if sys.stdout.isatty():
                sys.stdout.write(CLEAR_SCREEN)
                sys.stdout.flush()
        elif text == "/reconnect":
            await self.reconnect()
        elif text == "/cancel":
            print(f"{self.style.dim}(no reply is running){self.style.reset}")
        elif (client := self._connected()) is None:
            pass
        elif text.startswith("!"):
            await client.send({"type": "interrupt", "text": text[1:].strip()})
        elif text.startswith("/") and not text.startswith("//"):
            await _command(client, text, self.style)
        else:
            await self._reply(client, text)
        return True

    def _drain_proactive(self) -> None:
        if self.client is None:
            return
        while not self.client.frames.empty():
            frame = self.client.frames.get_nowait()
            if frame.get("type") == "output":
                print(f"{self.style.cyan}agent> {frame.get('text', '')}{self.style.reset}")

    def _stop_reply(self) -> None:
        if self.stopper is not None:
            task = asyncio.get_running_loop().create_task(self.stopper.request())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._note("(stopping the reply…)")

    def _on_sigint(self) -> None:
        if self.busy:
            self._stop_reply()
        else:
            print(f"\n{self.style.dim}(use /exit or Ctrl-D to quit){self.style.reset}", flush=True)

    def _note(self, text: str) -> None:
        if self.printer is not None:
            self.printer.note(text)
        else:
            print(f"{self.style.dim}{text}{self.style.reset}", flush=True)

    # ----------------------------------------------------------------- reply
    async def _reply(self, client: Client, text: str) -> None:
        self.printer = ReplyPrinter(sys.stdout, prefix="agent> ")
        self.stopper = TurnStopper(client)
        self.busy = True
        listening = self._listen()
        try:
            await client.send({"type": "chat", "text": text})
            while True:
                frame = await client.frames.get()
                if frame.get("type") == "closed":
                    self.printer.note("the daemon closed the connection; /reconnect once it runs again", color="red")
                    self.client = None
                    self.queued.clear()
                    return
                await self.stopper.seen(frame)
                if frame.get("type") == "approval_request":  # the turn waits for you: answer inline
                    await self._approve(client, frame, listening)
                    continue
                if self.printer.feed(frame):
                    return
        finally:
            if listening:
                asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
            self.busy = False
            self.printer = None
            self.stopper = None
            self._typed = b""

    async def _approve(self, client: Client, request: dict[str, Any], listening: bool) -> None:
        """Ask y/a/N at a readline prompt; typing-during-the-reply pauses meanwhile (one reader at a time)."""
        from homeagent.cli.approvals_cmd import prompt_answer

        loop = asyncio.get_running_loop()
        assert self.printer is not None
        self.printer.break_line()
        if listening:
            loop.remove_reader(sys.stdin.fileno())
        try:
            outcome = await prompt_answer(client, request, input)
        finally:
            if listening:
                loop.add_reader(sys.stdin.fileno(), self._on_typed)
        self.printer.note(f"({outcome})")

    def _listen(self) -> bool:
        """Read lines typed while the reply streams (a terminal only: piped input stays for the prompt)."""
        if not sys.stdin.isatty():
            return False
        try:
            asyncio.get_running_loop().add_reader(sys.stdin.fileno(), self._on_typed)
        except (NotImplementedError, ValueError, OSError):
            return False
        return True

    def _on_typed(self) -> None:
        try:
            data = os.read(sys.stdin.fileno(), 4096)
        except OSError:
            data = b""
        if not data:  # Ctrl-D: nothing more is read during this reply
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
            return
        self._typed += data
        while b"\n" in self._typed:
            raw, self._typed = self._typed.split(b"\n", 1)
            self._typed_line(raw.decode(errors="replace").strip())

    def _typed_line(self, text: str) -> None:
        if not text:
            return
        self.history.add(text)
        if text.startswith("!"):
            self._send_soon({"type": "interrupt", "text": text[1:].strip()})
            self._note("(interrupt sent: the model reads it before its next step)")
        elif text == "/cancel":
            self._stop_reply()
        elif text.startswith("/") and not text.startswith("//"):
            self._note(f"({text.split()[0]} waits: /cancel or Ctrl-C stops the reply, !text interrupts it)")
        else:
            self.queued.append(text)
            self._note("(queued: sent when this reply ends; !text interrupts it instead)")


async def run_chat(paths: DataPaths) -> int:
    return await ChatSession(paths).run()


async def _command(client: Client, text: str, style: Style) -> None:
    parts = text[1:].split()
    name, rest = parts[0], parts[1:]
    method: str = ""
    params: dict[str, Any] = {}
    if name == "status":
        method = "status"
    elif name == "settings" and rest[:1] == ["set"] and len(rest) >= 3:
        method, params = "config.set", {"key": rest[1], "value": " ".join(rest[2:])}
    elif name == "settings":
        method, params = "config.list", {"prefix": rest[0] if rest else ""}
    elif name == "llm" and rest[:1] == ["use"] and len(rest) == 2:
        method, params = "llm.use", {"name": rest[1]}
    elif name == "llm":
        method = "llm.sources"
    elif name == "plugin":
        method = f"plugins.{rest[0] if rest else 'list'}"
        params = {"name": rest[1] if len(rest) > 1 else ""}
    elif name == "memory":
        action = rest[0] if rest else "loops"
        method, params = f"memory.{action}", {"query": " ".join(rest[1:]), "name": rest[1] if len(rest) > 1 else ""}
    elif name == "knowledge":
        method = f"knowledge.{rest[0] if rest else 'list'}"
        params = {"query": " ".join(rest[1:])}
    else:
        print(f"unknown command /{name}; /help lists them")
        return
    try:
        result = await client.call(method, params)
    except (RemoteError, DaemonUnavailable) as exc:
        print(f"{style.red}{exc}{style.reset}")
        return
    if method == "status":
        from homeagent.cli.main import format_status

        print(format_status(result))
    else:
        print(json.dumps(result, ensure_ascii=False, indent=2))
