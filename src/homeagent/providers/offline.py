"""The offline provider: a deterministic stand-in for an LLM.

It lets a new user see the whole pipeline work before any model is
configured: it remembers simple statements made in the conversation, answers
from memory -- the ``【相关记忆文档】`` and ``【记忆索引】`` blocks of the system
prompt, recalled-memory messages and what the user said earlier -- and runs a
tool when asked with ``/tool NAME {json}``. It never answers from the rest of
the system prompt (persona, rules, ``【可用工具列表】``): those describe the
agent, they are not something the user told it. Every reply says plainly that
it comes from the offline provider.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

from homeagent.providers.base import (
    ChatRequest,
    ChatResponse,
    StreamChunk,
    ToolCallDelta,
    ToolCallOut,
    Usage,
)

PREFIX = "[offline] "
HINT = (
    "No LLM is configured, so this reply comes from HomeAgent's offline provider. "
    "Set HOMEAGENT_LLM_BASE_URL / HOMEAGENT_LLM_API_KEY / HOMEAGENT_LLM_MODEL, or "
    "`homeagent config set core.llm.sources.<name>.base_url ...`, to use a real model."
)

# (statement pattern, question pattern, answer template)
_FACTS: list[tuple[re.Pattern[str], re.Pattern[str], str]] = [
    (
        re.compile(r"\bmy name is ([^.,!?\n]+)", re.I),
        re.compile(r"\b(what('| i)s|what is) my name\b|\bwho am i\b", re.I),
        "Your name is {}.",
    ),
    (
        re.compile(r"\bi live in ([^.,!?\n]+)", re.I),
        re.compile(r"\bwhere do i live\b", re.I),
        "You live in {}.",
    ),
    (
        re.compile(r"\bi (?:like|love) ([^.,!?\n]+)", re.I),
        re.compile(r"\bwhat do i (like|love)\b", re.I),
        "You like {}.",
    ),
    (
        re.compile(r"\bi work as (?:an? )?([^.,!?\n]+)", re.I),
        re.compile(r"\bwhat('s| is) my (job|work)\b|\bwhat do i do\b", re.I),
        "You work as {}.",
    ),
    (re.compile(r"我叫([^，。！？,.!?\s]+)"), re.compile(r"我叫什么|我是谁"), "你叫{}。"),
    (re.compile(r"我住在([^，。！？,.!?\s]+)"), re.compile(r"我住(在)?哪"), "你住在{}。"),
    (re.compile(r"我喜欢([^，。！？,.!?\s]+)"), re.compile(r"我喜欢什么"), "你喜欢{}。"),
    (re.compile(r"我的工作是([^，。！？,.!?\s]+)"), re.compile(r"我的工作是什么|我做什么工作"), "你的工作是{}。"),
]

_TOOL_COMMAND = re.compile(r"^\s*/tool\s+([A-Za-z0-9_-]+)\s*(\{.*\})?\s*$", re.S)
_QUESTION = re.compile(
    r"[?？]\s*$|^\s*(what|who|where|when|why|how|which|do|does|did|is|are|can|could|remind)\b|什么|吗|哪|谁|多少",
    re.I,
)
_WORD = re.compile(r"[A-Za-z0-9]{3,}|[\u4e00-\u9fff]{2,}")
# the system prompt's paragraphs that hold memory (documents.render_injection, indexer.format)
_MEMORY_HEADERS = ("【相关记忆文档】", "【记忆索引】", "【场景记忆")
# words that say nothing about what is asked for: "what can you do" must not match any line with "can"
_STOP = frozenset(
    """the and for you your are was were what when where which who how why can could would should will with this
    that these those there here have has had not but from into about just like then than them they their our its
    his her she him does did doing done tell know remind please hello thanks any some all more most much many""".split()
)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class OfflineProvider:
    """Implements the Provider protocol without any network."""

    def __init__(self, name: str = "offline") -> None:
        self.name = name
        self.model = "offline"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return self._answer(request)

    async def chat_stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        response = self._answer(request)
        for index, call in enumerate(response.tool_calls):
            yield StreamChunk(
                tool_calls=[ToolCallDelta(index=index, id=call.id, name=call.name, arguments=call.raw_arguments)]
            )
        words = re.split(r"(\s+)", response.content)
        step = max(1, len(words) // 4)
        for start in range(0, len(words), step):
            piece = "".join(words[start : start + step])
            if piece:
                yield StreamChunk(content=piece)
        yield StreamChunk(finish_reason=response.finish_reason, usage=response.usage)

    # -- the "reasoning" ----------------------------------------------------
    def _answer(self, request: ChatRequest) -> ChatResponse:
        messages = request.messages
        last = messages[-1] if messages else {"role": "user", "content": ""}
        if last.get("role") == "tool":
            return self._reply(self._after_tool(messages))
        user_text = _text(last.get("content"))
        command = _TOOL_COMMAND.match(user_text)
        if command:
            return self._tool_call(command.group(1), command.group(2) or "{}", request)
        return self._reply(self._respond(user_text, messages))

    def _reply(self, text: str) -> ChatResponse:
        content = PREFIX + text
        n = max(1, len(content) // 4)
        return ChatResponse(content=content, usage=Usage(completion=n, total=n), source=self.name, model=self.model)

    def _tool_call(self, name: str, raw_args: str, request: ChatRequest) -> ChatResponse:
        available = {t.get("function", {}).get("name") for t in request.tools}
        if name not in available:
            names = ", ".join(sorted(n for n in available if n)) or "none"
            return self._reply(f"There is no tool named {name!r}. Available tools: {names}.")
        call = ToolCallOut(id=f"call_{uuid.uuid4().hex[:8]}", name=name, raw_arguments=raw_args)
        try:
            parsed = json.loads(raw_args)
            if isinstance(parsed, dict):
                call.arguments = parsed
            else:
                call.parse_error = "arguments must be a JSON object"
        except json.JSONDecodeError as exc:
            call.parse_error = f"arguments are not valid JSON: {exc}"
        return ChatResponse(tool_calls=[call], finish_reason="tool_calls", source=self.name, model=self.model)

    def _after_tool(self, messages: list[dict[str, Any]]) -> str:
        results = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            results.append(_text(message.get("content")))
        results.reverse()
        shown = "; ".join(r if len(r) <= 400 else r[:400] + "…" for r in results)
        return f"The tool returned: {shown}"

    def _respond(self, user_text: str, messages: list[dict[str, Any]]) -> str:
        history = _memory_texts(messages[:-1])
        for statement, question, template in _FACTS:
            if question.search(user_text):
                for text in reversed(history):
                    found = statement.findall(text)
                    if found:
                        return template.format(found[-1].strip())
                return "I don't know that yet. Tell me and I will remember it."
        for statement, _, _ in _FACTS:
            match = statement.search(user_text)
            if match:
                return f"Noted: {match.group(0).strip()}. I will remember it."
        recalled = self._recall(user_text, messages) if _QUESTION.search(user_text) else ""
        if recalled:
            return "From memory: " + recalled
        if not user_text.strip():
            return "I received an empty message."
        return f"I received: {user_text.strip()[:500]}\n{HINT}"

    def _recall(self, user_text: str, messages: list[dict[str, Any]]) -> str:
        """The memory line sharing the most words with the question: blocks first, then what the user said."""
        words = {w.lower() for w in _WORD.findall(user_text)} - _STOP
        if not words:
            return ""
        candidates: list[str] = []
        history = messages[:-1]
        if history and history[0].get("role") == "system":
            for block in _memory_blocks(_text(history[0].get("content"))):
                candidates += _block_items(block)
            history = history[1:]
        for message in reversed(history):
            text = _text(message.get("content")).strip()
            if message.get("role") == "system" and text.startswith("【recalled memory"):
                candidates += [ln.strip() for ln in text.splitlines()[1:] if ln.strip()]
            elif message.get("role") == "user" and text and not _QUESTION.search(text):
                candidates.append(text)
        best, best_score = "", 0
        for line in candidates:
            low = line.lower()
            score = sum(1 for w in words if w in low)
            if score > best_score:
                best, best_score = line, score
        return best[:500]


def _memory_blocks(system_prompt: str) -> list[str]:
    """The paragraphs of the system prompt that are memory (sections are joined by blank lines)."""
    return [p.strip() for p in system_prompt.split("\n\n") if p.lstrip().startswith(_MEMORY_HEADERS)]


_ITEM_DECORATION = re.compile(
    r"^\s*(?:[-*]\s*\[[^\]]*\]\s*(?:[^:\n]{1,40}?:\s)?"  # - [date] speaker: (a recalled turn)
    r"|(?:before|after):\s*(?:[^:\n]{1,40}?:\s)?"  # before: speaker: (its neighbours)
    r"|[-*]\s*|\[[^\]]*\]\s*)"  # - fact, [scene] fact
)
_ITEM_ID = re.compile(r"\s*\(id [^)]*\)\s*$")


def _block_items(block: str) -> list[str]:
    """The texts a memory block holds, one per turn, without the layout around them.

    ``render_injection`` shows a turn as ``- [date] speaker: text (id …)`` with
    its neighbours on the next line as ``before: speaker: text | after: …``;
    each of those is one item, so a fact is read as the speaker said it and
    never runs on into its neighbour.
    """
    items: list[str] = []
    for line in block.splitlines()[1:]:
        for piece in line.split(" | "):
            text = _ITEM_ID.sub("", _ITEM_DECORATION.sub("", piece, count=1))
            if text.strip():
                items.append(text.strip())
    return items


def _memory_texts(messages: list[dict[str, Any]]) -> list[str]:
    """What counts as memory, oldest first: the prompt's memory blocks, then the conversation (user and system)."""
    texts: list[str] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "system" and i == 0:
            texts += [item for block in _memory_blocks(_text(message.get("content"))) for item in _block_items(block)]
        elif role in ("user", "system"):
            texts.append(_text(message.get("content")))
    return texts
