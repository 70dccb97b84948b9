"""``homeagent memory media list|show|gc|add|repair``: the media store, seen and tended from the terminal.

Each command asks the running daemon over the local socket (``media.*``
methods) so the daemon's own store object does the work; with no daemon it
opens ``<data>/memory/media`` itself and runs the very same operations
(``MediaAPI``), which is safe next to another process because every change
takes the store's SQLite write lock. ``add`` passes the file's absolute path:
the daemon runs as the same user and reads it in chunks, refusing a file over
``core.memory.media.max_bytes`` before reading it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ACTIONS = ("list", "show", "gc", "add", "repair")


def register_memory_media(msub: Any) -> None:
    """Add ``media`` and its actions to the ``homeagent memory`` sub-commands."""
    media = msub.add_parser("media", help="the media store: list, show, gc, add, repair")
    actions = media.add_subparsers(dest="media_action", metavar="ACTION")

    ls = actions.add_parser("list", help="stored media, newest first, with size, state and references")
    ls.add_argument("--state", choices=["present", "evicted", "quarantined", "missing"])
    ls.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_media, media_action="list")

    show = actions.add_parser("show", help="one item's metadata, marker and references")
    show.add_argument("digest", help="full digest or at least 8 hex characters of it")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_media, media_action="show")

    gc = actions.add_parser("gc", help="run a GC pass now (mark, sweep, repair, cap) and print its counts")
    gc.add_argument("--min-age", help="sweep what was marked at least this long ago (e.g. 0s, 2h); "
                    "default core.memory.media.gc_min_age")
    gc.add_argument("--json", action="store_true")
    gc.set_defaults(func=cmd_media, media_action="gc")

    add = actions.add_parser("add", help="store a file (its type is read from its bytes)")
    add.add_argument("file")
    add.add_argument("--description", default="",
                     help="what it shows: the text memory keeps and search finds (replaces the stored one)")
    add.add_argument("--mime", default="", help="claimed type (only refines text types; the bytes decide)")
    add.add_argument("--json", action="store_true")
    add.set_defaults(func=cmd_media, media_action="add")

    fix = actions.add_parser("repair", help="after media.db was lost: adopt the files on disk and reference them "
                             "again from the markers in the conversation, documents and graph")
    fix.add_argument("--json", action="store_true")
    fix.set_defaults(func=cmd_media, media_action="repair")

    def no_action(args: argparse.Namespace) -> int:
        media.print_help(sys.stderr)
        return 2

    media.set_defaults(func=no_action)


def _params(args: argparse.Namespace) -> dict[str, Any]:
    from homeagent.config.values import parse_duration

    action = args.media_action
    if action == "list":
        return {"state": args.state, "limit": max(1, args.limit)}
    if action == "show":
        return {"digest": args.digest}
    if action == "gc":
        return {} if args.min_age is None else {"min_age": parse_duration(args.min_age)}
    if action == "repair":
        return {}
    return {
        "path": str(Path(args.file).expanduser().resolve()),
        "description": args.description,
        "overwrite": bool(args.description),  # an explicit --description replaces the stored one
        "mime": args.mime,
        "source": "cli",
    }


def cmd_media(args: argparse.Namespace) -> int:
    from homeagent.cli.client import DaemonUnavailable, RemoteError, connect_to
    from homeagent.cli.main import paths_from
    from homeagent.memory.media import MediaError

    paths = paths_from(args)
    try:
        params = _params(args)
    except ValueError as exc:
        print(f"homeagent: {exc}", file=sys.stderr)
        return 2
    method = f"media.{args.media_action}"

    async def via_daemon() -> Any:
        client = await connect_to(paths, timeout=1.0)
        try:
            return await client.call(method, params, timeout=600)
        finally:
            await client.close()

    try:
        try:
            result = asyncio.run(via_daemon())
        except DaemonUnavailable:
            result = asyncio.run(_local(paths.root, method, params))
    except (RemoteError, MediaError) as exc:
        print(f"homeagent: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        print(render(args.media_action, result))
    return 0


async def _local(data_dir: Path, method: str, params: dict[str, Any]) -> Any:
    """The same operation on the data directory's store, for when no daemon runs."""
    from homeagent.cli.memory_cmd import _configured
    from homeagent.config.values import parse_bool, parse_duration
    from homeagent.memory.media import MediaAPI, MediaError, MediaStore
    from homeagent.memory.media.api import OFF

    enabled = _configured(data_dir, "core.memory.media.enabled", True)
    if not (enabled if isinstance(enabled, bool) else parse_bool(str(enabled))):
        raise MediaError(f"{OFF} (core.memory.media.enabled is false)")
    min_age = _configured(data_dir, "core.memory.media.gc_min_age", "24h")
    store = MediaStore(
        data_dir / "memory" / "media",
        max_bytes=int(_configured(data_dir, "core.memory.media.max_bytes", 20 * 1024 * 1024)),
        cap=int(_configured(data_dir, "core.memory.media.cap", 1024 * 1024 * 1024)),
        min_age=float(min_age) if isinstance(min_age, int | float) else parse_duration(str(min_age)),
    )
    try:
        if method == "media.repair":
            return await _local_repair(data_dir, store)
        return await MediaAPI(store).methods()[method](params)
    finally:
        store.close()


