"""The ``plugins.*`` methods of the daemon's local socket (what ``homeagent plugin …`` calls)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from homeagent.io.socket_server import RPCError, SocketServer
from homeagent.plugins.errors import PluginError
from homeagent.plugins.manifest import ManifestError
from homeagent.plugins.package import PackageError
from homeagent.plugins.registry import PluginRegistry

__all__ = ["register_rpc"]


def register_rpc(socket_server: SocketServer, registry: PluginRegistry) -> None:
    """Add ``plugins.*`` methods to the daemon's socket server (used by ``homeagent plugin …``)."""

    def name_of(params: dict[str, Any]) -> str:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise RPCError("missing 'name'")
        return name

    def guard(fn: Callable[[dict[str, Any]], Awaitable[Any]]) -> Callable[[dict[str, Any]], Awaitable[Any]]:
        async def call(params: dict[str, Any]) -> Any:
            try:
                return await fn(params)
            except (PluginError, PackageError, ManifestError, ValueError) as e:
                raise RPCError(str(e)) from e

        return call

    async def list_(_: dict[str, Any]) -> Any:
        return registry.list()

    async def info(p: dict[str, Any]) -> Any:
        return registry.info(name_of(p))

    async def reload(p: dict[str, Any]) -> Any:
        if p.get("name"):
            return await registry.reload_one(name_of(p))
        return await registry.reload_all()

    async def enable(p: dict[str, Any]) -> Any:
        return await registry.enable(name_of(p))

    async def disable(p: dict[str, Any]) -> Any:
        return await registry.disable(name_of(p), by="cli")

    async def install(p: dict[str, Any]) -> Any:
        source = p.get("source")
        if not isinstance(source, str) or not source:
            raise RPCError("missing 'source' (a .hmap path or URL)")
        return await registry.install(source, upgrade=bool(p.get("upgrade")))

    async def remove(p: dict[str, Any]) -> Any:
        return await registry.remove(name_of(p))

    for method, fn in {
        "plugins.list": list_,
        "plugins.info": info,
        "plugins.reload": reload,
        "plugins.enable": enable,
        "plugins.disable": disable,
        "plugins.install": install,
        "plugins.remove": remove,
    }.items():
        socket_server.add_method(method, guard(fn))
