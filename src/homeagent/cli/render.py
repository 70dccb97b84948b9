"""Showing a streamed turn in a terminal: shared by ``homeagent chat`` and ``homeagent ask``.

Reasoning is dimmed and labelled ``thinking:``, reply text is written as it
arrives, each tool call is one line. ``chat`` writes everything to stdout
after an ``agent>`` prefix; ``ask`` writes only the reply text to stdout and
the rest (reasoning, tool lines, notes) to stderr, so ``homeagent ask … >
file`` keeps just the answer while the terminal still shows the progress.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO


class Style:
    """ANSI styles for one stream, or none when it is not a terminal or NO_COLOR is set."""

    def __init__(self, stream: TextIO | None = None) -> None:
        stream = stream or sys.stdout
        color = _isatty(stream) and not os.environ.get("NO_COLOR")
        self.dim = "\033[2m" if color else ""
        self.cyan = "\033[36m" if color else ""
        self.red = "\033[31m" if color else ""
        self.reset = "\033[0m" if color else ""


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (ValueError, OSError):
        return False


class ReplyPrinter:
    """Renders one turn's frames; :meth:`feed` returns True once the turn has ended."""

    def __init__(self, out: TextIO | None = None, side: TextIO | None = None, *, prefix: str = "agent> ") -> None:
        self.out = out or sys.stdout
        self.side = side or self.out
        self.prefix = prefix
        self.style = Style(self.out)
        self.side_style = Style(self.side)
        self._reasoning = False
        self._content = False  # reply text on the current line of ``out``
        self._segment = False  # reply text streamed since the last tool call (else the response's text is shown)

    @property
    def _shared(self) -> bool:
        return self.side is self.out

    def _end_reasoning(self) -> None:
        if self._reasoning:
            self.side.write(f"{self.side_style.reset}\n")
            self.side.flush()
            self._reasoning = False

    def _end_content_line(self) -> None:
        if self._content:
            self.out.write("\n")
            self.out.flush()
            self._content = False

    def break_line(self) -> None:
        """End the reasoning or reply line in progress (before something else takes the terminal)."""
        self._end_reasoning()
        self._end_content_line()

    def note(self, text: str, *, color: str = "dim") -> None:
        """A line of its own on the side stream (``(stopping the reply…)``, errors, proactive output)."""
        self._end_reasoning()
        self._end_content_line()
        s = self.side_style
        self.side.write(f"{getattr(s, color)}{text}{s.reset}\n")
        self.side.flush()

    def _tool_line(self, text: str) -> None:
        """A tool's line on the side stream, between the reasoning and the reply's next segment."""
        self._end_reasoning()
        if self._shared:
            self._end_content_line()
        side = self.side_style
        self.side.write(f"{side.cyan}{text}{side.reset}\n")
        self.side.flush()
        self._segment = False

    def feed(self, frame: dict[str, Any]) -> bool:
        kind = frame.get("type")
        s, side = self.style, self.side_style
        if kind == "reasoning_delta":
            if self._shared:
                self._end_content_line()
            if not self._reasoning:
                self.side.write(f"{side.dim}thinking: ")
                self._reasoning = True
            self.side.write(str(frame.get("text", "")))
            self.side.flush()
        elif kind == "content_delta":
            self._end_reasoning()
            if frame.get("reset") and self._content:
                self.note("(interrupted; continuing)")
                self._segment = False
            if frame.get("text"):
                if not self._content:
                    self.out.write(self.prefix)
                    self._content = True
                self.out.write(str(frame["text"]))
                self._segment = True
                self.out.flush()
        elif kind == "tool_call":
            result = str(frame.get("result", ""))
            result = result if len(result) <= 160 else result[:160] + "…"
            self._tool_line(f"⚙ {frame.get('tool')} [{frame.get('status')}] {result}")
        elif kind == "tool_media":
            self._tool_line(f"⚙ {frame.get('tool')} handed over: {frame.get('text', '')}")
        elif kind == "error":
            self.note(f"error: {frame.get('message')}", color="red")
        elif kind == "output":
            self.note(f"agent (proactive)> {frame.get('text', '')}", color="cyan")
        elif kind == "response":
            self._end_reasoning()
            if not self._segment and frame.get("text"):
                if not self._content:
                    self.out.write(self.prefix)
                self.out.write(str(frame["text"]))
                self._content = True
            if frame.get("interrupted"):
                if self._shared:
                    self.out.write(f"\n{s.dim}(stopped){s.reset}")
                else:
                    self._end_content_line()
                    self.note("(stopped)")
            if self._content or self._shared:
                self.out.write("\n")
            self._content = False
            self.out.flush()
            if frame.get("fallback_from"):  # the preferred source failed; say which one answered instead
                self.note(f"(answered by {frame.get('source')}: {frame['fallback_from']} did not answer)")
            return True
        elif kind == "closed":
            self.note("the daemon closed the connection", color="red")
            return True
        return False
