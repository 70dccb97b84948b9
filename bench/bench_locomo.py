"""LoCoMo turn recall through the product's own CLI, beside a plain BM25 baseline in the same run.

For each conversation file this makes a fresh data directory, imports the
turns with ``homeagent memory import`` (one JSONL line per turn, with
``speaker`` and ``session`` fields, as a chat export has them) and runs the
questions with ``homeagent memory search --queries --k 10 --json``. A turn
counts as found when its id is among the results. Categories 1-4 (multi-hop,
temporal, open-domain, single-hop); 5 (adversarial) has no answer turn to
find.

    .venv/bin/python bench/bench_locomo.py ../shared/data/locomo-dev
    .venv/bin/python bench/bench_locomo.py DIR --embedder hashing   # another dense model
    .venv/bin/python bench/bench_locomo.py DIR --no-speaker         # turns without structure fields

The data is research data for evaluation: it is read from where it lies and
never copied into the repository.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
HOMEAGENT = [sys.executable, "-m", "homeagent.cli.main"]


def load_conversation(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(turns, questions)`` of one LoCoMo file, in the import line format of the data's README."""
    data = json.loads(path.read_text(encoding="utf-8"))
    conv = data.get("conversation", data)
    turns: list[dict[str, Any]] = []
    n = 1
    while f"session_{n}" in conv:
        when = datetime.strptime(conv[f"session_{n}_date_time"].strip(), "%I:%M %p on %d %B, %Y")
        for i, t in enumerate(conv[f"session_{n}"]):
            text = t["text"] + (f" [shares {t['blip_caption']}]" if t.get("blip_caption") else "")
            turns.append({
                "id": t["dia_id"], "role": "user", "speaker": t["speaker"], "session": f"session_{n}",
                "content": text, "timestamp": (when + timedelta(seconds=i)).isoformat(),
            })
        n += 1
    ids = {t["id"] for t in turns}
    questions = []
    for q in data["qa"]:
        if q.get("category") not in CATEGORIES:
            continue
        evidence = {f"D{int(a)}:{int(b)}" for e in q.get("evidence", []) for a, b in EVIDENCE.findall(e)} & ids
        if evidence:
            questions.append({"query": q["question"], "category": q["category"], "evidence": evidence})
    return turns, questions


_WORD = re.compile(r"\w+")


def bm25_baseline(turns: list[dict[str, Any]], questions: list[dict[str, Any]], k: int = 10) -> list[list[str]]:
    """Plain BM25 (k1 1.5, b 0.75) over lower-cased words of ``speaker: text``, one document per turn."""
    docs = [Counter(_WORD.findall(f"{t['speaker']}: {t['content']}".lower())) for t in turns]
    lengths = [sum(d.values()) for d in docs]
    avg = sum(lengths) / len(lengths)
    df: Counter[str] = Counter(w for d in docs for w in d)
    n = len(docs)
    out = []
    for q in questions:
        words = set(_WORD.findall(q["query"].lower()))
        scores = []
        for d, length in zip(docs, lengths, strict=True):
            s = 0.0
            for w in words:
                tf = d.get(w, 0)
                if tf:
                    idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                    s += idf * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * length / avg))
            scores.append(s)
        order = sorted(range(n), key=lambda i: -scores[i])[:k]
        out.append([turns[i]["id"] for i in order])
    return out


