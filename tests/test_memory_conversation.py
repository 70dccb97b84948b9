"""Conversation structure in document memory: sessions, neighbours, dates, speakers, useful injection."""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from homeagent.cli.memory_cmd import run_import, run_search
from homeagent.memory.documents import DocDraft, DocumentStore, render_injection
from homeagent.memory.embedder import UseEmbedder
from homeagent.memory.lexical import Analyzer
from tests.fakes.memory_shared import shared_analyzer, shared_embedder

T0 = datetime(2023, 5, 8, 13, 56).timestamp()


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    return shared_analyzer()


@pytest.fixture(scope="module")
def embedder() -> UseEmbedder:
    return shared_embedder()


@pytest.fixture
def store(tmp_path: Path, embedder: UseEmbedder, analyzer: Analyzer) -> DocumentStore:
    s = DocumentStore(tmp_path / "documents.db", embedder, analyzer=analyzer)
    yield s
    s.close()


def turns(store: DocumentStore, session: str, start: float, lines: list[tuple[str, str]]) -> None:
    store.insert_many(
        [
            DocDraft(text, ts=start + 60 * i, id=f"{session}:{i}", speaker=speaker, session=session)
            for i, (speaker, text) in enumerate(lines)
        ]
    )


def ids(docs: list) -> list[str]:
    return [d.id for d in docs]


def test_a_turn_is_found_through_the_question_next_to_it(store: DocumentStore) -> None:
    turns(store, "s1", T0, [
        ("Sam", "Did you finally find someone for your teeth?"),
        ("Ana", "Yes! Dr. Okafor on Main Street, she is wonderful."),
        ("Sam", "Great. Want to get lunch on Friday?"),
    ])
    turns(store, "s2", T0 + 86400 * 7, [
        ("Ana", "Okafor Street has a new bakery, by the way."),
        ("Sam", "I love bakeries."),
    ])
    found = store.query("Who does Ana see for her teeth?", 3, touch=False, min_score=float("-inf"))
    assert "s1:1" in ids(found)[:2], [(d.id, d.content) for d in found]


def test_dates_are_searchable_as_text(store: DocumentStore) -> None:
    turns(store, "may", T0, [("Ana", "We went hiking in the hills.")])
    turns(store, "june", datetime(2023, 6, 20, 10, 0).timestamp(), [("Ana", "We went hiking by the lake.")])
    found = store.query("What did Ana do in June 2023?", 2, touch=False, min_score=float("-inf"))
    assert found[0].id == "june:0"


def test_a_named_speaker_is_preferred(store: DocumentStore) -> None:
    turns(store, "s1", T0, [("Caroline", "I painted a sunrise last week."), ("Melanie", "I painted a lake last week.")])
    found = store.query("What did Melanie paint?", 2, touch=False, min_score=float("-inf"))
    assert found[0].id == "s1:1"


def test_sessions_are_derived_from_gaps_in_time(tmp_path: Path, embedder: UseEmbedder, analyzer: Analyzer) -> None:
    store = DocumentStore(tmp_path / "d.db", embedder, analyzer=analyzer, session_gap=1800)
    try:
        stamps = [T0, T0 + 600, T0 + 1200, T0 + 5 * 3600, T0 + 5 * 3600 + 60]
        # out of order on purpose: a late-arriving older turn still joins its own conversation
        order = [0, 3, 1, 4, 2]
        store.insert_many([DocDraft(f"turn {i}", ts=stamps[i], id=f"t{i}", speaker="user") for i in order])
        store.insert_many([DocDraft("a note on its own", ts=T0 + 700, id="note")])
        sessions = {d.id: d.session for d in store.iter_docs()}
        assert sessions["t0"] == sessions["t1"] == sessions["t2"]
        assert sessions["t3"] == sessions["t4"] != sessions["t0"]
        assert sessions["note"] == ""  # no speaker: not a conversation turn
        # a one-turn session much later
        store.insert_many([DocDraft("alone", ts=T0 + 86400, id="t5", speaker="user")])
        assert store.get("t5").session not in (sessions["t0"], sessions["t3"])  # type: ignore[union-attr]
    finally:
        store.close()


