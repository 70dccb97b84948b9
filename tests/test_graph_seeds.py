"""Graph recall seeded by relation words and source sentences, not only entity names.

"Who is my dentist?" names no entity of ``user --has_dentist--> Dr. Okafor``;
the relation index (type words, both names, the sentence) must find it, for
the prompt block and the ``memory_recall`` tool alike, follow the graph as it
changes, and stay quiet for text that has nothing to do with any fact.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from homeagent.agent.tools import ToolRegistry
from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_model import Triple
from homeagent.memory.graph_tools import graph_tools
from homeagent.memory.indexer import MemoryIndexer, relation_text, relation_words
from homeagent.memory.social import Social
from homeagent.sdk.types import ToolCall
from tests.fakes.graph_embedder import CharEmbedder, real_embedder

FILLER = "苹果 香蕉 桌子 椅子 汽车 飞机 铅笔 电脑 手机 窗户 森林 河流 雨伞 帽子".split()
FACTS = [
    Triple("user", "has_dentist", "Dr. Okafor", sentence="My dentist is Dr. Okafor"),
    Triple("Mia", "sister_of", "user", sentence="Mia is my younger sister"),
    Triple("用户", "牙医", "王医生", sentence="我的牙医是王医生"),
    Triple("用户", "妹妹", "小红", sentence="我妹妹叫小红"),
    Triple("user", "likes", "jazz", sentence="I really like jazz"),
    Triple("user", "lives_in", "Paris", sentence="I moved to Paris last year"),
    Triple("用户", "owns", "猫", sentence="我养了一只猫"),
    *(Triple("用户", "knows", f) for f in FILLER),
]


@pytest.fixture
async def graph(tmp_path: Path):
    g = await GraphDB.open(tmp_path / "graph.db")
    yield g
    await g.close()


@pytest.fixture
async def real(graph: GraphDB):
    """The facts above, the default embedder, jieba warm, everything indexed."""
    await graph.commit(FACTS)
    indexer = MemoryIndexer(graph, real_embedder(), vector_timeout=60)  # type: ignore[arg-type]
    indexer.relations.warmup()
    await indexer.sync()
    yield graph, indexer
    await indexer.close()


def tool_runner(graph: GraphDB, indexer: MemoryIndexer | None) -> Any:
    registry = ToolRegistry()
    for definition, handler in graph_tools(graph, indexer, Social(graph)):
        registry.register(definition, handler)
    ids = itertools.count()

    async def call(tool: str, /, **args: Any) -> Any:
        return (await registry.execute(ToolCall(id=f"c{next(ids)}", name=tool, arguments=args))).result

    return call


def first_facts(text: str | None) -> list[str]:
    assert text is not None
    return [line for line in text.split("\n") if line.startswith("- ")]


def test_relation_documents() -> None:
    assert relation_words("has_dentist") == "has dentist"
    assert relation_words("sister_of") == "sister of"
    assert relation_words("牙医") == "牙医"


async def test_relation_words_seed_the_prompt_block(real) -> None:
    _, indexer = real
    block = await indexer.build("Who is my dentist?")
    assert block.relation_seeds and block.relation_seeds[0][0] == "user --has_dentist--> Dr. Okafor"
    assert "Dr. Okafor" in [e.name for e in block.seeds] and "user" in [e.name for e in block.seeds]
    assert first_facts(block.text)[0].startswith("- user --has_dentist--> Dr. Okafor（My dentist is Dr. Okafor）")
    sister = await indexer.build("How is my sister doing?")
    assert [line for line, _ in sister.relation_seeds] == ["Mia --sister_of--> user"]
    assert first_facts(sister.text)[0].startswith("- Mia --sister_of--> user")


async def test_chinese_and_cross_lingual(real) -> None:
    _, indexer = real
    block = await indexer.build("我的牙医是谁")
    lines = [line for line, _ in block.relation_seeds]
    assert lines[0] == "用户 --牙医--> 王医生"
    assert "user --has_dentist--> Dr. Okafor" in lines  # English fact, Chinese question: the vector half
    sister = await indexer.build("我妹妹最近怎么样")
    assert sister.relation_seeds[0][0] == "用户 --妹妹--> 小红"


async def test_a_paraphrase_of_the_source_sentence(real) -> None:
    _, indexer = real
    block = await indexer.build("my tooth hurts, who should I see?")  # no word in common with the fact
    assert "user --has_dentist--> Dr. Okafor" in [line for line, _ in block.relation_seeds]


async def test_unrelated_text_seeds_nothing(real) -> None:
    _, indexer = real
    for text in [
        "What's the weather like today?",
        "今天天气怎么样",
        "hello",
        "帮我写一首诗",
        "Remind me about the piano lesson",
        "我想订一张去北京的机票",
    ]:
        block = await indexer.build(text)
        assert block.relation_seeds == [], (text, block.relation_seeds)
        assert block.text is None, (text, block.text)


async def test_the_tool_shares_the_seeding_path(real) -> None:
    graph, indexer = real
    call = tool_runner(graph, indexer)
    got = await call("memory_recall", query_intent="dentist")
    assert got["relations"][0]["relation"] == "has_dentist" and got["relations"][0]["object"] == "Dr. Okafor"
    assert "Dr. Okafor" in got["seeds"]
    sister = await call("memory_recall", query_intent="sister", depth=1)
    assert (sister["relations"][0]["subject"], sister["relations"][0]["relation"]) == ("Mia", "sister_of")
    chinese = await call("memory_recall", query_intent="牙医")
    assert chinese["relations"][0]["object"] == "王医生"
    nothing = await call("memory_recall", query_intent="量子物理, quantum physics")
    assert nothing["relations"] == [] and nothing["note"] == "nothing in memory matches these keywords"


async def test_a_tool_recall_is_not_injected_again(real) -> None:
    graph, indexer = real
    call = tool_runner(graph, indexer)
    text = "Who is my dentist?"
    first = await indexer.build(text)
    assert "has_dentist" in (first.text or "")
    await call("memory_recall", query_intent="dentist")  # the model fetched it during this turn
    again = await indexer.build(text)  # the prompt rebuilt for the same turn
    assert "has_dentist" not in (again.text or "")
    indexer.new_turn()
    assert "has_dentist" in ((await indexer.build(text)).text or "")  # a new turn shows it again


async def test_without_an_embedder_words_still_seed(graph: GraphDB) -> None:
    await graph.commit(FACTS)
    indexer = MemoryIndexer(graph)
    indexer.relations.warmup()
    await indexer.sync()
    block = await indexer.build("Who is my dentist?")
    assert [line for line, _ in block.relation_seeds] == ["user --has_dentist--> Dr. Okafor"]
    assert [line for line, _ in (await indexer.build("sister")).relation_seeds] == ["Mia --sister_of--> user"]
    assert (await indexer.build("今天天气怎么样")).relation_seeds == []


async def test_retired_relations_do_not_seed(graph: GraphDB) -> None:
    await graph.commit([*FACTS, Triple("user", "has_plumber", "Bob Smith", sentence="Our plumber is Bob Smith")])
    indexer = MemoryIndexer(graph)  # words only: the test embedder finds every English text alike
    indexer.relations.warmup()
    await indexer.sync()
    assert (await indexer.build("who is the plumber")).relation_seeds
    await graph.purge({"relation_type": "has_plumber"}, "soft")  # retired, kept as history
    # Still in the index until the next full sync: recall itself drops it.
    assert len(indexer.relations) == len(FACTS) + 1
    indexer.new_turn()
    block = await indexer.build("who is the plumber")
    assert block.relation_seeds == [] and "Bob Smith" not in [e.name for e in block.seeds]
    await indexer.sync()
    assert len(indexer.relations) == len(FACTS)
    # a superseded single-valued fact: only the current one is found
    await graph.commit([Triple("user", "lives_in", "Lyon", sentence="I moved to Lyon last year")])
    await indexer.sync()
    lines = [line for line, _ in (await indexer.build("where did I move last year")).relation_seeds]
    assert "user --lives_in--> Lyon" in lines and "user --lives_in--> Paris" not in lines


async def test_a_relation_added_after_start_is_found(graph: GraphDB) -> None:
    await graph.commit(FACTS)
    indexer = MemoryIndexer(graph, vector_timeout=30)
    await indexer.start()
    await indexer.sync()
    indexer.relations.warmup()
    assert (await indexer.build("Who is my accountant?")).relation_seeds == []
    # stored during a turn (e.g. by memory_commit); the next turn finds it without an explicit sync
    await graph.commit([Triple("user", "has_accountant", "Priya Nair", sentence="My accountant is Priya Nair")])
    block = await indexer.build("Who is my accountant, again?")
    assert [line for line, _ in block.relation_seeds] == ["user --has_accountant--> Priya Nair"]
    assert first_facts(block.text)[0].startswith("- user --has_accountant--> Priya Nair")
    await indexer.close()


async def test_delete_merge_and_hard_purge_keep_the_index_consistent(graph: GraphDB) -> None:
    await graph.commit(
        [
            *FACTS,
            Triple("Okafor", "works_at", "Smile Clinic", sentence="Okafor works at Smile Clinic"),
            Triple("user", "has_plumber", "Bob Smith"),
        ]
    )
    indexer = MemoryIndexer(graph, CharEmbedder(), vector_timeout=30)
    indexer.relations.warmup()
    await indexer.sync()

    async def consistent() -> None:
        assert indexer.relations.keys() == set(await graph.relation_signatures())
        assert indexer.relations.vectors == len(indexer.relations)

    await consistent()
    await graph.merge_entities("Okafor", "Dr. Okafor")
    await graph.delete_entity("小红")
    await graph.purge({"relation_type": "has_plumber"}, "hard")
    await indexer.sync()
    await consistent()
    # the moved relation is indexed under its new endpoint's name
    clinic = next(r for r in await graph.current_relations() if r.relation == "works_at")
    assert relation_text(clinic).startswith("Dr. Okafor works at Smile Clinic")
    terms = dict(indexer.relations.index.lexical.term_counts(str(clinic.id)))
    assert "dr" in terms and "okafor" in terms
    block = await indexer.build("which clinic does the dentist work at")
    assert "Dr. Okafor --works_at--> Smile Clinic" in [r.line() for r in block.relations]
    gone = await indexer.build("我妹妹叫什么")  # its object was deleted
    assert "用户 --妹妹--> 小红" not in [line for line, _ in gone.relation_seeds]
    assert await indexer.relations.sync() == 0  # nothing left to do: nothing re-indexed
