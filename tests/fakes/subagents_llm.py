"""A fake OpenAI server that answers sub-agent requests from their own script.

Parent and child turns call the LLM concurrently, so one ordered script
cannot say who gets which answer. Requests whose first user message starts
with the sub-agent prefix are answered from ``child_turns`` instead.
"""

from __future__ import annotations

import contextvars
import json
from collections import deque
from typing import Any

from aiohttp import web

from homeagent.agent.subagents import CHILD_PREFIX
from tests.fakes.llm_common import Turn
from tests.fakes.llm_openai import FakeOpenAI

_is_child: contextvars.ContextVar[bool] = contextvars.ContextVar("is_child", default=False)


def is_child_body(body: object) -> bool:
    if not isinstance(body, dict):
        return False
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return bool(users) and str(users[0].get("content") or "").startswith(CHILD_PREFIX)


class RoutingFakeOpenAI(FakeOpenAI):
    def __init__(self) -> None:
        super().__init__()
        self.child_turns: deque[Turn] = deque()

    async def __aenter__(self) -> RoutingFakeOpenAI:
        await super().__aenter__()
        return self

    def script_child(self, *turns: Turn) -> None:
        self.child_turns.extend(turns)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        token = _is_child.set(is_child_body(body))
        try:
            return await super().handle(request)
        finally:
            _is_child.reset(token)

    def next_turn(self) -> Turn | None:
        if _is_child.get():
            return self.child_turns.popleft() if self.child_turns else self.default_turn
        return super().next_turn()

    def child_requests(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if is_child_body(r.body)]

    def parent_requests(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if isinstance(r.body, dict) and not is_child_body(r.body)]
