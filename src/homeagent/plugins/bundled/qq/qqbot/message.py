"""OneBot v11 messages as text, and text as OneBot messages.

An implementation reports a message either as an array of segments
(``[{"type": "text", "data": {"text": "hi"}}]``) or as a CQ-code string
(``hi[CQ:face,id=178]``), depending on its ``message_format`` setting; both are
read here. The model sees one line of plain text with readable markers for
what is not text (``[表情]``, ``[图片 URL]``, ``[回复 #ID]``), and a header that
says which chat it came from and who spoke, because a group chat is many
people talking to one agent.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

Segment = dict[str, Any]

MAX_INPUT_CHARS = 8000
"""Longest text handed to the agent from one QQ message; the rest is cut with a note."""

_CQ = re.compile(r"\[CQ:([A-Za-z0-9_.-]+)((?:,[^\]]*)?)\]")


def _unescape_text(text: str) -> str:
    return text.replace("&#91;", "[").replace("&#93;", "]").replace("&amp;", "&")


def _unescape_param(text: str) -> str:
    return _unescape_text(text.replace("&#44;", ","))


def parse_cq(message: str) -> list[Segment]:
    """Segments of a CQ-code string (the OneBot string format)."""
    out: list[Segment] = []
    pos = 0
    for m in _CQ.finditer(message):
        if m.start() > pos:
            out.append({"type": "text", "data": {"text": _unescape_text(message[pos : m.start()])}})
        data: dict[str, str] = {}
        for part in m.group(2)[1:].split(",") if m.group(2) else []:
            key, sep, value = part.partition("=")
            if sep:
                data[key] = _unescape_param(value)
        out.append({"type": m.group(1), "data": data})
        pos = m.end()
    if pos < len(message):
        out.append({"type": "text", "data": {"text": _unescape_text(message[pos:])}})
    return out


def segments(message: Any) -> list[Segment]:
    """The message's segments, whichever format it came in; anything else gives no segments."""
    if isinstance(message, str):
        return parse_cq(message)
    if isinstance(message, list):
        return [
            {"type": s["type"], "data": s.get("data") if isinstance(s.get("data"), dict) else {}}
            for s in message
            if isinstance(s, dict) and isinstance(s.get("type"), str)
        ]
    return []


@dataclass
class Parsed:
    """A message as the agent reads it."""

    text: str
    mentioned: bool = False
    """The bot itself was @-mentioned."""
    reply_to: str = ""
    """The id of the message this one quotes."""
    images: list[str] = field(default_factory=list)


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def to_text(segs: list[Segment], self_id: str = "") -> Parsed:
    """Plain text with markers; an @-mention of the bot itself is dropped from the text and noted."""
    parts: list[str] = []
    parsed = Parsed("")
    for seg in segs:
        kind, data = seg["type"], seg["data"]
        if kind == "text":
            parts.append(_str(data.get("text")))
        elif kind == "at":
            qq = _str(data.get("qq"))
            if self_id and qq == self_id:
                parsed.mentioned = True
            elif qq == "all":
                parts.append("@全体成员 ")
            else:
                parts.append(f"@{_str(data.get('name')) or qq} ")
        elif kind == "reply":
            parsed.reply_to = _str(data.get("id"))
            parts.append(f"[回复 #{parsed.reply_to}] ")
        elif kind == "face":
            parts.append("[表情]")
        elif kind == "image":
            where = _str(data.get("url")) or _str(data.get("file"))
            parsed.images.append(where)
            parts.append(f"[图片 {where}]" if where else "[图片]")
        elif kind == "record":
            parts.append("[语音]")
        elif kind == "video":
            parts.append("[视频]")
        elif kind == "file":
            parts.append(f"[文件 {_str(data.get('name')) or _str(data.get('file'))}]")
        elif kind in ("json", "xml"):
            parts.append("[卡片消息]")
        elif kind == "forward":
            parts.append(f"[合并转发 #{_str(data.get('id'))}]")
        else:
            parts.append(f"[{kind}]")
    text = "".join(parts).strip()
    if len(text) > MAX_INPUT_CHARS:
        text = text[:MAX_INPUT_CHARS] + f" …[cut: {len(text) - MAX_INPUT_CHARS} more characters]"
    parsed.text = text
    return parsed


