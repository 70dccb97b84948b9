"""A fake Anthropic Messages API server (real wire format incl. SSE event types), scripted with Turn."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.fakes.llm_common import BadImage, FakeLLMServer, Recorded, Turn, decode_image

__all__ = ["FakeAnthropic", "Recorded", "Turn"]


class FakeAnthropic(FakeLLMServer):
    def __init__(self) -> None:
        super().__init__()
        self._counter = 0

    @property
    def base_url(self) -> str:
        return self.root_url

    async def __aenter__(self) -> FakeAnthropic:
        await super().__aenter__()
        return self

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/messages", self.handle)]

    @staticmethod
    def tool_id(index: int) -> str:
        return f"toolu_fake_{index}"

    def usage(self, turn: Turn) -> dict[str, int]:
        u = turn.usage_numbers()
        return {"input_tokens": u["prompt"] - u["cached"], "output_tokens": u["completion"],
                "cache_read_input_tokens": u["cached"], "cache_creation_input_tokens": 0}

    def stop_reason(self, turn: Turn) -> str:
        return turn.finish_reason or ("tool_use" if turn.calls else "end_turn")

    def full(self, turn: Turn, model: str) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if turn.reasoning:
            content.append({"type": "thinking", "thinking": turn.reasoning, "signature": "sig-fake"})
        if turn.content:
            content.append({"type": "text", "text": turn.content})
        for i, (name, args) in enumerate(turn.calls):
            content.append({"type": "tool_use", "id": self.tool_id(i), "name": name,
                            "input": json.loads(args) if isinstance(args, str) else args})
        self._counter += 1
        return {"id": f"msg_fake{self._counter}", "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": self.stop_reason(turn), "stop_sequence": None,
                "usage": self.usage(turn)}

    @staticmethod
    def event(kind: str, doc: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **doc})}\n\n".encode()

    def events(self, turn: Turn, model: str) -> list[bytes]:
        usage = self.usage(turn)
        start_usage = {**usage, "output_tokens": 1}
        out = [self.event("message_start", {"message": {"id": "msg_fake", "type": "message", "role": "assistant",
                                                        "model": model, "content": [], "stop_reason": None,
                                                        "usage": start_usage}}),
               self.event("ping", {})]
        if turn.bad_json:
            out.append(b"event: content_block_delta\ndata: {broken\n\n")
        index = 0
        if turn.reasoning:
            out.append(self.event("content_block_start", {"index": index,
                                                          "content_block": {"type": "thinking", "thinking": ""}}))
            for piece in turn.pieces(turn.reasoning):
                out.append(self.event("content_block_delta", {"index": index,
                                                              "delta": {"type": "thinking_delta", "thinking": piece}}))
            out.append(self.event("content_block_delta", {"index": index,
                                                          "delta": {"type": "signature_delta", "signature": "sig"}}))
            out.append(self.event("content_block_stop", {"index": index}))
            index += 1
        if turn.content:
            out.append(self.event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}))
            for piece in turn.pieces(turn.content):
                out.append(self.event("content_block_delta", {"index": index,
                                                              "delta": {"type": "text_delta", "text": piece}}))
            out.append(self.event("content_block_stop", {"index": index}))
            index += 1
        for i, (name, args) in enumerate(turn.calls):
            out.append(self.event("content_block_start", {"index": index, "content_block": {
                "type": "tool_use", "id": self.tool_id(i), "name": name, "input": {}}}))
            for frag in turn.arg_pieces(args):
                out.append(self.event("content_block_delta", {"index": index, "delta": {
                    "type": "input_json_delta", "partial_json": frag}}))
            out.append(self.event("content_block_stop", {"index": index}))
            index += 1
        out.append(self.event("message_delta", {"delta": {"stop_reason": self.stop_reason(turn), "stop_sequence": None},
                                                "usage": {"output_tokens": usage["output_tokens"]}}))
        out.append(self.event("message_stop", {}))
        return out

    def error_response(self, turn: Turn) -> web.Response:
        kinds = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error",
                 529: "overloaded_error", 400: "invalid_request_error"}
        body = turn.body if turn.body is not None else {
            "type": "error", "error": {"type": kinds.get(turn.status, "api_error"), "message": turn.message}}
        text = body if isinstance(body, str) else json.dumps(body)
        return web.Response(status=turn.status, text=text, content_type="application/json", headers=turn.headers)

    @staticmethod
    def images(body: Any) -> list[tuple[str, bytes]]:
        """The ``image`` blocks of a request body, checked as the Messages API does (base64 source only here)."""
        out: list[tuple[str, bytes]] = []
        for message in (body or {}).get("messages") or []:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") != "image":
                    continue
                source = block.get("source")
                if set(block) != {"type", "source"} or not isinstance(source, dict) or source.get("type") != "base64":
                    raise BadImage("image block needs source {type: base64, media_type, data}")
                if set(source) != {"type", "media_type", "data"}:
                    raise BadImage(f"image source has fields {sorted(source)}")
                out.append(decode_image(source["media_type"], source["data"]))
        return out

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rec = await self.record(request)
        turn = self.next_turn()
        if turn is None:
            return self.no_turn()
        body = rec.body if isinstance(rec.body, dict) else {}
        try:
            self.images(body)
        except BadImage as exc:
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error",
                                                                 "message": str(exc)}}, status=400)
        model = str(body.get("model") or "claude-fake")
        if turn.status >= 400:
            return self.error_response(turn)
        if not body.get("stream"):
            if turn.bad_json:
                return web.Response(status=200, text="{not json", content_type="application/json")
            return web.json_response(self.full(turn, model))
        events = self.events(turn, model)
        resp = await self.start_stream(request, turn, "text/event-stream")
        return await self.send_events(request, resp, turn, events[:-2], events[-2:])
