"""Document recall at scale: conversation-aware search over 10k-100k turns, beside plain baselines.

Builds a documents.db of synthetic conversations (sessions of 8-40 turns by
two to four speakers, words drawn Zipf-like from a 20k-word vocabulary, one
random unit vector per turn so embedding cost does not hide the search's)
and times, in the same run:

* ``search``: ``DocumentStore.query`` minus the query's embedding (the
  embedder returns a precomputed vector), i.e. what retrieval itself costs;
* ``prompt recall``: ``DocumentStore.recall``, the 【相关记忆文档】 block's
  documents with their neighbours (in a turn the input's vector is already
  cached by the context prune, so this is what the injection adds);
* the plain ``HybridIndex.search`` over the same rows (no structure) and plain
  exact numpy cosine top-10, as baselines;
* the first search after a start (windows and sessions built) and the load.

    .venv/bin/python bench/bench_recall_scale.py               # 10k and 100k
    .venv/bin/python bench/bench_recall_scale.py --sizes 20000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from homeagent.memory.documents import DocDraft, DocumentStore
from homeagent.memory.lexical import Analyzer

DIM = 512


class PrecomputedEmbedder:
    """Returns a fixed random vector per text: retrieval is timed without a model's cost."""

    name = "precomputed"
    dim = DIM
    relevance_floor = 0.3

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.table: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            v = self.table.get(t)
            if v is None:
                v = self.rng.standard_normal(DIM).astype(np.float32)
                v /= np.linalg.norm(v)
                self.table[t] = v
            out[i] = v
        return out


def corpus(n: int, seed: int = 1) -> tuple[list[DocDraft], list[str]]:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    drafts: list[DocDraft] = []
    ts = 1.6e9
    session = 0
    while len(drafts) < n:
        session += 1
        speakers = [f"person{j}" for j in rng.choice(50, size=int(rng.integers(2, 5)), replace=False)]
        for _ in range(int(rng.integers(8, 41))):
            words = rng.choice(len(vocab), size=int(rng.integers(4, 30)), p=weights)
            ts += float(rng.integers(5, 120))
            drafts.append(DocDraft(" ".join(vocab[w] for w in words), ts=ts, id=f"d{len(drafts)}",
                                   speaker=str(rng.choice(speakers)), session=f"s{session}"))
        ts += 86_400
    queries = [" ".join(vocab[w] for w in rng.choice(len(vocab), size=6, p=weights)) + " person3" for _ in range(300)]
    return drafts[:n], queries


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


def run(n: int, analyzer: Analyzer) -> list[str]:
    drafts, queries = corpus(n)
    emb = PrecomputedEmbedder()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "documents.db"
        store = DocumentStore(path, emb, analyzer=analyzer)  # type: ignore[arg-type]
        t = time.perf_counter()
        for i in range(0, n, 2000):
            store.insert_many(drafts[i : i + 2000])
        insert_s = time.perf_counter() - t
        store.close()
        store = DocumentStore(path, emb, analyzer=analyzer)  # type: ignore[arg-type]
        t = time.perf_counter()
        store.load()
        load_s = time.perf_counter() - t
        emb.embed(queries)  # vectors ready: the timings below are retrieval only
        t = time.perf_counter()
        store.query(queries[0], 10, touch=False)
        first_ms = (time.perf_counter() - t) * 1000
        ours: list[float] = []
        injected: list[float] = []
        plain: list[float] = []
        exact: list[float] = []
        index = store._index
        assert index is not None and index.vectors is not None
        mat = index.vectors._mat[: len(index.vectors)]
        for q in queries:
            qv = emb.embed([q])[0]
            toks = analyzer.tokens(q)
            t = time.perf_counter()
            store.query(q, 10, touch=False, min_score=float("-inf"))
            ours.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            store.recall(q, 3, touch=False)
            injected.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            index.search(toks, qv, 10)
            plain.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            sims = mat @ qv
            top = np.argpartition(-sims, 10)[:10]
            top[np.argsort(-sims[top])]
            exact.append((time.perf_counter() - t) * 1000)
        store.close()
    rows.append(f"| {n:,} | conversation search (ours) | {statistics.median(ours):.2f} | {pct(ours, 95):.2f} |")
    rows.append(f"| {n:,} | prompt recall (3 documents with neighbours) | {statistics.median(injected):.2f} | {pct(injected, 95):.2f} |")
    rows.append(f"| {n:,} | plain HybridIndex.search, same rows | {statistics.median(plain):.2f} | {pct(plain, 95):.2f} |")
    rows.append(f"| {n:,} | numpy exact cosine top-10 | {statistics.median(exact):.2f} | {pct(exact, 95):.2f} |")
    rows.append(f"| {n:,} | first search after load (builds windows) | {first_ms:.0f} | — |")
    rows.append(f"| {n:,} | load / insert all (tokenise + SQLite) | {load_s * 1000:.0f} | {n / insert_s:,.0f} rows/s |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    args = ap.parse_args()
    analyzer = Analyzer()
    analyzer.warmup()
    print("| documents | what | p50 ms | p95 ms |")
    print("|---|---|---|---|")
    for n in args.sizes:
        for row in run(n, analyzer):
            print(row)
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
