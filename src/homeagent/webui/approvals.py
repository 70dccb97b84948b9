"""/api/v1/approvals: answer waiting tool calls, manage always rules, read the decision log.

Every route sits behind the web UI's authentication (API token, or a signed-in
session with its CSRF token for writes), which makes the web UI one of the
owner's two ways to approve; the other is the local socket. New requests and
decisions also go out on the event stream (``approval_request``,
``approval_decided``) so the chat page shows them as they happen.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from homeagent.approvals.broker import ApprovalBroker, ApprovalError, OwnerPath
from homeagent.approvals.desk import parse_answer
from homeagent.msg import Msg, message_of
from homeagent.webui.common import ApiError, Op, WebContext, ok, path_id, query_int, read_object

ANSWER_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["decision"],
    "properties": {
        "decision": {"type": "string", "enum": ["allow", "deny"]},
        "always": {"type": "boolean", "description": "with allow: also allow later calls matching the pattern"},
        "pattern": {"type": "string", "description": "with always: the fnmatch pattern (default: the suggested one)"},
    },
}


class ApprovalsAPI:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    @property
    def broker(self) -> ApprovalBroker:
        return self.ctx.daemon.approvals

    def ops(self) -> list[Op]:
        return [
            Op("GET", "/api/v1/approvals", self.list, "Tool calls waiting for approval, and the always rules",
               "approvals"),
            Op("POST", "/api/v1/approvals/{id}", self.answer, "Allow (once or always) or deny a waiting call",
               "approvals", body=ANSWER_BODY),
            Op("GET", "/api/v1/approvals/rules", self.rules, "The always rules", "approvals", returns="array"),
            Op("DELETE", "/api/v1/approvals/rules/{id}", self.remove_rule, "Remove an always rule", "approvals"),
            Op("GET", "/api/v1/approvals/log", self.log, "Recent decisions, newest first", "approvals",
               query=("limit",), returns="array"),
        ]

    async def list(self, request: Request) -> Response:
        broker = self.broker
        return ok({"pending": broker.pending(), "rules": broker.rules()})

    async def answer(self, request: Request) -> Response:
        body = await read_object(request)
        try:
            request_id, allow, always, pattern = parse_answer({**body, "id": request.path_params.get("id", "")})
            result = await self.broker.answer(request_id, allow, by=OwnerPath.WEB, always=always, pattern=pattern)
        except ApprovalError as exc:
            raise ApiError(404 if "no pending" in str(exc) else 400, message_of(exc)) from None
        return ok(result)

    async def rules(self, request: Request) -> Response:
        return ok(self.broker.rules())

    async def remove_rule(self, request: Request) -> Response:
        rule = path_id(request)
        if not await self.broker.remove_rule(rule):
            raise ApiError(404, Msg("no always rule #{rule}", rule=rule))
        return ok({"removed": rule})

    async def log(self, request: Request) -> Response:
        return ok(await self.broker.decisions(query_int(request, "limit", 50, lo=1, hi=1000)))
