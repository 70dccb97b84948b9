"""Approval requests: a tool call that needs the owner waits here until the owner answers or time runs out.

* Only the call waits. The request is an ``asyncio.Future`` the tool call
  awaits; the event loop, the socket and the web UI keep serving, and the
  owner's answer arrives through them.
* Only the owner answers. :meth:`ApprovalBroker.answer` takes an
  :class:`OwnerPath`, and the daemon hands the broker to exactly three places:
  the local socket (peer uid checked), the web API (token or signed-in
  session) and the chat intake (approvals/chat.py: "approve 3f9a2c" from a
  chat account the owner linked to themself, taken before any turn sees it).
  There is no tool, stage field or plugin API that reaches it, so a model, a
  sub-agent, a plugin or a stranger writing in a chat group cannot approve
  anything; from anyone but the owner's linked account such text is refused
  and logged, or is just text to the model.
* No answer is a *no*: after ``core.approvals.timeout`` the call is denied.
* Some calls only the owner may allow, one at a time (``OWNER_ACTIONS``:
  installing, removing, enabling plugins): they always ask, "always" stores
  no rule for them, and the tool runs only when :func:`owner_approved` says
  the owner approved that very call (the broker records it for the task that
  runs the call).
* Every decision that involved the policy (denied by it, allowed or denied by
  the owner, timed out, withdrawn because the turn was cancelled) is logged.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from homeagent.agent.gate import Frame, OwnerApproval, note_owner_approval
from homeagent.approvals.policy import (
    ALLOW,
    DENY,
    OWNER_ACTIONS,
    ApprovalPolicy,
    Rule,
    safe_arguments,
    subject_matches,
    subject_of,
    suggest_pattern,
)
from homeagent.approvals.store import ApprovalStore
from homeagent.msg import Msg
from homeagent.sdk.types import StageContext, ToolCall

log = logging.getLogger("homeagent.approvals")

__all__ = ["ApprovalBroker", "ApprovalError", "OwnerPath", "PendingApproval"]

RECENT_DENIALS = 256


class OwnerPath(enum.StrEnum):
    """The authenticated ways the owner reaches the daemon; nothing else can answer a request."""

    SOCKET = "socket"
    WEB = "web"
    CHAT = "chat"  # the owner's own linked chat account (approvals/chat.py)


class ApprovalError(ValueError):
    """An answer that cannot be applied (unknown or already decided request, bad pattern)."""


class Publisher(Protocol):
    def publish(self, type_: str, data: dict[str, Any]) -> Any: ...


class ChatPoster(Protocol):
    """Posts a request to the owner's chat accounts (approvals/chat.py)."""

    async def post(self, request: dict[str, Any]) -> None: ...


@dataclass
class PendingApproval:
    id: str
    tool: str
    arguments: dict[str, Any]  # as shown: cut and made visible
    subject: str
    pattern: str  # what "always" grants unless the owner gives another
    user_id: str
    channel: str
    source: str
    input_id: str
    child: str
    created: float
    timeout: float
    future: asyncio.Future[tuple[str, str, str]] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "tool": self.tool, "arguments": self.arguments, "subject": self.subject,
            "pattern": self.pattern, "user_id": self.user_id, "channel": self.channel, "source": self.source,
            "input_id": self.input_id, "child": self.child, "created": self.created,
            "expires_in": round(max(0.0, self.created + self.timeout - time.time()), 1),
            "always": self.tool not in OWNER_ACTIONS,  # whether "Always for this pattern" can apply
        }