def header(user_id: str, nickname: str, group_id: str = "") -> str:
    """``[QQ 群 123 · Ada(10001)]`` or ``[QQ 私聊 · Ada(10001)]``: where a message came from and who sent it."""
    where = f"群 {group_id}" if group_id else "私聊"
    return f"[QQ {where} · {nickname or user_id}({user_id})]"


_SENTENCE_END = re.compile(r"[。！？!?；;…]+[”’」』）)]*|[.](?=\s)")
_JOINERS = frozenset({0x200D, 0x20E3})  # zero-width joiner, combining enclosing keycap


@dataclass(frozen=True)
class _Block:
    """A fenced code block: ``start``..``end`` of the text, and its opening line (to reopen it after a cut)."""

    start: int
    end: int
    opener: str
    fence: str


def _fences(text: str) -> list[tuple[int, int, str, str]]:
    """Fence lines (start, end, the line, its backticks or tildes), found with ``str.find``: a regex anchored
    at every line start costs a millisecond per 100 kB, and a reply is scanned once per message it becomes."""
    found: list[tuple[int, int, str, str]] = []
    for marker in ("```", "~~~"):
        i = text.find(marker)
        while i >= 0:
            start = text.rfind("\n", 0, i) + 1
            if text[start:i].strip(" \t"):
                i = text.find(marker, i + 3)
                continue
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            line = text[start:end].strip()
            run = len(line) - len(line.lstrip(marker[0]))
            found.append((start, end, line, marker[0] * run))
            i = text.find(marker, end)
    return sorted(found)


def _code_blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    opened: tuple[int, int, str, str] | None = None
    for fence in _fences(text):
        _, end, line, run = fence
        if opened is None:
            opened = fence
        elif line == run and run[0] == opened[3][0] and len(run) >= len(opened[3]):
            blocks.append(_Block(opened[0], end, opened[2], opened[3]))
            opened = None
    if opened is not None:  # never closed: a code block to the end
        blocks.append(_Block(opened[0], len(text), opened[2], opened[3]))
    return blocks


def _extends(ch: str) -> bool:
    """Whether ``ch`` belongs to the character before it (accents, emoji modifiers and joiners, flags' tags)."""
    cp = ord(ch)
    return (
        unicodedata.combining(ch) != 0
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")
        or cp in _JOINERS
        or 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF  # variation selectors
        or 0x1F3FB <= cp <= 0x1F3FF  # skin tones
        or 0xE0020 <= cp <= 0xE007F  # tag characters (subdivision flags)
    )


def _is_regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _grapheme_boundary(text: str, i: int) -> bool:
    """Whether cutting before ``text[i]`` keeps every user-perceived character whole."""
    if i <= 0 or i >= len(text):
        return True
    if _extends(text[i]) or ord(text[i - 1]) in _JOINERS:
        return False
    if _is_regional(text[i]) and _is_regional(text[i - 1]):
        run = 0
        while i - 1 - run >= 0 and _is_regional(text[i - 1 - run]):
            run += 1
        return run % 2 == 0  # between two flags, not inside one
    return True


def _safe_cut(text: str, at: int) -> int:
    """The nearest grapheme boundary at or before ``at`` (at least one character is always taken)."""
    while at > 1 and not _grapheme_boundary(text, at):
        at -= 1
    return at


