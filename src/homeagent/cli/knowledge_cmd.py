"""``homeagent knowledge list|add|search|rm``: the knowledge base, straight on the data directory.

Notes are plain files, so these commands need no daemon: a running daemon
notices the change before its next search (the index is keyed on file mtimes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from homeagent.knowledge.base import KnowledgeBase, KnowledgeError


def register(sub: Any) -> None:
    kn = sub.add_parser("knowledge", help="the knowledge base (curated notes)")
    ks = kn.add_subparsers(dest="knowledge_command", metavar="ACTION", required=True)
    ls = ks.add_parser("list", help="list the entries")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)
    add = ks.add_parser("add", help="create or replace an entry from a markdown file, --text or stdin")
    add.add_argument("name", help="entry name (a folder name: no '/', no '..')")
    add.add_argument("file", nargs="?", help="markdown file; '-' or nothing reads stdin")
    add.add_argument("--text", help="the content itself")
    add.add_argument("--no-overwrite", action="store_true", help="fail if the entry exists")
    add.set_defaults(func=cmd_add)
    search = ks.add_parser("search", help="search the entries")
    search.add_argument("query", nargs="+")
    search.add_argument("--top-k", type=int, default=5)
    search.add_argument("--lexical", action="store_true", help="words only: skip loading the embedder")
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=cmd_search)
    rm = ks.add_parser("rm", help="delete an entry")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_rm)


def knowledge_root(args: argparse.Namespace) -> Path:
    from homeagent.cli.main import paths_from

    paths = paths_from(args)
    configured = _config_str(paths.config_db, "core.knowledge.path")
    return paths.resolve(configured, paths.knowledge)


def _config_str(config_db: Path, key: str) -> str:
    """A setting from config.db when there is one (the daemon may have moved the folder)."""
    if not config_db.exists():
        return ""
    try:
        from homeagent.config import ConfigRegistry

        registry = ConfigRegistry(config_db)
        try:
            return registry.get_str(key, "")
        finally:
            registry.close()
    except Exception:
        return ""


def _fail(message: str) -> int:
    print(f"homeagent: {message}", file=sys.stderr)
    return 1


def cmd_list(args: argparse.Namespace) -> int:
    kb = KnowledgeBase(knowledge_root(args))
    entries = asyncio.run(kb.entries())
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], ensure_ascii=False, indent=2))
        return 0
    if not entries:
        print("(the knowledge base is empty)")
        return 0
    width = max(len(e.name) for e in entries)
    for e in entries:
        d = e.to_dict()
        print(f"{e.name:<{width}}  {e.size:>8} B  {d['updated']}  {e.title}")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    if args.text is not None:
        content = args.text
    elif args.file and args.file != "-":
        try:
            content = Path(args.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return _fail(f"cannot read {args.file}: {exc}")
    else:
        content = sys.stdin.read()
    kb = KnowledgeBase(knowledge_root(args))
    try:
        info, replaced = asyncio.run(kb.add(args.name, content, overwrite=not args.no_overwrite))
    except KnowledgeError as exc:
        return _fail(str(exc))
    print(f"{'replaced' if replaced else 'added'} {info.name} ({info.size} bytes)")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    embedder = None
    root = knowledge_root(args)
    if not args.lexical:
        from homeagent.cli.main import paths_from
        from homeagent.memory.embedder import build_embedder

        spec = _config_str(paths_from(args).config_db, "core.agent.embedding_model_path")
        embedder = build_embedder(spec, log=lambda msg: print(f"homeagent: {msg}", file=sys.stderr))
    kb = KnowledgeBase(root, embedder)
    hits = asyncio.run(kb.search(" ".join(args.query), args.top_k))
    if args.json:
        print(json.dumps([h.to_dict() for h in hits], ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no match")
        return 0
    for h in hits:
        snippet = " ".join(h.snippet.split())
        print(f"{h.name}  ({h.score:.4f})\n    {snippet[:200]}")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    kb = KnowledgeBase(knowledge_root(args))
    try:
        removed = asyncio.run(kb.delete(args.name))
    except KnowledgeError as exc:
        return _fail(str(exc))
    if not removed:
        return _fail(f"no knowledge entry named {args.name!r}")
    print(f"removed {args.name}")
    return 0