class ApprovalBroker:
    """The daemon's :class:`~homeagent.agent.gate.ToolGate`, and the owner's desk for answering."""

    def __init__(
        self,
        policy: ApprovalPolicy,
        store: ApprovalStore,
        events: Publisher,
        *,
        notify: Callable[[dict[str, Any]], Awaitable[Any]] | None = None,
    ) -> None:
        self.policy = policy
        self.store = store
        self.events = events
        self.notify = notify  # reaches attached terminal clients when the turn has no client of its own
        self.chats: ChatPoster | None = None  # the owner's chat accounts; set once identities are loaded
        self._pending: dict[str, PendingApproval] = {}
        self._denied: OrderedDict[tuple[str, str, str], str] = OrderedDict()

    # -- the gate ---------------------------------------------------------------
    async def admit(self, call: ToolCall, ctx: StageContext, frame: Frame | None) -> str | None:
        note_owner_approval(None)  # nothing this task recorded for an earlier call carries over
        verdict = self.policy.decide(call.name, call.arguments)
        if verdict.action == ALLOW:
            return None
        subject = subject_of(call.arguments)
        if verdict.action == DENY:
            await self._log(call, ctx, "request", subject, "denied_by_policy", "policy", verdict.reason, 0.0)
            return (f"the owner's approval policy refuses {call.name} here ({verdict.reason}). It was not run; "
                    "do not retry it. If it is needed, tell the user what you wanted to do.")
        input_id = str(ctx.extra.get("input_id") or "")
        earlier = self._denied.get((input_id, call.name, subject))
        if earlier is not None:
            return f"{earlier} (the owner already said no to this exact call in this turn; it was not asked again)"
        return await self._ask(call, ctx, subject, input_id, frame)

    async def _ask(
        self, call: ToolCall, ctx: StageContext, subject: str, input_id: str, frame: Frame | None
    ) -> str | None:
        loop = asyncio.get_running_loop()
        request = PendingApproval(
            id=self._new_id(), tool=call.name, arguments=safe_arguments(call.arguments), subject=subject,
            pattern=suggest_pattern(call.arguments), user_id=ctx.user_id, channel=ctx.channel, source=ctx.source,
            input_id=input_id, child=str(ctx.extra.get("child_id") or ""), created=time.time(),
            timeout=self.policy.config.timeout, future=loop.create_future(),
        )
        self._pending[request.id] = request
        shown = request.to_dict()
        log.info("approval %s: %s %r asked by %s/%s", request.id, call.name, subject[:120], ctx.channel, ctx.user_id)
        self.events.publish("approval_request", shown)
        if frame is not None:
            await frame({"type": "approval_request", **shown})
        elif self.notify is not None:
            try:
                await self.notify({"type": "approval_request", **shown})
            except Exception:
                log.exception("approval %s: notifying terminal clients failed", request.id)
        if self.chats is not None:
            try:
                await self.chats.post(shown)
            except Exception:
                log.exception("approval %s: posting it to the owner's chat failed", request.id)
        started = time.perf_counter()
        decision, by, note = "timeout", "", ""
        try:
            async with asyncio.timeout(request.timeout):
                decision, by, note = await request.future
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            decision = "withdrawn"
            raise
        finally:
            self._pending.pop(request.id, None)
            waited = (time.perf_counter() - started) * 1000
            self.events.publish("approval_decided", {"id": request.id, "tool": call.name, "decision": decision,
                                                     "by": by})
            await asyncio.shield(self._log(call, ctx, request.id, subject, decision, by, note, waited))
        if decision.startswith("allowed"):
            note_owner_approval(OwnerApproval(call.name, dict(call.arguments), request.id))
            return None
        if decision == "timeout":
            reason = (f"{call.name} needs the owner's approval and nobody answered within {request.timeout:g}s, so "
                      "it was not run. Tell the user what you wanted to do; they can approve it when they are back.")
        elif decision == "denied":
            reason = (f"the owner denied {call.name} (approval {request.id}). It was not run; do not retry it. "
                      "Tell the user what you wanted to do instead.")
        else:
            reason = f"{call.name} was not run: its approval request was withdrawn ({note or decision})"
        self._denied[(input_id, call.name, subject)] = reason
        while len(self._denied) > RECENT_DENIALS:
            self._denied.popitem(last=False)
        return reason

    def _new_id(self) -> str:
        while True:
            rid = secrets.token_hex(3)
            if rid not in self._pending:
                return rid

    async def _log(self, call: ToolCall, ctx: StageContext, request: str, subject: str, decision: str, by: str,
                   reason: str, waited_ms: float) -> None:
        entry = {"ts": time.time(), "request": request, "tool": call.name, "subject": subject[:2000],
                 "arguments": safe_arguments(call.arguments), "user_id": ctx.user_id, "channel": ctx.channel,
                 "source": ctx.source, "decision": decision, "by": by, "reason": reason,
                 "waited_ms": round(waited_ms, 1)}
        try:
            await asyncio.to_thread(self.store.log, entry)
        except Exception:
            log.exception("logging approval decision %s failed", request)

    # -- the owner's desk ---------------------------------------------------------
    def pending(self) -> list[dict[str, Any]]:
        return [p.to_dict() for p in self._pending.values()]

    def is_pending(self, request_id: str) -> bool:
        request = self._pending.get(request_id)
        return request is not None and not request.future.done()

    async def log_refused_answer(self, request_id: str, channel: str, user_id: str) -> None:
        """Log an answer from someone who is not the owner (the request stays pending)."""
        request = self._pending.get(request_id)
        entry = {"ts": time.time(), "request": request_id, "tool": request.tool if request else "",
                 "subject": request.subject[:2000] if request else "",
                 "arguments": request.arguments if request else {}, "user_id": user_id, "channel": channel,
                 "source": "chat", "decision": "answer_refused", "by": f"{channel}:{user_id}",
                 "reason": "not the owner's linked account", "waited_ms": 0.0}
        try:
            await asyncio.to_thread(self.store.log, entry)
        except Exception:
            log.exception("logging a refused approval answer for %s failed", request_id)

    async def answer(self, request_id: str, allow: bool, *, by: OwnerPath, always: bool = False,
                     pattern: str = "") -> dict[str, Any]:
        """Decide a pending request. ``always`` also stores a rule (tool + pattern) so matching calls run."""
        if not isinstance(by, OwnerPath):
            raise ApprovalError(Msg("approvals are answered only through the local socket or the web UI"))
        request = self._pending.get(str(request_id).strip())
        if request is None or request.future.done():
            raise ApprovalError(Msg("no pending approval request {id!r} (answered, timed out or withdrawn); "
                                    "see `homeagent approvals list`", id=request_id))
        rule: Rule | None = None
        if allow and always and request.tool not in OWNER_ACTIONS:  # those are approved one call at a time
            rule = await self.add_rule(request.tool, pattern.strip() or request.pattern, by=by)
        decision = ("allowed_always" if rule else "allowed") if allow else "denied"
        if not request.future.done():
            request.future.set_result((decision, by.value, rule.describe() if rule else ""))
        if rule is not None:  # other calls waiting for the same thing need no second click
            for other in list(self._pending.values()):
                if other is not request and other.tool == request.tool and not other.future.done() \
                        and subject_matches(rule.match, other.subject):
                    other.future.set_result(("allowed_by_rule", by.value, rule.describe()))
        return {"id": request.id, "decision": decision, "rule": rule.to_dict() if rule else None}

    async def add_rule(self, tool: str, match: str, *, by: OwnerPath) -> Rule:
        if not tool.strip() or not match.strip():
            raise ApprovalError(Msg("a rule needs a tool and a pattern"))
        if tool.strip() in OWNER_ACTIONS:
            raise ApprovalError(Msg("{tools} are approved one call at a time; an always rule cannot cover them",
                                    tools=", ".join(sorted(OWNER_ACTIONS))))
        rule = await asyncio.to_thread(self.store.add_rule, tool.strip(), match.strip(), by=by.value)
        self.policy.invalidate()
        return rule

    def rules(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.store.rules()]

    async def remove_rule(self, rule_id: int) -> bool:
        removed = await asyncio.to_thread(self.store.remove_rule, int(rule_id))
        self.policy.invalidate()
        return removed

    async def decisions(self, limit: int = 50) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.store.decisions, limit)

    async def close(self) -> None:
        for request in list(self._pending.values()):
            if not request.future.done():
                request.future.set_result(("withdrawn", "daemon", "the daemon is stopping"))
        await asyncio.to_thread(self.store.close)
