"""Media in text memory: the marker ``[<mime> <12-hex short digest>] <description>``, composed by the core.

Documents, graph sentences and context events are text; a marker is how one
of them points at media. The model gives only digests (``media_digests``)
and the core writes the marker, because a marker the model typed could be
misspelt and silently cut the link. The description in the marker is the
durable memory (search finds it); the digest is the way back to the bytes
while the store still has them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from homeagent.memory.media.store import MediaInfo

__all__ = ["MARKER", "MediaRefs", "marker", "parse_digests", "with_markers"]

MARKER = re.compile(r"\[([a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*) ([0-9a-f]{12})\](?: ([^\n]*))?")
"""A marker in text: groups mime, short digest, description (what the media repair and the window's refs read)."""


class MediaRefs(Protocol):
    """What the memory tools need from the media store (``MediaStore`` implements it)."""

    async def ainfos(self, refs: Sequence[str]) -> list[MediaInfo]: ...

    async def aadd_refs(self, owner_kind: str, owner_id: str, refs: Sequence[str]) -> list[str]: ...

    async def aremove_refs(self, owner_kind: str, owner_id: str, refs: Sequence[str] | None = None) -> int: ...


def marker(info: MediaInfo) -> str:
    text = f"[{info.mime} {info.short}]"
    description = " ".join(info.description.split())
    return f"{text} {description}" if description else text


def with_markers(text: str, infos: Sequence[MediaInfo]) -> str:
    """``text`` followed by one marker line per media item (just the markers when ``text`` is blank)."""
    lines = [marker(i) for i in infos]
    return "\n".join([text.rstrip(), *lines]) if text.strip() else "\n".join(lines)


def parse_digests(value: object) -> list[str]:
    """The ``media_digests`` argument as a list of strings; anything else is a ``ValueError`` naming the problem."""
    if value is None or value == []:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError("'media_digests' must be a list of digest strings")
    return [v for v in value if v.strip()]