def run_cli(args: list[str], data_dir: Path, embedder: str | None) -> subprocess.CompletedProcess[str]:
    cmd = [*HOMEAGENT, "--data-dir", str(data_dir), "memory"]
    if embedder is not None:
        cmd += ["--embedder", embedder]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode not in (0, 1):
        raise SystemExit(f"homeagent {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def score(found: list[list[str]], questions: list[dict[str, Any]]) -> dict[int, list[tuple[bool, bool, bool]]]:
    out: dict[int, list[tuple[bool, bool, bool]]] = {}
    for ids, q in zip(found, questions, strict=True):
        ev = q["evidence"]
        out.setdefault(q["category"], []).append(
            (bool(ev & set(ids[:5])), bool(ev & set(ids[:10])), ev <= set(ids[:10]))
        )
    return out


def summarise(rows: dict[int, list[tuple[bool, bool, bool]]]) -> dict[str, tuple[int, float, float, float]]:
    def rates(items: list[tuple[bool, bool, bool]]) -> tuple[int, float, float, float]:
        return len(items), *(sum(x[i] for x in items) / len(items) for i in range(3))  # type: ignore[return-value]

    out = {CATEGORIES[c]: rates(v) for c, v in sorted(rows.items())}
    out["all (1-4)"] = rates([x for v in rows.values() for x in v])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", type=Path, help="folder of LoCoMo conversation files (*.json)")
    ap.add_argument("--embedder", help="passed to `homeagent memory --embedder` (default: the built-in)")
    ap.add_argument("--no-speaker", action="store_true", help="import without speaker and session fields")
    args = ap.parse_args()
    files = sorted(p for p in args.data.glob("*.json"))
    if not files:
        raise SystemExit(f"no *.json conversations in {args.data}")
    ours: dict[int, list[tuple[bool, bool, bool]]] = {}
    base: dict[int, list[tuple[bool, bool, bool]]] = {}
    latencies: list[float] = []
    imported = 0
    import_seconds = 0.0
    for path in files:
        turns, questions = load_conversation(path)
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp) / "data"
            lines = Path(tmp) / "turns.jsonl"
            with lines.open("w", encoding="utf-8") as f:
                for t in turns:
                    rec = dict(t)
                    if args.no_speaker:
                        rec.pop("speaker")
                        rec.pop("session")
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            report = json.loads(run_cli(["import", str(lines), "--json"], data_dir, args.embedder).stdout)
            imported += report["imported"]
            import_seconds += report["seconds"]
            qfile = Path(tmp) / "queries.jsonl"
            qfile.write_text("".join(json.dumps({"query": q["query"]}) + "\n" for q in questions), encoding="utf-8")
            out = run_cli(["search", "--queries", str(qfile), "--k", "10", "--json"], data_dir, args.embedder).stdout
            results = [json.loads(line) for line in out.splitlines() if line.strip()]
        found = [[r["id"] for r in res["results"]] for res in results]
        latencies += [res["elapsed_ms"] for res in results if "elapsed_ms" in res]
        for cat, v in score(found, questions).items():
            ours.setdefault(cat, []).extend(v)
        for cat, v in score(bm25_baseline(turns, questions), questions).items():
            base.setdefault(cat, []).extend(v)
        print(f"{path.name}: {len(turns)} turns, {len(questions)} questions", file=sys.stderr)
    a, b = summarise(ours), summarise(base)
    print(f"\n### LoCoMo turn recall ({len(files)} conversations, {args.data.name})\n")
    print("| category | n | HomeAgent any@5 | any@10 | all@10 | plain BM25 any@5 | any@10 | all@10 |")
    print("|---|---|---|---|---|---|---|---|")
    for name in a:
        n, *x = a[name]
        _, *y = b[name]
        print(f"| {name} | {n} | " + " | ".join(f"{v:.3f}" for v in x) + " | " + " | ".join(f"{v:.3f}" for v in y) + " |")
    if latencies:
        latencies.sort()
        p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
        print(f"\nquery latency (inside `memory search`): p50 {p(0.5):.1f} ms, p95 {p(0.95):.1f} ms over {len(latencies)} queries")
    if import_seconds:
        print(f"import: {imported} turns in {import_seconds:.1f} s ({imported / import_seconds:,.0f} turns/s, embedding included)")
    print(f"(measured {time.strftime('%Y-%m-%d %H:%M')}; embedder {args.embedder or 'built-in'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
