"""The SDK's ``DocMemoryAPI`` over the document store, one explicit call per method.

Why a class of its own: plugins (in-process, Lua and subprocess through the
``doc.*`` RPC methods) reach the document store only through this seam, and
every call goes to the store's coroutine, which runs SQLite and the embedder
in a worker thread. The host used to find "the first method that exists" on
the store, which bound ``insert`` and ``query`` to the synchronous methods:
they embedded on the event loop, and ``insert`` of a dict or a string raised.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from homeagent.memory.documents import Doc, DocDraft, DocumentStore
from homeagent.memory.media.inputs import check_blocks, store_blocks
from homeagent.memory.media.markers import with_markers
from homeagent.memory.media.store import MediaStore
from homeagent.sdk.api import DocMemoryAPI
from homeagent.sdk.types import MediaBlock

_FIELDS = ("content", "summary", "tags", "ts", "id", "speaker", "session", "source")


def as_draft(doc: Any, *, source: str = "") -> DocDraft:
    """A plugin's document as a draft: a ``Doc``, a ``DocDraft``, a text, or an object with ``content``.

    Raises ``ValueError`` naming what is wrong (an empty text, an unknown
    field, a field of the wrong type), which plugins see as a clear error.
    """
    if isinstance(doc, DocDraft):
        draft = doc
    elif isinstance(doc, Doc):
        draft = DocDraft(doc.content, doc.summary, doc.tags, doc.ts or None, doc.id or None, doc.source or source,
                         speaker=doc.speaker, session=doc.session)
    elif isinstance(doc, str):
        draft = DocDraft(doc, source=source)
    elif isinstance(doc, Mapping):
        unknown = sorted(str(k) for k in doc if k not in _FIELDS)
        if unknown:
            raise ValueError(f"unknown document field(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)}")
        content = doc.get("content")
        if not isinstance(content, str):
            raise ValueError("a document needs 'content' (a string)")
        tags = doc.get("tags") or ()
        if isinstance(tags, str) or not isinstance(tags, Sequence) or not all(isinstance(t, str) for t in tags):
            raise ValueError("'tags' must be a list of strings")
        ts = doc.get("ts")
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int | float)):
            raise ValueError("'ts' must be a number (seconds since the epoch)")
        texts = {}
        for name in ("summary", "id", "speaker", "session", "source"):
            value = doc.get(name) or ""
            if not isinstance(value, str):
                raise ValueError(f"'{name}' must be a string")
            texts[name] = value
        draft = DocDraft(content, texts["summary"], list(tags), float(ts) if ts is not None else None,
                         texts["id"] or None, texts["source"] or source, speaker=texts["speaker"],
                         session=texts["session"])
    else:
        raise ValueError(f"a document is a text or an object with 'content', not {type(doc).__name__}")
    if not draft.content.strip():
        raise ValueError("a document needs non-empty content")
    return draft


class DocMemoryService(DocMemoryAPI):
    """``DocMemoryAPI`` for plugins; built once in ``daemon.py`` around the daemon's store."""

    def __init__(
        self, store: DocumentStore, *, source: str = "plugin", media: MediaStore | None = None,
        max_bytes: Callable[[], int] = lambda: 20 * 1024 * 1024,
    ) -> None:
        self._store = store
        self._source = source
        self._media = media
        self._max_bytes = max_bytes

    async def query(self, text: str, top_k: int = 3) -> list[Any]:
        return list(await self._store.aquery(text, top_k))

    async def insert(self, doc: Any) -> Any:
        return await self._store.ainsert(as_draft(doc, source=self._source))

    async def remove(self, doc_id: str) -> Any:
        return await self._store.aremove(doc_id)

    async def stats(self) -> dict[str, Any]:
        return dict(await self._store.astats())

    async def insert_with_media(self, doc: Any, attachments: Sequence[MediaBlock]) -> Any:
        """The document with one marker line per attachment, referencing each (``document``, its id).

        Everything is checked and stored before the document is written, and
        the references are added before it too (GC never sees the bytes
        unreferenced while it is written); a failure leaves no document and
        no reference. With the media store off the lines are plain
        ``[image: description]`` text, as the rest of the media chain degrades.
        """
        draft = as_draft(doc, source=self._source)
        blocks = check_blocks(attachments, self._max_bytes())
        if self._media is None:
            lines = [f"[{'image' if b.mime.startswith('image/') else 'file'}: {b.description or b.digest[:12] or b.mime}]"
                     for b in blocks]
            return await self._store.ainsert(dataclasses.replace(draft, content="\n".join([draft.content.rstrip(), *lines])))
        infos = await store_blocks(self._media, blocks, source=f"plugin:{self._source}")
        doc_id = draft.id or f"doc-{uuid.uuid4().hex[:16]}"
        draft = dataclasses.replace(draft, id=doc_id, content=with_markers(draft.content, infos))
        await self._media.aadd_refs("document", doc_id, [i.digest for i in infos])
        try:
            return await self._store.ainsert(draft)
        except BaseException:
            await self._media.aremove_refs("document", doc_id)
            raise
