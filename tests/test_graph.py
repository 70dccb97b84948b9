"""The memory graph on real SQLite files: facts, contradictions, history, bad input, concurrency."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
from pathlib import Path

import pytest

from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_api import GraphMemoryService
from homeagent.memory.graph_model import GraphBusy, GraphError, Triple
from homeagent.memory.graph_schema import SCHEMA_VERSION


@pytest.fixture
async def graph(tmp_path: Path):
    g = await GraphDB.open(tmp_path / "memory" / "graph.db")
    yield g
    await g.close()


def lines(result) -> set[str]:
    return {r.line() for r in result.relations}


async def test_commit_and_recall_depth(graph: GraphDB) -> None:
    await graph.commit(
        [
            Triple("user", "lives_in", "北京", sentence="我住在北京"),
            Triple("user", "likes", "咖啡"),
            Triple("咖啡", "is_a", "饮料"),
            Triple("饮料", "sold_at", "超市"),
        ]
    )
    one = await graph.recall(["user"], depth=1)
    assert lines(one) == {"user --lives_in--> 北京", "user --likes--> 咖啡"}
    two = await graph.recall(["user"], depth=2)
    assert "咖啡 --is_a--> 饮料" in lines(two) and "饮料 --sold_at--> 超市" not in lines(two)
    assert [r.hop for r in two.relations][:2] == [1, 1]
    by_object = await graph.recall("北京")
    assert "user --likes--> 咖啡" in lines(by_object)  # reached through the user
    assert next(r for r in by_object.relations if r.object == "北京").sentence == "我住在北京"


async def test_two_character_chinese_keyword_matches_by_substring(graph: GraphDB) -> None:
    await graph.commit([Triple("user", "studied_at", "北京大学"), Triple("user", "likes", "Alice Cooper")])
    assert lines(await graph.recall("北京", depth=1)) == {"user --studied_at--> 北京大学"}
    assert lines(await graph.recall("cooper", depth=1)) == {"user --likes--> Alice Cooper"}
    assert (await graph.recall("京", depth=1)).relations == []  # one character: exact match only


async def test_single_valued_relation_retires_the_old_fact(graph: GraphDB) -> None:
    await graph.commit([Triple("user", "lives_in", "北京", valid_from=1000.0)])
    report = await graph.commit([Triple("user", "住在", "上海", sentence="我搬到上海了", valid_from=2000.0)])
    assert report.superseded == ["user --lives_in--> 北京"]
    current = await graph.recall("user", depth=1)
    assert lines(current) == {"user --lives_in--> 上海"}
    history = await graph.history("user", "lives_in")
    assert [(r.object, r.current) for r in history] == [("上海", True), ("北京", False)]
    old = history[1]
    assert old.valid_to == 2000.0 and old.retire_reason == "superseded"
    then = await graph.recall("user", depth=1, as_of=1500.0)
    assert lines(then) == {"user --lives_in--> 北京"}


async def test_multi_valued_relation_accumulates_and_repeats_reinforce(graph: GraphDB) -> None:
    await graph.commit([Triple("user", "likes", "猫"), Triple("user", "likes", "狗")])
    report = await graph.commit([Triple("user", "like", "猫")])
    assert report.reinforced == 1 and report.added == 0
    result = await graph.recall("user", depth=1)
    assert lines(result) == {"user --likes--> 猫", "user --likes--> 狗"}
    cat = next(r for r in result.relations if r.object == "猫")
    assert cat.mention_count == 2


async def test_only_facts_of_the_same_subject_are_retired(graph: GraphDB) -> None:
    await graph.commit([Triple("Alice", "lives_in", "Paris"), Triple("Bob", "lives_in", "London")])
    await graph.commit([Triple("Alice", "lives_in", "Berlin")])
    assert lines(await graph.recall("Bob", depth=1)) == {"Bob --lives_in--> London"}


async def test_a_late_older_fact_becomes_history_not_news(graph: GraphDB) -> None:
    await graph.commit([Triple("user", "lives_in", "上海", valid_from=2000.0)])
    report = await graph.commit([Triple("user", "lives_in", "北京", valid_from=1000.0)])
    assert report.historical == 1 and report.superseded == []
    assert lines(await graph.recall("user", depth=1)) == {"user --lives_in--> 上海"}
    assert lines(await graph.recall("user", depth=1, as_of=1500.0)) == {"user --lives_in--> 北京"}


async def test_sql_wildcards_and_quotes_are_plain_characters(graph: GraphDB) -> None:
    names = ["100%_done", "abc", 'O\'Brien "the" 1st', "a_b", "percent"]
    await graph.commit([Triple("user", "knows", n) for n in names])
    assert {r.object for r in (await graph.recall("%", depth=1)).relations} == set()  # 1 char: exact only
    assert {r.object for r in (await graph.recall("0%_d", depth=1)).relations} == {"100%_done"}
    assert {r.object for r in (await graph.recall("o'brien", depth=1)).relations} == {'O\'Brien "the" 1st'}
    n = await graph.purge({"target_contains": "%"}, "soft")
    assert n == 1
    n = await graph.purge({"target_contains": "_"}, "hard")
    assert n == 2  # hard also deletes history: a_b and the retired 100%_done
    remaining = {r.object for r in (await graph.recall("user", depth=1)).relations}
    assert remaining == {"abc", 'O\'Brien "the" 1st', "percent"}


async def test_bad_input_is_rejected_whole_and_named(graph: GraphDB) -> None:
    await graph.commit([Triple("user", "likes", "tea")])
    before = await graph.introspect()
    with pytest.raises(GraphError, match="triple 2: object is 10000 characters"):
        await graph.commit([Triple("user", "likes", "coffee"), Triple("user", "likes", "x" * 10_000)])
    with pytest.raises(GraphError, match="lacks relation"):
        await graph.commit([{"subject": "a", "object": "b"}])
    with pytest.raises(GraphError, match="empty"):
        await graph.commit([Triple("   ", "likes", "b")])
    after = await graph.introspect()
    assert (after["entities"], after["relations"]) == (before["entities"], before["relations"])
    assert (await graph.recall("x" * 10_000)).relations == []  # a huge keyword finds nothing, no error


async def test_merge_moves_relations_and_keeps_an_alias(graph: GraphDB) -> None:
    await graph.commit(
        [
            Triple("小明", "likes", "足球"),
            Triple("明明", "likes", "足球"),
            Triple("明明", "lives_in", "杭州"),
            Triple("明明", "knows", "小明"),
        ]
    )
    moved = await graph.merge_entities("明明", "小明")
    assert moved == 1  # lives_in moved; likes deduplicated; the self-loop retired
    result = await graph.recall("明明", depth=1)  # the alias still finds the entity
    assert [e.name for e in result.seeds] == ["小明"] and "明明" in result.seeds[0].aliases
    assert lines(result) == {"小明 --likes--> 足球", "小明 --lives_in--> 杭州"}
    football = next(r for r in result.relations if r.object == "足球")
    assert football.mention_count == 2


async def test_merge_into_itself_is_an_error(graph: GraphDB) -> None:
    await graph.commit([Triple("Alice", "likes", "tea"), Triple("Al", "likes", "tea")])
    with pytest.raises(GraphError, match="same entity"):
        await graph.merge_entities("Alice", "alice")
    await graph.merge_entities("Al", "Alice")
    with pytest.raises(GraphError, match="same entity"):
        await graph.merge_entities("Al", "Alice")  # Al is now an alias of Alice
    with pytest.raises(GraphError, match="no entity named"):
        await graph.merge_entities("Nobody", "Alice")


async def test_purge_soft_keeps_history_hard_deletes(graph: GraphDB) -> None:
    await graph.commit([Triple("user", "likes", "tea"), Triple("user", "likes", "coffee")])
    assert await graph.purge({"target_contains": "tea"}) == 1
    assert lines(await graph.recall("user", depth=1)) == {"user --likes--> coffee"}
    hist = await graph.recall("user", depth=1, include_history=True)
    assert {(r.object, r.retire_reason) for r in hist.relations} == {("tea", "purged"), ("coffee", None)}
    assert await graph.purge({"relation_type": "likes"}, "hard") == 2
    assert (await graph.recall("user", depth=1, include_history=True)).relations == []
    with pytest.raises(GraphError, match="at least one"):
        await graph.purge({})
    with pytest.raises(GraphError, match="mode"):
        await graph.purge({"relation_type": "likes"}, "everything")


async def test_edit_retracts_and_keeps_validity(graph: GraphDB) -> None:
    await graph.commit([Triple("user", "works_as", "teacher", valid_from=1000.0)])
    new = await graph.edit("user", "works_as", "teacher", new_object="doctor")
    assert (new.object, new.valid_from) == ("doctor", 1000.0)
    assert lines(await graph.recall("user", depth=1)) == {"user --works_as--> doctor"}
    # the wrong record never held: a past query sees only the correction
    assert lines(await graph.recall("user", depth=1, as_of=1500.0)) == {"user --works_as--> doctor"}
    with pytest.raises(GraphError, match="no current fact"):
        await graph.edit("user", "works_as", "teacher", new_object="nurse")


async def test_delete_entity_removes_its_relations(graph: GraphDB) -> None:
    await graph.commit(
        [Triple("user", "likes", "spam"), Triple("spam", "is_a", "food"), Triple("user", "likes", "tea")]
    )
    out = await graph.delete_entity("SPAM")
    assert out == {"deleted": "spam", "relations_deleted": 2}
    assert lines(await graph.recall("user", depth=2)) == {"user --likes--> tea"}
    assert await graph.entity("spam") is None


async def test_concurrent_commits_lose_no_update(graph: GraphDB) -> None:
    """Two loops and a user turn commit at once: every fact and every mention is counted."""

    async def writer(tag: str, n: int) -> None:
        for i in range(n):
            await graph.commit([Triple("user", "mentions", f"{tag}-{i}"), Triple("hub", "sees", f"{tag}-{i}")])

    await asyncio.gather(writer("distill", 60), writer("archive", 60), writer("turn", 60))
    stats = await graph.introspect()
    assert stats["relations"] == 360
    user = await graph.entity("user")
    assert user is not None and user.mention_count == 180


async def test_another_process_writing_at_the_same_time(graph: GraphDB, tmp_path: Path) -> None:
    script = (
        "import asyncio,sys\n"
        "from homeagent.memory.graph import GraphDB, Triple\n"
        "async def main():\n"
        "    g = await GraphDB.open(sys.argv[1])\n"
        "    for i in range(100):\n"
        "        await g.commit([Triple('other', 'has', f'item-{i}')])\n"
        "    await g.close()\n"
        "asyncio.run(main())\n"
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(graph.path))
    for i in range(100):
        await graph.commit([Triple("self", "has", f"item-{i}")])
    assert await proc.wait() == 0
    stats = await graph.introspect()
    assert stats["relations"] == 200


async def test_a_lock_held_too_long_reports_busy_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    g = await GraphDB.open(path, busy_timeout_ms=50, lock_retry_s=0.3)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(GraphBusy, match="nothing was written"):
            await g.commit([Triple("a", "r", "b")])
    finally:
        holder.execute("ROLLBACK")
    # a short hold is waited out
    release = threading.Timer(0.2, lambda: holder.execute("ROLLBACK"))
    holder.execute("BEGIN IMMEDIATE")
    release.start()
    g2 = await GraphDB.open(path, busy_timeout_ms=50, lock_retry_s=5)
    await g2.commit([Triple("a", "r", "b")])
    release.join()
    assert (await g.introspect())["relations"] == 1
    holder.close()
    await g.close()
    await g2.close()


async def test_migrations_are_numbered_and_refuse_a_newer_file(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    g = await GraphDB.open(path)
    assert await g.schema_version() == SCHEMA_VERSION
    await g.commit([Triple("a", "r", "b")])
    await g.close()
    g = await GraphDB.open(path)  # reopening migrates nothing and keeps the data
    assert (await g.introspect())["relations"] == 1
    await g.close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(GraphError, match="newer than this HomeAgent"):
        await GraphDB.open(path)
    with pytest.raises(FileNotFoundError):
        await GraphDB.open(tmp_path / "missing.db", create=False)


async def test_sqlite_never_runs_on_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every SQL statement of open, a 3000-triple commit, recall and close runs on a worker thread.

    Each connection the graph opens reports the thread of every statement it
    runs (sqlite3's trace callback); none may be the event loop's. A lag
    probe measured this before, and failed on a loaded host through GIL
    contention alone: the thread is what the design promises, so that is
    what is checked.
    """
    loop_thread = threading.get_ident()
    threads: list[int] = []
    real_connect = sqlite3.connect

    def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)  # type: ignore[arg-type]
        conn.set_trace_callback(lambda _sql: threads.append(threading.get_ident()))
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    graph = await GraphDB.open(tmp_path / "memory" / "graph.db")
    await graph.commit([Triple(f"e{i}", "links", f"e{i + 1}", sentence=f"sentence {i}") for i in range(3000)])
    assert lines(await graph.recall(["e10"], depth=1))
    await graph.close()
    assert len(threads) > 10
    assert loop_thread not in threads


async def test_memory_api_shapes(graph: GraphDB) -> None:
    api = GraphMemoryService(graph)
    assert (await api.commit([{"subject": "Ann", "relation": "likes", "object": "jazz"}]))["added"] == 1
    recall = await api.recall(["Ann"], 1)
    assert recall["seeds"] == ["Ann"] and {"name": "Ann", "type": "", "mention_count": 1} in recall["entities"]
    [fact] = recall["relations"]
    assert (fact["subject"], fact["relation"], fact["object"]) == ("Ann", "likes", "jazz")
    assert (await graph.history("Ann"))[0].source == "plugin"
    assert (await api.introspect())["relations"] == 1
    await api.commit([{"subject": "Annie", "relation": "likes", "object": "blues"}])
    assert await api.merge_entities("Annie", "Ann") == 1
    assert await api.purge({"subject_contains": "ann"}, "soft") == 2
