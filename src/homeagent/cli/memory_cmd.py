"""``homeagent memory import|search|stats|export``: memory files, read and written directly.

(``memory graph`` and ``memory run-loop`` are in ``graph_cmd.py``, ``memory media`` in ``media_cmd.py``.)

These commands open ``<data>/memory/documents.db`` and ``context.json``
themselves instead of asking the daemon, so they work whether it runs or
not: SQLite in WAL mode lets the daemon keep writing while they read, their
transactions are short, and the daemon notices imported documents on its
next query. ``search`` runs the same hybrid retrieval the agent's automatic
recall uses (without counting the access).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from homeagent.paths import resolve_data_dir

log = logging.getLogger("homeagent.memory.cli")


def register(subparsers: Any) -> None:
    """Add ``memory`` and its actions to the ``homeagent`` subparsers."""
    mem = subparsers.add_parser("memory", help="search, import, export and inspect memory (daemon may be running)")
    mem.add_argument("--embedder", help="embedding model spec (default: core.agent.embedding_model_path)")
    actions = mem.add_subparsers(dest="memory_action", metavar="ACTION")

    imp = actions.add_parser("import", help="import a JSONL conversation into document memory")
    imp.add_argument("file", help='JSONL, one {"role","content","timestamp"?,"speaker"?,"session"?,"id"?} per line')
    imp.add_argument("--json", action="store_true", help="print the report as JSON")
    imp.set_defaults(func=cmd_import)

    search = actions.add_parser("search", help="search document memory the way the agent does")
    search.add_argument("query", nargs="?", help="what to look for")
    search.add_argument("--k", type=int, default=5, help="how many results (default 5)")
    search.add_argument("--json", action="store_true", help="one JSON object per query")
    search.add_argument("--queries", help='JSONL file of {"query"} lines: one JSON result line per query')
    search.add_argument("--min-score", type=float, default=float("-inf"),
                        help="drop hits below this fused score (the agent's recall uses the embedder's floor)")
    search.set_defaults(func=cmd_search)

    stats = actions.add_parser("stats", help="counts and sizes of the memory layers")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(func=cmd_stats)

    export = actions.add_parser("export", help="write memory as JSONL (importable again)")
    export.add_argument("--out", help="output file (default: stdout)")
    export.add_argument("--layer", choices=["all", "documents", "context"], default="all")
    export.set_defaults(func=cmd_export)

    from homeagent.cli.graph_cmd import register_memory_graph

    register_memory_graph(actions)

    from homeagent.cli.media_cmd import register_memory_media

    register_memory_media(actions)

    def no_action(args: argparse.Namespace) -> int:
        mem.print_help(sys.stderr)
        return 2

    mem.set_defaults(func=no_action)


# -- argparse glue ---------------------------------------------------------------------
def _data_dir(args: argparse.Namespace) -> Path:
    return resolve_data_dir(getattr(args, "data_dir", None))


def cmd_import(args: argparse.Namespace) -> int:
    return run_import(_data_dir(args), Path(args.file), embedder_spec=args.embedder, as_json=args.json)


def cmd_search(args: argparse.Namespace) -> int:
    return run_search(
        _data_dir(args), args.query, k=args.k, as_json=args.json,
        queries_file=Path(args.queries) if args.queries else None, embedder_spec=args.embedder,
        min_score=args.min_score,
    )


def cmd_stats(args: argparse.Namespace) -> int:
    return run_stats(_data_dir(args), as_json=args.json)


def cmd_export(args: argparse.Namespace) -> int:
    return run_export(_data_dir(args), out_path=Path(args.out) if args.out else None, layer=args.layer)


# -- the commands ----------------------------------------------------------------------
def memory_paths(data_dir: Path) -> tuple[Path, Path]:
    """``(context.json, documents.db)`` under ``<data>/memory``."""
    mem = Path(data_dir) / "memory"
    return mem / "context.json", mem / "documents.db"


def configured_embedder_spec(data_dir: Path) -> str:
    """``core.agent.embedding_model_path`` from the data directory's config.db ("" when absent)."""
    return str(_configured(data_dir, "core.agent.embedding_model_path", "") or "")


def configured_session_gap(data_dir: Path) -> float:
    """``core.memory.session_gap`` in seconds (the documents' default when it is not set)."""
    from homeagent.config.values import parse_duration
    from homeagent.memory.documents import SESSION_GAP

    value = _configured(data_dir, "core.memory.session_gap", None)
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return parse_duration(str(value)) if value not in (None, "") else SESSION_GAP
    except (TypeError, ValueError):
        return SESSION_GAP


