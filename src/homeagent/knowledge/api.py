"""The SDK's ``KnowledgeAPI`` over the knowledge base, one explicit call per method.

Plugins of every kind (in-process, Lua, subprocess through ``knowledge.*``)
get the same JSON-shaped answers as the agent's ``knowledge_search`` tool;
the base does its file and index work in a worker thread.
"""

from __future__ import annotations

import builtins
from typing import Any

from homeagent.knowledge.base import KnowledgeBase
from homeagent.sdk.api import KnowledgeAPI


class KnowledgeService(KnowledgeAPI):
    """``KnowledgeAPI`` for plugins; built once in ``daemon.py`` around the daemon's knowledge base."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self._kb = kb

    async def search(self, query: str, top_k: int = 5) -> builtins.list[dict[str, Any]]:
        """``{"name", "score", "snippet", "content"}`` per hit, best first."""
        return [hit.to_dict() for hit in await self._kb.search(query, top_k)]

    async def add(self, name: str, content: str) -> dict[str, Any]:
        """The entry's info and ``replaced``: whether an entry of that name was overwritten."""
        info, replaced = await self._kb.add(name, content)
        return {**info.to_dict(), "replaced": replaced}

    async def list(self) -> builtins.list[str]:
        return await self._kb.names()
