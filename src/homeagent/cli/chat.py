"""``homeagent chat``: an interactive client with streamed replies.

Reasoning is shown dimmed as it streams, then the answer; tool calls appear as
one line each. Ctrl-C while a reply is running stops that turn; at the prompt
it only clears the line (quit with /exit or Ctrl-D). Lines starting with ``/``
are commands (/help lists them); ``!text`` sends text as an interrupt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from typing import Any

from homeagent.cli.client import Client, RemoteError, connect_to
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
  /cancel                     stop the running reply (or press Ctrl-C)
  !TEXT                       send TEXT as an interrupt to the running reply
  /exit, /quit, Ctrl-D        leave"""


class _Style:
    def __init__(self) -> None:
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        self.dim = "\033[2m" if color else ""
        self.cyan = "\033[36m" if color else ""
        self.red = "\033[31m" if color else ""
        self.reset = "\033[0m" if color else ""


async def run_chat(paths: DataPaths) -> int:
    client = await connect_to(paths)
    await client.send({"type": "attach"})
    style = _Style()
    loop = asyncio.get_running_loop()
    state: dict[str, Any] = {"busy": False}
    pending: set[asyncio.Task[None]] = set()

    def on_sigint() -> None:
        if state["busy"]:
            task = loop.create_task(client.send({"type": "cancel"}))
            pending.add(task)
            task.add_done_callback(pending.discard)
            print(f"\n{style.dim}(stopping the reply…){style.reset}", flush=True)
        else:
            print(f"\n{style.dim}(use /exit or Ctrl-D to quit){style.reset}", flush=True)

    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    print(f"{style.dim}connected to HomeAgent at {paths.socket}; /help for commands{style.reset}")
    try:
        while True:
            try:
                line = await loop.run_in_executor(None, _read_line, "you> ")
            except EOFError:
                print()
                return 0
            text = line.strip()
            if not text:
                _drain_proactive(client, style)
                continue
            if text in ("/exit", "/quit"):
                return 0
            if text == "/help":
                print(HELP)
                continue
            if text.startswith("!"):
                await client.send({"type": "interrupt", "text": text[1:].strip()})
                continue
            if text.startswith("/") and not text.startswith("//"):
                await _command(client, text, style)
                continue
            state["busy"] = True
            try:
                await _stream_reply(client, text, style)
            finally:
                state["busy"] = False
    finally:
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(signal.SIGINT)
        await client.close()


def _read_line(prompt: str) -> str:
    return input(prompt)


def _drain_proactive(client: Client, style: _Style) -> None:
    while not client.frames.empty():
        frame = client.frames.get_nowait()
        if frame.get("type") == "output":
            print(f"{style.cyan}agent> {frame.get('text', '')}{style.reset}")


async def _stream_reply(client: Client, text: str, style: _Style) -> None:
    in_reasoning = False
    started_content = False
    await client.send({"type": "chat", "text": text})
    while True:
        frame = await client.frames.get()
        kind = frame.get("type")
        if kind == "reasoning_delta":
            if not in_reasoning:
                sys.stdout.write(f"{style.dim}thinking: ")
                in_reasoning = True
            sys.stdout.write(str(frame.get("text", "")))
        elif kind == "content_delta":
            if in_reasoning:
                sys.stdout.write(f"{style.reset}\n")
                in_reasoning = False
            if frame.get("reset") and started_content:
                sys.stdout.write(f"\n{style.dim}(interrupted; continuing){style.reset}\n")
                started_content = False
            if frame.get("text"):
                if not started_content:
                    sys.stdout.write("agent> ")
                    started_content = True
                sys.stdout.write(str(frame["text"]))
        elif kind == "tool_call":
            if in_reasoning:
                sys.stdout.write(f"{style.reset}\n")
                in_reasoning = False
            result = str(frame.get("result", ""))
            result = result if len(result) <= 160 else result[:160] + "…"
            sys.stdout.write(f"{'' if not started_content else chr(10)}{style.cyan}⚙ {frame.get('tool')} [{frame.get('status')}] {result}{style.reset}\n")
            started_content = False
        elif kind == "error":
            sys.stdout.write(f"\n{style.red}error: {frame.get('message')}{style.reset}\n")
        elif kind == "output":
            sys.stdout.write(f"\n{style.cyan}agent (proactive)> {frame.get('text', '')}{style.reset}\n")
        elif kind == "response":
            if in_reasoning:
                sys.stdout.write(style.reset)
            if not started_content and frame.get("text"):
                sys.stdout.write(f"agent> {frame['text']}")
            if frame.get("interrupted"):
                sys.stdout.write(f"\n{style.dim}(stopped){style.reset}")
            sys.stdout.write("\n")
            sys.stdout.flush()
            return
        elif kind == "closed":
            sys.stdout.write(f"\n{style.red}the daemon closed the connection{style.reset}\n")
            raise EOFError
        sys.stdout.flush()


async def _command(client: Client, text: str, style: _Style) -> None:
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
    elif name == "cancel":
        await client.send({"type": "cancel"})
        return
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
    except RemoteError as exc:
        print(f"{style.red}{exc}{style.reset}")
        return
    if method == "status":
        from homeagent.cli.main import format_status

        print(format_status(result))
    else:
        print(json.dumps(result, ensure_ascii=False, indent=2))