def _configured(data_dir: Path, key: str, default: Any) -> Any:
    """A setting from the data directory's config.db, read without a daemon (``default`` when absent)."""
    config_db = Path(data_dir) / "config.db"
    if not config_db.exists():
        return default
    try:
        from homeagent.config.registry import ConfigRegistry

        reg = ConfigRegistry(config_db)
        try:
            return reg.get(key, default)
        finally:
            reg.close()
    except Exception as exc:
        log.warning("memory: cannot read %s from %s (%s); using the default", key, config_db, exc)
        return default


def _open_store(
    data_dir: Path, embedder_spec: str | None, err: TextIO, *, persist_vectors: bool = True, analyzer: Any = None
) -> Any:
    from homeagent.memory.documents import DocumentStore
    from homeagent.memory.embedder import build_embedder
    from homeagent.memory.lexical import Analyzer

    spec = embedder_spec if embedder_spec is not None else configured_embedder_spec(data_dir)
    analyzer = analyzer or Analyzer()
    embedder = build_embedder(spec, log=lambda msg: print(f"homeagent: {msg}", file=err), analyzer=analyzer)
    # Load the dictionary and the model now: the rates and query times reported are then the work's own.
    analyzer.warmup()
    embedder.warmup()
    _, db_path = memory_paths(data_dir)
    return DocumentStore(
        db_path, embedder, analyzer=analyzer, persist_vectors=persist_vectors,
        session_gap=configured_session_gap(data_dir),
    )


