"""memory_* and person_* tools through the real tool registry (schema checks, error results)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from homeagent.agent.tools import ToolRegistry
from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_tools import graph_tools
from homeagent.memory.indexer import MemoryIndexer
from homeagent.memory.social import Social
from homeagent.sdk.types import ToolCall

UPSTREAM = {
    "memory_recall": ({"query_intent"}, {"query_intent", "depth", "sort"}),
    "memory_commit": ({"triples"}, {"triples"}),
    "memory_introspect": (set(), set()),
    "memory_merge": ({"source", "target"}, {"source", "target"}),
    "memory_delete_entity": ({"name"}, {"name"}),
    "memory_block_merge": ({"entity_a", "entity_b", "rounds"}, {"entity_a", "entity_b", "rounds"}),
    "memory_purge": (set(), {"subject_contains", "relation_type", "target_contains", "mode"}),
    "memory_edit": (
        {"old_subject", "old_relation", "old_object"},
        {"old_subject", "old_relation", "old_object", "new_subject", "new_relation", "new_object"},
    ),
    "person_query": ({"name"}, {"name"}),
    "person_set_trait": ({"name", "trait", "value"}, {"name", "trait", "value"}),
    "person_relate": ({"person_a", "relation", "person_b"}, {"person_a", "relation", "person_b"}),
    "person_network": ({"name"}, {"name", "depth"}),
}


class Tools:
    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry
        self._ids = itertools.count()

    async def __call__(self, tool: str, /, **args: Any) -> Any:
        result = await self.registry.execute(ToolCall(id=f"c{next(self._ids)}", name=tool, arguments=args))
        return result.result


@pytest.fixture
async def env(tmp_path: Path):
    graph = await GraphDB.open(tmp_path / "graph.db")
    indexer = MemoryIndexer(graph)
    registry = ToolRegistry()
    for definition, handler in graph_tools(graph, indexer, Social(graph)):
        registry.register(definition, handler)
    yield graph, indexer, Tools(registry)
    await graph.close()


async def test_names_and_parameters_follow_upstream(env) -> None:
    _, _, tools = env
    defs = {d.name: d for d in tools.registry.tools()}
    assert set(defs) == set(UPSTREAM)
    for name, (required, props) in UPSTREAM.items():
        schema = defs[name].parameters
        assert set(schema.get("required", [])) == required, name
        assert set(schema["properties"]) == props, name
        # output dropped from indexing (it is memory already), but the turn that used the tool is remembered
        assert not defs[name].no_memory and defs[name].cleaner is not None and defs[name].cleaner("x") == ""
    item = defs["memory_commit"].parameters["properties"]["triples"]["items"]
    assert set(item["properties"]) == {"subject", "relation", "object", "sentence_text", "media_digests", "scene"}


async def test_commit_recall_and_history_through_tools(env) -> None:
    _, indexer, call = env
    out = await call(
        "memory_commit",
        triples=[
            {"subject": "用户", "relation": "lives_in", "object": "北京", "sentence_text": "我住在北京"},
            {"subject": "用户", "relation": "likes", "object": "咖啡", "scene": "早餐"},
        ],
    )
    assert out["ok"] and out["added"] == 2
    await call("memory_commit", triples=[{"subject": "用户", "relation": "lives_in", "object": "上海"}])
    got = await call("memory_recall", query_intent="用户, 咖啡", depth=1)
    facts = {(r["subject"], r["relation"], r["object"]) for r in got["relations"]}
    assert facts == {("用户", "lives_in", "上海"), ("用户", "likes", "咖啡")}
    assert [(p["object"], p["retire_reason"]) for p in got["past"]] == [("北京", "superseded")]
    assert json.dumps(got, ensure_ascii=False)  # JSON-able
    # what the tool fetched is not injected again this turn
    block = await indexer.build("用户")  # a different text starts a new turn
    assert block.text is not None and "上海" in block.text
    await call("memory_recall", query_intent="用户")
    again = await indexer.build("用户")
    assert again.text is None or "上海" not in again.text
    nothing = await call("memory_recall", query_intent="没有这个")
    assert nothing["relations"] == [] and "note" in nothing


async def test_bad_calls_come_back_as_errors(env) -> None:
    _, _, call = env
    missing = await call("memory_recall", depth=2)
    assert missing["isError"] and "query_intent" in missing["content"]
    bad_enum = await call("memory_purge", mode="all")
    assert bad_enum["isError"]
    no_criteria = await call("memory_purge")
    assert no_criteria["isError"] and "at least one" in no_criteria["content"]
    await call("memory_commit", triples=[{"subject": "A", "relation": "r", "object": "B"}])
    self_merge = await call("memory_merge", source="A", target="a")
    assert self_merge["isError"] and "same entity" in self_merge["content"]
    huge = await call("memory_commit", triples=[{"subject": "x" * 10_000, "relation": "r", "object": "y"}])
    assert huge["isError"] and "nothing was committed" in huge["content"]
    unknown = await call("memory_delete_entity", name="nobody")
    assert unknown["isError"] and "no entity" in unknown["content"]
    empty = await call("memory_recall", query_intent=" , ")
    assert empty["isError"]


async def test_merge_edit_delete_block_purge_introspect(env) -> None:
    graph, _, call = env
    await call(
        "memory_commit",
        triples=[
            {"subject": "Bob", "relation": "works_as", "object": "teacher"},
            {"subject": "Bobby", "relation": "likes", "object": "chess"},
            {"subject": "Bob", "relation": "likes", "object": "tea"},
        ],
    )
    assert (await call("memory_merge", source="Bobby", target="Bob"))["relations_moved"] == 1
    edited = await call(
        "memory_edit", old_subject="Bob", old_relation="works_as", old_object="teacher", new_object="doctor"
    )
    assert edited["now"]["object"] == "doctor"
    blocked = await call("memory_block_merge", entity_a="Bob", entity_b="Rob", rounds=3)
    assert blocked["rounds"] == 3
    assert await graph.merge_blocked() == {("bob", "rob")}
    assert (await call("memory_purge", target_contains="tea", mode="soft"))["relations"] == 1
    stats = await call("memory_introspect")
    assert stats["relations"] == 2 and stats["hot_entities"][0]["name"] == "Bob"
    assert (await call("memory_delete_entity", name="chess"))["relations_deleted"] == 1


async def test_person_tools(env) -> None:
    _, _, call = env
    await call("person_set_trait", name="张三", trait="性格", value="外向")
    replaced = await call("person_set_trait", name="张三", trait="性格", value="内向")
    assert replaced["replaced"] == ["张三 --性格--> 外向"]
    await call("person_relate", person_a="张三", relation="朋友", person_b="李四")
    await call("person_relate", person_a="李四", relation="parent_of", person_b="小李")
    stored = await call("person_relate", person_a="张三", relation="admires", person_b="王五")
    assert "note" in stored
    who = await call("person_query", name="张三")
    assert who["traits"] == {"性格": "内向"}
    assert {(r["relation"], r["person"]) for r in who["relations"]} == {("朋友", "李四"), ("admires", "王五")}
    li = await call("person_query", name="李四")
    assert ("朋友", "张三") in {(r["relation"], r["person"]) for r in li["relations"]}
    kid = await call("person_query", name="小李")
    assert {(r["relation"], r["person"]) for r in kid["relations"]} == {("child_of", "李四")}
    net = await call("person_network", name="张三", depth=2)
    assert {p["name"] for p in net["people"]} == {"张三", "李四", "王五", "小李"}
    near = await call("person_network", name="张三", depth=1)
    assert {p["name"] for p in near["people"]} == {"张三", "李四", "王五"}
    assert (await call("person_query", name="nobody"))["isError"]
    assert (await call("person_relate", person_a="张三", relation="朋友", person_b="张三"))["isError"]
