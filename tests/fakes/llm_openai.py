"""A fake OpenAI chat-completions server (real wire format, scripted per test).

    async with FakeOpenAI() as fake:
        fake.script(Turn.text("hi", chunks=3), Turn.tool_calls([("get_time", {"tz": "UTC"})]))
        provider = LuaAdaptedProvider("t", fake.base_url, "sk-test", "gpt-test", ...)
        ...
        fake.requests[0].body, fake.requests[0].headers["authorization"], fake.disconnected

``flavor="deepseek"`` reports cached tokens as DeepSeek does
(``prompt_cache_hit_tokens``) instead of ``prompt_tokens_details.cached_tokens``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from tests.fakes.llm_common import BadImage, FakeLLMServer, Recorded, Turn, data_url_image, decode_audio

__all__ = ["FakeOpenAI", "Recorded", "Turn"]


class FakeOpenAI(FakeLLMServer):
    def __init__(self, *, prefix: str = "/v1", flavor: str = "openai", model: str = "gpt-fake") -> None:
        super().__init__()
        self.prefix = prefix.rstrip("/")
        self.flavor = flavor
        self.model = model
        self._counter = 0

    @property
    def base_url(self) -> str:
        """What a source's base_url should be (the adapter appends ``/chat/completions``)."""
        return self.root_url + self.prefix

    async def __aenter__(self) -> FakeOpenAI:
        await super().__aenter__()
        return self

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post(self.prefix + "/chat/completions", self.handle),
            web.post(self.prefix + "/v1/chat/completions", self.handle),
            web.post(self.prefix + "/openai/v1/chat/completions", self.handle),
        ]

    # ------------------------------------------------------------------ render
    def usage_doc(self, turn: Turn) -> dict[str, Any]:
        u = turn.usage_numbers()
        doc: dict[str, Any] = {
            "prompt_tokens": u["prompt"],
            "completion_tokens": u["completion"],
            "total_tokens": u["prompt"] + u["completion"],
        }
        if self.flavor == "deepseek":
            doc["prompt_cache_hit_tokens"] = u["cached"]
            doc["prompt_cache_miss_tokens"] = u["prompt"] - u["cached"]
            if u["reasoning"]:
                doc["completion_tokens_details"] = {"reasoning_tokens": u["reasoning"]}
        else:
            doc["prompt_tokens_details"] = {"cached_tokens": u["cached"]}
            doc["completion_tokens_details"] = {"reasoning_tokens": u["reasoning"]}
        return doc

    def _id(self) -> str:
        self._counter += 1
        return f"chatcmpl-fake{self._counter}"

    @staticmethod
    def call_id(index: int) -> str:
        return f"call_fake_{index}"

    def finish(self, turn: Turn) -> str:
        return turn.finish_reason or ("tool_calls" if turn.calls else "stop")

    def full_response(self, turn: Turn, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.content or None}
        if turn.reasoning:
            message["reasoning_content"] = turn.reasoning
        if turn.calls:
            message["tool_calls"] = [
                {
                    "id": self.call_id(i),
                    "type": "function",
                    "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
                }
                for i, (name, args) in enumerate(turn.calls)
            ]
        return {
            "id": self._id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish(turn), "logprobs": None}],
            "usage": self.usage_doc(turn),
        }

    def stream_events(self, turn: Turn, model: str, include_usage: bool) -> tuple[list[bytes], list[bytes]]:
        cid = self._id()
        created = int(time.time())

        def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return self.sse(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
            )

        events = [event({"role": "assistant", "content": ""})]
        if turn.bad_json:
            events.append(b"data: {this is not json\n\n")
        for piece in turn.pieces(turn.reasoning):
            events.append(event({"reasoning_content": piece}))
        for piece in turn.pieces(turn.content):
            events.append(event({"content": piece}))
        for i, (name, args) in enumerate(turn.calls):
            events.append(
                event(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": self.call_id(i),
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            for frag in turn.arg_pieces(args):
                events.append(event({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}))
        events.append(event({}, self.finish(turn)))
        tail: list[bytes] = []
        if include_usage:
            tail.append(
                self.sse(
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": self.usage_doc(turn),
                    }
                )
            )
        tail.append(b"data: [DONE]\n\n")
        return events, tail

    # ------------------------------------------------------------------ handle
    def error_response(self, turn: Turn) -> web.Response:
        if turn.body is not None:
            text = turn.body if isinstance(turn.body, str) else json.dumps(turn.body)
        else:
            kind = {401: "invalid_request_error", 429: "rate_limit_error"}.get(turn.status, "server_error")
            text = json.dumps({"error": {"message": turn.message, "type": kind, "code": None}})
        return web.Response(status=turn.status, text=text, content_type="application/json", headers=turn.headers)

    @staticmethod
    def images(body: Any) -> list[tuple[str, bytes]]:
        """The images of a request body (``image_url`` parts of any message), checked as the API does."""
        out: list[tuple[str, bytes]] = []
        for message in (body or {}).get("messages") or []:
            content = message.get("content")
            for part in content if isinstance(content, list) else []:
                if part.get("type") == "image_url":
                    if set(part) != {"type", "image_url"} or not isinstance(part["image_url"], dict):
                        raise BadImage(f"malformed image_url part: {sorted(part)}")
                    out.append(data_url_image(part["image_url"].get("url")))
                elif part.get("type") == "input_audio":
                    continue  # checked by audios()
                elif part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise BadImage(f"unknown content part: {part.get('type')!r}")
        return out

    @staticmethod
    def audios(body: Any) -> list[tuple[str, bytes]]:
        """The ``input_audio`` parts of a request body, checked as the API does (format wav or mp3, base64)."""
        out: list[tuple[str, bytes]] = []
        for message in (body or {}).get("messages") or []:
            content = message.get("content")
            for part in content if isinstance(content, list) else []:
                if part.get("type") == "input_audio":
                    audio = part.get("input_audio")
                    if set(part) != {"type", "input_audio"} or not isinstance(audio, dict) \
                            or set(audio) != {"data", "format"}:
                        raise BadImage("input_audio needs {data, format}")
                    out.append(decode_audio(audio["format"], audio["data"]))
        return out

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rec = await self.record(request)
        turn = self.next_turn()
        if turn is None:
            return self.no_turn()
        body = rec.body if isinstance(rec.body, dict) else {}
        try:
            self.images(body)
            self.audios(body)
        except BadImage as exc:
            return web.json_response({"error": {"message": str(exc), "type": "invalid_request_error"}}, status=400)
        model = str(body.get("model") or self.model)
        if turn.status >= 400:
            if turn.first_delay:
                await self.watch_disconnect(request, turn.first_delay)
            return self.error_response(turn)
        if not body.get("stream"):
            if turn.delay or turn.first_delay:
                await self.watch_disconnect(request, turn.delay + turn.first_delay)
            if turn.bad_json:
                return web.Response(status=200, text="{this is not json", content_type="application/json")
            return web.json_response(self.full_response(turn, model), headers=turn.headers)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events, tail = self.stream_events(turn, model, include_usage)
        resp = await self.start_stream(request, turn, "text/event-stream")
        return await self.send_events(request, resp, turn, events, tail)
