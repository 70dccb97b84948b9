"""The language a web answer's messages are written in: the page's choice, else the browser's.

The page sends the language the user picked (or the one it took from the
browser) as ``X-HomeAgent-Lang`` with every API call; without it, the
``Accept-Language`` header decides. Anything that is not Chinese is English,
which is also what scripts get when they send neither. Error messages are
:class:`~homeagent.msg.Msg` values; :func:`localized` renders them from the
catalog of the chosen language.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from homeagent.msg import localize
from homeagent.webui.messages_zh import ZH_MESSAGES

LANG_HEADER = "x-homeagent-lang"
CATALOGS: dict[str, Mapping[str, str]] = {"zh": ZH_MESSAGES}


def _primary(tag: str) -> str:
    """``zh-CN`` → ``zh``; ``EN_us`` → ``en``."""
    return tag.strip().replace("_", "-").split("-", 1)[0].lower()


def accept_language(header: str) -> str:
    """The most wanted primary language of an ``Accept-Language`` header ("" when there is none)."""
    best, best_q = "", 0.0
    for item in header.split(",")[:32]:
        tag, _, params = item.partition(";")
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        lang = _primary(tag)
        if lang and lang != "*" and q > best_q:  # the first of equal weights wins
            best, best_q = lang, q
    return best


def request_lang(headers: Mapping[str, str]) -> str:
    """``zh`` or ``en`` for a request: ``X-HomeAgent-Lang`` first, then ``Accept-Language``."""
    chosen = _primary(headers.get(LANG_HEADER, "")) or accept_language(headers.get("accept-language", ""))
    return chosen if chosen in CATALOGS else "en"


def localized(value: Any, lang: str) -> Any:
    """``value`` (a message, or a dict/list holding some) in ``lang``; English stays as it is."""
    return localize(value, CATALOGS.get(lang))
