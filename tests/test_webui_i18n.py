"""Every label of the web UI exists in English and in Chinese (static/i18n.js), and every key the chat uses is one."""

from __future__ import annotations

import re
from pathlib import Path

STATIC = Path(__file__).resolve().parent.parent / "src" / "homeagent" / "webui" / "static"


def tables() -> dict[str, set[str]]:
    text = (STATIC / "i18n.js").read_text(encoding="utf-8")
    en_at, zh_at = text.index("\n  en: {"), text.index("\n  zh: {")
    end = text.index("\n};", zh_at)
    keys = {}
    for lang, block in (("en", text[en_at:zh_at]), ("zh", text[zh_at:end])):
        # several "key": "value" pairs share a line: take every quoted key followed by a colon
        keys[lang] = set(re.findall(r'"([a-z_]+(?:[.:][^"]+)+)":\s', block))
    return keys


def test_english_and_chinese_have_the_same_keys() -> None:
    keys = tables()
    assert keys["en"] and keys["en"] == keys["zh"], {"only en": keys["en"] - keys["zh"], "only zh": keys["zh"] - keys["en"]}


def test_the_chat_uses_only_keys_that_exist() -> None:
    known = tables()["en"]
    used: set[str] = set()
    for path in [STATIC / "views" / "chat.js", *sorted((STATIC / "chat").glob("*.js"))]:
        used |= set(re.findall(r'\bt\("([a-z_]+\.[a-z_]+)"', path.read_text(encoding="utf-8")))
    assert used and used <= known, sorted(used - known)
