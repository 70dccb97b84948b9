"""Rebuilding the media store's metadata and references after ``media.db`` was lost.

The bytes are on disk under their digests and every owner still has its
markers (``[<mime> <12 hex>] <description>``) in its text: an input's event in
the conversation window (which also lists its full digests in ``meta``), a
document, a graph sentence (whose row lists its digests too). So nothing is
truly lost with ``media.db``: ``repair`` adopts every blob on disk again
(``MediaStore.reconcile``), then walks the three places and references each
item from the owner whose marker names it, and gives an adopted item back the
description its marker carries. Without this an adopted blob would be
unreferenced and GC would evict bytes that memory still cites.

It runs from ``homeagent memory media repair`` and by itself at start when
the daemon opened a fresh ``media.db`` next to blobs that were already there.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from homeagent.memory.media.markers import MARKER
from homeagent.memory.media.store import MediaStore

__all__ = ["MARKER", "DocumentMarkers", "Marked", "RepairReport", "SentenceMarkers", "WindowMarkers", "repair"]

"""A marker as ``markers.marker`` writes it: type, short digest, the description to the end of the line."""


@dataclass(frozen=True)
class Marked:
    """An owner and what names its media: the text with markers and, where the owner keeps them, full digests."""

    owner_kind: str
    owner_id: str
    text: str
    digests: tuple[str, ...] = ()

    def references(self) -> Iterator[tuple[str, str]]:
        """``(digest or 12-hex short digest, description from the marker)`` for each item it names."""
        for digest in self.digests:
            yield digest, ""
        for match in MARKER.finditer(self.text):
            yield match.group(2), " ".join((match.group(3) or "").split())


@dataclass
class RepairReport:
    adopted: int = 0
    quarantined: int = 0
    missing: int = 0
    owners: int = 0
    references_added: int = 0
    described: int = 0
    unresolved: list[str] = field(default_factory=list)  # short digests named by markers whose bytes are not on disk
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MarkerSource(Protocol):
    """One place owners live; ``marked`` returns those whose text may name media."""

    async def marked(self) -> list[Marked]: ...


class Window(Protocol):
    def timeline(self) -> list[Any]: ...


class DocumentTexts(Protocol):
    def iter_docs(self, batch: int = 1000) -> Iterator[Any]: ...


class SentenceTexts(Protocol):
    async def marked_sentences(self) -> list[tuple[str, str, str | None]]: ...


class WindowMarkers:
    """The conversation window: an input's or a turn's event owns its media as ``context``; a document
    brought back by ``doc_query`` keeps its document id."""

    def __init__(self, window: Window) -> None:
        self.window = window

    async def marked(self) -> list[Marked]:
        out: list[Marked] = []
        for event in self.window.timeline():
            text = event.stored_text()
            digests = tuple(str(d) for d in event.meta.get("media", []) or [])
            if not digests and "[" not in text:
                continue
            doc_id = event.meta.get("doc_id")
            kind, owner = ("document", str(doc_id)) if doc_id else ("context", str(event.id))
            out.append(Marked(kind, owner, text, digests))
        return out


class DocumentMarkers:
    def __init__(self, documents: DocumentTexts) -> None:
        self.documents = documents

    async def marked(self) -> list[Marked]:
        def scan() -> list[Marked]:
            return [Marked("document", str(d.id), str(d.content)) for d in self.documents.iter_docs()
                    if MARKER.search(str(d.content))]

        return await asyncio.to_thread(scan)


class SentenceMarkers:
    def __init__(self, graph: SentenceTexts) -> None:
        self.graph = graph

    async def marked(self) -> list[Marked]:
        out: list[Marked] = []
        for key, text, media in await self.graph.marked_sentences():
            digests: tuple[str, ...] = ()
            if media:
                try:
                    listed = json.loads(media)
                except ValueError:
                    listed = []
                digests = tuple(str(d) for d in listed if isinstance(d, str)) if isinstance(listed, list) else ()
            out.append(Marked("graph_sentence", key, text, digests))
        return out


async def repair(store: MediaStore, sources: Sequence[MarkerSource]) -> RepairReport:
    """Adopt the blobs on disk, then reference each item from every owner whose marker names it."""
    started = time.perf_counter()
    report = RepairReport()
    report.adopted, report.quarantined, report.missing, _ = await asyncio.to_thread(store.reconcile)
    owners: list[Marked] = []
    for source in sources:
        owners += await source.marked()
    report.owners = len(owners)
    added, described, unresolved = await asyncio.to_thread(store.rebuild_refs, owners)
    report.references_added, report.described, report.unresolved = added, described, unresolved
    report.seconds = round(time.perf_counter() - started, 3)
    return report