def test_injection_is_useful_not_the_question_again(store: DocumentStore) -> None:
    turns(store, "s1", T0, [
        ("user", "My dentist is Dr. Okafor."),
        ("assistant", "Noted: your dentist is Dr. Okafor."),
        ("user", "I also need to buy milk."),
        ("user", "Who is my dentist?"),
        ("assistant", "I am not sure."),
        ("user", "Who is my dentist?"),
        ("user", "who is my dentist"),
    ])
    recalled = store.recall("Who is my dentist?", 3, touch=False)
    texts = [r.doc.content for r in recalled]
    assert texts[0] in ("My dentist is Dr. Okafor.", "Noted: your dentist is Dr. Okafor."), texts
    assert "I am not sure." not in texts[:2]  # matches only through the questions around it
    assert not any(t.lower().startswith("who is my dentist") for t in texts), texts
    assert len({t.lower() for t in texts}) == len(texts)
    block = render_injection(recalled)
    assert block.startswith("【相关记忆文档】\n- [2023-05-08")
    assert "user: My dentist is Dr. Okafor." in block
    assert "after: assistant: Noted" in block  # the turn around it, so it can be read alone


def test_import_reads_speaker_and_session_and_is_idempotent(tmp_path: Path, analyzer: Analyzer) -> None:
    lines = [
        {"id": "D1:1", "role": "user", "speaker": "Caroline", "session": "session_1", "content": "I went to a support group.",
         "timestamp": "2023-05-08T13:56:00"},
        {"id": "D1:2", "role": "user", "speaker": "Melanie", "session": "session_1", "content": "That is great!",
         "timestamp": "2023-05-08T13:57:00"},
        {"id": "D2:1", "role": "user", "speaker": "Caroline", "session": 2, "content": "Back from the lake.",
         "timestamp": "2023-06-01T10:00:00"},
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(rec) + "\n" for rec in lines), encoding="utf-8")
    data = tmp_path / "data"
    out = io.StringIO()
    assert run_import(data, path, embedder_spec="hashing", as_json=True, out=out, err=io.StringIO(), analyzer=analyzer) == 0
    assert json.loads(out.getvalue())["imported"] == 3
    out = io.StringIO()
    assert run_import(data, path, embedder_spec="hashing", as_json=True, out=out, err=io.StringIO(), analyzer=analyzer) == 0
    assert json.loads(out.getvalue())["duplicates"] == 3
    out = io.StringIO()
    run_search(data, "support group", k=2, as_json=True, embedder_spec="hashing", out=out, err=io.StringIO(), analyzer=analyzer)
    top = json.loads(out.getvalue())["results"][0]
    assert (top["id"], top["speaker"], top["session"]) == ("D1:1", "Caroline", "session_1")


def test_import_survives_hostile_lines(tmp_path: Path, analyzer: Analyzer) -> None:
    good = [json.dumps({"role": "user", "content": f"good line {i}", "id": f"g{i}"}) for i in range(300)]
    bad = [
        "[" * 50_000 + "]" * 50_000,  # nested 50,000 deep
        json.dumps({"role": "user", "content": "x", "timestamp": int("9" * 400)}),  # 400-digit timestamp
        json.dumps({"role": "user", "content": "x", "timestamp": "9" * 400}),
        json.dumps({"role": "user", "content": "x", "speaker": {"a": 1}}),
        '{"role": "user", "content": "x", "timestamp": NaN}',
    ]
    surrogate = '{"role": "user", "content": "broken \\ud800 text", "id": "sur"}'
    no_words = [json.dumps({"role": "user", "content": "Is it?", "id": f"q{i}"}) for i in range(80)]
    huge = json.dumps({"role": "user", "content": "long " * 200_000, "id": "huge"})  # 1 MB
    lines = good[:150] + bad + [surrogate] + no_words + [huge] + good[150:]
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = tmp_path / "data"
    out, err = io.StringIO(), io.StringIO()
    code = run_import(data, path, embedder_spec="hashing", as_json=True, out=out, err=err, analyzer=analyzer)
    report = json.loads(out.getvalue())
    assert code == 1
    assert report["imported"] == 300 + 1 + 80 + 1
    bad_lines = {e["line"] for e in report["errors"]}
    assert bad_lines == set(range(151, 151 + len(bad))), report["errors"]
    assert "nested too deeply" in err.getvalue() and "out of range" in err.getvalue()
    store = DocumentStore(data / "memory" / "documents.db", None)
    try:
        assert store.get("sur").content == "broken \ufffd text"  # type: ignore[union-attr]
        assert store.count() == 382
    finally:
        store.close()


