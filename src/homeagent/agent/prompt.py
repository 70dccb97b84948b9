"""System prompt builder.

The identity comes first (``core.agent.system_prompt``, else a persona file,
else the built-in persona); then sections that subsystems contribute (memory
index, recalled documents, knowledge, skills), then the fixed rules about
interrupts and output routing, then the tool list. Sections are registered by
the subsystems that own the data, so this module knows none of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from homeagent.sdk.types import ToolDef

log = logging.getLogger("homeagent.prompt")

DEFAULT_PERSONA = """你是小宅 (Xiao Zhai)，HomeAgent 的家政型 AI 管家。
You are Xiao Zhai, the home assistant of HomeAgent: a personal agent that lives on its user's own machine,
remembers across months through layered memory (context → documents → knowledge graph), and acts through tools.
Answer in the user's language. Be concise, warm and accurate; say so when you do not know something.
Use tools when they help; never invent tool results."""

INTERRUPT_RULES = """【中断消息】
System messages that start with [打断消息] arrived while you were working (a timer, a notification, the user
adding something). Take them into account before you continue."""

OUTPUT_RULES = """【输出规则】
Your reply goes back automatically to the channel and chat the message came from; so does the reply to a reminder
or timer set in it. Use output_send__<channel> only to send proactively or to another channel
(output_list_channels lists them; output_send__<channel>_help explains the meta format).
Several messages: call output_send__<channel> once per message, in order (without meta it goes to the chat the
current message came from). For long tasks, send a short acknowledgement first that way, then do the work.
Long replies: chat channels (QQ) split them into several messages at their length limit, at paragraph or sentence
ends and never inside a code block, so you need not shorten or cut them yourself; keep chat replies short anyway."""

SPEAKER_RULE = """【说话人】
The current message is from {speaker} (the person behind this chat account; memory keeps what they say as theirs,
person_query "{speaker}" shows what is known about them). In a group, others may be talking too: keep people apart."""

SectionFn = Callable[["PromptInputs"], Awaitable[str | None] | str | None]


@dataclass
class PromptInputs:
    user_text: str
    channel: str = ""
    tools: list[ToolDef] = field(default_factory=list)
    speaker: str = ""  # the person writing from a chat account (empty for the owner's own CLI and web UI)


@dataclass
class _Section:
    name: str
    order: int
    fn: SectionFn
    timeout: float


class PromptBuilder:
    def __init__(
        self,
        identity: Callable[[], str],
        persona_file: Callable[[], str] | None = None,
        *,
        tool_description_limit: int = 80,
    ) -> None:
        self._identity = identity
        self._persona_file = persona_file
        self._sections: list[_Section] = []
        self._limit = tool_description_limit
        self._persona_cache: tuple[str, float, str] | None = None
        self._tool_text_cache: tuple[list[ToolDef], int, str] | None = None

    def add_section(self, name: str, fn: SectionFn, *, order: int = 50, timeout: float = 2.0) -> Callable[[], None]:
        section = _Section(name, order, fn, timeout)
        self._sections.append(section)
        self._sections.sort(key=lambda s: s.order)

        def undo() -> None:
            if section in self._sections:
                self._sections.remove(section)

        return undo

    def identity_text(self) -> str:
        text = (self._identity() or "").strip()
        if text:
            return text
        path = (self._persona_file() if self._persona_file else "").strip()
        if path:
            persona = self._read_persona(Path(path).expanduser())
            if persona:
                return persona
        return DEFAULT_PERSONA

    def _read_persona(self, path: Path) -> str:
        try:
            mtime = path.stat().st_mtime
        except OSError:
            log.warning("persona file %s not found; using the built-in persona", path)
            return ""
        if self._persona_cache and self._persona_cache[0] == str(path) and self._persona_cache[1] == mtime:
            return self._persona_cache[2]
        try:
            text = path.read_text(encoding="utf-8")[:20000].strip()
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("persona file %s unreadable (%s); using the built-in persona", path, exc)
            return ""
        self._persona_cache = (str(path), mtime, text)
        return text

    async def build(self, inputs: PromptInputs) -> str:
        parts = [self.identity_text()]
        texts: list[str | None] = []
        waiting: dict[int, Awaitable[str | None]] = {}
        for section in self._sections:  # plain sections answer right here; only coroutines are gathered
            try:
                result = section.fn(inputs)
            except Exception:
                log.exception("prompt section %s failed; left out of this turn", section.name)
                result = None
            if asyncio.iscoroutine(result):
                waiting[len(texts)] = self._finish(section, result)
                result = None
            texts.append(_usable(result))
        if waiting:
            for index, text in zip(waiting, await asyncio.gather(*waiting.values()), strict=True):
                texts[index] = text
        parts.extend(t for t in texts if t)
        parts.append(INTERRUPT_RULES)
        parts.append(OUTPUT_RULES)
        if inputs.speaker:  # a linked name (set by the owner) or a chat account id, never a nickname
            parts.append(SPEAKER_RULE.format(speaker=inputs.speaker))
        if inputs.tools:
            parts.append(self._tool_list_text(inputs.tools))
        parts.append(f"Current time: {time.strftime('%Y-%m-%d %H:%M %Z')}")
        return "\n\n".join(parts)

    def _tool_list_text(self, tools: list[ToolDef]) -> str:
        """The tool list section; the turn runner passes the same list until the tools change."""
        cached = self._tool_text_cache
        if cached is not None and cached[0] is tools and cached[1] == len(tools):
            return cached[2]
        lines = ["【可用工具列表】"]
        for tool in tools:
            desc = " ".join(tool.description.split())
            if len(desc) > self._limit:
                desc = desc[: self._limit - 1] + "…"
            lines.append(f"- {tool.name}: {desc}")
        text = "\n".join(lines)
        self._tool_text_cache = (tools, len(tools), text)
        return text

    async def _finish(self, section: _Section, pending: Coroutine[Any, Any, str | None]) -> str | None:
        try:
            async with asyncio.timeout(section.timeout):
                return _usable(await pending)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            log.warning("prompt section %s took over %.1fs; left out of this turn", section.name, section.timeout)
            return None
        except Exception:
            log.exception("prompt section %s failed; left out of this turn", section.name)
            return None


def _usable(result: object) -> str | None:
    return result if isinstance(result, str) and result.strip() else None
