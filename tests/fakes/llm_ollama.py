"""A fake Ollama server: /api/chat with NDJSON streaming, and /api/tags."""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import web

from tests.fakes.llm_common import IMAGE_MAGIC, BadImage, FakeLLMServer, Recorded, Turn

__all__ = ["FakeOllama", "Recorded", "Turn"]


class FakeOllama(FakeLLMServer):
    def __init__(self, models: list[str] | None = None) -> None:
        super().__init__()
        self.models = models if models is not None else ["llama-fake:latest"]

    @property
    def base_url(self) -> str:
        return self.root_url

    async def __aenter__(self) -> FakeOllama:
        await super().__aenter__()
        return self

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/api/chat", self.handle), web.get("/api/tags", self.tags)]

    async def tags(self, request: web.Request) -> web.Response:
        return web.json_response({"models": [{"name": m, "model": m} for m in self.models]})

    @staticmethod
    def calls(turn: Turn) -> list[dict[str, Any]]:
        return [{"function": {"name": n, "arguments": json.loads(a) if isinstance(a, str) else a}}
                for n, a in turn.calls]

    def final(self, turn: Turn, model: str) -> dict[str, Any]:
        u = turn.usage_numbers()
        return {"model": model, "created_at": "2025-01-01T00:00:00Z", "done": True,
                "done_reason": turn.finish_reason or "stop", "prompt_eval_count": u["prompt"],
                "eval_count": u["completion"], "total_duration": 1000}

    def line(self, doc: dict[str, Any]) -> bytes:
        return (json.dumps(doc, ensure_ascii=False) + "\n").encode()

    @staticmethod
    def images(body: Any) -> list[tuple[str, bytes]]:
        """The ``images`` of the request's messages (bare base64, no data URL), checked as Ollama does."""
        out: list[tuple[str, bytes]] = []
        for message in (body or {}).get("messages") or []:
            for data in message.get("images") or []:
                if not isinstance(data, str) or data.startswith("data:"):
                    raise BadImage("images are base64 strings without a data: prefix")
                raw = base64.b64decode(data, validate=True)
                mime = next((m for m, magic in IMAGE_MAGIC.items() if raw.startswith(magic)), "")
                if not mime:
                    raise BadImage("an image is not a known image format")
                out.append((mime, raw))
        return out

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rec = await self.record(request)
        turn = self.next_turn()
        if turn is None:
            return web.json_response({"error": "fake: no scripted turn"}, status=500)
        body = rec.body if isinstance(rec.body, dict) else {}
        try:
            self.images(body)
        except (BadImage, ValueError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        model = str(body.get("model") or "llama-fake")
        if turn.status >= 400:
            text = turn.body if isinstance(turn.body, str) else json.dumps(turn.body or {"error": turn.message})
            return web.Response(status=turn.status, text=text, content_type="application/json", headers=turn.headers)
        stream = body.get("stream", True)
        if not stream:
            if turn.bad_json:
                return web.Response(status=200, text="{not json", content_type="application/json")
            message: dict[str, Any] = {"role": "assistant", "content": turn.content}
            if turn.reasoning:
                message["thinking"] = turn.reasoning
            if turn.calls:
                message["tool_calls"] = self.calls(turn)
            return web.json_response({**self.final(turn, model), "message": message})

        def msg(**fields: Any) -> bytes:
            return self.line({"model": model, "created_at": "2025-01-01T00:00:00Z",
                              "message": {"role": "assistant", "content": "", **fields}, "done": False})

        events: list[bytes] = []
        if turn.bad_json:
            events.append(b"{broken json\n")
        events += [msg(thinking=p) for p in turn.pieces(turn.reasoning)]
        events += [msg(content=p) for p in turn.pieces(turn.content)]
        events += [msg(tool_calls=[c]) for c in self.calls(turn)]
        tail = [self.line({**self.final(turn, model), "message": {"role": "assistant", "content": ""}})]
        resp = await self.start_stream(request, turn, "application/x-ndjson")
        return await self.send_events(request, resp, turn, events, tail)
