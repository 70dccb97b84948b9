"""Built-in ``pluginmgr``: lets the agent install, inspect, remove and reload plugins.

It is an ordinary plugin created by a factory (the same path external Python
plugins take); the host passes it the registry in ``config["registry"]``.
Every failure comes back to the model as ``{"isError": true, "content": …}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

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
            return await reg.install(str(args["url"]), upgrade=bool(args.get("upgrade", False)))

        async def list_(_: dict[str, Any]) -> Any:
            return {"plugins": [_brief(p) for p in reg.list()]}

        async def remove(args: dict[str, Any]) -> Any:
            return await reg.remove(str(args["name"]))

        async def info(args: dict[str, Any]) -> Any:
            return reg.info(str(args["name"]))

        async def reload(args: dict[str, Any]) -> Any:
            name = args.get("name")
            if name:
                return _brief(await reg.reload_one(str(name)))
            return await reg.reload_all()

        async def enable(args: dict[str, Any]) -> Any:
            return _brief(await reg.enable(str(args["name"])))

        async def disable(args: dict[str, Any]) -> Any:
            if args["name"] == self.name:
                return {"isError": True, "content": "pluginmgr cannot disable itself from a tool call"}
            return _brief(await reg.disable(str(args["name"]), by="agent"))

        tools: list[tuple[ToolDef, Callable[[dict[str, Any]], Awaitable[Any]]]] = [
            (
                ToolDef(
                    name="plugin_install",
                    description="Install a plugin package (.hmap) from an http(s) URL or a local path, then start it.",
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
                    description="Stop and uninstall a plugin.",
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
                    description="Reload plugins from the plugins folder without restarting (one plugin when name is given).",
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
                    description="Enable a disabled plugin and start it.",
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
