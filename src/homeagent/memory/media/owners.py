"""Which owners of media references still exist: so bytes are kept for what memory still shows, not forever.

A reference is added when a document or a graph sentence takes a marker, but
owners leave without saying so: ``doc_query`` moves a document into the
conversation (it keeps its id there and comes back with it), the archive loop
distils a cold document into the graph and deletes it, a hard purge deletes
the relations a sentence fed. Before each GC pass the references older than
``gc_min_age`` are checked against the stores; those whose owner is gone are
dropped, and the bytes become unreferenced, then evictable after another
``gc_min_age``. Only what can be checked is dropped: a document that is in
neither the document store nor the conversation window, a sentence that no
relation (current or retired) comes from, an input event (``context``: the
media of a turn) that left the window, by pruning into the document store or
by clearing. The descriptions stay in the text, as ever.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from homeagent.memory.media.store import GCReport, MediaStore

__all__ = ["DocumentOwners", "MediaOwners", "SentenceOwners", "WindowOwners", "gc_pass"]

log = logging.getLogger("homeagent.memory.media")


class DocumentOwners(Protocol):
    async def aexisting(self, ids: Sequence[str]) -> set[str]: ...


class WindowOwners(Protocol):
    """The conversation window: documents brought back by ``doc_query`` live there under their id."""

    def timeline(self) -> list[Any]: ...


class SentenceOwners(Protocol):
    async def live_sentences(self, hashes: Sequence[str]) -> set[str]: ...


class MediaOwners:
    def __init__(self, *, documents: DocumentOwners, window: WindowOwners, graph: SentenceOwners) -> None:
        self.documents = documents
        self.window = window
        self.graph = graph

    async def alive(self, owner_kind: str, ids: Sequence[str]) -> set[str]:
        """The ``ids`` of ``owner_kind`` that still exist (all of them for a kind that cannot be checked)."""
        if owner_kind == "document":
            # window, store, window again: a document moving either way between them (doc_query adds it to
            # the window before it leaves the store; pruning adds it to the store before it leaves the
            # window) is seen in one of the three reads
            before = self._in_window(ids)
            stored = await self.documents.aexisting([i for i in ids if i not in before])
            return before | stored | self._in_window(ids)
        if owner_kind == "graph_sentence":
            return await self.graph.live_sentences(ids)
        if owner_kind == "context":  # an input's media, referenced by its event while that is in the window
            return set(ids) & {str(e.id) for e in self.window.timeline()}
        return set(ids)


    def _in_window(self, ids: Sequence[str]) -> set[str]:
        in_window = {str(e.meta.get("doc_id")) for e in self.window.timeline() if e.meta.get("doc_id")}
        return set(ids) & in_window


async def gc_pass(store: MediaStore, owners: MediaOwners | None, min_age: float | None = None) -> GCReport:
    """Drop references whose owner is gone (older than ``min_age``), then run the store's GC pass."""
    age = store.min_age if min_age is None else min_age
    dropped = 0
    if owners is not None:
        cutoff = store.now() - age
        for kind, ids in (await store.aref_owners(cutoff)).items():
            alive = await owners.alive(kind, ids)
            gone = [i for i in ids if i not in alive]
            if gone:
                dropped += await store.adrop_owners(kind, gone, cutoff)
                log.info("media GC: %d %s owners are gone; their references were dropped", len(gone), kind)
    report = await store.agc(age)
    report.refs_dropped = dropped
    return report
