"""The text-cleaner chain: plugins strip their channel's noise before memory sees a text.

A chat platform wraps messages in templates ("[群消息] … 发送时间 …") that
would dominate every embedding and keyword list. The core knows no such
pattern: a plugin registers a cleaner for its own format, the chain runs
all cleaners in registration order and then normalises whitespace. Cleaning
only affects what is embedded and indexed; stored originals never change.

Tool output is filtered per tool, declaratively: a ``ToolDef`` with
``no_memory`` keeps its output out of every memory computation, and a
``ToolDef.cleaner`` runs on that tool's output before the chain does.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from homeagent.sdk.types import TextCleaner, ToolDef

if TYPE_CHECKING:
    from homeagent.memory.context import ContextEvent

ToolLookup = Callable[[str], ToolDef | None]

_SPACES = re.compile(r"[ \t\f\v\u00a0\u3000]+")
_BLANK_LINES = re.compile(r"\n\s*\n+")
_LEADING_PUNCT = re.compile(r"^[，,。.;；:：\s]+")


def drop_output(_: str) -> str:
    """The cleaner of tools whose output is memory already (recalls, documents, notes).

    Their output is not indexed again, but the turn that used them is
    remembered: unlike ``no_memory``, which keeps the whole turn out of memory.
    """
    return ""


def normalize_whitespace(text: str) -> str:
    """Collapse runs of spaces, at most one blank line, no leading separator punctuation."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _SPACES.sub(" ", text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    text = _BLANK_LINES.sub("\n\n", text).strip()
    return _LEADING_PUNCT.sub("", text).strip()


@dataclass
class _Entry:
    name: str
    plugin: str
    fn: TextCleaner
    failures: int = 0


class CleanerChain:
    """Ordered cleaners from plugins; one instance is passed to every memory layer.

    ``tool_lookup(name) -> ToolDef | None`` resolves tools' ``no_memory`` and
    ``cleaner``; the daemon passes the stage host's lookup (or sets it later
    with ``set_tool_lookup``).
    """

    def __init__(self, *, tool_lookup: ToolLookup | None = None, log: logging.Logger | None = None) -> None:
        self._entries: list[_Entry] = []
        self._lock = threading.Lock()
        self._tool_lookup = tool_lookup
        self._log = log or logging.getLogger(__name__)

    def set_tool_lookup(self, lookup: ToolLookup | None) -> None:
        self._tool_lookup = lookup

    def register(self, name: str, fn: TextCleaner, *, plugin: str = "") -> Callable[[], None]:
        """Append a cleaner; the returned function removes exactly this registration."""
        if not callable(fn):
            raise TypeError(f"cleaner {name!r} is not callable")
        entry = _Entry(name, plugin, fn)
        with self._lock:
            self._entries.append(entry)

        def undo() -> None:
            with self._lock:
                if entry in self._entries:
                    self._entries.remove(entry)

        return undo

    def unregister_plugin(self, plugin: str) -> int:
        """Drop every cleaner of ``plugin`` (on plugin stop, crash or reload); returns how many."""
        with self._lock:
            before = len(self._entries)
            self._entries = [e for e in self._entries if e.plugin != plugin]
            return before - len(self._entries)

    def names(self) -> list[str]:
        with self._lock:
            return [f"{e.plugin}:{e.name}" if e.plugin else e.name for e in self._entries]

    def clean(self, text: str) -> str:
        """Run every cleaner in order, then normalise whitespace; a raising cleaner is skipped."""
        if not text:
            return ""
        with self._lock:
            entries = list(self._entries)
        for entry in entries:
            try:
                out = entry.fn(text)
            except Exception as exc:  # one plugin's bug must not break memory
                entry.failures += 1
                if entry.failures <= 3 or entry.failures % 100 == 0:
                    self._log.warning(
                        "text cleaner %s (plugin %s) raised %s: %s; skipped (failure %d)",
                        entry.name,
                        entry.plugin or "-",
                        type(exc).__name__,
                        exc,
                        entry.failures,
                    )
                continue
            if not isinstance(out, str):
                self._log.warning("text cleaner %s returned %s, not str; skipped", entry.name, type(out).__name__)
                continue
            text = out
        return normalize_whitespace(text)

    def tool_text(self, tool: str, text: str, *, no_memory: bool = False) -> str:
        """A tool's output as memory sees it: "" when the tool is ``no_memory``; else its cleaner, then the chain."""
        if no_memory or not text:
            return ""
        tdef = self._tool_lookup(tool) if self._tool_lookup else None
        if tdef is not None and tdef.no_memory:
            return ""
        if tdef is not None and tdef.cleaner is not None:
            try:
                out: Any = tdef.cleaner(text)
                if isinstance(out, str):
                    text = out
                else:
                    self._log.warning("cleaner of tool %s returned %s, not str; ignored", tool, type(out).__name__)
            except Exception as exc:
                self._log.warning("cleaner of tool %s raised %s: %s; ignored", tool, type(exc).__name__, exc)
        return self.clean(text)

    def uses_no_memory_tool(self, event: ContextEvent) -> bool:
        """True when the event carries output of a ``no_memory`` tool (such events never sink to L2)."""
        for out in event.tool_outputs:
            if out.get("no_memory"):
                return True
            tdef = self._tool_lookup(str(out.get("tool", ""))) if self._tool_lookup else None
            if tdef is not None and tdef.no_memory:
                return True
        return False

    def memory_text_for(self, event: ContextEvent) -> str:
        """The text that represents ``event`` in vector and keyword space ("" = nothing).

        Three branches: an agent event is its response plus its tools' cleaned
        output, a user event its input, a recalled (cold_storage) event its
        input and response. A ``no_memory`` event has no memory text.
        """
        if event.no_memory:
            return ""
        if event.kind == "agent":
            parts = [self.clean(event.response)]
            for out in event.tool_outputs:
                parts.append(
                    self.tool_text(
                        str(out.get("tool", "")), str(out.get("text", "")), no_memory=bool(out.get("no_memory"))
                    )
                )
            parts.append(str(event.meta.get("media_text", "")))  # markers of media its tools handed over
        elif event.kind == "cold_storage":
            parts = [self.clean(event.input), self.clean(event.response)]
        else:
            parts = [self.clean(event.input)]
        return "\n".join(p for p in parts if p)


def memory_text_for(event: ContextEvent, chain: CleanerChain) -> str:
    """Module-level spelling of ``CleanerChain.memory_text_for``."""
    return chain.memory_text_for(event)
