"""The memory browser's media view over HTTP (list, show with references, the verified bytes), and the files the
agent sends to the web UI's output channel, kept in the media store and served at ``/files/{digest}``.

Bytes are served only after the store re-checked their digest; a damaged
file is quarantined by that read and answered ``410`` like an evicted one,
with the description that memory kept. Only image types a browser renders
safely are inline (for thumbnails); everything else is an attachment, and
every answer carries a sandboxing CSP, as uploads do.
"""

from __future__ import annotations

import asyncio
import mimetypes
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from homeagent.memory.media import MediaError, MediaGone, MediaInfo, UnknownMedia, marker
from homeagent.msg import Msg, message_of
from homeagent.sdk.types import MediaBlock
from homeagent.webui.chat import INLINE_TYPES
from homeagent.webui.common import ApiError, MediaLibrary, Op, WebContext, ok, query_int

STATES = ("present", "evicted", "quarantined", "missing")
FILES_PREFIX = "/files/"
_DIGEST = re.compile(r"(?:sha256:)?[0-9a-fA-F]{8,64}")
_UNSAFE_NAME = re.compile(r'[\x00-\x1f\x7f"\\/]')


class MediaRoutes:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    def ops(self) -> list[Op]:
        return [
            Op("GET", "/api/v1/memory/media", self.entries, "Media store entries, newest first, with stats", "memory",
               query=("state", "limit", "offset")),
            Op("GET", "/api/v1/memory/media/{digest}", self.show, "One media entry with its references", "memory"),
            Op("GET", "/api/v1/memory/media/{digest}/raw", self.raw, "The entry's bytes, digest-checked", "memory"),
        ]

    def _store(self) -> MediaLibrary:
        if self.ctx.media is None:
            raise ApiError(501, Msg("the media store is off (core.memory.media.enabled)"), missing="media")
        return self.ctx.media

    async def entries(self, request: Request) -> Response:
        store = self._store()
        state = request.query_params.get("state") or None
        if state is not None and state not in STATES:
            raise ApiError(400, Msg("unknown state {state!r}; one of {states}", state=state, states=", ".join(STATES)))
        items = await store.alist(
            limit=query_int(request, "limit", 50, lo=1, hi=500),
            offset=query_int(request, "offset", 0, lo=0, hi=10**9),
            state=state,
        )
        return ok({"stats": await store.astats(), "items": [self._item(i) for i in items]})

    @staticmethod
    def _item(info: Any) -> dict[str, Any]:
        return {**info.to_dict(), "marker": marker(info), "url": f"/api/v1/memory/media/{info.digest}/raw"}

    async def show(self, request: Request) -> Response:
        store = self._store()
        try:
            info = await store.ainfo(str(request.path_params["digest"]))
        except UnknownMedia as exc:
            raise ApiError(404, message_of(exc)) from None
        return ok({**self._item(info), "references": await store.arefs_of(info.digest)})

    async def raw(self, request: Request) -> Response:
        store = self._store()
        ref = str(request.path_params["digest"])
        try:
            info = await store.ainfo(ref)
            data = await store.aget(info.digest)
        except UnknownMedia as exc:
            raise ApiError(404, message_of(exc)) from None
        except MediaGone as exc:
            raise ApiError(410, message_of(exc)) from None
        except MediaError as exc:
            raise ApiError(500, message_of(exc)) from None
        inline = info.mime in INLINE_TYPES
        return Response(
            data,
            media_type=info.mime if inline else "application/octet-stream",
            headers={
                "Content-Disposition": f'{"inline" if inline else "attachment"}; filename="{info.short}"',
                "Content-Security-Policy": "sandbox; default-src 'none'",
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "private, max-age=86400, immutable",
            },
        )


