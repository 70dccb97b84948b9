"""Conversations over HTTP: list, search, make, rename, delete, export, read page by page, regenerate, edit.

A conversation's turns run through the chat routes (``conversation`` in the
body of ``POST /api/v1/chat/stream``); what the chat showed is read back
here, newest page first (``before``: the id of the oldest entry the page
has, so a conversation of thousands of entries opens with one indexed
query). Regenerate and edit continue a conversation from one of its
messages: the transcript from that message on is dropped, and so are those
turns in the model's recent past of this conversation; then the message is
sent again (regenerate) or its new text is (edit), as a streamed turn.
"""

from __future__ import annotations

import builtins
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from homeagent.conversations import Conversation, ConversationError, Entry
from homeagent.conversations.export import to_json, to_markdown
from homeagent.conversations.store import MAX_TITLE
from homeagent.memory.media import MediaError
from homeagent.msg import Msg, message_of
from homeagent.sdk.types import MediaBlock
from homeagent.webui.chat import CONVERSATION_FIELD, MAX_TEXT, ChatAPI, no_conversation
from homeagent.webui.common import (
    ApiError,
    Op,
    WebContext,
    field_str,
    ok,
    path_id,
    query_int,
    read_object,
    read_optional_object,
)
from homeagent.webui.host import ConversationLog

PAGE_DEFAULT = 50
PAGE_MAX = 500


def entry_json(entry: Entry) -> dict[str, Any]:
    return entry.to_dict()


