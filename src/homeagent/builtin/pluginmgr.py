"""Built-in ``pluginmgr``: lets the agent inspect, disable and reload plugins.

It is an ordinary plugin created by a factory (the same path external Python
plugins take); the host passes it the registry in ``config["registry"]``.
Every failure comes back to the model as ``{"isError": true, "content": …}``.

Installing, removing and enabling a plugin start (or swap) code that runs as
the owner, so the model may not do them on its own: a prompt-injected turn
could otherwise write a plugin folder and install it. "Approve, then
install": the approval policy always asks the owner about these three tools
(``OWNER_ACTIONS``; no setting or always rule waives it), the owner sees the
URL, path or name and answers Allow once or Deny (web chat, ``homeagent
chat``, ``homeagent approvals``), and the tool runs the action only when
:func:`~homeagent.agent.gate.owner_approved` confirms the owner approved this
very call. A deny or a timeout leaves everything as it was; a runner with no
approval gate gets the refusal with the command for the owner to run. For the
same reason ``plgreload`` reloads only plugins that are already loaded: a
folder that appeared since is started by the owner's ``homeagent plugin
reload``. Disabling (which only narrows what runs) stays available.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from homeagent.agent.gate import owner_approved
from homeagent.sdk.api import PluginSDK
from homeagent.sdk.types import ToolDef

if TYPE_CHECKING:
    from homeagent.plugins.registry import PluginRegistry

_NAME = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "plugin name"}},
    "required": ["name"],
}


def _error(exc: Exception) -> dict[str, Any]:
    return {"isError": True, "content": str(exc) or type(exc).__name__}


def owner_action(action: str, command: str) -> dict[str, Any]:
    """The refusal the model gets for a plugin action only the owner may take."""
    return {"isError": True, "content": (
        f"{action} is the owner's decision: it would run new code as the owner, and the model may not do that "
        f"on its own. Ask the owner to run `{command}` or to use the Plugins page of the web UI.")}


def unapproved(action: str, command: str) -> dict[str, Any]:
    """The refusal when the call reached the tool without the owner's approval of it (no gate, or other arguments)."""
    return {"isError": True, "content": (
        f"{action} is the owner's decision and runs only after the owner approves this very call, which did not "
        f"happen here (it was not run). Ask the owner to run `{command}` or to use the Plugins page of the web UI.")}


def _brief(item: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: item.get(k) for k in ("name", "kind", "version", "state", "description")}
    if item.get("error"):
        out["error"] = item["error"]
    tools = item.get("tools") or []
    if tools:
        out["tools"] = tools
    return out


