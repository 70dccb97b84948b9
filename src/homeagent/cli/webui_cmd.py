"""``homeagent webui token``: make a new API token for the web UI and HTTP API.

Only a hash of the token is stored, so the current token cannot be shown
again; this command replaces it and prints the new one. The old token stops
working at once and browser sessions are signed out. With a daemon running
the daemon does the rotation (so it takes effect immediately); otherwise the
data directory is changed directly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from homeagent.cli.client import DaemonUnavailable, RemoteError, connect_to


def register(sub: Any) -> None:
    webui = sub.add_parser("webui", help="web UI and HTTP API")
    wsub = webui.add_subparsers(dest="webui_command", metavar="ACTION", required=True)
    token = wsub.add_parser(
        "token",
        help="replace the API token with a new one and print it (only a hash is stored, so the old one "
        "cannot be shown)",
    )
    token.add_argument("--json", action="store_true", help="print {token, url, rotated_by} as JSON")
    token.set_defaults(func=cmd_webui_token)


async def _via_daemon(args: argparse.Namespace) -> dict[str, Any]:
    from homeagent.cli.main import paths_from

    client = await connect_to(paths_from(args), timeout=1.0)
    try:
        result: dict[str, Any] = await client.call("webui.token", {}, timeout=30)
        return result
    finally:
        await client.close()


def _local(args: argparse.Namespace) -> dict[str, Any]:
    from homeagent.cli.main import paths_from
    from homeagent.config import ConfigRegistry
    from homeagent.webui.auth import PLUGIN, TokenStore, webui_defs

    paths = paths_from(args)
    paths.ensure()
    with ConfigRegistry(paths.config_db) as registry:
        for definition in webui_defs():
            registry.register_def(definition, plugin=PLUGIN)
        token = TokenStore(registry).rotate()
        listen = str(registry.get("webui.listen_addr") or "127.0.0.1:8780")
    return {"token": token, "url": f"http://{listen}/"}


def cmd_webui_token(args: argparse.Namespace) -> int:
    rotated_by = "daemon"
    try:
        result = asyncio.run(_via_daemon(args))
    except DaemonUnavailable:
        rotated_by = "data directory"
        result = _local(args)
    except RemoteError as exc:
        if "unknown method" not in str(exc):
            print(f"homeagent: {exc}", file=sys.stderr)
            return 1
        rotated_by = "data directory"  # the daemon runs without its web UI
        result = _local(args)
    if args.json:
        print(json.dumps({**result, "rotated_by": rotated_by}))
        return 0
    print("A new API token was made; the previous one no longer works (only a hash is stored, so a token")
    print("cannot be shown again — run this command again if you lose it). Browser sessions were signed out.")
    print()
    print(f"  token: {result['token']}")
    print(f"  web UI: {result.get('url', '')}login")
    return 0
