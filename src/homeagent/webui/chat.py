"""Chat over HTTP: send and wait, stream a turn as SSE, upload files, history, interrupt and stop.

Web input arrives on channel ``webui``. A turn's frames are exactly the ones
the local socket sends (``reasoning_delta``, ``content_delta`` with ``reset``,
``tool_call``, ``response``, ``error``), preceded by ``accepted`` with the
input id. A ``client_msg_id`` makes a send idempotent per signed-in client:
a retry gets the first attempt's result instead of running the turn twice.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import re
import secrets
import shutil
import unicodedata
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.types import Message, Receive

from homeagent.conversations import Conversation, ConversationError, scope_of
from homeagent.io.manager import InputMessage, TurnResult
from homeagent.memory.media import MediaError, marker
from homeagent.msg import Msg, message_of
from homeagent.sdk.types import InjectOptions, MediaBlock
from homeagent.webui.common import ApiError, Op, WebContext, field_str, ok, principal_of, query_int, read_object
from homeagent.webui.host import ConversationLog, InputQueue
from homeagent.webui.sse import SSE_HEADERS, FrameQueue, frame_stream, sse

log = logging.getLogger("homeagent.webui")

CHANNEL = "webui"
SOURCE = "webui"
MAX_TEXT = 200_000
UPLOAD_NAME = re.compile(r"^[0-9a-f]{24}\.[a-z0-9]{1,10}$")
SAFE_EXT = re.compile(r"^\.[a-z0-9]{1,10}$")
# Served as downloads anyway; renamed so nothing on disk looks like a page or a program.
RISKY_EXT = frozenset(
    ".html .htm .xhtml .shtml .svg .svgz .xml .xsl .js .mjs .php .phtml .asp .aspx .jsp .cgi .pl .py .sh .bash "
    ".exe .dll .bat .cmd .com .msi .ps1 .vbs .jar .app .scr .hta".split()
)
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"})
MULTIPART_OVERHEAD = 1024 * 1024


class ChatDedupe:
    """``(client, client_msg_id)`` → the turn it started; bounded and time-limited."""

    def __init__(self, *, max_entries: int = 2000) -> None:
        self.max_entries = max_entries
        self._turns: OrderedDict[tuple[str, str], asyncio.Future[TurnResult]] = OrderedDict()

    def get(self, client: str, msg_id: str) -> asyncio.Future[TurnResult] | None:
        return self._turns.get((client, msg_id)) if msg_id else None

    def put(self, client: str, msg_id: str, future: asyncio.Future[TurnResult]) -> None:
        if not msg_id:
            return
        self._turns[(client, msg_id)] = future
        while len(self._turns) > self.max_entries:
            self._turns.popitem(last=False)


class _TooLarge(Exception):
    pass


def _limited(receive: Receive, limit: int) -> Receive:
    """A receive that refuses a body larger than ``limit`` bytes while it streams in."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _TooLarge
        return message

    return wrapped


def clean_name(name: str) -> str:
    """A file name fit to show the model and the user: no path, no control characters, bounded."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(ch for ch in base if unicodedata.category(ch)[0] != "C").strip()
    return base[:200] or "file"


def stored_name(original: str) -> str:
    ext = Path(clean_name(original)).suffix.lower()
    if not SAFE_EXT.match(ext) or ext in RISKY_EXT:
        ext = ".bin"
    return secrets.token_hex(12) + ext


def _copy(src: BinaryIO, dest: Path) -> int:
    src.seek(0)
    with open(dest, "xb") as out:
        shutil.copyfileobj(src, out, 1024 * 1024)
        return out.tell()


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


CONVERSATION_FIELD = {
    "type": "integer",
    "description": "the conversation this message belongs to (POST /api/v1/conversations makes one): the turn "
    "sees that conversation's recent turns only, and the chat's transcript records it; without it the turn is "
    "outside every conversation, like the terminal's",
}


def no_conversation(conversation: int) -> ApiError:
    return ApiError(404, Msg("no conversation {conversation} (deleted, or never made); GET /api/v1/conversations "
                             "lists them", conversation=conversation), conversation=conversation)


def conversation_id(value: Any) -> int:
    """A conversation id from a JSON body or form field: a whole number (digits in a string are taken too)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63:
        return value
    raise ApiError(400, Msg("'conversation' must be a conversation id (a whole number)"), field="conversation")


