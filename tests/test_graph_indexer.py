"""The 【记忆索引】 block: seeds from keywords and vectors, budget, turn de-duplication."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_model import Triple
from homeagent.memory.indexer import KeywordExtractor, MemoryIndexer, estimate_tokens, fallback_keywords
from tests.fakes.graph_embedder import CharEmbedder, real_embedder

FILLER = [
    "苹果",
    "香蕉",
    "桌子",
    "椅子",
    "汽车",
    "飞机",
    "铅笔",
    "电脑",
    "手机",
    "窗户",
    "森林",
    "河流",
    "雨伞",
    "帽子",
]


@pytest.fixture
async def graph(tmp_path: Path):
    g = await GraphDB.open(tmp_path / "graph.db")
    yield g
    await g.close()


async def test_block_format_and_facts(graph: GraphDB) -> None:
    await graph.commit(
        [
            Triple("用户", "lives_in", "上海", sentence="我上个月搬到上海了，" + "很长的句子" * 20),
            Triple("用户", "likes", "咖啡"),
            Triple("咖啡", "is_a", "饮料"),
        ]
    )
    indexer = MemoryIndexer(graph)
    text = await indexer.prompt_section("我在上海过得还不错")
    assert text is not None
    header, *facts = text.split("\n")
    assert header.startswith("【记忆索引】 关联 3 个记忆实体，高频：用户")
    assert "索引: 上海(Location)" in header and header.endswith("| 需更多细节请用 memory_recall 查询")
    assert facts[0].startswith("- 用户 --lives_in--> 上海（我上个月搬到上海了，")
    assert facts[0].endswith("…）") and len(facts[0]) < 100  # source sentence cut at 60 characters
    assert "- 用户 --likes--> 咖啡" in facts  # depth 2 through the user
    assert await indexer.prompt_section("完全无关的话题") is None
    assert await indexer.prompt_section("") is None


async def test_token_budget_is_respected(graph: GraphDB) -> None:
    await graph.commit([Triple("用户", "likes", f"爱好{i}号", sentence=f"我喜欢第{i}个爱好" * 3) for i in range(50)])
    indexer = MemoryIndexer(graph, token_budget=120)
    block = await indexer.build("用户")
    assert block.text is not None
    assert estimate_tokens(block.text) <= 120
    assert block.text.count("\n- ") >= 1


async def test_scene_facts_get_their_own_block(graph: GraphDB) -> None:
    await graph.commit([Triple("早餐", "includes", "豆浆", scene="早餐"), Triple("早餐", "at", "七点")])
    text = await MemoryIndexer(graph).prompt_section("明天的早餐")
    assert text is not None
    scenes, index = text.split("\n\n")
    assert scenes.startswith("【场景记忆 scenes】\n[早餐] 早餐 --includes--> 豆浆")
    assert scenes.endswith("（以上是该场景下的既有约定，请照办）")
    assert index.startswith("【记忆索引】") and "早餐 --at--> 七点" in index


async def test_vector_seeds_find_what_keywords_miss(graph: GraphDB) -> None:
    await graph.commit([Triple("user", "likes", "Python"), *(Triple("user", "owns", f) for f in FILLER)])
    embedder = CharEmbedder()
    indexer = MemoryIndexer(graph, embedder)
    assert await indexer.sync() == len(FILLER) + 2
    block = await indexer.build("Pyhton")  # a typo: no substring match
    assert [name for name, _ in block.vector_seeds] == ["Python"]
    assert block.text is not None and "user --likes--> Python" in block.text
    # nothing in common with any name: no vector seed
    assert (await indexer.build("xyz qqq")).vector_seeds == []


async def test_vectors_follow_new_merged_and_deleted_entities(graph: GraphDB) -> None:
    embedder = CharEmbedder()
    indexer = MemoryIndexer(graph, embedder)
    await indexer.sync()
    await graph.commit([Triple("user", "owns", f) for f in FILLER])
    assert await indexer.sync() == len(FILLER) + 1
    assert await indexer.sync() == 0  # nothing new: nothing embedded twice
    await graph.delete_entity("苹果")
    await graph.merge_entities("香蕉", "帽子")
    await indexer.sync()
    assert indexer.stats()["vectors"] == len(FILLER) + 1 - 2
    # another model's vectors are dropped, not mixed in
    other = MemoryIndexer(graph, CharEmbedder(dim=32, name="other"))
    assert await other.sync() == len(FILLER) - 1
    again = MemoryIndexer(graph, embedder)
    assert await again.sync() == len(FILLER) - 1


async def test_max_vector_entities_caps_memory(graph: GraphDB) -> None:
    await graph.commit([Triple("user", "owns", f) for f in FILLER])
    indexer = MemoryIndexer(graph, CharEmbedder(), max_vector_entities=5)
    assert await indexer.sync() == 5
    assert await indexer.sync() == 0


async def test_without_jieba_the_fallback_keywords_serve(graph: GraphDB) -> None:
    await graph.commit([Triple("user", "lives_in", "北京")])
    extractor = KeywordExtractor()
    indexer = MemoryIndexer(graph, keywords=extractor)
    started = time.perf_counter()
    block = await indexer.build("我下周要回北京一趟")
    assert not extractor.ready and time.perf_counter() - started < 0.5
    assert "北京" in block.keywords and block.text is not None
    assert fallback_keywords("Where does Alice live?") == ["Alice", "live"]


async def test_real_default_embedder_and_jieba(graph: GraphDB) -> None:
    embedder: Any = real_embedder()
    await graph.commit(
        [
            Triple("用户", "owns", "猫", sentence="我养了一只猫"),
            Triple("用户", "works_as", "程序员"),
            *(Triple("用户", "knows", f) for f in FILLER),
        ]
    )
    indexer = MemoryIndexer(graph, embedder, vector_timeout=60)
    await indexer.start()
    await indexer.sync()
    await asyncio.to_thread(indexer.keywords.warmup)
    assert indexer.keywords.ready
    block = await indexer.build("我的猫咪今天生病了，不吃东西")
    assert "猫" in [e.name for e in block.seeds]
    assert block.text is not None and "用户 --owns--> 猫" in block.text
    cross = await indexer.build("my kitten is sick")  # English text, Chinese entity: only the vector can link them
    assert any(name == "猫" for name, _ in cross.vector_seeds), cross.vector_seeds
    vec = embedder.embed(["x"])
    assert vec.dtype == np.float32
    await indexer.close()
