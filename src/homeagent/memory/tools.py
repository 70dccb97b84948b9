"""The document-memory tools the model can call: ``doc_query`` and ``doc_commit``.

``doc_query`` consumes: the documents it returns leave L2 and re-enter the
context window as recalled (cold_storage) events at their original time, so
the model sees them in the timeline and, if they stop being relevant, they
sink back into L2 unchanged. Its own output is not embedded again (its
cleaner returns ""), because the recalled events already carry that text.

The move is crash-safe: the documents are found without removing them,
journaled into L1 (fsynced), and only then deleted from L2.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from homeagent.io.origin import current_origin
from homeagent.memory.cleaners import drop_output
from homeagent.memory.context import ContextEvent, RelevanceContext
from homeagent.memory.documents import Doc, DocDraft, DocumentStore, excerpt, iso
from homeagent.memory.media import MediaError, MediaRefs, marker, parse_digests, with_markers
from homeagent.sdk.types import ToolDef

ToolHandlerFn = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

MAX_TOP_K = 20


def doc_tools(
    context: RelevanceContext, docs: DocumentStore, *, media: MediaRefs | None = None
) -> list[tuple[ToolDef, ToolHandlerFn]]:
    """``[(ToolDef, handler), ...]`` for ``doc_query`` and ``doc_commit``; handlers take the validated args.

    With ``media`` (the media store), ``doc_commit``'s ``media_digests`` become
    markers at the end of the content and ``document`` references; an unknown
    digest fails the commit. Without it the digests are dropped silently.
    """
    consuming = asyncio.Lock()  # two doc_query calls never move one document into L1 twice

    async def doc_query(args: dict[str, Any]) -> dict[str, Any]:
        async with consuming:
            return await recall(args)

    async def take_from_l2(found: list[Doc]) -> list[Doc]:
        """Delete from L2 what L1 now holds durably: a kill -9 before this leaves a copy in both, never in neither."""
        await context.durable()
        if not found:
            return found
        taken = set(await asyncio.to_thread(docs.remove_many, [d.id for d in found]))
        return [d for d in found if d.id in taken]  # one removed meanwhile (the CLI) stays as a harmless L1 copy

    async def recall(args: dict[str, Any]) -> dict[str, Any]:
        query = str(args.get("query", "")).strip()
        if not query:
            return {"isError": True, "content": "doc_query needs a non-empty 'query'"}
        try:
            top_k = int(args.get("top_k", 3) or 3)
        except (TypeError, ValueError):
            return {"isError": True, "content": "'top_k' must be an integer"}
        top_k = max(1, min(top_k, MAX_TOP_K))
        found = await docs.aquery(query, top_k, touch=False)  # found, not yet removed: L1 first
        # recalled in a chat scope (a group, a web conversation): it joins that chat's recent past, where it was
        # asked for; recalled outside any, it stays outside every one, as before
        origin = current_origin()
        scope = {"group_id": origin.group_id} if origin is not None and origin.group_id else {}
        for d in found:
            context.append(
                ContextEvent(
                    kind="cold_storage",
                    input=d.content,
                    source="cold_storage",
                    ts=d.ts,
                    meta={"doc_id": d.id, "summary": d.summary, "tags": d.tags, "doc_source": d.source,
                          "speaker": d.speaker, "session": d.session, **scope},
                )
            )
        found = await take_from_l2(found)
        return {
            "count": len(found),
            "documents": [
                {
                    "id": d.id,
                    "timestamp": iso(d.ts),
                    "summary": d.summary or excerpt(d.content, 80),
                    "content": d.content,
                    "tags": d.tags,
                    "score": round(d.score, 4),
                }
                for d in found
            ],
            "note": "these documents were moved back into the conversation timeline" if found else "nothing found",
        }

    async def doc_commit(args: dict[str, Any]) -> dict[str, Any]:
        content = str(args.get("content", ""))
        if not content.strip():
            return {"isError": True, "content": "doc_commit needs a non-empty 'content'"}
        tags_arg = args.get("tags") or []
        if not isinstance(tags_arg, list):
            return {"isError": True, "content": "'tags' must be a list of strings"}
        try:
            digests = parse_digests(args.get("media_digests"))
        except ValueError as exc:
            return {"isError": True, "content": str(exc)}
        summary = str(args.get("summary", "") or "")
        tags = [str(t) for t in tags_arg]
        if not digests or media is None:
            return {"ok": True, "id": await docs.acommit(content, summary, tags)}
        doc_id = f"doc-{uuid.uuid4().hex[:16]}"
        try:
            infos = await media.ainfos(digests)
            # the reference first: GC never sees the bytes unreferenced while the document is being written
            await media.aadd_refs("document", doc_id, [i.digest for i in infos])
        except MediaError as exc:
            return {"isError": True, "content": f"nothing was saved: {exc}"}
        try:
            await docs.ainsert(
                DocDraft(with_markers(content, infos), summary, tags, id=doc_id, source="doc_commit")
            )
        except BaseException:
            await media.aremove_refs("document", doc_id)
            raise
        return {"ok": True, "id": doc_id, "media": [marker(i) for i in infos]}

    query_def = ToolDef(
        name="doc_query",
        description=(
            "Search the document memory (older conversation and saved notes) and bring the best matches "
            "back into the conversation timeline at their original time. Found documents are moved, not copied."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for, in any language"},
                "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": 3},
            },
            "required": ["query"],
        },
        plugin="memory",
        cleaner=drop_output,
    )
    commit_def = ToolDef(
        name="doc_commit",
        description="Save a document (a fact, a note, a summary) to document memory for later recall.",
        parameters={
            "type": "object",
            "properties": {
                "content": {"type": "string", "description": "the text to keep"},
                "summary": {"type": "string", "description": "one line shown when it is recalled"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "media_digests": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "digests (full or the 12-hex short form) of stored media this document is "
                    "about; the core appends their markers",
                },
            },
            "required": ["content"],
        },
        plugin="memory",
        serial=True,
        parallel_safe=False,
    )
    return [(query_def, doc_query), (commit_def, doc_commit)]
