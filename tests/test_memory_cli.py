"""``homeagent memory import|search|stats|export`` on real data directories and real processes."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from homeagent.cli import memory_cmd
from homeagent.cli.memory_cmd import run_export, run_import, run_search, run_stats
from homeagent.memory.lexical import Analyzer
from tests.fakes.memory_shared import shared_analyzer

EMB = "hashing"  # the CLI logic is under test here; retrieval quality is tested elsewhere
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _write_jsonl(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"\n".join(lines) + b"\n")


def _rec(**kw: object) -> bytes:
    return json.dumps(kw, ensure_ascii=False).encode("utf-8")


@pytest.fixture(scope="session")
def analyzer() -> Analyzer:
    return shared_analyzer()


@pytest.fixture
def conversation(tmp_path: Path) -> Path:
    path = tmp_path / "chat.jsonl"
    _write_jsonl(
        path,
        [
            _rec(role="user", content="我家的小狗叫旺财", timestamp="2024-03-01T10:00:00+08:00", speaker="me", id="m1"),
            _rec(role="assistant", content="Got it, Wangcai it is.", timestamp=1709258460),
            b"{this is not json",
            b'{"role": "user", "content": "caf\xe9 latte"}',  # Latin-1 byte: invalid UTF-8
            _rec(role="user", content="", timestamp=1709258470),
            _rec(role="user", content="The wifi password is sunflower42", timestamp=1709258480000),
            b"",
            _rec(role="user", content="明天下午三点看牙医 🦷", timestamp="bad date"),
            _rec(role="user", content="明天下午三点看牙医 🦷", timestamp="2024-03-02 09:00"),
            _rec(speaker="Caroline", session="s9", content="A chat export names speakers, not roles"),
            _rec(content="neither a role nor a speaker"),
        ],
    )
    return path


def test_import_reports_bad_lines_and_imports_the_rest(tmp_path: Path, conversation: Path, analyzer: Analyzer) -> None:
    an = analyzer
    out, err = io.StringIO(), io.StringIO()
    data = tmp_path / "data"
    assert run_import(data, conversation, embedder_spec=EMB, analyzer=an, as_json=True, out=out, err=err) == 1
    report = json.loads(out.getvalue())
    assert report["imported"] == 5 and report["duplicates"] == 0
    assert [e["line"] for e in report["errors"]] == [3, 4, 5, 8, 11]
    text = err.getvalue()
    assert f"{conversation}:3: not valid JSON" in text and ":4: invalid UTF-8 at byte" in text
    assert ":5: empty 'content'" in text and ":8: timestamp 'bad date'" in text
    assert ":11: missing 'role' (or 'speaker')" in text
    assert "importing chat.jsonl: 100%" in text  # progress on stderr
    again = io.StringIO()
    assert run_import(data, conversation, embedder_spec=EMB, analyzer=an, out=again, err=io.StringIO()) == 1
    assert "imported 0, already present 5" in again.getvalue()


def test_search_stats_export_round_trip(tmp_path: Path, conversation: Path, analyzer: Analyzer) -> None:
    an = analyzer
    data = tmp_path / "data"
    run_import(data, conversation, embedder_spec=EMB, analyzer=an, out=io.StringIO(), err=io.StringIO())
    out = io.StringIO()
    assert (
        run_search(data, "sunflower42", k=2, as_json=True, embedder_spec=EMB, analyzer=an, out=out, err=io.StringIO())
        == 0
    )
    res = json.loads(out.getvalue())
    top = res["results"][0]
    assert res["query"] == "sunflower42" and top["text"] == "The wifi password is sunflower42"
    assert top["ts"] == 1709258480.0 and top["timestamp"] and top["score"] > 0 and top["id"].startswith("imp-")
    human = io.StringIO()
    run_search(data, "旺财", k=1, embedder_spec=EMB, analyzer=an, out=human, err=io.StringIO())
    assert " m1\n" in human.getvalue() and "我家的小狗叫旺财" in human.getvalue()

    queries = tmp_path / "q.jsonl"
    _write_jsonl(queries, [_rec(query="小狗"), b"[1]", _rec(query="牙医")])
    out, err = io.StringIO(), io.StringIO()
    assert run_search(data, None, k=1, queries_file=queries, embedder_spec=EMB, analyzer=an, out=out, err=err) == 0
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["query"] for x in lines] == ["小狗", "牙医"] and ":2:" in err.getvalue()
    assert lines[1]["results"][0]["text"].startswith("明天下午三点看牙医")

    stats = io.StringIO()
    assert run_stats(data, as_json=True, out=stats) == 0
    st = json.loads(stats.getvalue())
    assert st["documents"]["documents"] == 5 and st["context"]["events"] == 0

    exported = tmp_path / "export.jsonl"
    assert run_export(data, out_path=exported) == 0
    recs = [json.loads(x) for x in exported.read_text(encoding="utf-8").splitlines()]
    assert len(recs) == 5 and {r["role"] for r in recs} == {"user", "assistant"}
    assert {r.get("speaker") for r in recs} >= {"me", "Caroline"}
    fresh = tmp_path / "fresh"
    assert run_import(fresh, exported, embedder_spec=EMB, analyzer=an, out=io.StringIO(), err=io.StringIO()) == 0
    again = tmp_path / "again.jsonl"
    run_export(fresh, out_path=again, layer="documents")
    strip = lambda rs: sorted((r["id"], r["content"], r["timestamp"]) for r in rs)  # noqa: E731
    assert strip(recs) == strip(json.loads(x) for x in again.read_text(encoding="utf-8").splitlines())


def test_argparse_registration_and_usage_errors(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir")
    memory_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["--data-dir", str(tmp_path), "memory", "search", "x", "--k", "3", "--json"])
    assert args.func is memory_cmd.cmd_search and args.k == 3 and args.json
    assert memory_cmd.main(["--data-dir", str(tmp_path), "memory", "import", str(tmp_path / "nope.jsonl")]) == 2
    assert memory_cmd.main(["--data-dir", str(tmp_path), "memory", "search"]) == 2
    assert memory_cmd.main(["--data-dir", str(tmp_path), "memory"]) == 2
    assert memory_cmd.main(["--data-dir", str(tmp_path), "memory", "stats"]) == 0


DAEMON = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from homeagent.memory.cleaners import CleanerChain
    from homeagent.memory.context import ContextEvent, RelevanceContext
    from homeagent.memory.documents import DocumentStore
    from homeagent.memory.embedder import HashingEmbedder

    async def main():
        mem = Path(sys.argv[1]) / "memory"
        emb = HashingEmbedder()
        docs = DocumentStore(mem / "documents.db", emb)
        ctx = RelevanceContext(mem / "context.json", emb, docs, CleanerChain(), top_k=5, keep_recent=2, save_delay=0.05)
        print("READY", flush=True)
        i = 0
        seen_import = False
        while True:
            ctx.append(ContextEvent(kind="user", input="daemon turn %d about the garden" % i))
            await ctx.prune("garden")
            hits = [d for d in await docs.aquery("daemon-import-marker", 5) if d.id.startswith("x")]
            if hits and not seen_import:
                seen_import = True
                print("SAW", hits[0].id, flush=True)
            i += 1
            await asyncio.sleep(0.01)

    asyncio.run(main())
    """
)


