"""The text cleaner this plugin registers: QQ noise out of what memory embeds and indexes.

Memory stores the original text; the cleaner only changes what is embedded
and indexed, so that two messages about the same thing look alike although
one came with a chat header, a quoted-message marker and three stickers. It
removes what this plugin itself adds (the ``[QQ 群 … · name(id)]`` header
becomes ``name:``, the ``[表情]``/``[图片 …]``/``[回复 #…]`` markers), what
OneBot text can carry (CQ codes, escaped brackets, @全体成员), the notices QQ
clients put into message text, timestamps and repeated spaces.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"\[QQ (?:群 \d+|私聊) · ([^\]\n]*?)\(\d+\)\]\s*")
_MARKERS = re.compile(
    r"\[(?:表情|语音|视频|卡片消息|图片|文件)(?: [^\]\n]*)?\]"
    r"|\[(?:回复|合并转发) #[^\]\n]*\]"
    r"|…?\[cut: \d+ more characters\]"
)
_CQ = re.compile(r"\[CQ:[A-Za-z0-9_.-]+(?:,[^\]]*)?\]")
_ENTITIES = re.compile(r"&#91;|&#93;|&#44;|&amp;")
_NOTICES = re.compile(
    r"请使用最新版(?:本)?手机QQ(?:查看|体验新功能)|\[该消息类型暂不能展示\]|\[(?:QQ红包|动画表情|闪照|戳一戳|小程序)\][^\n]*?(?=\s|$)"
)
_ALL = re.compile(r"@全体成员")
_TIMESTAMP = re.compile(r"\b\d{4}[-/]\d{1,2}[-/]\d{1,2}[ T]\d{1,2}:\d{2}(?::\d{2})?\b|\b\d{1,2}:\d{2}:\d{2}\b")
_SPACES = re.compile(r"[ \t\u3000]{2,}")
_ENTITY_TEXT = {"&#91;": "[", "&#93;": "]", "&#44;": ",", "&amp;": "&"}


def clean(text: str) -> str:
    """``text`` without QQ decoration; plain text passes through unchanged (but for spaces)."""
    text = _HEADER.sub(lambda m: f"{m.group(1)}: ", text)
    text = _CQ.sub(" ", text)
    text = _MARKERS.sub(" ", text)
    text = _NOTICES.sub(" ", text)
    text = _ALL.sub(" ", text)
    text = _ENTITIES.sub(lambda m: _ENTITY_TEXT[m.group(0)], text)
    text = _TIMESTAMP.sub(" ", text)
    return _SPACES.sub(" ", text).strip()
