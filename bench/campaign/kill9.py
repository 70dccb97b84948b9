"""kill -9 at random moments during every kind of write, with a ledger of the writes the daemon acknowledged.

Writers run at once against a real `homeagent run`, each through a real
interface: chat turns that state a fact (socket), `config.set` (socket RPC) and
`homeagent config set` (CLI), `homeagent memory import` and `homeagent knowledge
add` (CLI), `/tool doc_commit`, `/tool knowledge_create`, `/tool timer_set`
turns (the offline provider runs the tool), `homeagent backup` of the live data
dir, `homeagent plugin install` / `remove` of a packed plugin, and the memory
loops' graph writes (`homeagent memory run-loop distill`, then `rules`, whose
report names the relations it wrote). A write enters the ledger only when
the daemon (or the CLI) said it was done. At a random moment the daemon is
killed with SIGKILL; every .db in the data dir must then pass `PRAGMA
integrity_check`, and after the restart every write in the ledger (all of them,
since the first kill) must be there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.campaign.daemon import DaemonProc, clean_env, configure
from bench.campaign.report import Row
from homeagent.cli.client import Client

CONFIG_RPC_KEY = "core.input_processing.image.describe_prompt"
CONFIG_CLI_KEY = "core.input_processing.image.ocr_prompt"
PLUGIN = "k9plug"
RELATION = re.compile(r"--likes--> campaign item (cmpfac\d+x)")


@dataclass
class Write:
    kind: str
    token: str
    value: str = ""


@dataclass
class Ledger:
    """Acknowledged writes; config keys keep every value sent, since a later unacknowledged one may have landed."""

    acked: list[Write] = field(default_factory=list)
    config_sent: dict[str, list[str]] = field(default_factory=dict)
    config_acked: dict[str, str] = field(default_factory=dict)
    # the plugin's states asked for, in order, and the last one the CLI acknowledged (like a config key)
    plugin_sent: list[str] = field(default_factory=list)
    plugin_acked: int | None = None
    backups_checked: set[str] = field(default_factory=set)
    attempts: int = 0
    counter: int = 0

    def token(self, kind: str) -> str:
        self.counter += 1
        return f"cmp{kind[:3]}{self.counter:06d}x"


async def _cli(data_dir: Path, *args: str, timeout: float = 60) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), *args,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env=clean_env(),
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, "timeout"
    return proc.returncode or 0, out.decode(errors="replace")


async def _turn(client: Client, text: str) -> dict[str, object] | None:
    async for frame in client.chat(text):
        if frame.get("type") == "response":
            return frame
    return None


class Writers:
    """The concurrent write loops of one daemon life; they end on their own when the daemon dies."""

    def __init__(self, daemon: DaemonProc, ledger: Ledger, rng: random.Random, cli: bool, package: Path) -> None:
        self.daemon = daemon
        self.ledger = ledger
        self.rng = rng
        self.cli = cli
        self.package = package
        self.errors: list[str] = []

    async def run(self) -> None:
        loops = [self._turns(), self._config_rpc()]
        if self.cli:
            loops += [self._imports(), self._cli_writes(), self._backups(), self._plugins(), self._graph_loops()]
        await asyncio.gather(*loops, return_exceptions=True)

    async def _backups(self) -> None:
        """`homeagent backup` of the live data dir; one that said it was done must restore (checked after)."""
        while self.daemon.alive():
            tok = self.ledger.token("backup")
            dest = self.daemon.data_dir.parent / "backups" / f"{tok}.tar.gz"
            dest.parent.mkdir(exist_ok=True)
            self.ledger.attempts += 1
            code, out = await _cli(self.daemon.data_dir, "backup", str(dest), "--quiet")
            if code == 0:
                self.ledger.acked.append(Write("backup", tok, str(dest)))
            elif self.daemon.alive():
                self.errors.append(f"backup {tok}: {out[-200:]}")
            await asyncio.sleep(self.rng.uniform(0.2, 1.0))

    async def _plugins(self) -> None:
        """Install and remove one packed plugin in turn; the folder must match the last acknowledged state."""
        while self.daemon.alive():
            installed = (self.daemon.data_dir / "plugins" / PLUGIN).exists()
            want = "removed" if installed else "installed"
            self.ledger.plugin_sent.append(want)
            index = len(self.ledger.plugin_sent) - 1
            self.ledger.attempts += 1
            args = ("plugin", "remove", PLUGIN) if installed else ("plugin", "install", str(self.package))
            code, out = await _cli(self.daemon.data_dir, *args)
            if code == 0:
                self.ledger.plugin_acked = index
                self.ledger.acked.append(Write("plugin", f"{want}#{index}"))
            elif self.daemon.alive():
                self.errors.append(f"plugin {want}: {out[-200:]}")
            await asyncio.sleep(self.rng.uniform(0.1, 0.5))

    async def _graph_loops(self) -> None:
        """The memory loops' graph writes: distill moves turns into documents, rules writes relations from them."""
        while self.daemon.alive():
            code, _ = await _cli(self.daemon.data_dir, "memory", "run-loop", "distill", "--json")
            code, out = (code, "") if code != 0 else await _cli(self.daemon.data_dir, "memory", "run-loop", "rules",
                                                                 "--json")
            written = sorted(set(RELATION.findall(out))) if code == 0 else []  # the report lists them ("facts")
            self.ledger.attempts += max(1, len(written))  # a loop cut short counts as one write not acknowledged
            self.ledger.acked += [Write("graph", t) for t in written]

    async def _turns(self) -> None:
        """Facts and tool writes, interleaved on one connection (the agent runs one turn at a time anyway)."""
        client = await Client.connect(self.daemon.socket, timeout=5)
        try:
            while self.daemon.alive():
                kind = self.rng.choice(("fact", "doc", "knowledge", "timer"))
                tok = self.ledger.token(kind)
                text = {
                    "fact": f"I like campaign item {tok}",
                    "doc": "/tool doc_commit " + json.dumps({"content": f"campaign document {tok}"}),
                    "knowledge": "/tool knowledge_create " + json.dumps({"name": tok, "content": f"note {tok}"}),
                    "timer": "/tool timer_set " + json.dumps({"message": f"remind {tok}", "duration": "20h"}),
                }[kind]
                self.ledger.attempts += 1
                frame = await _turn(client, text)
                if frame is None:
                    return
                reply = str(frame.get("text", ""))
                ok = frame.get("ok") and ("Noted" in reply if kind == "fact" else '"isError"' not in reply)
                if ok:
                    self.ledger.acked.append(Write(kind, tok))
                elif self.daemon.alive():
                    self.errors.append(f"{kind} {tok} not acknowledged: {reply[:200]}")
        except Exception:  # the daemon died under us: that is the point
            return
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    async def _config_rpc(self) -> None:
        client = await Client.connect(self.daemon.socket, timeout=5)
        try:
            while self.daemon.alive():
                value = self.ledger.token("config")
                self.ledger.config_sent.setdefault(CONFIG_RPC_KEY, []).append(value)
                self.ledger.attempts += 1
                await client.call("config.set", {"key": CONFIG_RPC_KEY, "value": value}, timeout=10)
                self.ledger.config_acked[CONFIG_RPC_KEY] = value
                self.ledger.acked.append(Write("config", value, CONFIG_RPC_KEY))
                await asyncio.sleep(self.rng.uniform(0, 0.05))
        except Exception:
            return
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    async def _imports(self) -> None:
        while self.daemon.alive():
            toks = [self.ledger.token("import") for _ in range(3)]
            path = self.daemon.data_dir.parent / f"import-{toks[0]}.jsonl"
            path.write_text("".join(json.dumps({"role": "user", "content": f"imported line {t}"}) + "\n" for t in toks))
            self.ledger.attempts += len(toks)
            code, out = await _cli(self.daemon.data_dir, "memory", "import", str(path))
            if code == 0 and "imported 3" in out:
                self.ledger.acked += [Write("import", t) for t in toks]
            elif code == 0:
                self.errors.append(f"import {toks[0]}: {out[-200:]}")

    async def _cli_writes(self) -> None:
        while self.daemon.alive():
            tok = self.ledger.token("cliwrite")
            self.ledger.attempts += 1
            if self.rng.random() < 0.5:
                self.ledger.config_sent.setdefault(CONFIG_CLI_KEY, []).append(tok)
                code, _ = await _cli(self.daemon.data_dir, "config", "set", CONFIG_CLI_KEY, tok)
                if code == 0:
                    self.ledger.config_acked[CONFIG_CLI_KEY] = tok
                    self.ledger.acked.append(Write("config", tok, CONFIG_CLI_KEY))
            else:
                code, _ = await _cli(self.daemon.data_dir, "knowledge", "add", tok, "--text", f"cli note {tok}")
                if code == 0:
                    self.ledger.acked.append(Write("knowledge", tok))


