"""``homeagent ask``: one message, its reply streamed (or, with ``--no-stream``/``--json``, printed at the end).

Ctrl-C stops the turn on the daemon too (the socket's ``cancel`` frame, as in
``homeagent chat``) and the command exits 130; a second Ctrl-C leaves at once
without waiting for the daemon's answer. The turn's result decides the exit
status: 0 answered, 1 failed, 130 stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import Any

from homeagent.cli.client import Client, connect_to
from homeagent.cli.render import ReplyPrinter
from homeagent.cli.turnstop import TurnStopper
from homeagent.paths import DataPaths

EXIT_STOPPED = 130
"""What a shell reports for a command ended by Ctrl-C."""


def register(sub: Any) -> None:
    ask = sub.add_parser("ask", help="send one message and stream the reply")
    ask.add_argument("text", nargs="+")
    ask.add_argument("--no-stream", action="store_true", help="print only the final reply, at the end (for scripts)")
    ask.add_argument("--json", action="store_true", help="print the whole result as JSON (implies --no-stream)")
    ask.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the reply (default 300)")
    ask.add_argument("--image", action="append", default=[], metavar="FILE",
                     help="send image FILE with the message (repeatable): kept in the media store, seen by a "
                     "model with vision, else described by the image fallback source; the text gets its marker")
    ask.set_defaults(func=cmd_ask)


def cmd_ask(args: argparse.Namespace) -> int:
    from homeagent.cli.main import paths_from

    text = " ".join(args.text)
    images = [Path(f).expanduser().resolve() for f in args.image]  # the daemon reads them by absolute path
    printer = None if args.no_stream or args.json else ReplyPrinter(sys.stdout, sys.stderr, prefix="")
    result = asyncio.run(ask(paths_from(args), text, printer=printer, timeout=args.timeout, images=images))
    result.pop("type", None)
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    elif printer is None and result.get("ok"):
        print(result.get("text", ""))
    elif not result.get("ok") and not result.get("interrupted"):
        print(f"homeagent: {result.get('error') or 'the turn failed'}", file=sys.stderr)
    if result.get("interrupted"):
        return EXIT_STOPPED
    return 0 if result.get("ok") else 1


async def ask(
    paths: DataPaths, text: str, *, printer: ReplyPrinter | None, timeout: float, images: list[Path] | None = None
) -> dict[str, Any]:
    """Send ``text``, follow its turn to the end; returns the response frame plus ``tool_calls``."""
    client = await connect_to(paths)
    try:
        media: list[str] = []
        if images:
            from homeagent.cli.media_cmd import attach_images

            media, lines = await attach_images(client, images)
            text = "\n".join([text, *lines])
        return await _AskTurn(client, printer).run(text, timeout, media)
    finally:
        await client.close()


class _AskTurn:
    """One message's turn, followed to its end; Ctrl-C stops it on the daemon (a second one leaves at once)."""

    def __init__(self, client: Client, printer: ReplyPrinter | None) -> None:
        self.client = client
        self.printer = printer
        self.stopper = TurnStopper(client)  # this turn only, never one it waits behind
        self.stops = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, text: str, timeout: float, media: list[str] | None = None) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()

        def on_sigint() -> None:
            self.stops += 1
            if self.stops == 1:
                task = loop.create_task(self.stopper.request())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                self.note("(stopping the turn; Ctrl-C again to leave without waiting)")
            elif me is not None:
                me.cancel()

        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            async with asyncio.timeout(timeout):
                return await self.follow(text, media or [])
        except TimeoutError:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.stopper.request(), 5)
            return {"ok": False, "error": f"no reply within {timeout:g}s (the turn was stopped)", "tool_calls": []}
        except asyncio.CancelledError:
            if self.stops < 2:
                raise
            return {"ok": False, "interrupted": True, "error": "left without waiting for the daemon", "tool_calls": []}
        finally:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGINT)

    def note(self, message: str) -> None:
        if self.printer is not None:
            self.printer.note(message)
        else:
            print(message, file=sys.stderr, flush=True)

    async def follow(self, text: str, media: list[str] | None = None) -> dict[str, Any]:
        tools: list[dict[str, Any]] = []
        errors: list[str] = []
        printer = self.printer
        await self.client.send({"type": "chat", "text": text, **({"media": media} if media else {})})
        while True:
            frame = await self.client.frames.get()
            kind = frame.get("type")
            await self.stopper.seen(frame)
            if printer is not None and kind not in ("response", "closed"):
                printer.feed(frame)
            if kind == "approval_request":
                from homeagent.cli.approvals_cmd import describe

                self.note(
                    f"approval needed {describe(frame)}: answer with `homeagent approvals allow|deny {frame.get('id')}`"
                )
            elif kind == "tool_call":
                tools.append({k: frame.get(k) for k in ("tool", "status", "result")})
            elif kind == "error":
                errors.append(str(frame.get("message")))
            elif kind == "closed":
                return {"ok": False, "error": "the daemon closed the connection", "tool_calls": tools}
            elif kind == "response":
                final = dict(frame)
                if printer is not None and (final.get("ok") or final.get("interrupted") or final.get("text")):
                    printer.feed(frame)
                final["tool_calls"] = tools
                if errors and not final.get("error"):
                    final["error"] = "; ".join(errors)
                return final
