"""``homeagent approvals``: answer the tool calls waiting for you, manage ``always`` rules, read the log.

Everything goes through the daemon's local socket (only your user can connect),
which is one of the two places an approval can come from; the other is the
web UI. ``describe`` and ``prompt_answer`` are shared with ``homeagent chat``,
which asks inline when its own turn needs an approval.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from homeagent.cli.client import Client, RemoteError


def register(sub: Any) -> None:
    ap = sub.add_parser("approvals", help="tool calls waiting for your approval; always rules; the decision log")
    asub = ap.add_subparsers(dest="approvals_command", metavar="ACTION", required=True)
    lst = asub.add_parser("list", help="pending requests (and your always rules)")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=cmd_list)
    allow = asub.add_parser("allow", help="let a waiting tool call run")
    allow.add_argument("id")
    allow.add_argument("--always", action="store_true",
                       help="also allow later calls of this tool that match the request's pattern")
    allow.add_argument("--pattern", default="", help="with --always: the fnmatch pattern to allow instead")
    allow.set_defaults(func=cmd_answer, decision="allow")
    deny = asub.add_parser("deny", help="refuse a waiting tool call")
    deny.add_argument("id")
    deny.set_defaults(func=cmd_answer, decision="deny", always=False, pattern="")
    rules = asub.add_parser("rules", help="your always rules")
    rules.add_argument("--json", action="store_true")
    rules.set_defaults(func=cmd_rules)
    remove = asub.add_parser("remove", help="remove an always rule by its number")
    remove.add_argument("rule", type=int)
    remove.set_defaults(func=cmd_remove)
    logp = asub.add_parser("log", help="recent decisions (newest first)")
    logp.add_argument("--limit", type=int, default=30)
    logp.add_argument("--json", action="store_true")
    logp.set_defaults(func=cmd_log)


def _rpc(args: argparse.Namespace, method: str, params: dict[str, Any] | None = None) -> Any:
    from homeagent.cli.main import rpc

    return asyncio.run(rpc(args, method, params))


def describe(request: dict[str, Any]) -> str:
    """One request for a terminal. Arguments come escaped by the daemon; json.dumps escapes the rest."""
    if request.get("child"):
        who = f"sub-agent {request['child']}"
    else:
        who = f"{request.get('user_id') or 'owner'} on {request.get('channel') or '?'}"
    args = json.dumps(request.get("arguments", {}), ensure_ascii=True)
    return (f"[{request.get('id')}] {request.get('tool')} {args}\n"
            f"    asked by {who}; pattern for --always: {request.get('pattern')!r}; "
            f"expires in {request.get('expires_in', 0):.0f}s")


def _rule_line(rule: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(rule.get("created") or 0))
    return f"#{rule['id']:<4} {rule['action']:<6} {rule['tool']:<20} {rule['match']!r}  (by {rule['by']}, {when})"


def cmd_list(args: argparse.Namespace) -> int:
    result = _rpc(args, "approvals.list")
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    pending = result.get("pending", [])
    if not pending:
        print("no tool call is waiting for approval")
    for request in pending:
        print(describe(request))
    if pending:
        print("answer with: homeagent approvals allow ID [--always] | homeagent approvals deny ID")
    return 0


def cmd_answer(args: argparse.Namespace) -> int:
    params = {"id": args.id, "decision": args.decision, "always": bool(args.always), "pattern": args.pattern}
    result = _rpc(args, "approvals.answer", params)
    line = f"{result['id']}: {result['decision']}"
    if result.get("rule"):
        line += f"; always rule #{result['rule']['id']}: {result['rule']['tool']} {result['rule']['match']!r}"
    print(line)
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    rules = _rpc(args, "approvals.rules")
    if args.json:
        print(json.dumps(rules, ensure_ascii=False, indent=2))
    elif not rules:
        print("no always rules")
    else:
        print("\n".join(_rule_line(r) for r in rules))
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    _rpc(args, "approvals.remove_rule", {"id": args.rule})
    print(f"removed always rule #{args.rule}")
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    entries = _rpc(args, "approvals.log", {"limit": args.limit})
    if args.json:
        print(json.dumps(entries, ensure_ascii=False, indent=2))
        return 0
    if not entries:
        print("no decisions yet")
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["ts"]))
        by = f" by {e['by']}" if e.get("by") else ""
        print(f"{when}  {e['decision']:<16} {e['tool']:<16} {json.dumps(e['subject'], ensure_ascii=True)}"
              f"  ({e['user_id'] or '-'}@{e['channel'] or '-'}{by})")
    return 0


async def prompt_answer(client: Client, request: dict[str, Any], read_line: Any) -> str:
    """Ask in the terminal (y = once, a = always for the pattern, anything else = deny); returns what was done."""
    sys.stdout.write(f"\napproval needed {describe(request)}\n")
    sys.stdout.flush()
    always = request.get("always", True) is not False  # plugin installs and the like are approved one at a time
    question = "allow? [y]es once / [a]lways for this pattern / [N]o: " if always else "allow this once? [y]es / [N]o: "
    reply = (await asyncio.to_thread(read_line, question)).strip()
    choice = reply[:1].lower()
    params = {"id": request.get("id"), "decision": "allow" if choice in ("y", "a") else "deny",
              "always": always and choice == "a"}
    try:
        result = await client.call("approvals.answer", params)
    except RemoteError as exc:
        return str(exc)
    return str(result.get("decision"))
