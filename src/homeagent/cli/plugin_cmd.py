"""``homeagent plugin …``: list, inspect, install, remove, enable, disable, reload, init, pack.

Commands talk to the running daemon over its socket so changes take effect
at once; without a daemon, list/info/install/remove/enable/disable work on
the data directory directly (the daemon picks them up when it starts) and
reload says there is nothing to reload. ``init`` and ``pack`` never need a
daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from homeagent.cli.client import DaemonUnavailable, RemoteError, connect_to

KINDS = ("lua", "python", "skill")


def register(sub: Any) -> None:
    plugin = sub.add_parser("plugin", help="manage plugins (Lua, Python, skills, packages)")
    psub = plugin.add_subparsers(dest="plugin_command", metavar="ACTION", required=True)

    lst = psub.add_parser("list", help="list plugins with kind, version, state and tools")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=cmd_list)

    info = psub.add_parser("info", help="show one plugin: manifest, state, last error, registrations")
    info.add_argument("name")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=cmd_info)

    install = psub.add_parser(
        "install", help="install a plugin: a .hmap/.zip file, an http(s) URL, or a folder (a SKILL.md folder is a skill)"
    )
    install.add_argument("source")
    install.add_argument("--upgrade", action="store_true", help="replace an installed plugin of the same name")
    install.add_argument("--json", action="store_true")
    install.set_defaults(func=cmd_install)

    remove = psub.add_parser("remove", help="stop and uninstall a plugin")
    remove.add_argument("name")
    remove.set_defaults(func=cmd_remove)

    for action, helptext in (
        ("enable", "enable a plugin (and start it)"),
        ("disable", "stop a plugin and keep it off"),
    ):
        p = psub.add_parser(action, help=helptext)
        p.add_argument("name")
        p.set_defaults(func=cmd_enable if action == "enable" else cmd_disable)

    reload = psub.add_parser("reload", help="reload one plugin, or all plugins from the plugins folder")
    reload.add_argument("name", nargs="?")
    reload.set_defaults(func=cmd_reload)

    init = psub.add_parser("init", help="create a working example plugin to start from")
    init.add_argument("name")
    init.add_argument("--kind", choices=KINDS, default="lua")
    init.add_argument(
        "--process", action="store_true", help="with --kind python: run it as a crash-isolated subprocess plugin"
    )
    init.add_argument("--dir", default=".", help="folder to create it in (default: the current folder)")
    init.set_defaults(func=cmd_init)

    pack = psub.add_parser("pack", help="build a .hmap package from a plugin folder (or a SKILL.md-only skill folder)")
    pack.add_argument("dir")
    pack.add_argument("-o", "--output", help="output file (default: ./<name>-<version>.hmap)")
    pack.set_defaults(func=cmd_pack)


# ---------------------------------------------------------------- plumbing


def _paths(args: argparse.Namespace) -> Any:
    from homeagent.cli.main import paths_from

    return paths_from(args)


def _fail(message: str, code: int = 1) -> int:
    print(f"homeagent: {message}", file=sys.stderr)
    return code


async def _via_daemon(args: argparse.Namespace, method: str, params: dict[str, Any]) -> Any:
    client = await connect_to(_paths(args), timeout=1.0)
    try:
        return await client.call(method, params, timeout=300)
    finally:
        await client.close()


def _call(args: argparse.Namespace, method: str, params: dict[str, Any], local: Callable[[], Any] | None) -> Any:
    try:
        return asyncio.run(_via_daemon(args, method, params))
    except DaemonUnavailable:
        if local is None:
            raise
        return local()


def _local_config(args: argparse.Namespace) -> Any:
    from homeagent.config import ConfigRegistry, core_defs

    paths = _paths(args)
    paths.ensure()
    registry = ConfigRegistry(paths.config_db)
    for definition in core_defs(paths.root):
        registry.register_def(definition)
    return registry


def _plugins_dir(args: argparse.Namespace, config: Any) -> Path:
    paths = _paths(args)
    return paths.resolve(config.get_str("core.plugin.dir", ""), paths.plugins)


def _builtin_names() -> set[str]:
    from homeagent.plugins.registry import BUILTIN_PLUGINS

    names = set(BUILTIN_PLUGINS)
    try:  # the daemon also registers the built-ins of homeagent.builtin.catalog
        from homeagent.builtin.catalog import builtin_factories

        names |= set(builtin_factories())
    except Exception:
        pass
    return names


def _local_list(args: argparse.Namespace) -> list[dict[str, Any]]:
    from homeagent.plugins.discovery import scan_plugins_dir
    from homeagent.plugins.shipped import available_entries

    config = _local_config(args)
    try:
        items = scan_plugins_dir(
            _plugins_dir(args, config), disabled=set(config.disabled_plugins()), builtins=_builtin_names()
        )
    finally:
        config.close()
    return items + available_entries({item["name"] for item in items})


# ---------------------------------------------------------------- commands


def cmd_list(args: argparse.Namespace) -> int:
    items = _call(args, "plugins.list", {}, lambda: _local_list(args))
    if args.json:
        print(json.dumps(items, ensure_ascii=False, indent=2))
        return 0
    if not items:
        print("no plugins")
        return 0
    print(f"{'NAME':<22}{'KIND':<9}{'VERSION':<10}{'STATE':<12}TOOLS")
    for item in items:
        tools = item.get("tools") or []
        shown = ", ".join(tools[:4]) + (f" (+{len(tools) - 4})" if len(tools) > 4 else "")
        print(
            f"{item['name']:<22}{item.get('kind', ''):<9}{item.get('version', ''):<10}{item.get('state', ''):<12}{shown}"
        )
        if item.get("error"):
            print(f"  error: {item['error']}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    def local() -> Any:
        for item in _local_list(args):
            if item["name"] == args.name:
                return item
        raise RemoteError(f"no plugin named {args.name!r}")

    try:
        item = _call(args, "plugins.info", {"name": args.name}, local)
    except RemoteError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(item, ensure_ascii=False, indent=2))
        return 0
    keys = ("name", "kind", "version", "state", "description", "author", "license", "entry", "path", "error")
    for key in keys:
        if item.get(key):
            print(f"{key + ':':<14}{item[key]}")
    for key in ("tools", "stages", "channels", "cleaners", "capabilities", "env", "tags", "warnings"):
        if item.get(key):
            print(f"{key + ':':<14}{', '.join(map(str, item[key]))}")
    status = (item.get("health") or {}).get("status")
    if status:
        print(f"{'status:':<14}{status.get('state', '')}" + (f": {status['detail']}" if status.get("detail") else ""))
    if item.get("note"):
        print(f"{'note:':<14}{item['note']}")
    skill = item.get("skill")
    if skill and skill.get("missing"):
        print(f"{'missing:':<14}{'; '.join(skill['missing'])}")
    health = item.get("health") or {}
    crash = health.get("last_crash")
    if isinstance(crash, dict) and crash.get("reason"):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(crash.get("at") or 0)))
        print(f"{'last crash:':<14}{when}: {crash['reason']} (restarts: {health.get('restarts', 0)})")
    limits = health.get("limits")
    if isinstance(limits, dict):
        memory, cpu = limits.get("max_memory_mb") or 0, limits.get("max_cpu_seconds") or 0
        print(
            f"{'limits:':<14}memory {f'{memory} MB' if memory else 'unlimited'}, "
            f"CPU time {f'{cpu} s' if cpu else 'unlimited'}"
            + (f"; {health['log_dropped']} log lines dropped" if health.get("log_dropped") else "")
        )
    install = item.get("install")
    if install and install.get("sha256"):
        print(f"{'sha256:':<14}{install['sha256']}")
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from homeagent.plugins.package import PackageError

    source = args.source
    if not source.startswith(("http://", "https://")):
        # the daemon runs in another working directory: a relative path means the user's, so send it absolute
        source = str(_expand(source).resolve())
    params = {"source": source, "upgrade": args.upgrade}

    def local() -> Any:
        return asyncio.run(_local_install(args))

    try:
        result = _call(args, "plugins.install", params, local)
    except (RemoteError, PackageError, ValueError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    print(f"{result['status']} {result['name']} {result['version']} ({result['kind']}) in {result['path']}")
    print(f"sha256 {result['sha256']}")
    if result.get("state"):
        print(f"state  {result['state']}" + (f": {result['error']}" if result.get("error") else ""))
    elif result.get("note"):
        print(result["note"])
    return 0 if result.get("state") != "failed" else 1


async def _local_install(args: argparse.Namespace) -> dict[str, Any]:
    from homeagent import __version__
    from homeagent.plugins.package import (
        PackageError,
        download_package,
        extract_package,
        inspect_package,
        pack_folder,
    )
    from homeagent.plugins.registry import RESERVED_NAMES

    config = _local_config(args)
    plugins_dir = _plugins_dir(args, config)
    config.close()
    downloaded = None
    try:
        if args.source.startswith(("http://", "https://")):
            downloaded = await download_package(args.source, plugins_dir / ".downloads")
            path = downloaded
        else:
            path = _expand(args.source)
            if path.is_dir():  # a plugin or SKILL.md folder: packed, then checked like a package
                downloaded = await asyncio.to_thread(pack_folder, path, plugins_dir / ".downloads")
                path = downloaded
        info = await asyncio.to_thread(inspect_package, path, host_version=__version__)
        if info.manifest.name in _builtin_names() or info.manifest.name in RESERVED_NAMES:
            raise PackageError(f"{info.manifest.name!r} is the name of a built-in plugin; choose another name")
        existed = (plugins_dir / info.manifest.name).exists()
        target = await asyncio.to_thread(extract_package, info, plugins_dir, upgrade=args.upgrade, source=args.source)
    finally:
        if downloaded is not None:
            downloaded.unlink(missing_ok=True)
    return {
        "status": "upgraded" if existed else "installed",
        **info.to_dict(),
        "path": str(target),
        "note": "no daemon is running: the plugin starts with the next `homeagent run`",
    }


def _expand(source: str) -> Path:
    return Path(source).expanduser()


def cmd_remove(args: argparse.Namespace) -> int:
    from homeagent.plugins.package import PackageError, remove_plugin_dir

    def local() -> Any:
        if args.name in _builtin_names():
            raise PackageError(f"{args.name!r} is a built-in plugin and cannot be removed; disable it instead")
        config = _local_config(args)
        try:
            path = remove_plugin_dir(_plugins_dir(args, config), args.name)
            if config.is_disabled(args.name):
                config.enable_plugin(args.name)
        finally:
            config.close()
        return {"status": "removed", "name": args.name, "path": str(path)}

    try:
        result = _call(args, "plugins.remove", {"name": args.name}, local)
    except (RemoteError, PackageError) as exc:
        return _fail(str(exc))
    print(f"removed {result['name']} ({result['path']})")
    return 0


def _toggle(args: argparse.Namespace, enable: bool) -> int:
    def local() -> Any:
        from homeagent.plugins.shipped import link_shipped

        config = _local_config(args)
        try:
            if enable:
                if args.name not in _builtin_names():
                    link_shipped(_plugins_dir(args, config), args.name)
                config.enable_plugin(args.name)
            else:
                config.disable_plugin(args.name, "cli")
        finally:
            config.close()
        return {
            "name": args.name,
            "state": "enabled" if enable else "disabled",
            "note": "no daemon is running: this applies at the next `homeagent run`",
        }

    from homeagent.plugins.package import PackageError

    try:
        result = _call(args, "plugins.enable" if enable else "plugins.disable", {"name": args.name}, local)
    except (RemoteError, PackageError) as exc:
        return _fail(str(exc))
    line = f"{result['name']}: {result.get('state')}"
    if result.get("error"):
        line += f" ({result['error']})"
    print(line)
    if result.get("note"):
        print(result["note"])
    return 0 if result.get("state") != "failed" else 1


def cmd_enable(args: argparse.Namespace) -> int:
    return _toggle(args, True)


def cmd_disable(args: argparse.Namespace) -> int:
    return _toggle(args, False)


def cmd_reload(args: argparse.Namespace) -> int:
    params = {"name": args.name} if args.name else {}
    try:
        result = _call(args, "plugins.reload", params, None)
    except DaemonUnavailable:
        return _fail("no daemon is running, so there is nothing to reload; plugins load when `homeagent run` starts", 3)
    except RemoteError as exc:
        return _fail(str(exc))
    if args.name:
        line = f"{result['name']}: {result['state']}"
        print(line + (f" ({result['error']})" if result.get("error") else ""))
        return 0 if result["state"] != "failed" else 1
    states = ", ".join(f"{n} {s}" for s, n in sorted(result.get("states", {}).items()))
    print(f"reloaded {result.get('plugins', 0)} plugins: {states}")
    for name, error in result.get("failed", {}).items():
        print(f"  {name}: {error}")
    return 0 if not result.get("failed") else 1


def cmd_init(args: argparse.Namespace) -> int:
    from homeagent.plugins.manifest import NAME_RE

    if not NAME_RE.match(args.name):
        return _fail(f"invalid plugin name {args.name!r}: use letters, digits, '_' or '-'")
    target = Path(args.dir).expanduser() / args.name
    if target.exists():
        return _fail(f"{target} already exists")
    files = scaffold(args.name, args.kind, process=getattr(args, "process", False))
    for rel, content in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    print(f"created {args.kind} plugin {args.name} in {target}:")
    for rel in files:
        print(f"  {rel}")
    print(f"try it: copy the folder into the plugins folder and run `homeagent plugin reload {args.name}`,")
    print(f"or pack it: `homeagent plugin pack {target}`")
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    from homeagent.plugins.manifest import ManifestError
    from homeagent.plugins.package import PackageError, pack_plugin

    try:
        out, manifest, digest = pack_plugin(Path(args.dir), Path(args.output) if args.output else None)
    except (ManifestError, PackageError) as exc:
        return _fail(str(exc))
    print(f"packed {manifest.name} {manifest.version} ({manifest.kind}) -> {out}")
    print(f"sha256 {digest}  size {out.stat().st_size} bytes")
    return 0


# ---------------------------------------------------------------- scaffolds


def _manifest(name: str, entry: str, description: str, *, process: bool = False) -> str:
    from homeagent import __version__

    data = {
        "name": name,
        "version": "0.1.0",
        "description": description,
        "author": "",
        "license": "",
        "entry": entry,
        "min_version": __version__,
        "capabilities": [],
        "tags": [],
    }
    if process:
        data["runtime"] = "process"
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def scaffold(name: str, kind: str, *, process: bool = False) -> dict[str, str]:
    """The files of a new working plugin of ``kind`` (relative path → content)."""
    tool = name.replace("-", "_") + "_hello"
    if kind == "lua":
        main = f"""\
            -- {name}: a HomeAgent Lua plugin. See docs/plugins.md for the whole sdk.* API.
            local plugin = {{ name = "{name}" }}

            sdk.register_tool("{tool}", {{
              description = "Say hello to someone.",
              parameters = {{
                type = "object",
                properties = {{ who = {{ type = "string", description = "who to greet" }} }},
                required = {{ "who" }},
              }},
            }}, function(args)
              return {{ greeting = "Hello, " .. args.who .. "!" }}
            end)

            function plugin.start(s)
              s.log("info", "{name} started")
            end

            function plugin.stop()
            end

            return plugin
            """
        return {"plugin.json": _manifest(name, "main.lua", "A Lua plugin."), "main.lua": textwrap.dedent(main)}
    if kind == "python":
        main = f'''\
            """{name}: a HomeAgent Python plugin. See docs/plugins.md for the whole SDK."""

            from __future__ import annotations

            from typing import Any

            from homeagent.sdk import Plugin, PluginSDK


            class Hello:
                def __init__(self, name: str) -> None:
                    self.name = name

                async def start(self, sdk: PluginSDK) -> None:
                    async def hello(args: dict[str, Any]) -> Any:
                        return {{"greeting": f"Hello, {{args['who']}}!"}}

                    sdk.register_tool(
                        "{tool}",
                        hello,
                        description="Say hello to someone.",
                        parameters={{
                            "type": "object",
                            "properties": {{"who": {{"type": "string", "description": "who to greet"}}}},
                            "required": ["who"],
                        }},
                    )

                async def stop(self) -> None:
                    pass


            def create_plugin(name: str, config: dict[str, Any]) -> Plugin:
                return Hello(name)
            '''
        description = "A Python plugin run as a subprocess." if process else "A Python plugin."
        return {
            "plugin.json": _manifest(name, "main.py", description, process=process),
            "main.py": textwrap.dedent(main),
        }
    if kind == "skill":
        skill = f"""\
            ---
            name: {name}
            description: Describe in one or two sentences what this skill does and when the agent should use it.
            license: Apache-2.0
            metadata: {{"openclaw": {{"requires": {{"bins": []}}}}}}
            ---

            # {name}

            Step-by-step instructions the agent follows when this skill applies.

            1. First step.
            2. Second step; bundled files are read with skill_file("{name}", "reference.md").
            """
        return {
            "plugin.json": _manifest(name, "SKILL.md", "A SKILL.md skill."),
            "SKILL.md": textwrap.dedent(skill),
            "reference.md": f"# {name} reference\n\nBackground material the skill's instructions point to.\n",
        }
    raise ValueError(f"unknown kind {kind!r} (choose {', '.join(KINDS)})")