async def _plugin_package(workdir: Path) -> Path:
    """The plugin the install/remove writer uses: `homeagent plugin init` (Lua), packed with `plugin pack`."""
    src = workdir / "k9src"
    src.mkdir(parents=True, exist_ok=True)
    scratch = workdir / "k9scratch"
    for args in (("plugin", "init", PLUGIN, "--kind", "lua", "--dir", str(src)),
                 ("plugin", "pack", str(src / PLUGIN), "-o", str(workdir / f"{PLUGIN}.hmap"))):
        code, out = await _cli(scratch, *args)
        if code != 0:
            raise RuntimeError(f"could not build the campaign's plugin: {out[-500:]}")
    return workdir / f"{PLUGIN}.hmap"


def integrity(data_dir: Path) -> list[str]:
    """`PRAGMA integrity_check` on every SQLite file in the data dir; the ones not `ok`, with what SQLite said."""
    bad = []
    for db in sorted(data_dir.rglob("*.db")):
        try:
            conn = sqlite3.connect(db, timeout=30)
            try:
                result = conn.execute("PRAGMA integrity_check").fetchall()
            finally:
                conn.close()
        except sqlite3.Error as exc:
            result = [(f"{exc.__class__.__name__}: {exc}",)]
        if result != [("ok",)]:
            bad.append(f"{db.relative_to(data_dir)}: {result[:3]}")
    return bad


