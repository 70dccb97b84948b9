"""Approval requests in the owner's chat: a request is posted to the owner's linked chat account, and
the owner's "approve 3f9a2c" there answers it.

Why this is safe although chat text is untrusted:

* Only an account the owner linked to themself (``homeagent identity link qq
  12345 --owner``, through the local socket; the model has no tool for it)
  answers. Inputs without a user id (the CLI, the web UI, a plugin's own
  pings) never do: the owner has the socket and the web UI for those, and any
  plugin could inject such an input.
* The answer is taken at intake, before it is queued: the model never sees
  it, so it cannot be quoted, forwarded or made up by the model, and it does
  not wait behind the very turn that is waiting for it.
* The same words from anybody else are refused, answered with a note, and
  logged (``homeagent approvals log`` shows ``answer_refused``); the request
  stays pending for the owner.

The trust placed in a chat plugin is the trust already placed in the user id
it reports (who is speaking, memory's speaker): enable only chat plugins you
trust, and link only accounts the platform verifies (a QQ number).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, Protocol

from homeagent.approvals.broker import ApprovalBroker, ApprovalError, OwnerPath
from homeagent.io.manager import InputMessage

log = logging.getLogger("homeagent.approvals")

_ANSWER = re.compile(
    r"^\s*(?:\[[^\]\n]{0,200}\]\s*)*"  # a chat plugin's header: [QQ 私聊 · Ada(10001)]
    r"(approve|allow|批准|同意|允许|deny|reject|拒绝|不同意)\s*#?\s*([0-9a-f]{6})"  # not yes/no: everyday words
    r"(?:\s+(always|总是|始终))?\s*[.!。！]?\s*$",
    re.I,
)
_ALLOW = frozenset({"approve", "allow", "批准", "同意", "允许"})


class OwnerAccounts(Protocol):
    """Which chat accounts are the owner's (the daemon's ``memory.identity.Identities``)."""

    def is_linked_owner(self, channel: str, user_id: str) -> bool: ...

    def owner_accounts(self, channel: str) -> list[str]: ...


class ChatOut(Protocol):
    """Sends to an output channel (the daemon's ``io.channels.OutputChannels``)."""

    async def send(self, name: str, payload: str, meta: dict[str, Any], type_: str = "text") -> Any: ...


def parse_answer(text: str) -> tuple[bool, str, bool] | None:
    """(allow, request id, always) when ``text`` is an answer to an approval request, else None."""
    m = _ANSWER.match(text)
    if m is None:
        return None
    allow = m.group(1).lower() in _ALLOW
    return allow, m.group(2).lower(), bool(m.group(3)) and allow


def describe(request: dict[str, Any]) -> str:
    args = json.dumps(request.get("arguments", {}), ensure_ascii=False)
    if len(args) > 600:
        args = args[:600] + "…"
    where = request.get("channel") or "?"
    who = request.get("user_id") or "you"
    rid = request.get("id")
    return (f"[approval {rid}] {request.get('tool')} {args}\n"
            f"asked in a turn from {who} on {where}. Reply \"approve {rid}\" (or \"approve {rid} always\") "
            f"or \"deny {rid}\" within {request.get('expires_in', 0):.0f}s; no answer is a no.")


class ChatApprovals:
    """The broker's chat side: posts requests to the owner's accounts and takes their answers at intake."""

    def __init__(self, broker: ApprovalBroker, owners: OwnerAccounts, out: ChatOut) -> None:
        self._broker = broker
        self._owners = owners
        self._out = out
        self._tasks: set[asyncio.Task[None]] = set()

    async def post(self, request: dict[str, Any]) -> None:
        """Post ``request`` to the owner's accounts on the channel its turn came from (a QQ turn: the owner's QQ)."""
        channel = str(request.get("channel") or "")
        accounts = self._owners.owner_accounts(channel) if channel else []
        for account in accounts:
            result = await self._out.send(channel, describe(request), {"user_id": account})
            if isinstance(result, dict) and result.get("isError"):
                log.warning("approval %s could not be posted to %s:%s: %s", request.get("id"), channel, account,
                            result.get("content"))

    def intake(self, message: InputMessage) -> bool:
        """Take an answer to a pending request from a chat account; everything else goes on to the agent."""
        user_id = message.options.user_id
        if not user_id:
            return False
        parsed = parse_answer(message.text)
        if parsed is None:
            return False
        allow, request_id, always = parsed
        owner = self._owners.is_linked_owner(message.channel, user_id)
        if not owner and not self._broker.is_pending(request_id):
            return False  # just words to the model: "no abc123" about something else
        task = asyncio.get_running_loop().create_task(
            self._answer(message, request_id, allow, always, owner), name=f"approval-answer-{request_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _answer(self, message: InputMessage, request_id: str, allow: bool, always: bool, owner: bool) -> None:
        who = f"{message.channel}:{message.options.user_id}"
        if not owner:
            log.warning("approval %s: %s answered it, but only the owner may; refused", request_id, who)
            await self._broker.log_refused_answer(request_id, message.channel, message.options.user_id)
            text = f"Only the owner can answer approval request {request_id}; this was refused and logged."
        else:
            try:
                result = await self._broker.answer(request_id, allow, by=OwnerPath.CHAT, always=always)
            except ApprovalError as exc:
                text = str(exc)
            else:
                text = f"{request_id}: {result['decision']}"
                if result.get("rule"):
                    text += f" (always rule #{result['rule']['id']}: {result['rule']['tool']} {result['rule']['match']!r})"
        meta = {k: v for k, v in (("user_id", message.options.user_id), ("group_id", message.options.group_id)) if v}
        sent = await self._out.send(message.channel, text, meta)
        if isinstance(sent, dict) and sent.get("isError"):
            log.warning("approval %s: the answer to %s could not be sent: %s", request_id, who, sent.get("content"))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
