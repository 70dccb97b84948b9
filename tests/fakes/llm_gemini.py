"""A fake Gemini (generativelanguage v1beta) server: generateContent and streamGenerateContent?alt=sse."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.fakes.llm_common import BadImage, FakeLLMServer, Recorded, Turn, decode_audio, decode_image

__all__ = ["FakeGemini", "Recorded", "Turn"]


class FakeGemini(FakeLLMServer):
    @property
    def base_url(self) -> str:
        return self.root_url

    async def __aenter__(self) -> FakeGemini:
        await super().__aenter__()
        return self

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1beta/models/{target}", self.handle)]

    def usage(self, turn: Turn) -> dict[str, int]:
        u = turn.usage_numbers()
        doc = {"promptTokenCount": u["prompt"], "candidatesTokenCount": u["completion"] - u["reasoning"],
               "totalTokenCount": u["prompt"] + u["completion"], "cachedContentTokenCount": u["cached"]}
        if u["reasoning"]:
            doc["thoughtsTokenCount"] = u["reasoning"]
        return doc

    @staticmethod
    def call_part(name: str, args: Any) -> dict[str, Any]:
        return {"functionCall": {"name": name, "args": json.loads(args) if isinstance(args, str) else args}}

    def finish(self, turn: Turn) -> str:
        return turn.finish_reason or "STOP"

    def full(self, turn: Turn) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if turn.reasoning:
            parts.append({"text": turn.reasoning, "thought": True})
        if turn.content:
            parts.append({"text": turn.content})
        parts += [self.call_part(n, a) for n, a in turn.calls]
        return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": self.finish(turn),
                                "index": 0}],
                "usageMetadata": self.usage(turn), "modelVersion": "gemini-fake"}

    def events(self, turn: Turn) -> list[bytes]:
        def ev(parts: list[dict[str, Any]], last: bool = False) -> bytes:
            cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            doc: dict[str, Any] = {"candidates": [cand], "modelVersion": "gemini-fake"}
            if last:
                cand["finishReason"] = self.finish(turn)
                doc["usageMetadata"] = self.usage(turn)
            return self.sse(doc)

        out: list[bytes] = []
        if turn.bad_json:
            out.append(b"data: {oops\n\n")
        out += [ev([{"text": p, "thought": True}]) for p in turn.pieces(turn.reasoning)]
        out += [ev([{"text": p}]) for p in turn.pieces(turn.content)]
        out += [ev([self.call_part(n, a)]) for n, a in turn.calls]
        out.append(ev([{"text": ""}], last=True))
        return out

    def error_response(self, turn: Turn) -> web.Response:
        statuses = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                    429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
        body = turn.body if turn.body is not None else {
            "error": {"code": turn.status, "message": turn.message, "status": statuses.get(turn.status, "UNKNOWN")}}
        text = body if isinstance(body, str) else json.dumps(body)
        return web.Response(status=turn.status, text=text, content_type="application/json", headers=turn.headers)

    @staticmethod
    def images(body: Any) -> list[tuple[str, bytes]]:
        """The inline images of a request body (``inlineData`` or ``inline_data`` parts), checked as the API does."""
        out: list[tuple[str, bytes]] = []
        for content in (body or {}).get("contents") or []:
            for part in content.get("parts") or []:
                inline = part.get("inlineData", part.get("inline_data"))
                if inline is None:
                    continue
                if len(part) != 1 or not isinstance(inline, dict):
                    raise BadImage("an inline data part holds only inlineData")
                mime = str(inline.get("mimeType", inline.get("mime_type")))
                if mime.startswith("audio/"):
                    decode_audio({"audio/wav": "wav", "audio/mp3": "mp3"}.get(mime), inline.get("data"))
                    continue
                out.append(decode_image(mime, inline.get("data")))
        return out

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rec = await self.record(request)
        turn = self.next_turn()
        if turn is None:
            return self.no_turn()
        try:
            self.images(rec.body if isinstance(rec.body, dict) else {})
        except BadImage as exc:
            return web.json_response({"error": {"code": 400, "message": str(exc), "status": "INVALID_ARGUMENT"}},
                                     status=400)
        target = request.match_info["target"]
        if turn.status >= 400:
            return self.error_response(turn)
        if target.endswith(":generateContent"):
            if turn.bad_json:
                return web.Response(status=200, text="{not json", content_type="application/json")
            return web.json_response(self.full(turn))
        if not target.endswith(":streamGenerateContent"):
            return web.json_response({"error": {"code": 404, "message": "unknown method"}}, status=404)
        events = self.events(turn)
        resp = await self.start_stream(request, turn, "text/event-stream")
        return await self.send_events(request, resp, turn, events[:-1], events[-1:])