class ChatAPI:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx
        self.dedupe = ChatDedupe()

    @property
    def io(self) -> InputQueue:
        return self.ctx.daemon.io

    @property
    def transcripts(self) -> ConversationLog:
        return self.ctx.daemon.conversations

    async def conversation(self, value: Any) -> Conversation | None:
        """The conversation a request names (None when it names none); 404 for one that does not exist."""
        if value is None:
            return None
        cid = conversation_id(value)
        found = await self.transcripts.get(cid)
        if found is None:
            raise no_conversation(cid)
        return found

    def timeout(self) -> float:
        return self.ctx.config.get_duration("plugin.webui.chat_timeout", 300.0)

    def max_upload(self) -> int:
        return self.ctx.config.get_int("plugin.webui.max_upload_mb", 64) * 1024 * 1024

    def ops(self) -> list[Op]:
        text_body = {
            "type": "object",
            "required": ["text"],
            "properties": {
                "text": {"type": "string", "description": "the message"},
                "conversation": CONVERSATION_FIELD,
                "client_msg_id": {"type": "string", "description": "makes the send idempotent for this client"},
                "media": {"type": "array", "items": {"type": "string"}, "maxItems": 10,
                          "description": "digests of uploads kept in the media store (POST /api/v1/chat/file "
                          "with inject=false): they go with the message, images as images"},
            },
        }
        return [
            Op(
                "POST",
                "/api/v1/chat",
                self.send,
                "Send a message and wait for the turn's result",
                "chat",
                body=text_body,
            ),
            Op(
                "POST",
                "/api/v1/chat/stream",
                self.stream,
                "Send a message; the turn's frames stream back as SSE",
                "chat",
                body=text_body,
                stream=True,
            ),
            Op(
                "POST",
                "/api/v1/chat/file",
                self.upload,
                "Upload files (multipart), optionally with a message",
                "chat",
                form={
                    "type": "object",
                    "properties": {
                        "file": {"type": "array", "items": {"type": "string", "format": "binary"}},
                        "message": {"type": "string"},
                        "conversation": {"type": "string", "description": "the conversation id (as text)"},
                        "client_msg_id": {"type": "string"},
                        "inject": {
                            "type": "string",
                            "enum": ["true", "false"],
                            "description": "false: only save the files (default true: run a turn)",
                        },
                    },
                },
            ),
            Op(
                "GET",
                "/api/v1/chat/history",
                self.history,
                "Recent conversation from the text log",
                "chat",
                query=("limit", "channel"),
            ),
            Op(
                "POST",
                "/api/v1/chat/interrupt",
                self.interrupt,
                "Interrupt text: cancels the LLM call in flight; the model sees it before its next call",
                "chat",
                body={"type": "object", "required": ["text"],
                      "properties": {"text": {"type": "string"}, "conversation": CONVERSATION_FIELD}},
            ),
            Op("POST", "/api/v1/chat/cancel", self.cancel, "Stop the running turn", "chat"),
            Op("GET", "/api/v1/uploads/{name}", self.download, "Download an uploaded file", "chat"),
        ]

    # ------------------------------------------------------------ send
    def _message(
        self, text: str, *, sink: Any = None, media: list[MediaBlock] | None = None,
        conversation: Conversation | None = None,
    ) -> tuple[InputMessage, asyncio.Future[TurnResult]]:
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        options = InjectOptions(group_id=scope_of(conversation.id)) if conversation is not None else InjectOptions()
        message = InputMessage(text, SOURCE, CHANNEL, options, sink=sink, reply=future, media=media or [])
        return message, future

    async def _media_field(self, body: dict[str, Any]) -> list[MediaBlock]:
        """``media``: digests of uploads kept in the media store, sent to the model with this message."""
        raw = body.get("media")
        if raw is None or raw == []:
            return []
        if not isinstance(raw, list) or not all(isinstance(d, str) for d in raw) or len(raw) > 10:
            raise ApiError(400, Msg("'media' must be a list of at most 10 digests of uploaded files"))
        if self.ctx.media is None:
            raise ApiError(409, Msg("the media store is off (core.memory.media.enabled); send the upload's note instead"))
        try:
            infos = [await self.ctx.media.ainfo(d) for d in dict.fromkeys(raw)]
        except (MediaError, ValueError) as exc:
            raise ApiError(400, Msg("media: {reason}", reason=message_of(exc))) from None
        return [MediaBlock(mime=i.mime, digest=i.digest, description=i.description) for i in infos]

    async def _wait(self, future: asyncio.Future[TurnResult], input_id: str) -> Response:
        try:
            result = await asyncio.wait_for(asyncio.shield(future), self.timeout())
        except TimeoutError:
            raise ApiError(
                504, Msg("the turn did not finish in time; its reply will appear in the history"), id=input_id
            ) from None
        return ok(result.to_dict())

    async def _queue(self, client: str, message: InputMessage, future: asyncio.Future[TurnResult],
                     conversation: Conversation | None, msg_id: str) -> dict[str, Any]:
        """Hold the client's turn slot, record the message in its conversation, then queue it; the ids of the
        message's and its reply's entries (none outside a conversation)."""
        self.ctx.turns.claim(client, future)
        entries: dict[str, Any] = {}
        if conversation is not None:
            try:
                recorder = await self.transcripts.begin(conversation.id, message)
            except ConversationError:  # deleted since it was looked up: free the slot, nothing runs
                future.set_result(TurnResult(ok=False, error="conversation deleted", input_id=message.id))
                raise no_conversation(conversation.id) from None
            entries = {"conversation": conversation.id, "entry": recorder.entry, "reply_entry": recorder.reply_entry}
        self.dedupe.put(client, msg_id, future)
        self.io.inject(message)
        return entries

    async def send(self, request: Request) -> Response:
        body = await read_object(request)
        text = field_str(body, "text", max_len=MAX_TEXT)
        msg_id = field_str(body, "client_msg_id", required=False, max_len=200)
        media = await self._media_field(body)
        conversation = await self.conversation(body.get("conversation"))
        client = principal_of(request).key
        existing = self.dedupe.get(client, msg_id)
        if existing is not None:
            return await self._wait(existing, "")
        message, future = self._message(text, media=media, conversation=conversation)
        await self._queue(client, message, future, conversation, msg_id)
        return await self._wait(future, message.id)

    async def stream(self, request: Request) -> Response:
        body = await read_object(request)
        text = field_str(body, "text", max_len=MAX_TEXT)
        msg_id = field_str(body, "client_msg_id", required=False, max_len=200)
        media = await self._media_field(body)
        conversation = await self.conversation(body.get("conversation"))
        return await self.stream_turn(request, text, media=media, conversation=conversation, msg_id=msg_id)

    async def stream_turn(
        self, request: Request, text: str, *, media: list[MediaBlock], conversation: Conversation | None,
        msg_id: str = "", accepted: dict[str, Any] | None = None,
    ) -> Response:
        """Start a turn and answer its frames as SSE (``accepted`` first, with ``accepted``'s extra fields)."""
        client = principal_of(request).key
        if self.ctx.streams.full():
            raise ApiError(503, Msg("too many open streams; try again shortly"))
        existing = self.dedupe.get(client, msg_id)
        if existing is not None:
            return StreamingResponse(self._replay(existing), media_type="text/event-stream", headers=SSE_HEADERS)
        queue = FrameQueue()
        message, future = self._message(text, sink=queue.sink, media=media, conversation=conversation)
        entries = await self._queue(client, message, future, conversation, msg_id)
        queue.put({"type": "accepted", "id": message.id, **entries, **(accepted or {})})
        return StreamingResponse(
            frame_stream(queue, self.ctx.streams), media_type="text/event-stream", headers=SSE_HEADERS
        )

    async def _replay(self, future: asyncio.Future[TurnResult]) -> Any:
        result = await asyncio.shield(future)
        frame = {
            "type": "response",
            "text": result.text,
            "ok": result.ok,
            "interrupted": result.interrupted,
            "id": result.input_id,
            "usage": result.usage,
            "source": result.source,
            "duplicate": True,
        }
        yield sse(frame, event="response")

    # ------------------------------------------------------------ control
    async def interrupt(self, request: Request) -> Response:
        body = await read_object(request)
        text = field_str(body, "text", max_len=MAX_TEXT)
        conversation = await self.conversation(body.get("conversation"))
        self.ctx.turns.interrupt(principal_of(request).key)
        # in a conversation the interrupt names its chat: it joins a running turn of that conversation only;
        # otherwise it waits, becomes its own input, and its answer comes back to this conversation
        options = (InjectOptions(deliver_to=CHANNEL, group_id=scope_of(conversation.id))
                   if conversation is not None else None)
        input_id = self.io.inject_interrupt_text(SOURCE, CHANNEL, text, options=options)
        if conversation is not None:
            try:
                await self.transcripts.interrupt(conversation.id, text, input_id)
            except ConversationError:
                raise no_conversation(conversation.id) from None
        return ok({"id": input_id, "busy": bool(self.ctx.daemon.agent.busy)})

    async def cancel(self, request: Request) -> Response:
        return ok({"cancelled": bool(self.ctx.daemon.agent.cancel_turn())})

    async def history(self, request: Request) -> Response:
        limit = query_int(request, "limit", 100, lo=1, hi=1000)
        channel = request.query_params.get("channel", "")
        textlog = self.ctx.daemon.textlog
        await textlog.flush()  # include the turn that just ended
        scan = limit if not channel else min(limit * 10, 10_000)
        records = await asyncio.to_thread(textlog.read_recent, scan)
        if channel:
            records = [r for r in records if r.get("channel") == channel][-limit:]
        keep = ("ts", "role", "content", "channel", "id", "error", "tools", "source", "ms")
        return ok({"messages": [{k: r[k] for k in keep if r.get(k) is not None} for r in records]})

    # ------------------------------------------------------------ files
    async def upload(self, request: Request) -> Response:
        cap = self.max_upload()
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            raise ApiError(415, Msg("send the files as multipart/form-data (field 'file')"))
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > cap + MULTIPART_OVERHEAD:
            raise ApiError(413, Msg("upload too large (limit {mb} MB)", mb=cap // (1024 * 1024)), limit=cap)
        limited = Request(request.scope, _limited(request.receive, cap + MULTIPART_OVERHEAD))
        try:
            form = await limited.form(max_files=10, max_fields=20)
        except _TooLarge:
            raise ApiError(413, Msg("upload too large (limit {mb} MB)", mb=cap // (1024 * 1024)), limit=cap) from None
        except MultiPartException as exc:
            raise ApiError(400, Msg("malformed upload: {reason}", reason=exc.message)) from None
        try:
            uploads = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
            if not uploads:
                raise ApiError(400, Msg("no file in the upload (field 'file')"))
            if sum(u.size or 0 for u in uploads) > cap:
                raise ApiError(413, Msg("upload too large (limit {mb} MB)", mb=cap // (1024 * 1024)), limit=cap)
            message = form.get("message")
            message = message if isinstance(message, str) else ""
            msg_id = form.get("client_msg_id")
            msg_id = msg_id[:200] if isinstance(msg_id, str) else ""
            inject = str(form.get("inject", "true")).lower() not in ("false", "0", "no")
            raw_conversation = form.get("conversation")
            conversation = (await self.conversation(raw_conversation)
                            if inject and isinstance(raw_conversation, str) and raw_conversation else None)
            client = principal_of(request).key
            existing = self.dedupe.get(client, msg_id) if inject else None
            if existing is not None:  # a retry of an upload that already started its turn
                return await self._wait(existing, "")
            saved = [await self._save(u) for u in uploads]
        finally:
            await form.close()
        notes = "\n".join(f["note"] for f in saved)
        if not inject:
            return ok({"files": saved, "note": notes})
        text = f"{message.strip()}\n\n{notes}" if message.strip() else notes
        blocks = [MediaBlock(mime=f["media"]["mime"], digest=f["media"]["digest"], description=f["media"]["description"])
                  for f in saved if f["media"] is not None]
        chat_message, future = self._message(text, media=blocks, conversation=conversation)
        try:
            await self._queue(client, chat_message, future, conversation, msg_id)
        except ApiError as exc:  # the files are kept: say where, so a retry can refer to them
            exc.extra["files"] = saved
            raise
        input_id = chat_message.id
        try:
            result = await asyncio.wait_for(asyncio.shield(future), self.timeout())
        except TimeoutError:
            raise ApiError(504, Msg("the turn did not finish in time"), id=input_id, files=saved) from None
        return ok({"files": saved, "result": result.to_dict()})

    async def _save(self, upload: UploadFile) -> dict[str, Any]:
        directory = self.ctx.chat_uploads()
        await asyncio.to_thread(directory.mkdir, mode=0o700, parents=True, exist_ok=True)
        original = clean_name(upload.filename or "file")
        name = stored_name(original)
        dest = directory / name
        size = await asyncio.to_thread(_copy, upload.file, dest)
        content_type = (upload.content_type or "application/octet-stream").split(";")[0].strip()[:100]
        # what the model reads, in English whatever the UI's language; a file kept in the media store also goes
        # with the message as media (its marker line and, for an image, the image itself: agent/media_input.py)
        note = (f"[file uploaded in the web UI: {original} ({_human(size)}), saved at {dest}; "
                f"files_read path: uploads/{name}]")
        log.info("upload saved: %s (%d bytes)", name, size)
        media = await self._keep_media(dest, content_type, original)
        return {
            "media": media,
            "name": original,
            "saved_as": name,
            "path": str(dest),
            "size": size,
            "content_type": content_type,
            "url": f"/api/v1/uploads/{name}",
            "note": note,
        }

    async def _keep_media(self, path: Path, content_type: str, original: str) -> dict[str, Any] | None:
        """Also keep the upload in the media store, so the model can attach it to memory by its digest.

        Its marker goes into the note the model reads; the type in it is read
        from the bytes, not from what the browser claimed. An upload the store
        refuses (over its size limit, empty) is only a file, as before.
        """
        if self.ctx.media is None:
            return None
        try:
            put = await self.ctx.media.aput_file(path, claimed_mime=content_type, source="webui", description=original)
        except MediaError as exc:
            log.info("upload %s not kept in the media store: %s", path.name, exc)
            return None
        return {**put.info.to_dict(), "marker": marker(put.info)}

    async def download(self, request: Request) -> Response:
        name = str(request.path_params.get("name", ""))
        if not UPLOAD_NAME.match(name):
            raise ApiError(404, Msg("no such upload"))
        path = self.ctx.chat_uploads() / name
        if not await asyncio.to_thread(path.is_file):
            path = self.ctx.uploads_dir / name  # uploaded before chat uploads moved into the files folder
            if not await asyncio.to_thread(path.is_file):
                raise ApiError(404, Msg("no such upload"))
        guessed = mimetypes.guess_type(name)[0] or ""
        media = guessed if guessed in INLINE_TYPES else "application/octet-stream"
        return FileResponse(
            path,
            media_type=media,
            filename=name,
            content_disposition_type="inline" if media in INLINE_TYPES else "attachment",
            headers={
                "Content-Security-Policy": "sandbox; default-src 'none'",
                "Cache-Control": "private, max-age=3600",
            },
        )
