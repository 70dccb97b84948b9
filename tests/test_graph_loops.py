"""Memory heartbeats: archive, merge, review with a scripted LLM; bad replies; backoff and stats."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from homeagent.memory.documents import DocumentStore
from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_model import Triple
from homeagent.memory.loops import MemoryLoops, ReplyRejected, archive_pass, merge_pass, review_pass
from tests.fakes.builtins_host import llm_daemon
from tests.fakes.llm_openai import FakeOpenAI, Turn


class ScriptedLLM:
    """Answers prompts from a list of replies (strings), recording what it was asked."""

    def __init__(self, replies: Iterable[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    async def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.replies:
            raise RuntimeError("the LLM is down")
        return self.replies.pop(0)


@pytest.fixture
async def graph(tmp_path: Path):
    g = await GraphDB.open(tmp_path / "graph.db")
    yield g
    await g.close()


@pytest.fixture
async def docs(tmp_path: Path):
    store = DocumentStore(tmp_path / "documents.db", None)
    yield store
    await store.aclose()


async def _cold(docs: DocumentStore, *contents: str) -> list[str]:
    ids = [await docs.acommit(c, ts=1_000_000.0) for c in contents]
    await asyncio.sleep(0.01)  # strictly older than "now" for find_cold(age_hours=0)
    return ids


async def test_archive_with_rules_keeps_documents(graph: GraphDB, docs: DocumentStore) -> None:
    await _cold(docs, "I live in Paris. I like jazz.", "Nothing personal here.")
    report = await archive_pass(graph, docs, None, age_hours=0)
    assert report.counts == {"documents": 2, "facts": 2, "documents_removed": 0}
    facts = await graph.recall("user", 1)
    assert {r.line() for r in facts.relations} == {"user --lives_in--> Paris", "user --likes--> jazz"}
    assert all(r.valid_from == 1_000_000.0 for r in facts.relations)  # the document's time, not now
    assert await docs.acount() == 2
    again = await archive_pass(graph, docs, None, age_hours=0)
    assert again.counts["documents"] == 0  # already processed


async def test_archive_with_llm_moves_documents_into_the_graph(graph: GraphDB, docs: DocumentStore) -> None:
    await _cold(docs, "Lunch with Maria at Luigi's; she is moving to Lisbon.")
    reply = {
        "triples": [
            {
                "subject": "Maria",
                "relation": "moving_to",
                "object": "Lisbon",
                "sentence_text": "she is moving to Lisbon",
            }
        ]
    }
    llm = ScriptedLLM(["```json\n" + json.dumps(reply) + "\n```"])
    report = await archive_pass(graph, docs, llm, age_hours=0)
    assert report.counts == {"documents": 1, "facts": 1, "documents_removed": 1}
    assert "Lunch with Maria" in llm.prompts[0]
    assert {r.line() for r in (await graph.recall("Maria", 1)).relations} == {"Maria --moving_to--> Lisbon"}
    assert await docs.acount() == 0


async def test_bad_llm_replies_change_nothing_and_fall_back_to_rules(
    graph: GraphDB, docs: DocumentStore, caplog: pytest.LogCaptureFixture
) -> None:
    await _cold(docs, "I like tea. My cousin Bob visited.")
    bad = [
        "Sure! Here are the triples: subject=user",  # not JSON
        json.dumps({"triples": [{"subject": "user", "relation": "likes"}]}),  # wrong shape
        json.dumps({"triples": [{"subject": "user", "relation": "owns", "object": "a yacht"}]}),  # not in the text
    ]
    llm = ScriptedLLM(bad)
    for expected in ("not JSON", "expected shape", "does not mention"):
        with pytest.raises(ReplyRejected, match=expected):
            await archive_pass(graph, docs, llm, age_hours=0)
        assert (await graph.introspect())["relations"] == 0 and await docs.acount() == 1
    # three strikes: that document is archived by the rules instead
    report = await archive_pass(graph, docs, llm, age_hours=0)
    assert report.counts["facts"] == 1 and llm.replies == [] and len(llm.prompts) == 3
    assert {r.line() for r in (await graph.recall("user", 1)).relations} == {"user --likes--> tea"}


async def test_merge_exact_then_llm(graph: GraphDB) -> None:
    await graph.commit(
        [
            Triple("user", "uses", "Visual Studio Code"),
            Triple("user", "likes", "Visual Studio Codes"),
            Triple("user", "supports", "Tottenham Hotspur"),
            Triple("user", "watched", "Tottenham Hotspurs"),
            Triple("user", "reads", "New York Times"),
            Triple("user", "quotes", "new-york times"),
        ]
    )
    bad = ScriptedLLM([json.dumps({"decisions": [{"a": "Visual Studio Code", "b": "Emacs", "same": True}]})])
    with pytest.raises(ReplyRejected, match="not shown"):
        await merge_pass(graph, bad)
    assert await graph.entity("Visual Studio Codes") is not None  # nothing merged by the rejected reply
    llm = ScriptedLLM(
        [
            json.dumps(
                {
                    "decisions": [
                        {
                            "a": "Visual Studio Codes",
                            "b": "Visual Studio Code",
                            "same": True,
                            "keep": "Visual Studio Code",
                        },
                        {"a": "Tottenham Hotspur", "b": "Tottenham Hotspurs", "same": False},
                    ]
                }
            )
        ]
    )
    report = await merge_pass(graph, llm)
    assert report.counts["merged"] == 1
    vsc = await graph.entity("Visual Studio Codes")
    assert vsc is not None and vsc.name == "Visual Studio Code"  # now an alias
    assert ("tottenham hotspur", "tottenham hotspurs") in await graph.merge_blocked()
    quiet = await merge_pass(graph, ScriptedLLM([]))  # nothing left to ask: the LLM is not called
    assert quiet.counts == {"merged": 0, "candidates": 0}


async def test_review_retracts_and_corrects(graph: GraphDB) -> None:
    await graph.commit(
        [
            Triple("user", "likes", "cats", sentence="I am allergic to cats"),
            Triple("user", "lives_in", "Rome", sentence="I live in Milan"),
            Triple("user", "likes", "tea", sentence="I like tea"),
        ]
    )
    page = await graph.current_relations()
    ids = {r.object: r.id for r in page}
    bad = ScriptedLLM([json.dumps({"verdicts": [{"id": 999, "verdict": "wrong"}]})])
    with pytest.raises(ReplyRejected, match="999"):
        await review_pass(graph, bad)
    llm = ScriptedLLM(
        [
            json.dumps(
                {
                    "verdicts": [
                        {"id": ids["cats"], "verdict": "wrong"},
                        {"id": ids["Rome"], "verdict": "fix", "object": "Milan"},
                        {"id": ids["tea"], "verdict": "keep"},
                    ]
                }
            )
        ]
    )
    report = await review_pass(graph, llm)
    assert report.counts == {"reviewed": 3, "retracted": 1, "corrected": 1}
    assert {r.line() for r in (await graph.recall("user", 1)).relations} == {
        "user --lives_in--> Milan",
        "user --likes--> tea",
    }


async def test_scheduler_backs_off_and_reports(graph: GraphDB, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="homeagent.memory.loops")
    await graph.commit([Triple("user", "a", "Tottenham Hotspur"), Triple("user", "b", "Tottenham Hotspurs")])
    loops = MemoryLoops(
        graph,
        intervals={"merge": lambda: 0.02, "rules": lambda: 0.02},
        llm=ScriptedLLM(["this is not json"]),
        min_interval=0.01,
    )
    await loops.distiller.record("我住在成都。")
    loops.start()
    await asyncio.sleep(0.5)
    await loops.stop()
    stats = loops.stats()
    merge = stats["merge"]
    assert merge["errors"] >= 2 and merge["consecutive_failures"] >= 2
    assert merge["runs"] <= 5  # 0.02 s interval, doubled after each failure: backing off
    assert "the LLM is down" in merge["last_error"] or "not JSON" in merge["last_error"]
    # one loop failing leaves the other alone
    assert stats["rules"]["runs"] >= 3 and stats["rules"]["errors"] == 0, stats["rules"]
    assert any("LLM reply rejected" in r.message for r in caplog.records)
    assert any("memory loop rules: records 1" in r.message for r in caplog.records)
    now = await loops.run_now("rules")
    assert now["records"] == 0
    with pytest.raises(ValueError, match="unknown memory loop"):
        await loops.run_now("nap")


async def test_user_turns_are_not_blocked_by_a_loop(graph: GraphDB) -> None:
    """A slow LLM inside the merge loop while user-turn commits and recalls go on at full speed."""
    await graph.commit([Triple("user", "a", "Tottenham Hotspur"), Triple("user", "b", "Tottenham Hotspurs")])

    async def slow_llm(prompt: str) -> str:
        await asyncio.sleep(1.0)
        return json.dumps({"decisions": []})

    async def user_turns(tag: str) -> float:
        started = time.perf_counter()
        for i in range(20):
            await graph.commit([Triple("user", "said", f"{tag} {i}")])
            await graph.recall("user", 2)
        return time.perf_counter() - started

    quiet = await user_turns("quiet")  # the same work with no loop running: this run's own baseline
    loops = MemoryLoops(graph, intervals={}, llm=slow_llm)
    job = asyncio.create_task(loops.run_now("merge"))
    await asyncio.sleep(0.05)
    busy = await user_turns("busy")
    assert not job.done()  # all of it ran while the loop waited for its LLM
    assert busy < 3 * quiet + 0.1, (busy, quiet)
    await job


async def test_a_daemons_memory_decision_is_its_own_llm_call_and_shows_in_the_event_stream(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review loop asks the daemon's LLM directly (no agent turn, no tools), and says so in the event stream."""
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d:
        await d.graph.commit([Triple("Ada", "lives_in", "Paris", sentence="Ada lives in Paris now.")])
        [fact] = await d.graph.current_relations()
        fake.script(Turn.text(json.dumps({"verdicts": [{"id": fact.id, "verdict": "wrong"}]})))
        report = await d.memory_loops.run_now("review")
        assert report["retracted"] == 1 and not await d.graph.current_relations()
        [request] = fake.requests
        assert [m["role"] for m in request.body["messages"]] == ["user"] and not request.body.get("tools")
        assert d.agent.turns == 0  # not an agent turn: no persona, history, stages or tools
        [event] = d.events.recent(types=["memory_llm"])
        assert event.data["ok"] is True and event.data["source"] == "env" and event.data["prompt_chars"] > 0
        fake.script(Turn.text("not json"))
        await d.graph.commit([Triple("Ada", "likes", "tea", sentence="Ada likes tea.")])
        with pytest.raises(ReplyRejected):
            await d.memory_loops.run_now("review")
        assert [e.data["ok"] for e in d.events.recent(types=["memory_llm"])] == [True, True]  # the call itself worked
