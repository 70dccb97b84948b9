"""``homeagent config …`` and ``homeagent llm …``.

Each command talks to the running daemon when there is one, and otherwise
works on the data directory directly, so settings can be prepared before the
first start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from homeagent.cli.client import DaemonUnavailable, RemoteError, connect_to


def register(sub: Any) -> None:
    config = sub.add_parser("config", help="read and change settings")
    csub = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    get = csub.add_parser("get", help="print one setting (plugin keys as plugin.<name>.<key>)")
    get.add_argument("key")
    get.add_argument("--json", action="store_true")
    get.set_defaults(func=cmd_config_get)
    set_ = csub.add_parser("set", help="change one setting; the value is checked against its definition")
    set_.add_argument("key")
    set_.add_argument("value")
    set_.set_defaults(func=cmd_config_set)
    lst = csub.add_parser("list", help="list settings (secrets masked)")
    lst.add_argument("prefix", nargs="?", default="")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=cmd_config_list)

    llm = sub.add_parser("llm", help="LLM sources")
    lsub = llm.add_subparsers(dest="llm_command", metavar="ACTION", required=True)
    sources = lsub.add_parser("sources", help="list the LLM sources in fallback order")
    sources.add_argument("--json", action="store_true")
    sources.set_defaults(func=cmd_llm_sources)
    use = lsub.add_parser("use", help="make a source the preferred one")
    use.add_argument("name")
    use.set_defaults(func=cmd_llm_use)
    test = lsub.add_parser("test", help="send one tiny request to a source and report latency or the error")
    test.add_argument("name")
    test.add_argument("--json", action="store_true")
    test.set_defaults(func=cmd_llm_test)
    add = lsub.add_parser(
        "add", help="add a source or change one (base URL and model default to the adapter's usual ones)"
    )
    add.add_argument("name")
    add.add_argument("--adapter", default=None, help="openai, deepseek, anthropic, gemini, mistral, groq, github, "
                     "kimi, ollama, server (default openai for a new source)")
    add.add_argument("--base-url", default=None)
    add.add_argument("--model", default=None)
    add.add_argument("--api-key", default=None, help="or - to read it from standard input (kept out of the history)")
    add.set_defaults(func=cmd_llm_add)
    rm = lsub.add_parser("remove", help="remove a configured source")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_llm_remove)
    order = lsub.add_parser("order", help="set the fallback order (the first becomes the preferred one)")
    order.add_argument("names", nargs="+")
    order.set_defaults(func=cmd_llm_order)


def _paths(args: argparse.Namespace) -> Any:
    from homeagent.cli.main import paths_from

    return paths_from(args)


async def _via_daemon(args: argparse.Namespace, method: str, params: dict[str, Any]) -> Any:
    client = await connect_to(_paths(args), timeout=1.0)
    try:
        return await client.call(method, params, timeout=120)
    finally:
        await client.close()


def _call(args: argparse.Namespace, method: str, params: dict[str, Any], local: Callable[[], Any]) -> Any:
    """Ask the daemon; without one, do it locally on the data directory."""
    try:
        return asyncio.run(_via_daemon(args, method, params))
    except DaemonUnavailable:
        return local()


def _local_control(args: argparse.Namespace) -> Any:
    from homeagent.config import ConfigRegistry, core_defs
    from homeagent.control import ConfigControl

    paths = _paths(args)
    paths.ensure()
    registry = ConfigRegistry(paths.config_db)
    for definition in core_defs(paths.root):
        registry.register_def(definition)
    return ConfigControl(registry)


def _fail(message: str) -> int:
    print(f"homeagent: {message}", file=sys.stderr)
    return 1


def cmd_config_get(args: argparse.Namespace) -> int:
    from homeagent.config import ConfigError

    try:
        result = _call(args, "config.get", {"key": args.key}, lambda: _local_control(args).get({"key": args.key}))
    except (ConfigError, RemoteError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        value = result["value"]
        print(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return 0


def cmd_config_set(args: argparse.Namespace) -> int:
    from homeagent.config import ConfigError

    params = {"key": args.key, "value": args.value}
    try:
        result = _call(args, "config.set", params, lambda: _local_control(args).set(params))
    except (ConfigError, RemoteError) as exc:
        return _fail(str(exc))
    print(f"{result['key']} = {json.dumps(result['value'], ensure_ascii=False)}")
    return 0


def cmd_config_list(args: argparse.Namespace) -> int:
    params = {"prefix": args.prefix}
    result = _call(args, "config.list", params, lambda: _local_control(args).list(params))
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    width = max((len(k) for k in result), default=0)
    for key, value in result.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        print(f"{key.ljust(width)}  {shown}")
    return 0


def cmd_llm_sources(args: argparse.Namespace) -> int:
    result = _call(args, "llm.sources", {}, lambda: _local_llm(args).sources())
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    for note in result.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    print(f"{'':2}{'NAME':<14}{'ADAPTER':<11}{'MODEL':<28}{'STATE':<10}BASE URL")
    for src in result.get("sources", []):
        mark = "* " if src.get("name") == result.get("current") else "  "
        print(
            f"{mark}{src.get('name', ''):<14}{src.get('adapter', ''):<11}{src.get('model', ''):<28}"
            f"{src.get('state', ''):<10}{src.get('base_url', '')}{'  (sees images)' if src.get('vision') else ''}"
        )
    return 0


def cmd_llm_use(args: argparse.Namespace) -> int:
    params = {"name": args.name}
    try:
        result = _call(args, "llm.use", params, lambda: _local_llm(args).use(params))
    except (RemoteError, ValueError) as exc:
        return _fail(str(exc))
    print(f"preferred LLM source: {result['current']}")
    return 0


def cmd_llm_test(args: argparse.Namespace) -> int:
    params = {"name": args.name}
    try:
        result = _call(args, "llm.test", params, lambda: asyncio.run(_local_llm_test(args, params)))
    except (RemoteError, ValueError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    elif result.get("ok"):
        print(f"{result['name']}: ok in {result['latency_ms']:.0f} ms: {result.get('reply', '')!r}")
    else:
        print(f"{result['name']}: FAILED after {result['latency_ms']:.0f} ms: {result.get('error')}")
    return 0 if result.get("ok") else 1


def cmd_llm_add(args: argparse.Namespace) -> int:
    from homeagent.config import ConfigError

    params: dict[str, Any] = {"name": args.name}
    if args.adapter is None and args.name not in _stored_sources(args):
        params["adapter"] = "openai"
    key = sys.stdin.readline().strip() if args.api_key == "-" else args.api_key
    for field, value in (("adapter", args.adapter), ("base_url", args.base_url), ("model", args.model),
                         ("api_key", key)):
        if value is not None:
            params[field] = value
    try:
        result = _call(args, "llm.add", params, lambda: _local_llm(args).save_source(params))
    except (RemoteError, ValueError, ConfigError) as exc:
        return _fail(str(exc))
    source = next((s for s in result.get("sources", []) if s.get("name") == result["name"]), None)
    print(f"{'added' if result.get('created') else 'changed'} LLM source {result['name']}"
          + (f": {source['adapter']} {source['model']} at {source['base_url']}" if source else ""))
    for note in result.get("notes", []):
        if f"'{result['name']}'" in note:
            print(f"note: {note}", file=sys.stderr)
    print(f"try it: homeagent llm test {result['name']}")
    return 0


def _stored_sources(args: argparse.Namespace) -> list[str]:
    try:
        stored = _call(args, "config.list", {"prefix": "core.llm.sources."},
                       lambda: _local_control(args).list({"prefix": "core.llm.sources."}))
    except RemoteError:
        return []
    return sorted({k.split(".")[3] for k in stored if k.count(".") >= 4})


def cmd_llm_remove(args: argparse.Namespace) -> int:
    from homeagent.config import ConfigError

    params = {"name": args.name}
    try:
        _call(args, "llm.remove", params, lambda: _local_llm(args).remove_source(params))
    except (RemoteError, ValueError, ConfigError) as exc:
        return _fail(str(exc))
    print(f"removed LLM source {args.name}")
    return 0


def cmd_llm_order(args: argparse.Namespace) -> int:
    from homeagent.config import ConfigError

    params = {"names": list(args.names)}
    try:
        result = _call(args, "llm.order", params, lambda: _local_llm(args).reorder(params))
    except (RemoteError, ValueError, ConfigError) as exc:
        return _fail(str(exc))
    print("fallback order: " + " > ".join(s["name"] for s in result.get("sources", [])))
    return 0


async def _local_llm_test(args: argparse.Namespace, params: dict[str, Any]) -> dict[str, Any]:
    """``llm test`` without a daemon: one request, then the HTTP clients are closed (no unclosed-session warnings)."""
    llm = _local_llm(args)
    try:
        result: dict[str, Any] = await llm.test(params)
        return result
    finally:
        await llm.close()


def _local_llm(args: argparse.Namespace) -> Any:
    from homeagent.llm_control import LLMControl

    control = _local_control(args)
    return LLMControl.from_registry(control.registry, _paths(args))