class _Progress:
    """A one-line progress bar on stderr (a TTY), or a line per 10% otherwise."""

    def __init__(self, err: TextIO, label: str) -> None:
        self.err = err
        self.label = label
        self.tty = bool(getattr(err, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self._last_decile = -1

    def __call__(self, done: int, total: int, records: int) -> None:
        frac = done / total if total else 1.0
        rate = records / max(time.perf_counter() - self.t0, 1e-9)
        if self.tty:
            bar = "#" * int(frac * 30)
            self.err.write(f"\r{self.label} [{bar:<30}] {frac:6.1%} {records} records {rate:,.0f}/s")
            if done >= total:
                self.err.write("\n")
            self.err.flush()
        else:
            decile = int(frac * 10)
            if decile != self._last_decile:
                self._last_decile = decile
                self.err.write(f"{self.label}: {frac:.0%} ({records} records, {rate:,.0f}/s)\n")
                self.err.flush()


def run_import(
    data_dir: Path,
    file: Path,
    *,
    embedder_spec: str | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    analyzer: Any = None,
) -> int:
    """Import ``file`` into L2. Exit 0 when every line was imported or already there, 1 when lines failed."""
    from homeagent.memory.importer import import_jsonl

    out = out or sys.stdout
    err = err or sys.stderr
    if not file.is_file():
        print(f"homeagent: no such file: {file}", file=err)
        return 2
    store = _open_store(data_dir, embedder_spec, err, analyzer=analyzer)
    try:
        report = import_jsonl(file, store, progress=_Progress(err, f"importing {file.name}"))
    finally:
        store.close()
    for lineno, msg in report.errors[:50]:
        print(f"homeagent: {file}:{lineno}: {msg} (line skipped)", file=err)
    if len(report.errors) > 50:
        print(f"homeagent: … and {len(report.errors) - 50} more bad lines", file=err)
    if as_json:
        print(json.dumps(report.to_dict(), ensure_ascii=False), file=out)
    else:
        rate = report.imported / report.seconds if report.seconds else 0.0
        print(
            f"imported {report.imported}, already present {report.duplicates}, bad lines {len(report.errors)}"
            f" in {report.seconds:.1f} s ({rate:,.0f}/s)",
            file=out,
        )
    return 1 if report.errors else 0


def _result_json(query: str, docs: list[Any]) -> dict[str, Any]:
    return {
        "query": query,
        "results": [
            {
                "id": d.id,
                "ts": d.ts,
                "timestamp": d.to_dict()["timestamp"],
                "score": round(d.score, 6),
                "dense": round(d.dense, 6),
                "lexical": round(d.lexical, 6),
                "source": d.source,
                "speaker": d.speaker,
                "session": d.session,
                "summary": d.summary,
                "text": d.content,
            }
            for d in docs
        ],
    }


def run_search(
    data_dir: Path,
    query: str | None,
    *,
    k: int = 5,
    as_json: bool = False,
    queries_file: Path | None = None,
    embedder_spec: str | None = None,
    min_score: float = float("-inf"),
    out: TextIO | None = None,
    err: TextIO | None = None,
    analyzer: Any = None,
) -> int:
    """Search L2 like the agent's automatic recall (read-only: access counts are not touched)."""
    from homeagent.memory.documents import excerpt

    out = out or sys.stdout
    err = err or sys.stderr
    if k < 1:
        print("homeagent: --k must be at least 1", file=err)
        return 2
    if not query and queries_file is None:
        print("homeagent: give a QUERY or --queries FILE", file=err)
        return 2
    queries: list[tuple[int, str]] = []
    if queries_file is not None:
        from homeagent.memory.importer import iter_records

        if not queries_file.is_file():
            print(f"homeagent: no such file: {queries_file}", file=err)
            return 2
        for lineno, _, rec, error in iter_records(queries_file):
            q = rec.get("query") if rec is not None else None
            if not isinstance(q, str) or not q.strip():
                reason = error or 'no "query" string'
                print(f"homeagent: {queries_file}:{lineno}: {reason} (skipped)", file=err)
                continue
            queries.append((lineno, q))
    if query:
        queries.append((0, query))
    store = _open_store(data_dir, embedder_spec, err, persist_vectors=False, analyzer=analyzer)
    try:
        store.load()
        for _, q in queries:
            started = time.perf_counter()
            docs = store.query(q, k, touch=False, min_score=min_score)
            elapsed_ms = (time.perf_counter() - started) * 1000
            if as_json or queries_file is not None:
                result = _result_json(q, docs)
                result["elapsed_ms"] = round(elapsed_ms, 2)
                print(json.dumps(result, ensure_ascii=False), file=out)
                continue
            if not docs:
                print(f"no documents match {q!r}", file=out)
                continue
            for rank, d in enumerate(docs, start=1):
                stamp = d.to_dict()["timestamp"]
                print(f"{rank:2d}. {d.score:.4f}  {stamp}  {d.id}\n    {excerpt(d.content, 160)}", file=out)
    finally:
        store.close()
    return 0


def _media_stats(data_dir: Path) -> dict[str, Any]:
    """Counts and bytes of the media store, when it has been created (read directly, like the graph)."""
    from homeagent.memory.media import MediaStore

    root = data_dir / "memory" / "media"
    if not (root / "media.db").exists():
        return {"present": 0, "present_bytes": 0, "path": str(root)}
    try:
        store = MediaStore(root)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "path": str(root)}
    try:
        return store.stats()
    finally:
        store.close()


def _graph_stats(data_dir: Path) -> dict[str, Any]:
    """Entity and relation counts of the knowledge graph (read directly; WAL lets a daemon keep writing)."""
    import asyncio

    from homeagent.memory.graph import GraphDB

    path = data_dir / "memory" / "graph.db"
    if not path.exists():
        return {"entities": 0, "relations": 0, "path": str(path)}

    async def read() -> dict[str, Any]:
        graph = await GraphDB.open(path, create=False)
        try:
            return dict(await graph.introspect())
        finally:
            await graph.close()

    try:
        return asyncio.run(read())
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "path": str(path)}


def _loop_stats(data_dir: Path) -> dict[str, Any] | None:
    """The memory loops' last runs, counts and errors, from the running daemon (None without one)."""
    import asyncio

    from homeagent.cli.client import DaemonUnavailable, connect_to
    from homeagent.paths import DataPaths

    async def ask() -> Any:
        client = await connect_to(DataPaths(data_dir), timeout=1.0)
        try:
            return await client.call("memory.loops", timeout=5)
        finally:
            await client.close()

    try:
        result = asyncio.run(ask())
    except (DaemonUnavailable, OSError, TimeoutError, Exception):
        return None
    return result if isinstance(result, dict) else {"loops": result}