class PluginManager:
    def __init__(self, name: str, registry: PluginRegistry) -> None:
        self.name = name
        self._registry = registry

    def start(self, sdk: PluginSDK) -> None:
        reg = self._registry

        def guarded(fn: Callable[[dict[str, Any]], Awaitable[Any]]) -> Callable[[dict[str, Any]], Awaitable[Any]]:
            async def call(args: dict[str, Any]) -> Any:
                try:
                    return await fn(args)
                except Exception as exc:
                    return _error(exc)

            return call

        async def install(args: dict[str, Any]) -> Any:
            upgrade = bool(args.get("upgrade"))
            if owner_approved("plugin_install", args, ("url", "upgrade")) is None:
                flag = " --upgrade" if upgrade else ""
                return unapproved("installing a plugin", f"homeagent plugin install{flag} {args['url']}")
            return await reg.install(str(args["url"]), upgrade=upgrade)

        async def list_(_: dict[str, Any]) -> Any:
            return {"plugins": [_brief(p) for p in reg.list()]}

        async def remove(args: dict[str, Any]) -> Any:
            if owner_approved("plugin_remove", args, ("name",)) is None:
                return unapproved("removing a plugin", f"homeagent plugin remove {args['name']}")
            return await reg.remove(str(args["name"]))

        async def info(args: dict[str, Any]) -> Any:
            return reg.info(str(args["name"]))

        async def reload(args: dict[str, Any]) -> Any:
            name = args.get("name")
            if name:
                if reg.get(str(name)) is None:
                    return owner_action(f"starting the new plugin folder {name!r}", f"homeagent plugin reload {name}")
                return _brief(await reg.reload_one(str(name)))
            loaded = [p["name"] for p in reg.list() if not p.get("builtin") and reg.get(str(p["name"])) is not None]
            reloaded = [_brief(await reg.reload_one(str(n))) for n in loaded]
            return {"reloaded": reloaded, "note": "plugins already loaded were reloaded; new plugin folders are "
                    "started only by the owner (`homeagent plugin reload`)"}

        async def enable(args: dict[str, Any]) -> Any:
            if owner_approved("plugin_enable", args, ("name",)) is None:
                return unapproved("enabling a plugin", f"homeagent plugin enable {args['name']}")
            return _brief(await reg.enable(str(args["name"])))

        async def disable(args: dict[str, Any]) -> Any:
            if args["name"] == self.name:
                return {"isError": True, "content": "pluginmgr cannot disable itself from a tool call"}
            return _brief(await reg.disable(str(args["name"]), by="agent"))

        tools: list[tuple[ToolDef, Callable[[dict[str, Any]], Awaitable[Any]]]] = [
            (
                ToolDef(
                    name="plugin_install",
                    description="Install a plugin package (.hmap) from an http(s) URL or a file path. The owner "
                                "is asked first and it runs only if they approve; on a deny or no answer nothing "
                                "is installed.",
                    parameters={
                        "type": "object",
                        "properties": {
                            "url": {"type": "string", "description": "http(s) URL or file path of the .hmap"},
                            "upgrade": {
                                "type": "boolean",
                                "description": "replace an installed plugin of the same name",
                            },
                        },
                        "required": ["url"],
                    },
                    serial=True,
                    parallel_safe=False,
                ),
                install,
            ),
            (
                ToolDef(
                    name="plugin_list", description="List plugins with kind, version, state and tools.", no_memory=True
                ),
                list_,
            ),
            (
                ToolDef(
                    name="plugin_remove",
                    description="Uninstall a plugin; the owner is asked first and it runs only if they approve.",
                    parameters=_NAME,
                    serial=True,
                    parallel_safe=False,
                ),
                remove,
            ),
            (
                ToolDef(
                    name="plugin_info",
                    description="Details of one plugin: manifest, state, last error, tools.",
                    parameters=_NAME,
                    no_memory=True,
                ),
                info,
            ),
            (
                ToolDef(
                    name="plgreload",
                    description="Reload loaded plugins without restarting (one plugin when name is given); "
                                "new plugin folders are started only by the owner.",
                    parameters={
                        "type": "object",
                        "properties": {"name": {"type": "string", "description": "optional plugin"}},
                    },
                    serial=True,
                    parallel_safe=False,
                ),
                reload,
            ),
            (
                ToolDef(
                    name="plugin_enable",
                    description="Enable (start) a disabled plugin; the owner is asked first and it runs only if "
                                "they approve.",
                    parameters=_NAME,
                    serial=True,
                    parallel_safe=False,
                ),
                enable,
            ),
            (
                ToolDef(
                    name="plugin_disable",
                    description="Stop a plugin and keep it disabled across restarts.",
                    parameters=_NAME,
                    serial=True,
                    parallel_safe=False,
                ),
                disable,
            ),
        ]
        for tool, handler in tools:
            sdk.register_tool(tool, guarded(handler))

    def stop(self) -> None:
        """Nothing to release: the tools are removed by the host."""


def create_plugin(name: str, config: Mapping[str, Any]) -> PluginManager:
    registry = config.get("registry")
    if registry is None:
        raise ValueError("pluginmgr needs the plugin registry (config['registry'])")
    return PluginManager(name, registry)