def test_an_old_documents_file_is_migrated(tmp_path: Path, analyzer: Analyzer) -> None:
    path = tmp_path / "documents.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE docs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, content TEXT NOT NULL,"
        " summary TEXT NOT NULL DEFAULT '', tags TEXT NOT NULL DEFAULT '[]', ts REAL NOT NULL, created REAL NOT NULL,"
        " access_count INTEGER NOT NULL DEFAULT 0, last_access REAL, source TEXT NOT NULL DEFAULT '',"
        " terms TEXT NOT NULL DEFAULT '', analyzer TEXT NOT NULL DEFAULT '', model TEXT, vec BLOB);"
        "INSERT INTO docs (id, content, ts, created) VALUES ('old', 'the wifi password is sunflower', 1.7e9, 1.7e9);"
    )
    conn.commit()
    conn.close()
    store = DocumentStore(path, None, analyzer=analyzer)
    try:
        assert ids(store.query("wifi password", 1, touch=False, min_score=float("-inf"))) == ["old"]
        store.insert_many([DocDraft("new turn", id="new", speaker="user")])
        assert store.get("new").speaker == "user"  # type: ignore[union-attr]
    finally:
        store.close()


def test_kill_during_import_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """A kill -9 in the middle of an import leaves a sound file; importing again completes it exactly."""
    path = tmp_path / "big.jsonl"
    path.write_text(
        "".join(json.dumps({"role": "user", "content": f"turn number {i} about topic {i % 37}", "id": f"k{i}",
                            "speaker": "user", "timestamp": T0 + i}) + "\n" for i in range(6000)),
        encoding="utf-8",
    )
    data = tmp_path / "data"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "homeagent.cli.main", "--data-dir", str(data), "memory", "--embedder", "hashing",
           "import", str(path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    db = data / "memory" / "documents.db"
    deadline = time.time() + 60
    while time.time() < deadline:
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=1) as conn:
                    if conn.execute("SELECT COUNT(*) FROM docs").fetchone()[0] > 0:
                        break
            except sqlite3.Error:
                pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        partial = conn.execute("SELECT COUNT(*) FROM docs").fetchone()[0]
    assert 0 < partial <= 6000
    done = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=env, timeout=120)
    report = json.loads(done.stdout)
    assert report["imported"] + report["duplicates"] == 6000 and report["duplicates"] == partial


def test_chinese_multi_session_check(tmp_path: Path, analyzer: Analyzer) -> None:
    """bench/data/zh: 40 turns over four sessions; the facts are found through `memory search` as in English."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from bench_locomo import load_conversation

    turns_, questions = load_conversation(Path(__file__).resolve().parent.parent / "bench/data/zh/zh_friends.json")
    lines = tmp_path / "zh.jsonl"
    lines.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in turns_), encoding="utf-8")
    data = tmp_path / "data"
    assert run_import(data, lines, as_json=True, out=io.StringIO(), err=io.StringIO(), analyzer=analyzer) == 0
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps({"query": q["query"]}, ensure_ascii=False) + "\n" for q in questions), "utf-8")
    out = io.StringIO()
    run_search(data, None, k=10, queries_file=qfile, out=out, err=io.StringIO(), analyzer=analyzer)
    found = [[r["id"] for r in json.loads(line)["results"]] for line in out.getvalue().splitlines()]
    hits = sum(bool(q["evidence"] & set(ids)) for q, ids in zip(questions, found, strict=True))
    assert hits >= 16, f"{hits}/20 questions found their turn in the top 10"
    by_question = dict(zip((q["query"] for q in questions), found, strict=True))
    assert "D1:4" in by_question["小李的猫叫什么名字？"][:3]  # 咪咪
    assert "D3:6" in by_question["小李在学什么乐器？"][:3]  # 吉他
    assert "D1:4" in by_question["What is the name of Xiao Li's cat?"][:10]  # cross-lingual, through the dense half


def test_a_long_session_does_not_grow_the_windows_of_its_day(tmp_path: Path, analyzer: Analyzer) -> None:
    # found by the campaign (bench/campaign, load): rebuilding a session's row extended the cached word list of its
    # date, so every later window of that day carried the whole session -- each turn slower than the one before
    from homeagent.memory.conversation import date_text

    store = DocumentStore(tmp_path / "documents.db", None, analyzer=analyzer)
    try:
        for i in range(60):
            store.insert_many([DocDraft(f"I like item number {i}", ts=T0 + 60 * i, id=f"s:{i}", speaker="Ana", session="s")])
            store.query(f"what about item {i}?", 3, touch=False, min_score=float("-inf"))
        conv = store._conv
        assert conv is not None
        assert len(conv._words(date_text(T0))) < 20
        windows = conv.windows
        longest = max(windows._doc_len[row] for row in windows._row_of.values())
        assert longest < 200, longest
    finally:
        store.close()
