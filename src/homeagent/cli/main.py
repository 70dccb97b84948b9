"""The ``homeagent`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from homeagent import __version__
from homeagent.cli.client import DaemonStarting, DaemonUnavailable, RemoteError, connect_to
from homeagent.console import detach
from homeagent.paths import DataPaths, resolve_data_dir

EXIT_BROKEN_PIPE = 141
"""What a shell reports for a command ended by SIGPIPE."""


def paths_from(args: argparse.Namespace) -> DataPaths:
    return DataPaths(resolve_data_dir(getattr(args, "data_dir", None)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="homeagent", description="HomeAgent: your personal AI agent daemon.")
    parser.add_argument("--version", action="version", version=f"homeagent {__version__}")
    parser.add_argument("--data-dir", help="data directory (default: $HOMEAGENT_DATA_DIR or the user data dir)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run the daemon in the foreground")
    run.add_argument("--log-level", choices=["debug", "info", "warn", "error"], help="override core.daemon.log_level")
    run.add_argument("--no-web", action="store_true", help="do not start the web UI")
    run.set_defaults(func=cmd_run)

    from homeagent.cli import ask_cmd

    ask_cmd.register(sub)

    chat = sub.add_parser("chat", help="interactive chat with streamed replies")
    chat.set_defaults(func=cmd_chat)

    status = sub.add_parser("status", help="show the daemon's status")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)

    stop = sub.add_parser("stop", help="stop the running daemon")
    stop.set_defaults(func=cmd_stop)

    from homeagent.cli import config_cmd

    config_cmd.register(sub)
    for module_name in (
        "homeagent.cli.memory_cmd",
        "homeagent.cli.knowledge_cmd",
        "homeagent.cli.plugin_cmd",
        "homeagent.cli.webui_cmd",
        "homeagent.cli.backup_cmd",
        "homeagent.cli.approvals_cmd",
        "homeagent.cli.identity_cmd",
    ):
        _register_optional(module_name, sub)
    return parser


def _register_optional(module_name: str, sub: Any) -> None:
    """Command groups that live in their own modules register themselves here."""
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return
        raise
    module.register(sub)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        code = func(args)
        sys.stdout.flush()  # a closed pipe shows here, not as a traceback at exit
        return code
    except BrokenPipeError:
        # `homeagent … | head`: the reader is gone; leave quietly, as `yes | head` does
        detach(sys.stdout)
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return 130
    except (DaemonUnavailable, DaemonStarting) as exc:
        print(f"homeagent: {exc}", file=sys.stderr)
        return 3
    except RemoteError as exc:
        print(f"homeagent: {exc}", file=sys.stderr)
        return 1


# -- commands -----------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from homeagent.datalock import AlreadyRunning, DataDirLock

    paths = paths_from(args)
    paths.ensure()
    # Take the data directory before the daemon's imports (seconds): from here on a CLI
    # command waits for this daemon instead of writing to the data directory behind its back.
    lock = DataDirLock(paths.lock)
    try:
        lock.acquire()
    except AlreadyRunning as exc:
        print(f"homeagent: {exc}", file=sys.stderr)
        return 1
    try:
        from homeagent.daemon import run_daemon

        return run_daemon(paths, log_level=args.log_level, web=not args.no_web, lock=lock)
    finally:
        lock.release()


async def rpc(args: argparse.Namespace, method: str, params: dict[str, Any] | None = None) -> Any:
    client = await connect_to(paths_from(args))
    try:
        return await client.call(method, params)
    finally:
        await client.close()


def cmd_chat(args: argparse.Namespace) -> int:
    from homeagent.cli.chat import run_chat

    return asyncio.run(run_chat(paths_from(args)))


def cmd_status(args: argparse.Namespace) -> int:
    status = asyncio.run(rpc(args, "status"))
    mcp = asyncio.run(_mcp_health(args))
    if mcp is not None:
        status["mcp"] = mcp
    if args.json:
        print(json.dumps(status, ensure_ascii=False, indent=2))
        return 0
    print(format_status(status))
    return 0


async def _mcp_health(args: argparse.Namespace) -> dict[str, Any] | None:
    """The mcp plugin's per-server health, or None when it is not running (or the daemon is still starting)."""
    try:
        info = await rpc(args, "plugins.info", {"name": "mcp"})
    except (RemoteError, DaemonUnavailable, DaemonStarting):
        return None
    health = info.get("health") if isinstance(info, dict) else None
    return health if isinstance(health, dict) and health.get("servers") else None


def format_mcp(health: dict[str, Any]) -> list[str]:
    lines = []
    for name, server in sorted((health.get("servers") or {}).items()):
        state = str(server.get("state", "?"))
        detail = f"{server.get('tools', 0)} tools" if state == "connected" else str(server.get("error") or "")
        lines.append(f"mcp        {name}: {state}{f' ({detail})' if detail else ''}")
    lines += [f"mcp        problem: {p}" for p in health.get("problems") or []]
    return lines


def format_status(status: dict[str, Any]) -> str:
    agent = status.get("agent", {})
    starting = status.get("starting") or []
    state = "ready" if status.get("ready", True) else f"starting ({', '.join(starting)} not up yet)"
    lines = [
        f"HomeAgent {status.get('version')}  pid {status.get('pid')}  up {status.get('uptime_s', 0):.0f}s  {state}",
        f"data dir   {status.get('data_dir')}",
        f"socket     {status.get('socket')}",
    ]
    if status.get("web"):
        lines.append(f"web UI     {status['web']}")
    lines.append(
        f"agent      {'busy' if agent.get('busy') else 'idle'}; {agent.get('turns', 0)} turns, "
        f"{agent.get('queued', 0)} queued"
    )
    lines.append(f"LLM        {status.get('llm_source') or 'offline'}")
    lines.append(f"tools      {status.get('tools', 0)}   plugins {status.get('plugins', 0)}")
    if isinstance(status.get("mcp"), dict):
        lines.extend(format_mcp(status["mcp"]))
    sandbox = status.get("sandbox") or {}
    if sandbox.get("summary"):
        warn = "" if sandbox.get("confined") or sandbox.get("state") == "checking" else "WARNING: "
        lines.append(f"sandbox    {warn}{sandbox['summary']}")
    if status.get("approvals_pending"):
        lines.append(f"approvals  {status['approvals_pending']} tool call(s) waiting: homeagent approvals list")
    return "\n".join(lines)


def cmd_stop(args: argparse.Namespace) -> int:
    try:
        asyncio.run(rpc(args, "shutdown"))
    except DaemonUnavailable as exc:
        print(f"homeagent: {exc}", file=sys.stderr)
        return 3
    print("stopping")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
