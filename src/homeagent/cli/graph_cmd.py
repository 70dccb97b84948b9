"""``homeagent memory graph`` and ``homeagent memory run-loop``.

``memory graph`` reads ``<data>/memory/graph.db`` directly (SQLite WAL lets it
run next to a daemon) and prints the neighbourhood of an entity as a tree, as
Graphviz DOT or as JSON. ``memory run-loop NAME`` asks the running daemon to
run one memory loop now; without a daemon, the loops that need nothing but the
graph (``rules``, and ``merge`` without an LLM) run on the data directory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_model import Entity, GraphError, Recall, Relation, iso

LOOPS = ("distill", "archive", "merge", "review", "rules")
LOCAL_LOOPS = ("rules", "merge")


def register_memory_graph(msub: Any) -> None:
    """Add ``graph`` and ``run-loop`` to the ``homeagent memory`` sub-commands."""
    g = msub.add_parser("graph", help="print the memory graph around an entity (tree, dot or json)")
    g.add_argument("--entity", help="center entity (name or alias); default: the most mentioned entities")
    g.add_argument("--depth", type=int, default=2, help="hops from the center (default 2)")
    g.add_argument("--format", choices=["tree", "dot", "json"], default="tree")
    g.add_argument("--history", action="store_true", help="include retired facts")
    g.add_argument("--limit", type=int, default=200, help="at most this many relations (default 200)")
    g.set_defaults(func=cmd_graph)
    r = msub.add_parser("run-loop", help="run one memory loop now: " + ", ".join(LOOPS))
    r.add_argument("name", choices=LOOPS)
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_run_loop)


def graph_path(args: argparse.Namespace) -> Path:
    from homeagent.cli.knowledge_cmd import _config_str
    from homeagent.cli.main import paths_from

    paths = paths_from(args)
    configured = _config_str(paths.config_db, "core.memory.graph")
    return paths.resolve(configured, paths.memory / "graph.db")


# ------------------------------------------------------------------------- memory graph
async def neighbourhood(
    graph: GraphDB, entity: str | None, depth: int, *, history: bool = False, limit: int = 200
) -> tuple[list[Entity], Recall]:
    if entity:
        found = await graph.entity(entity)
        if found is None:
            near = await graph.recall(entity, 0, max_seeds=5)
            hint = f"; similar names: {', '.join(e.name for e in near.seeds)}" if near.seeds else ""
            raise GraphError(f"no entity named {entity!r}{hint}")
        centers = [found]
    else:
        centers = await graph.hot_entities(5)
    if not centers:
        return [], Recall()
    result = await graph.recall(
        [],
        max(0, depth),
        entity_ids=[e.id for e in centers],
        include_history=history,
        max_seeds=len(centers),
        fanout=max(10, limit // max(1, len(centers))),
        max_relations=limit,
    )
    return centers, result


def _edge_note(r: Relation) -> str:
    notes = []
    if r.sentence:
        s = " ".join(r.sentence.split())
        notes.append(s if len(s) <= 40 else s[:39] + "…")
    if not r.current:
        until = f" until {iso(r.valid_to)}" if r.valid_to else ""
        notes.append(f"retired: {r.retire_reason}{until}")
    return f"  ({'; '.join(notes)})" if notes else ""


def render_tree(centers: list[Entity], result: Recall, depth: int) -> str:
    names = {e.id: e for e in result.entities}
    adj: dict[int, list[tuple[Relation, bool]]] = defaultdict(list)
    for r in result.relations:
        adj[r.subject_id].append((r, True))
        adj[r.object_id].append((r, False))
    used_edges: set[int] = set()
    shown: set[int] = set()
    out: list[str] = []

    def label(eid: int) -> str:
        e = names.get(eid)
        if e is None:
            return f"#{eid}"
        return f"{e.name} ({e.type})" if e.type else e.name

    def walk(node: int, prefix: str, level: int) -> None:
        shown.add(node)
        if level >= depth:
            return
        children = [(r, outgoing) for r, outgoing in adj.get(node, []) if r.id not in used_edges]
        for r, _ in children:
            used_edges.add(r.id)
        for i, (r, outgoing) in enumerate(children):
            last = i == len(children) - 1
            other = r.object_id if outgoing else r.subject_id
            arrow = f"--{r.relation}--> " if outgoing else f"<--{r.relation}-- "
            seen = other in shown
            out.append(
                f"{prefix}{'└── ' if last else '├── '}{arrow}{label(other)}{_edge_note(r)}{' ↑' if seen else ''}"
            )
            if not seen:
                walk(other, prefix + ("    " if last else "│   "), level + 1)

    for center in centers:
        if center.id in shown:
            continue
        out.append(f"{label(center.id)}  [{center.mention_count} mentions]")
        walk(center.id, "", 0)
    return "\n".join(out)


def _dot_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(centers: list[Entity], result: Recall) -> str:
    lines = ["digraph memory {", "  rankdir=LR;", '  node [shape=box, fontname="sans-serif"];']
    center_ids = {c.id for c in centers}
    for e in result.entities:
        style = ", style=bold" if e.id in center_ids else ""
        lines.append(f"  n{e.id} [label={_dot_str(e.name)}{style}];")
    for r in result.relations:
        style = ", style=dashed" if not r.current else ""
        lines.append(f"  n{r.subject_id} -> n{r.object_id} [label={_dot_str(r.relation)}{style}];")
    lines.append("}")
    return "\n".join(lines)


def render_json(centers: list[Entity], result: Recall) -> str:
    data: dict[str, Any] = {"center": [c.name for c in centers], **result.to_dict()}
    data.pop("seeds", None)
    return json.dumps(data, ensure_ascii=False, indent=2)


def cmd_graph(args: argparse.Namespace) -> int:
    path = graph_path(args)
    if not path.exists():
        print(f"homeagent: no memory graph yet at {path}", file=sys.stderr)
        return 1

    async def go() -> str:
        graph = await GraphDB.open(path, create=False)
        try:
            centers, result = await neighbourhood(
                graph, args.entity, args.depth, history=args.history, limit=max(1, args.limit)
            )
        finally:
            await graph.close()
        if not centers:
            return (
                "(the memory graph is empty)"
                if args.format == "tree"
                else (
                    "digraph memory {\n}"
                    if args.format == "dot"
                    else json.dumps({"center": [], "entities": [], "relations": []})
                )
            )
        if args.format == "dot":
            return render_dot(centers, result)
        if args.format == "json":
            return render_json(centers, result)
        return render_tree(centers, result, max(0, args.depth))

    try:
        print(asyncio.run(go()))
    except GraphError as exc:
        print(f"homeagent: {exc}", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------- memory run-loop
def cmd_run_loop(args: argparse.Namespace) -> int:
    from homeagent.cli.client import DaemonUnavailable, RemoteError, connect_to
    from homeagent.cli.main import paths_from

    async def via_daemon() -> Any:
        client = await connect_to(paths_from(args), timeout=1.0)
        try:
            return await client.call("memory.run_loop", {"name": args.name}, timeout=600)
        finally:
            await client.close()

    try:
        result = asyncio.run(via_daemon())
    except DaemonUnavailable:
        if args.name not in LOCAL_LOOPS:
            print(
                f"homeagent: the {args.name} loop needs the running daemon (it uses the context, documents or "
                "the LLM); start it with `homeagent run`",
                file=sys.stderr,
            )
            return 3
        path = graph_path(args)
        if not path.exists():
            print(f"homeagent: no memory graph yet at {path}", file=sys.stderr)
            return 1
        result = asyncio.run(_run_local(path, args.name))
    except RemoteError as exc:
        print(f"homeagent: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        for key, value in (result or {}).items():
            if isinstance(value, list):
                print(f"{key}: {len(value)}")
                for item in value[:20]:
                    print(f"  - {item}")
            else:
                print(f"{key}: {value}")
    return 0


async def _run_local(path: Path, name: str) -> dict[str, Any]:
    from homeagent.memory.distill import RuleDistiller
    from homeagent.memory.loops import merge_pass

    graph = await GraphDB.open(path)
    try:
        if name == "rules":
            return (await RuleDistiller(graph).run_once()).to_dict()
        return (await merge_pass(graph, llm=None)).to_dict()
    finally:
        await graph.close()
