"""The memory browser's media view over HTTP: list, show (with references) and the verified bytes.

Bytes are served only after the store re-checked their digest; a damaged
file is quarantined by that read and answered ``410`` like an evicted one,
with the description that memory kept. Only image types a browser renders
safely are inline (for thumbnails); everything else is an attachment, and
every answer carries a sandboxing CSP, as uploads do.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from homeagent.memory.media import MediaError, MediaGone, UnknownMedia, marker
from homeagent.webui.chat import INLINE_TYPES
from homeagent.webui.common import ApiError, MediaLibrary, Op, WebContext, ok, query_int

STATES = ("present", "evicted", "quarantined", "missing")


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
            raise ApiError(501, "the media store is off (core.memory.media.enabled)", missing="media")
        return self.ctx.media

    async def entries(self, request: Request) -> Response:
        store = self._store()
        state = request.query_params.get("state") or None
        if state is not None and state not in STATES:
            raise ApiError(400, f"unknown state {state!r}; one of {', '.join(STATES)}")
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
            raise ApiError(404, str(exc)) from None
        return ok({**self._item(info), "references": await store.arefs_of(info.digest)})

    async def raw(self, request: Request) -> Response:
        store = self._store()
        ref = str(request.path_params["digest"])
        try:
            info = await store.ainfo(ref)
            data = await store.aget(info.digest)
        except UnknownMedia as exc:
            raise ApiError(404, str(exc)) from None
        except MediaGone as exc:
            raise ApiError(410, str(exc)) from None
        except MediaError as exc:
            raise ApiError(500, str(exc)) from None
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