def _cut(rest: str, limit: int) -> tuple[int, _Block | None]:
    """Where to end the next message, and the code block it ends inside (to close and reopen), if any.

    Preference: a paragraph end, a line end, a sentence end, a space — in
    the second half of the window and never inside a code block; else just
    before a code block, so the block starts a message of its own; a code
    block longer than a message is cut at a line end and its fence reopened.
    """
    blocks = _code_blocks(rest)

    def outside(i: int) -> bool:
        return all(not (b.start < i < b.end) for b in blocks)

    window = rest[:limit]
    half = limit // 2
    for pattern in ("\n\n", "\n"):
        at = window.rfind(pattern)
        while at >= half:
            if outside(at + len(pattern)):
                return at + len(pattern), None
            at = window.rfind(pattern, 0, at)
    ends = [m.end() for m in _SENTENCE_END.finditer(window) if m.end() >= half and outside(m.end())]
    if ends:
        return ends[-1], None
    at = window.rfind(" ")
    while at >= half:
        if outside(at + 1):
            return at + 1, None
        at = window.rfind(" ", 0, at)
    inside = next((b for b in blocks if b.start < limit and b.end > limit), None)
    if inside is not None and inside.start > 0:
        return inside.start, None  # the block goes to the next message whole (or is cut there)
    if inside is not None:
        room = limit - len(inside.fence) - 1  # the closing fence this message gets
        at = rest.rfind("\n", len(inside.opener), room)
        if at > len(inside.opener):
            return at + 1, inside
        return _safe_cut(rest, room), inside
    return _safe_cut(rest, limit), None


def split_text(text: str, limit: int, max_parts: int = 10) -> list[str]:
    """Cut a reply into messages of at most ``limit`` characters, at natural ends.

    Paragraph, line, sentence or word ends are preferred (see ``_cut``); a
    fenced code block is never cut unless it alone is longer than a message
    (then each piece is a closed block of its own, so it still renders as
    code); an emoji, a flag or a letter with its accents is never cut in two.
    At most ``max_parts`` messages: a runaway reply must not flood a chat, so
    what is beyond them is dropped with a note in the last one.
    """
    limit = max(limit, 50)
    parts: list[str] = []
    rest = text.strip()
    while rest:
        if len(rest) <= limit:
            parts.append(rest)
            break
        cut, block = _cut(rest, limit)
        part, rest = rest[:cut].rstrip(), rest[cut:]
        if block is not None:
            part = f"{part}\n{block.fence}"
            rest = f"{block.opener}\n{rest.lstrip(chr(10))}"
        else:
            rest = rest.lstrip()
        parts.append(part)
        if len(parts) == max_parts and rest:
            note = f"\n…[{len(rest)} more characters not sent]"
            keep = _safe_cut(parts[-1], limit - len(note))
            parts[-1] = parts[-1][:keep] + note
            break
    return [p for p in parts if p]


def split_paragraphs(text: str, limit: int, max_parts: int = 10) -> list[str]:
    """One message per paragraph (blank-line separated, a code block counts as one), each split at ``limit``.

    With more messages than ``max_parts`` this gives :func:`split_text`'s
    messages instead: fewer, fuller messages rather than a dropped ending.
    """
    text = text.strip()
    blocks = _code_blocks(text)
    paragraphs: list[str] = []
    start = 0
    for m in re.finditer(r"\n[ \t]*\n", text):
        if all(not (b.start < m.start() < b.end) for b in blocks):
            paragraphs.append(text[start : m.start()])
            start = m.end()
    paragraphs.append(text[start:])
    parts = [p for para in paragraphs if para.strip() for p in split_text(para, limit, max_parts)]
    return parts if len(parts) <= max_parts else split_text(text, limit, max_parts)


def text_message(text: str, reply_to: str = "") -> list[Segment]:
    """A text message as segments (never a CQ string, so brackets in the text stay text)."""
    segs: list[Segment] = []
    if reply_to:
        segs.append({"type": "reply", "data": {"id": reply_to}})
    segs.append({"type": "text", "data": {"text": text}})
    return segs