def test_cli_works_while_a_daemon_writes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON, str(data)], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert daemon.stdout is not None and daemon.stdout.readline().strip() == "READY"
        time.sleep(0.5)
        chat = tmp_path / "c.jsonl"
        _write_jsonl(chat, [_rec(role="user", content=f"daemon-import-marker line {i}", id=f"x{i}") for i in range(50)])
        base = [sys.executable, "-m", "homeagent.cli.memory_cmd", "--data-dir", str(data), "memory", "--embedder", EMB]
        imp = subprocess.run([*base, "import", str(chat)], capture_output=True, text=True, env=ENV, timeout=60)
        assert imp.returncode == 0, imp.stderr
        assert "imported 50" in imp.stdout
        srch = subprocess.run(
            [*base, "search", "garden", "--json", "--k", "3"], capture_output=True, text=True, env=ENV, timeout=60
        )
        assert srch.returncode == 0, srch.stderr
        assert json.loads(srch.stdout)["results"]
        stats = subprocess.run([*base, "stats", "--json"], capture_output=True, text=True, env=ENV, timeout=60)
        st = json.loads(stats.stdout)
        assert st["documents"]["documents"] >= 50 and st["context"]["events"] >= 1
        line = daemon.stdout.readline()  # the daemon picked up the imported documents
        assert line.startswith("SAW x")
    finally:
        daemon.kill()
        daemon.wait()
