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

from homeagent.io.manager import InputMessage, TurnResult
from homeagent.memory.media import MediaError, marker
from homeagent.sdk.types import InjectOptions, MediaBlock
from homeagent.webui.common import ApiError, Op, WebContext, field_str, ok, principal_of, query_int, read_object
from homeagent.webui.host import InputQueue
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


class ChatAPI:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx
        self.dedupe = ChatDedupe()

    @property
    def io(self) -> InputQueue:
        return self.ctx.daemon.io

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
                body={"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
            ),
            Op("POST", "/api/v1/chat/cancel", self.cancel, "Stop the running turn", "chat"),
            Op("GET", "/api/v1/uploads/{name}", self.download, "Download an uploaded file", "chat"),
        ]

    # ------------------------------------------------------------ send
    def _message(
        self, text: str, *, sink: Any = None, media: list[MediaBlock] | None = None
    ) -> tuple[InputMessage, asyncio.Future[TurnResult]]:
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        message = InputMessage(text, SOURCE, CHANNEL, InjectOptions(), sink=sink, reply=future, media=media or [])
        return message, future

    async def _media_field(self, body: dict[str, Any]) -> list[MediaBlock]:
        """``media``: digests of uploads kept in the media store, sent to the model with this message."""
        raw = body.get("media")
        if raw is None or raw == []:
            return []
        if not isinstance(raw, list) or not all(isinstance(d, str) for d in raw) or len(raw) > 10:
            raise ApiError(400, "'media' must be a list of at most 10 digests of uploaded files")
        if self.ctx.media is None:
            raise ApiError(409, "the media store is off (core.memory.media.enabled); send the upload's note instead")
        try:
            infos = [await self.ctx.media.ainfo(d) for d in dict.fromkeys(raw)]
        except (MediaError, ValueError) as exc:
            raise ApiError(400, f"media: {exc}") from None
        return [MediaBlock(mime=i.mime, digest=i.digest, description=i.description) for i in infos]

    async def _wait(self, future: asyncio.Future[TurnResult], input_id: str) -> Response:
        try:
            result = await asyncio.wait_for(asyncio.shield(future), self.timeout())
        except TimeoutError:
            raise ApiError(
                504, "the turn did not finish in time; its reply will appear in the history", id=input_id
            ) from None
        return ok(result.to_dict())

    async def send(self, request: Request) -> Response:
        body = await read_object(request)
        text = field_str(body, "text", max_len=MAX_TEXT)
        msg_id = field_str(body, "client_msg_id", required=False, max_len=200)
        media = await self._media_field(body)
        client = principal_of(request).key
        existing = self.dedupe.get(client, msg_id)
        if existing is not None:
            return await self._wait(existing, "")
        message, future = self._message(text, media=media)
        self.ctx.turns.claim(client, future)
        self.dedupe.put(client, msg_id, future)
        self.io.inject(message)
        return await self._wait(future, message.id)

    async def stream(self, request: Request) -> Response:
        body = await read_object(request)
        text = field_str(body, "text", max_len=MAX_TEXT)
        msg_id = field_str(body, "client_msg_id", required=False, max_len=200)
        media = await self._media_field(body)
        client = principal_of(request).key
        if self.ctx.streams.full():
            raise ApiError(503, "too many open streams; try again shortly")
        existing = self.dedupe.get(client, msg_id)
        if existing is not None:
            return StreamingResponse(self._replay(existing), media_type="text/event-stream", headers=SSE_HEADERS)
        queue = FrameQueue()
        message, future = self._message(text, sink=queue.sink, media=media)
        self.ctx.turns.claim(client, future)
        queue.put({"type": "accepted", "id": message.id})
        self.dedupe.put(client, msg_id, future)
        self.io.inject(message)
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
        self.ctx.turns.interrupt(principal_of(request).key)
        input_id = self.io.inject_interrupt_text(SOURCE, CHANNEL, text)
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
            raise ApiError(415, "send the files as multipart/form-data (field 'file')")
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > cap + MULTIPART_OVERHEAD:
            raise ApiError(413, f"upload too large (limit {cap // (1024 * 1024)} MB)", limit=cap)
        limited = Request(request.scope, _limited(request.receive, cap + MULTIPART_OVERHEAD))
        try:
            form = await limited.form(max_files=10, max_fields=20)
        except _TooLarge:
            raise ApiError(413, f"upload too large (limit {cap // (1024 * 1024)} MB)", limit=cap) from None
        except MultiPartException as exc:
            raise ApiError(400, f"malformed upload: {exc.message}") from None
        try:
            uploads = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
            if not uploads:
                raise ApiError(400, "no file in the upload (field 'file')")
            if sum(u.size or 0 for u in uploads) > cap:
                raise ApiError(413, f"upload too large (limit {cap // (1024 * 1024)} MB)", limit=cap)
            message = form.get("message")
            message = message if isinstance(message, str) else ""
            msg_id = form.get("client_msg_id")
            msg_id = msg_id[:200] if isinstance(msg_id, str) else ""
            inject = str(form.get("inject", "true")).lower() not in ("false", "0", "no")
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
        chat_message, future = self._message(text, media=blocks)
        try:
            self.ctx.turns.claim(client, future)
        except ApiError as exc:  # the files are kept: say where, so a retry can refer to them
            exc.extra["files"] = saved
            raise
        input_id = chat_message.id
        self.dedupe.put(client, msg_id, future)
        self.io.inject(chat_message)
        try:
            result = await asyncio.wait_for(asyncio.shield(future), self.timeout())
        except TimeoutError:
            raise ApiError(504, "the turn did not finish in time", id=input_id, files=saved) from None
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
            raise ApiError(404, "no such upload")
        path = self.ctx.chat_uploads() / name
        if not await asyncio.to_thread(path.is_file):
            path = self.ctx.uploads_dir / name  # uploaded before chat uploads moved into the files folder
            if not await asyncio.to_thread(path.is_file):
                raise ApiError(404, "no such upload")
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
