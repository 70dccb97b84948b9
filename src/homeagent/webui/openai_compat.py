"""``POST /v1/chat/completions``: OpenAI clients talking to HomeAgent.

HomeAgent keeps its own memory, so only the last user message of the request
becomes an input (channel ``http``, kept out of memory like the original's
HTTP channel); the rest of ``messages`` is ignored. The reply comes back as a
``chat.completion`` or, with ``stream: true``, as ``chat.completion.chunk``
SSE ending in ``data: [DONE]``. Reasoning is sent as ``reasoning_content``
(the field DeepSeek-style clients read); tool calls stay internal to the
agent.

Each request belongs to a HomeAgent conversation, so a client's chat keeps
its own recent turns and shows up in the web UI's list (:func:`conversation_key`):
the ``X-HomeAgent-Conversation`` header names one by id; else the request's
``user`` field maps to one conversation per user; else the hash of the
request's first system and user messages does, which is the same for every
request of one chat, since OpenAI clients send the whole chat each time. The
answer's ``X-HomeAgent-Conversation`` header says which conversation it was.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from homeagent.conversations import Conversation, ConversationError, scope_of
from homeagent.io.manager import InputMessage, TurnResult
from homeagent.memory.media.inputs import check_blocks
from homeagent.sdk.types import InjectOptions, MediaBlock
from homeagent.webui.common import ApiError, Op, WebContext, ok, principal_of, read_object
from homeagent.webui.sse import SSE_HEADERS, FrameQueue

MODEL = "homeagent"
CHANNEL = "http"
SOURCE = "openai"
HEADER = "X-HomeAgent-Conversation"
MAX_USER = 200


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def conversation_key(messages: list[Any], user: Any) -> str:
    """Which conversation a request without the header belongs to: ``user:<user>``, else
    ``hash:<sha256 of the first system and first user message>`` (the same for every request of one chat)."""
    if isinstance(user, str) and user.strip():
        if len(user) > MAX_USER:
            raise ApiError(400, f"'user' is at most {MAX_USER} characters", type="invalid_request_error", param="user")
        return f"user:{user.strip()}"
    first = {role: next((_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == role),
                        "") for role in ("system", "user")}
    digest = hashlib.sha256(json.dumps([first["system"], first["user"]], ensure_ascii=False).encode()).hexdigest()
    return f"hash:{digest[:32]}"


def first_user_text(messages: list[Any]) -> str:
    return next((_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "user"), "")


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
                        "user": {"type": "string", "description": "one HomeAgent conversation per user value "
                                 "(without it and without the X-HomeAgent-Conversation header: one per chat, "
                                 "by the hash of its first messages)"},
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
        conversation = await self._conversation(request, body)
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        options = InjectOptions(no_memory=True, meta={"openai_model": model}, group_id=scope_of(conversation.id))
        client = principal_of(request).key
        pinned = {HEADER: str(conversation.id)}
        if not stream:
            await self._queue(client, InputMessage(text, SOURCE, CHANNEL, options, reply=future, media=media),
                              future, conversation)
            timeout = self.ctx.config.get_duration("plugin.webui.chat_timeout", 300.0)
            try:
                result = await asyncio.wait_for(asyncio.shield(future), timeout)
            except TimeoutError:
                raise ApiError(504, "the agent did not answer in time", type="timeout") from None
            if not result.ok and not result.interrupted:
                raise ApiError(502, result.error or "the turn failed", type="agent_error")
            answer = ok(
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
            answer.headers.update(pinned)
            return answer
        if self.ctx.streams.full():
            raise ApiError(503, "too many open streams; try again shortly")
        queue = FrameQueue()
        await self._queue(client, InputMessage(text, SOURCE, CHANNEL, options, sink=queue.sink, reply=future,
                                               media=media), future, conversation)
        return StreamingResponse(
            self._chunks(queue, completion_id, model), media_type="text/event-stream", headers={**SSE_HEADERS, **pinned}
        )

    async def _conversation(self, request: Request, body: dict[str, Any]) -> Conversation:
        """The conversation this request belongs to (module docstring); 404 for a header naming none."""
        history = self.ctx.daemon.conversations
        named = request.headers.get(HEADER, "").strip()
        if named:
            if not (named.isascii() and named.isdigit() and len(named) <= 18):
                raise ApiError(400, f"{HEADER} must be a conversation id (a whole number)",
                               type="invalid_request_error", param=HEADER)
            found = await history.get(int(named))
            if found is None:
                raise ApiError(404, f"no conversation {named} ({HEADER}); GET /api/v1/conversations lists them",
                               type="invalid_request_error", param=HEADER)
            return found
        messages = body["messages"]
        conversation, _ = await history.for_external(conversation_key(messages, body.get("user")),
                                                     first_user_text(messages))
        return conversation

    async def _queue(self, client: str, message: InputMessage, future: asyncio.Future[TurnResult],
                     conversation: Conversation) -> None:
        """Hold the client's turn slot, record the message in its conversation, then queue it."""
        self.ctx.turns.claim(client, future)
        try:
            await self.ctx.daemon.conversations.begin(conversation.id, message)
        except ConversationError:  # deleted in between: free the slot, nothing runs
            future.set_result(TurnResult(ok=False, error="conversation deleted", input_id=message.id))
            raise ApiError(404, f"no conversation {conversation.id}", type="invalid_request_error") from None
        self.ctx.daemon.io.inject(message)

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
