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


def split_text(text: str, limit: int, max_parts: int = 10) -> list[str]:
    """Cut a reply into messages of at most ``limit`` characters, at paragraph, line, sentence or word ends.

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
        window = rest[:limit]
        cut = -1
        for pattern in ("\n\n", "\n"):
            at = window.rfind(pattern)
            if at >= limit // 2:
                cut = at + len(pattern)
                break
        if cut < 0:
            ends = [m.end() for m in re.finditer(r"[。！？!?；;]|[.](?=\s)", window)]
            if ends and ends[-1] >= limit // 2:
                cut = ends[-1]
        if cut < 0:
            at = window.rfind(" ")
            cut = at + 1 if at >= limit // 2 else limit
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
        if len(parts) == max_parts and rest:
            note = f"\n…[{len(rest)} more characters not sent]"
            parts[-1] = parts[-1][: limit - len(note)] + note
            break
    return [p for p in parts if p]


def text_message(text: str, reply_to: str = "") -> list[Segment]:
    """A text message as segments (never a CQ string, so brackets in the text stay text)."""
    segs: list[Segment] = []
    if reply_to:
        segs.append({"type": "reply", "data": {"id": reply_to}})
    segs.append({"type": "text", "data": {"text": text}})
    return segs