async def _local_repair(data_dir: Path, store: Any) -> Any:
    """``repair`` with the stores opened here: the window read-only, the documents and the graph if they exist."""
    from homeagent.cli.memory_cmd import memory_paths
    from homeagent.memory.cleaners import CleanerChain
    from homeagent.memory.context import RelevanceContext
    from homeagent.memory.documents import DocumentStore
    from homeagent.memory.graph import GraphDB
    from homeagent.memory.media.repair import DocumentMarkers, MarkerSource, SentenceMarkers, WindowMarkers, repair

    ctx_path, db_path = memory_paths(data_dir)
    window = await asyncio.to_thread(RelevanceContext, ctx_path, None, None, CleanerChain(), read_only=True)
    sources: list[MarkerSource] = [WindowMarkers(window)]
    docs = await asyncio.to_thread(DocumentStore, db_path, None) if db_path.exists() else None
    graph_path = data_dir / "memory" / "graph.db"
    graph = await GraphDB.open(graph_path, create=False) if graph_path.exists() else None
    try:
        if docs is not None:
            sources.append(DocumentMarkers(docs))
        if graph is not None:
            sources.append(SentenceMarkers(graph))
        return (await repair(store, sources)).to_dict()
    finally:
        if docs is not None:
            await asyncio.to_thread(docs.close)
        if graph is not None:
            await graph.close()


# -- rendering ---------------------------------------------------------------------------
def human(size: float) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def render(action: str, result: dict[str, Any]) -> str:
    if action == "list":
        return _render_list(result)
    if action == "show":
        return _render_show(result)
    if action == "gc":
        return _render_gc(result)
    if action == "repair":
        return _render_repair(result)
    verb = "stored" if result["new"] else "already stored"
    return f"{verb}: {result['marker']}\ndigest: {result['digest']}\nsize:   {human(result['size'])}"


def _render_list(result: dict[str, Any]) -> str:
    s = result["stats"]
    states = s.get("states", {})
    cap = f" of a {human(s['cap'])} cap" if s.get("cap") else ""
    others = ", ".join(f"{n} {state}" for state, n in sorted(states.items()) if state != "present")
    lines = [
        f"{s['present']} stored, {human(s['present_bytes'])}{cap}; {s['references']} references"
        + (f"; {others}" if others else "")
    ]
    if not result["items"]:
        lines.append("(no media)")
    for i in result["items"]:
        description = i["description"] if len(i["description"]) <= 50 else i["description"][:49] + "…"
        lines.append(
            f"{i['short']}  {i['mime']:<22} {human(i['size']):>9}  {i['state']:<11} refs {i['refs']:<3} "
            f"{_when(i['created'])}  {description}"
        )
    return "\n".join(lines)


def _render_show(r: dict[str, Any]) -> str:
    lines = [
        f"digest:      {r['digest']}",
        f"marker:      {r['marker']}",
        f"type:        {r['mime']}",
        f"size:        {human(r['size'])} ({r['size']} bytes)",
        f"state:       {r['state']}" + (f" since {_when(r['state_at'])}" if r.get("state_at") else ""),
        f"source:      {r['source'] or '-'}",
        f"created:     {_when(r['created'])}",
        f"last access: {_when(r['last_access'])}",
    ]
    if r.get("marked_at"):
        lines.append(f"GC:          unreferenced since {_when(r['marked_at'])}")
    lines.append(f"references:  {len(r['references'])}")
    lines += [f"  {ref['owner_kind']} {ref['owner_id']}  (since {_when(ref['created'])})" for ref in r["references"]]
    return "\n".join(lines)


def _render_gc(r: dict[str, Any]) -> str:
    lines = [
        f"references dropped:  {r['refs_dropped']} (their document or sentence is gone)",
        f"marked unreferenced: {r['marked']} (cleared {r['unmarked']} now referenced)",
        f"swept:               {r['swept']} ({human(r['swept_bytes'])}) marked at least {r['min_age']:g}s ago",
        f"evicted for the cap: {r['cap_evicted']} ({human(r['cap_evicted_bytes'])})",
        f"repaired:            {r['adopted']} adopted, {r['quarantined']} quarantined, {r['missing']} missing, "
        f"{r['temporaries_removed']} dead temporaries removed",
        f"now stored:          {r['present']} ({human(r['present_bytes'])}) in {r['seconds']:.2f}s",
    ]
    lines += [f"note: {n}" for n in r.get("notes", [])]
    return "\n".join(lines)


# -- homeagent ask --image ---------------------------------------------------------------
async def attach_images(client: Any, files: list[Path]) -> tuple[list[str], list[str]]:
    """Keep each file in the daemon's media store: (their digests, lines to add to the message).

    The digests go with the message as media: an image reaches a model that
    sees as an image, else as its description (agent/media_input.py), and the
    turn's text gets each item's marker. With the store off there is no
    digest, and the line is a plain ``[image: name]``. A file the store
    refuses (missing, empty, too large) raises ``RemoteError`` naming it: the
    message is not sent.
    """
    from homeagent.cli.client import RemoteError
    from homeagent.memory.media.api import OFF

    digests: list[str] = []
    lines: list[str] = []
    for path in files:
        try:
            result = await client.call(
                "media.add", {"path": str(path), "description": path.name, "source": "cli"}, timeout=120
            )
        except RemoteError as exc:
            if str(exc).startswith(OFF):
                lines.append(f"[image: {path.name}]")
                continue
            raise RemoteError(f"{path}: {exc}") from None
        digests.append(str(result["digest"]))
    return digests, lines


def _render_repair(r: dict[str, Any]) -> str:
    lines = [
        f"files adopted:       {r['adopted']} ({r['quarantined']} damaged ones quarantined, "
        f"{r['missing']} entries without a file)",
        f"owners with markers: {r['owners']}",
        f"references rebuilt:  {r['references_added']}",
        f"descriptions back:   {r['described']}",
    ]
    if r["unresolved"]:
        lines.append(f"markers whose bytes are gone: {len(r['unresolved'])} ({', '.join(r['unresolved'][:10])}"
                     + (", …" if len(r["unresolved"]) > 10 else "") + "); their descriptions stay in the text")
    return "\n".join(lines)