class OutgoingFiles:
    """Files and images the agent sends to the ``webui`` output channel: kept in the media store, served back.

    A browser cannot open a path on the daemon's disk, and a path in a chat
    bubble would go stale when the file moves; the bytes go into the media
    store instead (type sniffed, size capped, digest-checked on every read) and
    the chat gets ``/files/<digest>``, behind the same sign-in as the API.
    """

    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    def ops(self) -> list[Op]:
        return [Op("GET", FILES_PREFIX + "{digest}", self.serve,
                   "A file the agent sent to the web UI, from the media store (410 with its description once evicted)",
                   "chat")]

    async def keep(self, payload: str, meta: dict[str, Any]) -> dict[str, Any]:
        """The payload (a stored digest, a data URL or an absolute file path) in the store; what the chat shows.

        ``MediaError``/``ValueError`` say what is wrong; nothing is stored then.
        """
        if self.ctx.media is None:
            raise MediaError("the media store is off (core.memory.media.enabled): files cannot be sent to the web UI")
        store = self.ctx.media
        text = payload.strip()
        given = str(meta.get("name") or meta.get("description") or "").strip()
        if not text:
            raise ValueError("the payload is empty: give a media digest, a data URL or an absolute file path")
        if text.startswith("data:"):
            block = MediaBlock.from_data_url(text)
            info = (await store.aput_bytes(block.data, claimed_mime=block.mime, source="webui:sent",
                                           description=given)).info
        elif _DIGEST.fullmatch(text):
            info = await store.ainfo(text)
            if not info.present:
                raise MediaGone(f"media {info.short} cannot be sent: its bytes were {info.state}")
        else:
            path = Path(text)
            if not path.is_absolute():
                raise ValueError(f"{text!r} is not an absolute file path, a media digest or a data URL")
            path = await asyncio.to_thread(self._inside_roots, path)
            info = (await store.aput_file(path, source="webui:sent", description=given or path.name)).info
        name = file_name(info, given or (Path(text).name if text.startswith("/") else ""))
        url = f"{FILES_PREFIX}{info.digest}?name={quote(name, safe='')}"  # the download keeps the name it was sent as
        return {"digest": info.digest, "url": url, "mime": info.mime, "size": info.size,
                "name": name, "description": info.description, "marker": marker(info)}

    def roots(self) -> list[Path]:
        """The folders the agent's file tools reach: the files folder (with the chat's uploads) and the
        workspace. A path elsewhere (``/etc/shadow``, the data dir) is not sent: the model gets no way around
        the confinement its file tools have."""
        return [self.ctx.files_root(), self.ctx.workspace()]

    def _inside_roots(self, path: Path) -> Path:
        """``path`` with its links resolved, if it lies in one of :meth:`roots`; blocking (file system)."""
        real = path.resolve()
        for root in self.roots():
            if real.is_relative_to(root.resolve()):
                return real
        shown = ", ".join(str(r) for r in self.roots())
        raise ValueError(f"{path} is outside the folders the agent may send files from ({shown}); "
                         "put it in one of them first (files_write, cmd_run in the workspace)")

    async def serve(self, request: Request) -> Response:
        if self.ctx.media is None:
            raise ApiError(501, Msg("the media store is off (core.memory.media.enabled)"), missing="media")
        store = self.ctx.media
        ref = str(request.path_params["digest"])
        if not _DIGEST.fullmatch(ref):
            raise ApiError(404, Msg("{ref!r} is not a media digest", ref=ref))
        try:
            info = await store.ainfo(ref)
            data = await store.aget(info.digest)
        except UnknownMedia as exc:
            raise ApiError(404, message_of(exc)) from None
        except MediaError as exc:  # evicted, quarantined (this read may have found it damaged) or missing
            try:
                info = await store.ainfo(ref)
            except MediaError:
                raise ApiError(410, message_of(exc)) from None
            raise ApiError(410, Msg("the file's bytes are gone ({state}); what memory kept of it is its "
                               "description", state=info.state), state=info.state, description=info.description, mime=info.mime,
                           marker=marker(info)) from None
        inline = info.mime in INLINE_TYPES
        name = file_name(info, request.query_params.get("name", ""))
        return Response(
            data,
            media_type=info.mime,
            headers={
                "Content-Disposition": content_disposition("inline" if inline else "attachment", name),
                "Content-Security-Policy": "sandbox; default-src 'none'",
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "private, max-age=86400, immutable",
            },
        )


def file_name(info: MediaInfo, given: str = "") -> str:
    """A download name: the one given (or a description that looks like one), else the short digest with the
    type's usual extension; never a path or a character that could break the header."""
    name = _UNSAFE_NAME.sub("_", Path(given.strip()).name)[:200].strip(". ")
    if name:
        return name
    described = _UNSAFE_NAME.sub("_", info.description.strip())[:200]
    if "." in described.strip(".") and " " not in described:
        return described
    return info.short + (mimetypes.guess_extension(info.mime) or "")


def content_disposition(kind: str, name: str) -> str:
    """``kind; filename="<ascii>"; filename*=UTF-8''<name>`` (RFC 6266): every browser gets a usable name."""
    ascii_name = name.encode("ascii", "replace").decode("ascii").replace("?", "_")
    return f"{kind}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"