def _text_of(db: Path, query: str) -> str:
    if not db.exists():
        return ""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return "\n".join(str(r[0]) for r in conn.execute(query))
    finally:
        conn.close()


async def verify(daemon: DaemonProc, ledger: Ledger) -> list[str]:
    """Every acknowledged write, looked up where a user would find it; the ones missing."""
    from homeagent.knowledge.base import KnowledgeBase
    from homeagent.memory.cleaners import CleanerChain
    from homeagent.memory.context import RelevanceContext

    data = daemon.data_dir
    docs = _text_of(data / "memory" / "documents.db", "SELECT content FROM docs")
    entities = _text_of(data / "memory" / "graph.db", "SELECT name FROM entities")
    timers = _text_of(data / "plugin_data" / "timer" / "timers.db", "SELECT message FROM timers")
    timeline = RelevanceContext(data / "memory" / "context.json", None, None, CleanerChain(), read_only=True)
    said = "\n".join(e.input for e in timeline.timeline())
    knowledge = set(await KnowledgeBase(data / "knowledge").names())
    client = await Client.connect(daemon.socket, timeout=10)
    try:
        config = {key: (await client.call("config.get", {"key": key}))["value"] for key in ledger.config_sent}
    finally:
        await client.close()
    lost = []
    for key, acked in ledger.config_acked.items():
        sent = ledger.config_sent[key]
        # the value must be the last acknowledged one, or one sent after it (in flight at the kill)
        if config[key] not in sent[sent.index(acked):]:
            lost.append(f"config {key}: {config[key]!r}, last acknowledged {acked!r}")
    lost += await _verify_plugin(data, ledger)
    for write in ledger.acked:
        if write.kind == "backup" and write.value not in ledger.backups_checked:
            lost += await _verify_backup(daemon, write)
            ledger.backups_checked.add(write.value)
            continue
        found = {
            "backup": lambda t: True,  # checked once, above
            "plugin": lambda t: True,  # checked above, as the folder's current state
            "graph": lambda t: t in entities,
            "fact": lambda t: t in said or t in docs,
            "doc": lambda t: t in docs,
            "import": lambda t: t in docs,
            "knowledge": lambda t: t in knowledge,
            "timer": lambda t: t in timers,
            "config": lambda t: True,  # checked above, as the key's current value
        }[write.kind](write.token)
        if not found:
            lost.append(f"{write.kind} {write.token}")
    return lost


