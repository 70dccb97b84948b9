"""The rule distiller: patterns, false-positive guards, the labelled set, and the raw-record tick."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homeagent.memory.distill import RuleDistiller, extract, zh_number
from homeagent.memory.graph import GraphDB

LABELLED = Path(__file__).resolve().parent.parent / "bench" / "distill_labelled.jsonl"


def facts(text: str) -> set[tuple[str, str]]:
    return {(t.relation, t.object) for t in extract(text)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我叫张三。", {("name", "张三")}),
        ("我住在杭州西湖区，离公司很近。", {("lives_in", "杭州西湖区")}),
        ("我喜欢跑步和游泳", {("likes", "跑步"), ("likes", "游泳")}),
        ("我今年二十二岁了", {("age", "22")}),
        ("我的工作是程序员。", {("works_as", "程序员")}),
        ("我叫刘洋，住在杭州。", {("name", "刘洋"), ("lives_in", "杭州")}),
        ("我不叫小明，我叫小亮。", {("name", "小亮")}),
        ("My name is John Smith and I live in Boston.", {("name", "John Smith"), ("lives_in", "Boston")}),
        ("I like cats and dogs.", {("likes", "cats"), ("likes", "dogs")}),
        ("I am 30 years old.", {("age", "30")}),
        ("I work as a software engineer at Google.", {("works_as", "software engineer")}),
        ("I am not 30 years old, I'm 29 years old.", {("age", "29")}),
    ],
)
def test_patterns(text: str, expected: set[tuple[str, str]]) -> None:
    assert facts(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "我叫什么名字？",  # question
        "你知道我叫什么吗",  # question
        "我不喜欢香菜",  # negation
        "我并不是很喜欢吃辣",  # negation
        "他说“我叫张三”，但我不信。",  # quoted speech
        "她说：“我喜欢玫瑰。”",  # quoted speech
        "如果我住在东京，我每天都去吃拉面",  # hypothetical
        "等我60岁退休了就去旅游",  # future
        "我5岁的时候去过北京",  # a time, not an age
        "我叫了外卖，半小时后到。",  # 叫 = order
        "What is my name?",
        "I don't like mushrooms.",
        'She said "I like pizza" but I don\'t.',
        "If I am 18 years old, can I vote?",
        "Let's pretend I am 100 years old.",
        "I like it when you do that.",
        "I work as hard as I can.",
        "My name is not important.",
        "I live in fear of spiders.",
    ],
)
def test_false_positive_guards(text: str) -> None:
    assert facts(text) == set()


def test_chinese_numerals() -> None:
    assert [zh_number(x) for x in ("二十二", "三十", "十八", "一百", "两", "25", "二十五", "")] == [
        22,
        30,
        18,
        100,
        2,
        25,
        25,
        None,
    ]


def _score(split: str) -> tuple[float, float, int]:
    tp = fp = fn = 0
    rows = [json.loads(line) for line in LABELLED.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if r["split"] == split]
    for row in rows:
        expected = {(r, o.casefold()) for _, r, o in row["expected"]}
        got = {(t.relation, t.object.casefold()) for t in extract(row["text"])}
        tp += len(expected & got)
        fp += len(got - expected)
        fn += len(expected - got)
    return tp / max(1, tp + fp), tp / max(1, tp + fn), len(rows)


def test_labelled_set_precision_and_recall() -> None:
    precision, recall, n = _score("dev")
    assert n == 200
    assert precision >= 0.95 and recall >= 0.95
    precision, recall, n = _score("heldout")  # written after the rules were frozen
    assert n == 50
    assert precision >= 0.85 and recall >= 0.7


async def test_tick_distils_user_records_once_and_expires_old_ones(tmp_path: Path) -> None:
    now = [1_000_000.0]
    graph = await GraphDB.open(tmp_path / "graph.db", clock=lambda: now[0])
    distiller = RuleDistiller(graph, clock=lambda: now[0], batch=2)
    await distiller.record("我住在北京。", session="s1")
    await distiller.record("我叫小宅，是你的管家。", role="assistant")  # the assistant's name is not the user's
    await distiller.record("I like green tea.")
    await distiller.record("今天天气不错")
    report = await distiller.run_once()
    assert report.records == 4 and report.triples == 2 and report.added == 2
    assert (await distiller.run_once()).records == 0  # nothing is distilled twice
    now[0] += 3600
    await distiller.record("我搬到了上海。")
    report = await distiller.run_once()
    assert report.superseded == ["user --lives_in--> 北京"]
    result = await graph.recall("user", depth=1)
    assert {r.line() for r in result.relations} == {"user --lives_in--> 上海", "user --likes--> green tea"}
    moved = next(r for r in result.relations if r.object == "上海")
    assert moved.sentence == "我搬到了上海。" and moved.valid_from == now[0] and moved.source == "rules"
    now[0] += 7 * 24 * 3600 + 1
    assert (await distiller.run_once()).expired == 5
    assert (await graph.introspect())["pending_raw_records"] == 0
    await graph.close()


async def test_a_failed_tick_leaves_records_pending(tmp_path: Path) -> None:
    graph = await GraphDB.open(tmp_path / "graph.db")
    distiller = RuleDistiller(graph)
    await distiller.record("我住在北京。")

    def boom(_: str) -> str:
        raise RuntimeError("disk on fire")

    broken = RuleDistiller(graph, subject_of=boom)
    with pytest.raises(RuntimeError):
        await broken.run_once()
    assert (await graph.introspect())["pending_raw_records"] == 1
    assert (await distiller.run_once()).added == 1
    await graph.close()
