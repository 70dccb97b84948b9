"""``POST /v1/chat/completions``: OpenAI clients talking to HomeAgent.

HomeAgent keeps its own memory, so only the last user message of the request
becomes an input (channel ``http``, kept out of memory like the original's
HTTP channel); the rest of ``messages`` is ignored. The reply comes back as a
``chat.completion`` or, with ``stream: true``, as ``chat.completion.chunk``
SSE ending in ``data: [DONE]``. Reasoning is sent as ``reasoning_content``
(the field DeepSeek-style clients read); tool calls stay internal to the
agent.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from homeagent.io.manager import InputMessage, TurnResult
from homeagent.memory.media.inputs import check_blocks
from homeagent.sdk.types import InjectOptions, MediaBlock
from homeagent.webui.common import ApiError, Op, WebContext, ok, principal_of, read_object
from homeagent.webui.sse import SSE_HEADERS, FrameQueue

MODEL = "homeagent"
CHANNEL = "http"
SOURCE = "openai"


def last_user_text(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", type="invalid_request_error", param="messages")
    for message in reversed(messages):
        if not isinstance(message, dict):
            raise ApiError(400, "each message must be an object", type="invalid_request_error", param="messages")
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            parts = [str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"]
            return "\n".join(parts)
        raise ApiError(400, "the user message has no text content", type="invalid_request_error", param="messages")
    raise ApiError(400, "'messages' has no user message", type="invalid_request_error", param="messages")


def last_user_media(messages: list[Any], max_bytes: int) -> list[MediaBlock]:
    """The images of the last user message (``image_url`` parts with data URLs): they go with the turn.

    Only data URLs: the daemon fetches nothing a request names (an ``http``
    image would make it a proxy into the owner's network), so one is refused
    with a clear 400, as is a malformed one; nothing is queued then.
    """
    message = next(m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user")
    content = message.get("content")
    if not isinstance(content, list):
        return []
    blocks: list[MediaBlock] = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "image_url":
            continue
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str) or not url.startswith("data:"):
            raise ApiError(400, "image_url must be a data: URL here (HomeAgent does not fetch images by URL)",
                           type="invalid_request_error", param="messages")
        try:
            blocks.append(MediaBlock.from_data_url(url))
        except ValueError as exc:
            raise ApiError(400, f"image_url: {exc}", type="invalid_request_error", param="messages") from None
    try:
        return check_blocks(blocks, max_bytes)
    except ValueError as exc:
        raise ApiError(400, f"images: {exc}", type="invalid_request_error", param="messages") from None


def _usage(usage: dict[str, Any]) -> dict[str, int]:
    prompt = int(usage.get("prompt", 0))
    completion = int(usage.get("completion", 0))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": int(usage.get("total", prompt + completion)),
    }


class OpenAICompat:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    def ops(self) -> list[Op]:
        return [
            Op(
                "POST",
                "/v1/chat/completions",
                self.completions,
                "OpenAI-compatible chat completions",
                "openai",
                body={
                    "type": "object",
                    "required": ["messages"],
                    "properties": {
                        "model": {"type": "string"},
                        "messages": {"type": "array", "items": {"type": "object"}},
                        "stream": {"type": "boolean"},
                    },
                },
            ),
            Op("GET", "/v1/models", self.models, "OpenAI-compatible model list", "openai"),
        ]

    async def models(self, request: Request) -> Response:
        return ok(
            {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "created": int(self.ctx.started), "owned_by": "homeagent"}],
            }
        )

    async def completions(self, request: Request) -> Response:
        body = await read_object(request)
        text = last_user_text(body.get("messages"))
        media = last_user_media(body["messages"], self.ctx.config.get_int("core.memory.media.max_bytes", 20 << 20))
        model = str(body.get("model") or MODEL)[:100]
        stream = bool(body.get("stream", False))
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        options = InjectOptions(no_memory=True, meta={"openai_model": model})
        client = principal_of(request).key
        if not stream:
            self.ctx.turns.claim(client, future)
            self.ctx.daemon.io.inject(InputMessage(text, SOURCE, CHANNEL, options, reply=future, media=media))
            timeout = self.ctx.config.get_duration("plugin.webui.chat_timeout", 300.0)
            try:
                result = await asyncio.wait_for(asyncio.shield(future), timeout)
            except TimeoutError:
                raise ApiError(504, "the agent did not answer in time", type="timeout") from None
            if not result.ok and not result.interrupted:
                raise ApiError(502, result.error or "the turn failed", type="agent_error")
            return ok(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": result.text,
                                **({"reasoning_content": result.reasoning} if result.reasoning else {}),
                            },
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": _usage(result.usage),
                }
            )
        if self.ctx.streams.full():
            raise ApiError(503, "too many open streams; try again shortly")
        self.ctx.turns.claim(client, future)
        queue = FrameQueue()
        self.ctx.daemon.io.inject(InputMessage(text, SOURCE, CHANNEL, options, sink=queue.sink, reply=future,
                                               media=media))
        return StreamingResponse(
            self._chunks(queue, completion_id, model), media_type="text/event-stream", headers=SSE_HEADERS
        )

    async def _chunks(self, queue: FrameQueue, completion_id: str, model: str) -> AsyncIterator[bytes]:
        created = int(time.time())
        key = self.ctx.streams.add(queue.close)

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()

        try:
            yield chunk({"role": "assistant", "content": ""})
            while True:
                try:
                    async with asyncio.timeout(15.0):
                        frame = await queue.get()
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
                except EOFError:
                    break
                kind = frame.get("type")
                if kind == "content_delta" and frame.get("text"):
                    yield chunk({"content": frame["text"]})
                elif kind == "reasoning_delta" and frame.get("text"):
                    yield chunk({"reasoning_content": frame["text"]})
                elif kind == "error":
                    error = {"message": str(frame.get("message", "error")), "type": "agent_error"}
                    yield f"data: {json.dumps({'error': error}, ensure_ascii=False)}\n\n".encode()
                elif kind == "response":
                    yield chunk({}, "stop", usage=_usage(dict(frame.get("usage") or {})))
                    break
            yield b"data: [DONE]\n\n"
        finally:
            self.ctx.streams.remove(key)
            queue.close()
