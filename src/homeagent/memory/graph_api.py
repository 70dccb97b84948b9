"""The SDK's ``MemoryAPI`` over the knowledge graph, one explicit call per method.

Why a class of its own: plugins (in-process, Lua and subprocess through the
``memory.*`` RPC methods) see the graph only through this seam, and they all
get the same JSON-shaped answers the agent's ``memory_recall`` tool gets, not
the store's row tuples. Every call goes to a :class:`GraphDB` coroutine, which
runs SQLite in the graph's worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from homeagent.memory.graph import GraphDB
from homeagent.sdk.api import MemoryAPI

PLUGIN_SOURCE = "plugin"
"""The ``source`` recorded on facts a plugin commits (the agent's own are ``agent``/``distill``)."""


class GraphMemoryService(MemoryAPI):
    """``MemoryAPI`` for plugins; built once in ``daemon.py`` around the daemon's graph."""

    def __init__(self, graph: GraphDB) -> None:
        self._graph = graph

    async def recall(self, keywords: list[str], depth: int = 2) -> dict[str, Any]:
        """``{"seeds", "entities", "relations"}``, the shape ``memory_recall`` answers with."""
        return (await self._graph.recall(list(keywords), depth)).to_dict()

    async def commit(self, triples: list[Any]) -> dict[str, Any]:
        return (await self._graph.commit(list(triples), source=PLUGIN_SOURCE)).to_dict()

    async def introspect(self) -> dict[str, Any]:
        return await self._graph.introspect()

    async def merge_entities(self, source: str, target: str) -> int:
        return await self._graph.merge_entities(source, target)

    async def purge(self, criteria: Mapping[str, str], mode: str = "soft") -> int:
        return await self._graph.purge(dict(criteria), mode)