async def _verify_backup(daemon: DaemonProc, write: Write) -> list[str]:
    """An acknowledged backup passes `homeagent restore --check` (manifest, hashes, every store's integrity)."""
    code, out = await _cli(daemon.data_dir, "restore", write.value, "--check")
    return [] if code == 0 else [f"backup {write.token} does not restore: {out[-300:]}"]


async def _verify_plugin(data: Path, ledger: Ledger) -> list[str]:
    """The plugin's folder is in the last acknowledged state (or a later one in flight), and whole when present."""
    if ledger.plugin_acked is None:
        return []
    folder = data / "plugins" / PLUGIN
    state = "installed" if folder.exists() else "removed"
    allowed = ledger.plugin_sent[ledger.plugin_acked:]
    if state not in allowed:
        return [f"plugin {PLUGIN}: {state}, last acknowledged {ledger.plugin_sent[ledger.plugin_acked]}"]
    if state == "installed":
        try:
            manifest = json.loads((folder / "plugin.json").read_text())
            whole = (folder / str(manifest["entry"])).is_file()
        except (OSError, ValueError, KeyError):
            whole = False
        if not whole:
            return [f"plugin {PLUGIN}: its folder is there but not whole: {sorted(p.name for p in folder.iterdir())}"]
    return []


async def run(workdir: Path, kills: int, seed: int, max_life: float, cli: bool) -> Row:
    """`kills` kill -9s, each at a random moment within `max_life` seconds of a start; verify after each restart."""
    row = Row("kill -9 during writes")
    rng = random.Random(seed)
    data = workdir / "k9"
    data.mkdir(parents=True)
    configure(data, {"core.agent.context_top_k": 8})  # a small window: older turns sink into documents on the way
    package = await _plugin_package(workdir)
    daemon = DaemonProc(data)
    ledger = Ledger()
    started = time.monotonic()
    lost: list[str] = []
    corrupt: list[str] = []
    await daemon.start()
    client = await Client.connect(daemon.socket)
    try:  # every timer write stays active (20 h): lift the cap of 100, or the ledger would only see refusals
        await client.call("config.set", {"key": "plugin.timer.max_timers", "value": 1_000_000})
    finally:
        await client.close()
    try:
        for _ in range(kills):
            writers = Writers(daemon, ledger, rng, cli, package)
            task = asyncio.create_task(writers.run())
            await asyncio.sleep(rng.uniform(0.05, max_life))
            daemon.kill9()
            await asyncio.wait_for(task, 90)  # CLI writes in flight finish (or fail) on their own
            corrupt += integrity(data)
            row.notes += writers.errors[:3]
            await daemon.start()
            missing = await verify(daemon, ledger)
            lost += [m for m in missing if m not in lost]
    finally:
        await daemon.stop()
    corrupt += integrity(data)
    kinds: dict[str, int] = {}
    for write in ledger.acked:
        kinds[write.kind] = kinds.get(write.kind, 0) + 1
    row.figures = {
        "kills": kills,
        "writes attempted": ledger.attempts,
        "acknowledged": len(ledger.acked),
        "lost": len(lost),
        "corrupt stores": len(corrupt),
        "by kind": ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
    }
    if lost:
        row.fail(f"lost acknowledged writes: {lost[:10]}")
    if corrupt:
        row.fail(f"integrity_check failed: {corrupt[:5]}")
    if row.notes and not lost and not corrupt:
        row.notes = [f"unacknowledged while the daemon was up: {n}" for n in row.notes[:5]]
    row.seconds = time.monotonic() - started
    return row