class ConversationRoutes:
    def __init__(self, ctx: WebContext, chat: ChatAPI) -> None:
        self.ctx = ctx
        self.chat = chat

    @property
    def history(self) -> ConversationLog:
        return self.ctx.daemon.conversations

    def ops(self) -> builtins.list[Op]:
        title = {"type": "string", "maxLength": MAX_TITLE}
        one = "/api/v1/conversations/{id}"
        return [
            Op("GET", "/api/v1/conversations", self.list,
               "Conversations, most recently used first; q: those whose title or messages contain it",
               "conversations", query=("q", "limit")),
            Op("POST", "/api/v1/conversations", self.create, "Make a conversation (201)", "conversations",
               body={"type": "object", "properties": {"title": title}}),
            Op("GET", one, self.get, "One conversation", "conversations"),
            Op("PATCH", one, self.rename, "Rename a conversation", "conversations",
               body={"type": "object", "required": ["title"], "properties": {"title": title}}),
            Op("DELETE", one, self.delete, "Delete a conversation and its transcript (memory keeps what it learned)",
               "conversations"),
            Op("GET", one + "/entries", self.entries,
               "What the chat showed, a page at a time: the newest entries, or those before entry 'before'",
               "conversations", query=("before", "limit")),
            Op("GET", one + "/export", self.export, "The conversation as a file: format=md (default) or json",
               "conversations", query=("format",)),
            Op("POST", one + "/regenerate", self.regenerate,
               "Drop the last reply (and anything after the last message) and answer that message again, as SSE",
               "conversations", body={"type": "object", "properties": {"client_msg_id": {"type": "string"}}},
               stream=True),
            Op("POST", one + "/edit", self.edit,
               "Edit one of your messages and continue from it (later entries are dropped), as SSE",
               "conversations",
               body={"type": "object", "required": ["entry", "text"],
                     "properties": {"entry": {"type": "integer", "description": "the id of a message of yours"},
                                    "text": {"type": "string"}, "client_msg_id": {"type": "string"}}},
               stream=True),
        ]

    async def _one(self, request: Request) -> Conversation:
        cid = path_id(request)
        found = await self.history.get(cid)
        if found is None:
            raise no_conversation(cid)
        return found

    # ------------------------------------------------------------ conversations
    async def list(self, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        if len(query) > 500:
            raise ApiError(400, Msg("'q' is at most 500 characters"))
        limit = query_int(request, "limit", 100, lo=1, hi=1000)
        found = await self.history.list(query, limit)
        return ok({"conversations": [c.to_dict() for c in found], "query": query})

    async def create(self, request: Request) -> Response:
        body = await read_optional_object(request)
        title = field_str(body, "title", required=False, max_len=100_000)
        try:
            made = await self.history.create(title)
        except ConversationError as exc:
            raise ApiError(400, message_of(exc), field="title") from None
        return ok(made.to_dict(), status=201)

    async def get(self, request: Request) -> Response:
        found = await self._one(request)
        return ok({**found.to_dict(), "running": self.history.running(found.id)})

    async def rename(self, request: Request) -> Response:
        cid = path_id(request)
        body = await read_object(request)
        title = field_str(body, "title", max_len=100_000)
        try:
            renamed = await self.history.rename(cid, title)
        except ConversationError as exc:
            raise ApiError(400, message_of(exc), field="title") from None
        if renamed is None:
            raise no_conversation(cid)
        return ok(renamed.to_dict())

    async def delete(self, request: Request) -> Response:
        cid = path_id(request)
        if not await self.history.delete(cid):
            raise no_conversation(cid)
        return ok({"deleted": cid})

    # ------------------------------------------------------------ transcript
    async def entries(self, request: Request) -> Response:
        conversation = await self._one(request)
        raw_before = request.query_params.get("before")
        before = None if raw_before in (None, "") else query_int(request, "before", 0, lo=0, hi=2**62)
        limit = query_int(request, "limit", PAGE_DEFAULT, lo=1, hi=PAGE_MAX)
        page, more = await self.history.page(conversation.id, before=before, limit=limit)
        return ok({
            "conversation": conversation.to_dict(),
            "entries": [entry_json(e) for e in page],
            "more": more,
            "before": page[0].id if page and more else None,
            "running": self.history.running(conversation.id),
        })

    async def export(self, request: Request) -> Response:
        conversation = await self._one(request)
        kind = request.query_params.get("format", "md").lower()
        if kind not in ("md", "markdown", "json"):
            raise ApiError(400, Msg("format is md or json"))
        entries = await self.history.entries(conversation.id)
        stem = f"conversation-{conversation.id}"
        if kind == "json":
            return JSONResponse(to_json(conversation, entries), headers=_attachment(f"{stem}.json", conversation))
        return Response(to_markdown(conversation, entries), media_type="text/markdown; charset=utf-8",
                        headers=_attachment(f"{stem}.md", conversation))

    # ------------------------------------------------------------ continue from a message
    def _refuse_while_running(self, conversation: Conversation) -> None:
        if self.history.running(conversation.id):
            raise ApiError(409, Msg("a reply in this conversation is still running; stop it first (POST "
                                    "/api/v1/chat/cancel) or wait for it"), code="busy")

    async def _media(self, entry: Entry) -> builtins.list[MediaBlock]:
        """The media sent with a message, for sending it again; what the media store no longer has is left out
        (the message's text still carries their markers and descriptions)."""
        media = self.ctx.media
        if media is None:
            return []
        blocks = []
        for item in entry.data.get("media") or []:
            try:
                info = await media.ainfo(str(item.get("digest", "")))
            except (MediaError, ValueError):
                continue
            blocks.append(MediaBlock(mime=info.mime, digest=info.digest, description=info.description))
        return blocks

    async def regenerate(self, request: Request) -> Response:
        conversation = await self._one(request)
        body = await read_optional_object(request)
        msg_id = field_str(body, "client_msg_id", required=False, max_len=200)
        self._refuse_while_running(conversation)
        last = await self.history.last_of(conversation.id, "user")
        if last is None:
            raise ApiError(409, Msg("nothing to regenerate: this conversation has no message of yours yet"))
        media = await self._media(last)
        gone, forgotten = await self.history.truncate(conversation.id, last.id)
        return await self.chat.stream_turn(request, last.text, media=media, conversation=conversation, msg_id=msg_id,
                                           accepted={"dropped": len(gone), "forgotten": forgotten})

    async def edit(self, request: Request) -> Response:
        conversation = await self._one(request)
        body = await read_object(request)
        if "entry" not in body:
            raise ApiError(400, Msg("'entry' (the id of the message to edit) is required"), field="entry")
        raw = body["entry"]
        if isinstance(raw, bool) or not isinstance(raw, int) or not 0 < raw < 2**62:
            raise ApiError(400, Msg("'entry' must be the id of a message (a whole number)"), field="entry")
        text = field_str(body, "text", max_len=MAX_TEXT)
        msg_id = field_str(body, "client_msg_id", required=False, max_len=200)
        self._refuse_while_running(conversation)
        entry = await self.history.entry(conversation.id, raw)
        if entry is None:
            raise ApiError(404, Msg("conversation {conversation} has no entry {entry}", conversation=conversation.id, entry=raw),
                           entry=raw)
        if entry.kind != "user":
            raise ApiError(400, Msg("entry {entry} is not a message of yours ({kind}); only those can be edited",
                                    entry=raw, kind=entry.kind), entry=raw)
        media = await self._media(entry)
        gone, forgotten = await self.history.truncate(conversation.id, entry.id)
        return await self.chat.stream_turn(request, text, media=media, conversation=conversation, msg_id=msg_id,
                                           accepted={"dropped": len(gone), "forgotten": forgotten})


def _attachment(name: str, conversation: Conversation) -> dict[str, str]:
    shown = f"{conversation.title[:80]}{name[name.rfind('.'):]}" if conversation.title else name
    return {"Content-Disposition": f"attachment; filename=\"{name}\"; filename*=UTF-8''{quote(shown, safe='')}",
            "Cache-Control": "no-store"}


__all__ = ["CONVERSATION_FIELD", "ConversationRoutes"]
