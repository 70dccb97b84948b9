"""The owner's approval operations as socket RPC methods (the web API calls the same broker).

Parameters are checked here, once, so the socket and the web UI accept the
same shapes: ``{"id", "decision": "allow"|"deny", "always"?, "pattern"?}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from homeagent.approvals.broker import ApprovalBroker, ApprovalError, OwnerPath
from homeagent.msg import Msg

RPCMethod = Callable[[dict[str, Any]], Awaitable[Any]]


def parse_answer(params: dict[str, Any]) -> tuple[str, bool, bool, str]:
    """(id, allow, always, pattern) from an answer's parameters; ApprovalError when they do not fit."""
    request_id = params.get("id")
    if not isinstance(request_id, str) or not request_id.strip():
        raise ApprovalError(Msg("'id' must be the request's id (see `homeagent approvals list`)"))
    decision = str(params.get("decision", "")).strip().lower()
    if decision not in ("allow", "deny"):
        raise ApprovalError(Msg("'decision' must be 'allow' or 'deny'"))
    always = params.get("always", False)
    pattern = params.get("pattern") or ""
    if not isinstance(always, bool) or not isinstance(pattern, str):
        raise ApprovalError(Msg("'always' must be true or false and 'pattern' a string"))
    if always and decision != "allow":
        raise ApprovalError(Msg("'always' goes with 'allow' only"))
    return request_id.strip(), decision == "allow", always, pattern


def socket_methods(broker: ApprovalBroker) -> dict[str, RPCMethod]:
    """``approvals.*`` methods for the local socket (only the daemon's own user can connect)."""

    async def list_(_: dict[str, Any]) -> Any:
        return {"pending": broker.pending(), "rules": broker.rules()}

    async def answer(params: dict[str, Any]) -> Any:
        request_id, allow, always, pattern = parse_answer(params)
        return await broker.answer(request_id, allow, by=OwnerPath.SOCKET, always=always, pattern=pattern)

    async def rules(_: dict[str, Any]) -> Any:
        return broker.rules()

    async def add_rule(params: dict[str, Any]) -> Any:
        rule = await broker.add_rule(str(params.get("tool") or ""), str(params.get("match") or ""),
                                     by=OwnerPath.SOCKET)
        return rule.to_dict()

    async def remove_rule(params: dict[str, Any]) -> Any:
        try:
            rule_id = int(params.get("id"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ApprovalError(Msg("'id' must be a rule number (see `homeagent approvals rules`)")) from None
        if not await broker.remove_rule(rule_id):
            raise ApprovalError(Msg("no always rule #{rule}", rule=rule_id))
        return {"removed": rule_id}

    async def decisions(params: dict[str, Any]) -> Any:
        return await broker.decisions(int(params.get("limit") or 50))

    return {
        "approvals.list": list_,
        "approvals.answer": answer,
        "approvals.rules": rules,
        "approvals.add_rule": add_rule,
        "approvals.remove_rule": remove_rule,
        "approvals.log": decisions,
    }
