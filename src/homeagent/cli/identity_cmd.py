"""``homeagent identity``: one person across channels (QQ accounts, the web UI, the CLI).

Links go through the daemon's local socket, which only your user can reach:
the model has no tool for them, so nobody in a chat can make themself you.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any


def register(sub: Any) -> None:
    ip = sub.add_parser("identity", help="who is who across channels: link chat accounts to people (or to you)")
    isub = ip.add_subparsers(dest="identity_command", metavar="ACTION", required=True)
    lst = isub.add_parser("list", help="the links, and your own name in memory")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=cmd_list)
    link = isub.add_parser("link", help="say who an account is: homeagent identity link qq 10001 Ada")
    link.add_argument("channel", help="the channel the account speaks on (qq, …)")
    link.add_argument("account", help="its user id there (a QQ number)")
    link.add_argument("person", nargs="?", default="", help="the person's name (omit with --owner)")
    link.add_argument("--owner", action="store_true",
                      help="the account is yours: it speaks as you and may answer approval requests in its chat")
    link.set_defaults(func=cmd_link)
    unlink = isub.add_parser("unlink", help="forget who an account is")
    unlink.add_argument("channel")
    unlink.add_argument("account")
    unlink.set_defaults(func=cmd_unlink)


def _rpc(args: argparse.Namespace, method: str, params: dict[str, Any] | None = None) -> Any:
    from homeagent.cli.main import rpc

    return asyncio.run(rpc(args, method, params))


def cmd_list(args: argparse.Namespace) -> int:
    result = _rpc(args, "identity.list")
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    print(f"you are {result['owner']!r} in memory (core.memory.owner_name); the CLI and the web UI speak as you")
    links = result.get("links", [])
    if not links:
        print("no linked accounts: chat users speak as 'nickname (channel:id)'")
    for k in links:
        when = time.strftime("%Y-%m-%d", time.localtime(k.get("created") or 0))
        who = f"{k['person']} (you)" if k.get("owner") else k["person"]
        print(f"{k['channel']}:{k['account']:<16} → {who}  (since {when})")
    return 0


def cmd_link(args: argparse.Namespace) -> int:
    if args.owner and args.person:
        print("homeagent: give a person's name or --owner, not both", file=sys.stderr)
        return 2
    result = _rpc(args, "identity.link", {"channel": args.channel, "account": args.account,
                                          "person": args.person, "owner": bool(args.owner)})
    who = f"you ({result['person']})" if result.get("owner") else result["person"]
    print(f"{result['channel']}:{result['account']} is now {who}")
    return 0


def cmd_unlink(args: argparse.Namespace) -> int:
    result = _rpc(args, "identity.unlink", {"channel": args.channel, "account": args.account})
    print(f"{result['channel']}:{result['account']} is no longer linked")
    return 0