def run_stats(data_dir: Path, *, as_json: bool = False, out: TextIO | None = None) -> int:
    """Counts of both layers, without loading an embedder or an index."""
    from homeagent.memory.cleaners import CleanerChain
    from homeagent.memory.context import RelevanceContext
    from homeagent.memory.documents import DocumentStore

    out = out or sys.stdout
    ctx_path, db_path = memory_paths(data_dir)
    result: dict[str, Any] = {"data_dir": str(data_dir)}
    ctx = RelevanceContext(ctx_path, None, None, CleanerChain(), read_only=True)
    result["context"] = ctx.stats()
    if db_path.exists():
        store = DocumentStore(db_path, None)
        try:
            result["documents"] = store.stats()
        finally:
            store.close()
    else:
        result["documents"] = {"documents": 0, "path": str(db_path)}
    result["graph"] = _graph_stats(data_dir)
    result["media"] = _media_stats(data_dir)
    result["loops"] = _loop_stats(data_dir)
    if as_json:
        print(json.dumps(result, ensure_ascii=False, indent=2), file=out)
        return 0
    c, d = result["context"], result["documents"]
    print(f"data dir        {data_dir}", file=out)
    print(f"context (L1)    {c['events']} events {c['by_kind']}  {c['oldest']} … {c['newest']}", file=out)
    print(f"documents (L2)  {d.get('documents', 0)} documents, {d.get('cold', 0)} cold, "
          f"{d.get('accesses', 0)} accesses, {d.get('db_bytes', 0) / 1e6:.1f} MB", file=out)
    if d.get("vectors_by_model"):
        print(f"vectors         {d['vectors_by_model']}", file=out)
    if d.get("sources"):
        print(f"sources         {d['sources']}", file=out)
    g = result["graph"]
    if "error" in g:
        print(f"graph (L3)      unreadable: {g['error']}", file=out)
    else:
        print(f"graph (L3)      {g.get('entities', 0)} entities, {g.get('relations', 0)} relations", file=out)
    m = result["media"]
    if "error" in m:
        print(f"media           unreadable: {m['error']}", file=out)
    else:
        others = ", ".join(f"{n} {state}" for state, n in sorted(m.get("states", {}).items()) if state != "present")
        print(f"media           {m['present']} stored, {m['present_bytes'] / 1e6:.1f} MB, "
              f"{m.get('references', 0)} references" + (f"; {others}" if others else ""), file=out)
    loops = result["loops"]
    if loops is None:
        print("loops           (no daemon running: last runs unknown)", file=out)
    else:
        for name, info in sorted((loops.get("loops") or loops).items()):
            if isinstance(info, dict):
                print(
                    f"loop {name:<10} runs {info.get('runs', 0)}, errors {info.get('errors', 0)}, "
                    f"last {info.get('last_run') or 'never'}"
                    + (f", last error: {info['last_error']}" if info.get("last_error") else ""),
                    file=out,
                )
    return 0


def run_export(
    data_dir: Path, *, out_path: Path | None = None, layer: str = "all", out: TextIO | None = None
) -> int:
    """JSONL in the import format (plus summary, tags, source, layer): context events, then documents."""
    from homeagent.memory.cleaners import CleanerChain
    from homeagent.memory.context import RelevanceContext
    from homeagent.memory.documents import DocumentStore

    ctx_path, db_path = memory_paths(data_dir)
    sink = out_path.open("w", encoding="utf-8") if out_path else (out or sys.stdout)
    n = 0
    try:
        if layer in ("all", "context"):
            ctx = RelevanceContext(ctx_path, None, None, CleanerChain(), read_only=True)
            for e in ctx.timeline():
                role = {"user": "user", "agent": "assistant"}.get(e.kind, "memory")
                text = e.stored_text()
                if not text:
                    continue
                rec = {"role": role, "content": text, "timestamp": e.ts, "id": f"ctx-{e.id}",
                       "layer": "context", "channel": e.channel, "source": e.source}
                sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
                n += 1
        if layer in ("all", "documents") and db_path.exists():
            store = DocumentStore(db_path, None)
            try:
                for d in store.iter_docs():
                    role = d.source.split(":", 1)[1] if d.source.startswith(("import:", "context:")) else "memory"
                    role = {"agent": "assistant"}.get(role, role)
                    rec = {"role": role, "content": d.content, "timestamp": d.ts, "id": d.id, "layer": "documents",
                           "summary": d.summary, "tags": d.tags, "source": d.source}
                    # the conversation structure, so that importing the export gives the same recall
                    if d.speaker:
                        rec["speaker"] = d.speaker
                    if d.session:
                        rec["session"] = d.session
                    sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    n += 1
            finally:
                store.close()
    finally:
        if out_path:
            sink.close()
    if out_path:
        print(f"exported {n} records to {out_path}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m homeagent.cli.memory_cmd [--data-dir D] memory ACTION …`` without the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="homeagent")
    parser.add_argument("--data-dir")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    return int(func(args))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
