"""The memory and person tools the model calls (names and parameters as in the original).

Every handler returns JSON; bad input comes back as ``{"isError": True,
"content": …}`` naming the problem, and a failed write changes nothing. The
tools' output is memory already, so their cleaner drops it: feeding a recall
back into the context → documents → graph pipeline would only duplicate it.
They are not ``no_memory``: that would forget the whole turn (the user's
"my dentist is Dr. Okafor" with it) the moment the model saved the fact.
Writes are ``serial`` so a commit and an edit in one LLM turn keep their order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from homeagent.memory.cleaners import drop_output
from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_model import RETIRE_SUPERSEDED, GraphError, Triple, sentence_hash, split_keywords
from homeagent.memory.indexer import MemoryIndexer
from homeagent.memory.media import MediaError, MediaRefs, marker, with_markers
from homeagent.memory.social import Social
from homeagent.sdk.types import ToolDef

Handler = Callable[[dict[str, Any]], Awaitable[Any]]

PLUGIN = "memory"
MAX_RECALL_RELATIONS = 60
MAX_RECALL_SEEDS = 10
RECALL_FANOUT = 20
MAX_RECALL_ENTITIES = 30

_S = {"type": "string"}


def _obj(props: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = list(required)
    return schema


def _err(exc: Exception) -> dict[str, Any]:
    return {"isError": True, "content": str(exc)}


def _guard(fn: Handler) -> Handler:
    async def run(args: dict[str, Any]) -> Any:
        try:
            return await fn(args)
        except GraphError as exc:
            return _err(exc)

    return run


def graph_tools(
    graph: GraphDB,
    indexer: MemoryIndexer | None,
    social: Social,
    *,
    media: MediaRefs | None = None,
) -> list[tuple[ToolDef, Handler]]:
    """ToolDefs and handlers for memory_* and person_*; register each with the tool registry.

    With ``media`` (the media store), a triple's ``media_digests`` become
    markers appended to its sentence and ``graph_sentence`` references keyed
    by the sentence's hash; an unknown digest fails the whole commit. Without
    it (``core.memory.media.enabled`` off) the digests are dropped silently.
    """

    async def memory_recall(args: dict[str, Any]) -> Any:
        keywords = split_keywords(str(args.get("query_intent", "")))
        if not keywords:
            return _err(GraphError("query_intent needs at least one keyword (comma-separated)"))
        depth = int(args.get("depth", 2))
        sort = str(args.get("sort", "relevance"))
        if sort not in ("relevance", "recent"):
            return _err(GraphError("sort must be 'relevance' or 'recent'"))
        if indexer is not None:
            # The prompt block's seeding path (names, relation words and sentences, vectors), so "dentist"
            # finds has_dentist here too and both always agree on what a query is about.
            result, _ = await indexer.recall(
                ", ".join(keywords),
                keywords,
                depth=depth,
                sort=sort,
                max_seeds=MAX_RECALL_SEEDS,
                fanout=RECALL_FANOUT,
                max_relations=MAX_RECALL_RELATIONS,
            )
            indexer.mark_recalled(result)
        else:
            result = await graph.recall(
                keywords, depth, sort=sort, max_seeds=MAX_RECALL_SEEDS, fanout=RECALL_FANOUT,
                max_relations=MAX_RECALL_RELATIONS,
            )  # fmt: skip
        out = result.to_dict()
        out["entities"] = out["entities"][:MAX_RECALL_ENTITIES]
        if result.seeds:
            past = await graph.recall(
                [], 1, entity_ids=[e.id for e in result.seeds], include_history=True, max_relations=200, fanout=50
            )
            out["past"] = [
                r.to_dict() for r in past.relations if not r.current and r.retire_reason == RETIRE_SUPERSEDED
            ][:10]
            if not out["past"]:
                del out["past"]
        else:
            out["note"] = "nothing in memory matches these keywords"
        return out

    async def memory_commit(args: dict[str, Any]) -> Any:
        raw = args.get("triples")
        if not isinstance(raw, list) or not raw:
            return _err(GraphError("triples must be a non-empty list of {subject, relation, object}"))
        triples = [Triple.from_dict(t, source="tool") for t in raw]
        owners: list[tuple[str, list[str]]] = []
        attached: list[str] = []
        for i, t in enumerate(triples):
            if not t.media:
                continue
            if media is None:
                t.media = ()
                continue
            try:
                infos = await media.ainfos(t.media)
            except MediaError as exc:
                return _err(GraphError(f"nothing was committed: triple {i + 1}: {exc}"))
            t.sentence = with_markers(t.sentence or "", infos)
            t.media = tuple(info.digest for info in infos)
            owners.append((sentence_hash(t.sentence), list(t.media)))
            attached += [marker(info) for info in infos]
        added: list[tuple[str, list[str]]] = []
        try:
            if media is not None:
                for owner, digests in owners:
                    added.append((owner, await media.aadd_refs("graph_sentence", owner, digests)))
            report = await graph.commit(triples, source="tool")
        except (MediaError, GraphError) as exc:
            for owner, new in added:  # only the references this call created: older identical ones stay
                if new and media is not None:
                    await media.aremove_refs("graph_sentence", owner, new)
            return _err(exc)
        out: dict[str, Any] = {"ok": True, **report.to_dict()}
        if attached:
            out["media"] = attached
        return out

    async def memory_introspect(args: dict[str, Any]) -> Any:
        return await graph.introspect()

    async def memory_merge(args: dict[str, Any]) -> Any:
        moved = await graph.merge_entities(str(args["source"]), str(args["target"]))
        return {"ok": True, "merged": args["source"], "into": args["target"], "relations_moved": moved}

    async def memory_delete_entity(args: dict[str, Any]) -> Any:
        return {"ok": True, **(await graph.delete_entity(str(args["name"])))}

    async def memory_block_merge(args: dict[str, Any]) -> Any:
        return {
            "ok": True,
            **(await graph.block_merge(str(args["entity_a"]), str(args["entity_b"]), int(args["rounds"]))),
        }

    async def memory_purge(args: dict[str, Any]) -> Any:
        criteria = {k: str(args[k]) for k in ("subject_contains", "relation_type", "target_contains") if args.get(k)}
        mode = str(args.get("mode", "soft"))
        count = await graph.purge(criteria, mode)
        return {"ok": True, "mode": mode, "relations": count}

    async def memory_edit(args: dict[str, Any]) -> Any:
        new = await graph.edit(
            str(args["old_subject"]),
            str(args["old_relation"]),
            str(args["old_object"]),
            new_subject=args.get("new_subject") or None,
            new_relation=args.get("new_relation") or None,
            new_object=args.get("new_object") or None,
        )
        return {"ok": True, "now": new.to_dict()}

    async def person_query(args: dict[str, Any]) -> Any:
        return (await social.query(str(args["name"]))).to_dict()

    async def person_set_trait(args: dict[str, Any]) -> Any:
        return {"ok": True, **(await social.set_trait(str(args["name"]), str(args["trait"]), str(args["value"])))}

    async def person_relate(args: dict[str, Any]) -> Any:
        return {
            "ok": True,
            **(await social.relate(str(args["person_a"]), str(args["relation"]), str(args["person_b"]))),
        }

    async def person_network(args: dict[str, Any]) -> Any:
        return await social.network(str(args["name"]), int(args.get("depth", 2)))

    triple_schema = _obj(
        {
            "subject": {"type": "string", "description": "entity name, e.g. 用户 / Alice"},
            "relation": {"type": "string", "description": "snake_case relation, e.g. lives_in, likes, works_as"},
            "object": {"type": "string"},
            "sentence_text": {"type": "string", "description": "the sentence the fact came from, verbatim"},
            "media_digests": {
                "type": "array",
                "items": {"type": "string"},
                "description": "digests (full or the 12-hex short form) of stored media this fact is about; "
                "the core adds their markers to the sentence",
            },
            "scene": {"type": "string", "description": "a scene/context this fact belongs to (optional)"},
        },
        ["subject", "relation", "object"],
    )
    # Their output is memory already: not indexed again (drop_output), but the turn is remembered.
    read: dict[str, Any] = {"plugin": PLUGIN, "cleaner": drop_output, "parallel_safe": True}
    write: dict[str, Any] = {"plugin": PLUGIN, "cleaner": drop_output, "serial": True, "parallel_safe": False}
    defs: list[tuple[ToolDef, Handler]] = [
        (
            ToolDef(
                "memory_recall",
                "Recall facts from long-term graph memory by keywords; current facts plus superseded ones as 'past'.",
                _obj(
                    {
                        "query_intent": {"type": "string", "description": "comma-separated keywords: 张三,咖啡"},
                        "depth": {"type": "integer", "minimum": 0, "maximum": 4, "default": 2},
                        "sort": {"type": "string", "enum": ["relevance", "recent"], "default": "relevance"},
                    },
                    ["query_intent"],
                ),
                **read,
            ),
            memory_recall,
        ),
        (
            ToolDef(
                "memory_commit",
                "Store facts as triples; a new value of a single-valued relation (lives_in, age…) retires the old one.",
                _obj({"triples": {"type": "array", "items": triple_schema, "minItems": 1}}, ["triples"]),
                **write,
            ),
            memory_commit,
        ),
        (
            ToolDef(
                "memory_introspect",
                "Graph memory statistics: entity and relation counts, hot entities.",
                _obj({}),
                **read,
            ),
            memory_introspect,
        ),
        (
            ToolDef(
                "memory_merge",
                "Merge two entities that name the same thing; source is folded into target and becomes its alias.",
                _obj({"source": _S, "target": _S}, ["source", "target"]),
                **write,
            ),
            memory_merge,
        ),
        (
            ToolDef(
                "memory_delete_entity",
                "Delete an entity and all of its relations.",
                _obj({"name": _S}, ["name"]),
                **write,
            ),
            memory_delete_entity,
        ),
        (
            ToolDef(
                "memory_block_merge",
                "Stop the merge heartbeat from proposing these two entities for N rounds (0 lifts the block).",
                _obj(
                    {"entity_a": _S, "entity_b": _S, "rounds": {"type": "integer", "minimum": 0}},
                    ["entity_a", "entity_b", "rounds"],
                ),
                **write,
            ),
            memory_block_merge,
        ),
        (
            ToolDef(
                "memory_purge",
                "Remove relations matching all given criteria; soft retires them (kept as history), hard deletes.",
                _obj(
                    {
                        "subject_contains": _S,
                        "relation_type": _S,
                        "target_contains": _S,
                        "mode": {"type": "string", "enum": ["soft", "hard"], "default": "soft"},
                    }
                ),
                **write,
            ),
            memory_purge,
        ),
        (
            ToolDef(
                "memory_edit",
                "Correct a stored fact: give the old triple and the parts that change.",
                _obj(
                    {
                        "old_subject": _S,
                        "old_relation": _S,
                        "old_object": _S,
                        "new_subject": _S,
                        "new_relation": _S,
                        "new_object": _S,
                    },
                    ["old_subject", "old_relation", "old_object"],
                ),
                **write,
            ),
            memory_edit,
        ),
        (
            ToolDef(
                "person_query",
                "What memory knows about a person: traits, relations to other people, other facts.",
                _obj({"name": _S}, ["name"]),
                **read,
            ),
            person_query,
        ),
        (
            ToolDef(
                "person_set_trait",
                "Set a person's trait (one value per trait; the old value becomes history).",
                _obj({"name": _S, "trait": _S, "value": _S}, ["name", "trait", "value"]),
                **write,
            ),
            person_set_trait,
        ),
        (
            ToolDef(
                "person_relate",
                "Record how two people relate (stored both ways when the converse is known).",
                _obj({"person_a": _S, "relation": _S, "person_b": _S}, ["person_a", "relation", "person_b"]),
                **write,
            ),
            person_relate,
        ),
        (
            ToolDef(
                "person_network",
                "People connected to a person through person-to-person relations.",
                _obj({"name": _S, "depth": {"type": "integer", "minimum": 1, "maximum": 4, "default": 2}}, ["name"]),
                **read,
            ),
            person_network,
        ),
    ]
    return [(d, _guard(h)) for d, h in defs]
