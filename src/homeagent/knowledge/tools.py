"""knowledge_search / knowledge_create / knowledge_list / knowledge_delete for the model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from homeagent.knowledge.base import KnowledgeBase, KnowledgeError
from homeagent.memory.cleaners import drop_output
from homeagent.sdk.types import ToolDef

Handler = Callable[[dict[str, Any]], Awaitable[Any]]
PLUGIN = "knowledge"
_S = {"type": "string"}


def knowledge_tools(kb: KnowledgeBase) -> list[tuple[ToolDef, Handler]]:
    """ToolDefs and handlers for the knowledge base; register each with the tool registry."""

    async def search(args: dict[str, Any]) -> Any:
        hits = await kb.search(str(args["query"]), int(args.get("top_k", 5)))
        if not hits:
            return {"results": [], "note": "no knowledge entry matches"}
        return {"results": [h.to_dict() for h in hits]}

    async def create(args: dict[str, Any]) -> Any:
        info, replaced = await kb.add(str(args["name"]), str(args["content"]))
        return {"ok": True, "replaced": replaced, **info.to_dict()}

    async def list_(args: dict[str, Any]) -> Any:
        return {"entries": [i.to_dict() for i in await kb.entries()]}

    async def delete(args: dict[str, Any]) -> Any:
        name = str(args["name"])
        if not await kb.delete(name):
            return {"isError": True, "content": f"no knowledge entry named {name!r}"}
        return {"ok": True, "deleted": name}

    def guard(fn: Handler) -> Handler:
        async def run(args: dict[str, Any]) -> Any:
            try:
                return await fn(args)
            except KnowledgeError as exc:
                return {"isError": True, "content": str(exc)}

        return run

    # Their output is memory already: not indexed again (drop_output), but the turn is remembered.
    read: dict[str, Any] = {"plugin": PLUGIN, "cleaner": drop_output, "parallel_safe": True}
    write: dict[str, Any] = {"plugin": PLUGIN, "cleaner": drop_output, "serial": True, "parallel_safe": False}
    return [
        (
            ToolDef(
                "knowledge_search",
                "Search the user's knowledge base (curated notes) and return the best matching entries.",
                {
                    "type": "object",
                    "properties": {
                        "query": _S,
                        "top_k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
                    },
                    "required": ["query"],
                },
                **read,
            ),
            guard(search),
        ),
        (
            ToolDef(
                "knowledge_create",
                "Create or replace a knowledge entry: name is a folder name (no '/' or '..'), content is markdown.",
                {
                    "type": "object",
                    "properties": {"name": _S, "content": {"type": "string", "description": "markdown"}},
                    "required": ["name", "content"],
                },
                **write,
            ),
            guard(create),
        ),
        (
            ToolDef("knowledge_list", "List the knowledge base entries.", {"type": "object", "properties": {}}, **read),
            guard(list_),
        ),
        (
            ToolDef(
                "knowledge_delete",
                "Delete a knowledge entry by name.",
                {"type": "object", "properties": {"name": _S}, "required": ["name"]},
                **write,
            ),
            guard(delete),
        ),
    ]
