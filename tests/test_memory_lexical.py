"""The analyzer's terms and the incremental BM25 index (checked against bm25s)."""

from __future__ import annotations

import random

import bm25s
import numpy as np
import pytest

from homeagent.memory.lexical import Analyzer, LexicalIndex
from homeagent.memory.retrieval import HybridIndex, VectorIndex, fuse, minmax
from tests.fakes.memory_shared import shared_analyzer


@pytest.fixture(scope="session")
def analyzer() -> Analyzer:
    return shared_analyzer()


def test_chinese_gives_bigrams_and_long_words_without_particles(analyzer: Analyzer) -> None:
    toks = analyzer.tokens("我们去北京大学看展览了")
    assert "北京" in toks and "展览" in toks
    assert "北京大学" in toks  # a jieba word bigrams do not cover
    assert not any("了" in t for t in toks)  # particles carry no topic
    assert "我们" not in toks


def test_english_is_stemmed_lowercased_and_stopworded(analyzer: Analyzer) -> None:
    assert analyzer.tokens("The Dogs were RUNNING to the meetings") == ["dog", "run", "meet"]


def test_mixed_scripts_numbers_and_emoji(analyzer: Analyzer) -> None:
    toks = analyzer.tokens("Python3入门 🎉 价格998元 café")
    assert "python3" in toks and "入门" in toks and "998" in toks and "café" in toks
    assert "🎉" not in toks
    assert analyzer.tokens("") == [] and analyzer.tokens("  \n ") == []


def test_huge_text_is_capped(analyzer: Analyzer) -> None:
    toks = analyzer.tokens("天气不错 " * 200_000)  # 1 MB
    assert 0 < len(toks) < 30_000


def _corpus(n: int, seed: int = 3) -> list[list[str]]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(60)]
    return [[rng.choice(vocab[: rng.randint(5, 60)]) for _ in range(rng.randint(1, 20))] for _ in range(n)]


def test_scores_match_bm25s() -> None:
    corpus = _corpus(300)
    ref = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    ref.index(corpus, show_progress=False)
    idx = LexicalIndex()
    for i, toks in enumerate(corpus):
        idx.add(str(i), toks)
    for query in (["w1", "w7"], ["w3", "w3", "w50"], ["nothing"]):
        ours, keys = idx.scores(query)
        expected = ref.get_scores(query)
        np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5)
        assert keys[5] == "5"


def test_incremental_add_remove_equals_fresh_index_after_compaction() -> None:
    corpus = _corpus(2500, seed=9)
    idx = LexicalIndex()
    for i, toks in enumerate(corpus):
        idx.add(f"d{i}", toks)
    for i in range(0, 2500, 2):  # > 1000 removals: triggers compaction
        assert idx.remove(f"d{i}")
    assert not idx.remove("d0")
    idx.add("d1", ["w1", "w1", "w2"])  # replace an existing key
    fresh = LexicalIndex()
    for i in range(1, 2500, 2):
        fresh.add(f"d{i}", ["w1", "w1", "w2"] if i == 1 else corpus[i])
    assert len(idx) == len(fresh) == 1250
    assert idx.stats()["removed_rows"] < 1250
    keys = [f"d{i}" for i in range(1, 2500, 2)]
    for query in (["w1"], ["w4", "w9", "w30"]):
        np.testing.assert_allclose(idx.score_array(query, keys), fresh.score_array(query, keys), rtol=1e-5)
        assert idx.search(query, 1)[0][1] == pytest.approx(fresh.search(query, 1)[0][1], rel=1e-5)


def test_a_few_keys_are_scored_as_the_whole_index_scores_them() -> None:
    # score_array of a handful of keys takes the per-key path; it must give what scoring every row gives,
    # also with removed rows, a replaced key, repeated query words and keys the index does not have
    corpus = _corpus(2000, seed=3)
    idx = LexicalIndex()
    idx.add_many([(f"d{i}", toks) for i, toks in enumerate(corpus)])
    for i in range(0, 300, 3):
        idx.remove(f"d{i}")
    idx.add("d1", ["w1", "w1", "w2"])
    few = ["d1", "d0", "d5", "d1999", "nope", "d700"]
    for query in (["w1"], ["w3", "w3", "w50"], ["w4", "w9", "w30", "w1"], ["unknown"], []):
        everything, keys = idx.scores(query)
        row = {k: r for r, k in enumerate(keys) if k is not None}
        expected = [float(everything[row[k]]) if k in row else 0.0 for k in few]
        np.testing.assert_allclose(idx.score_array(query, few), expected, rtol=1e-5, atol=1e-7)
    assert idx.score_array(["w1"], few)[0] > 0  # the replaced key scores with its new words


def test_search_returns_only_matches() -> None:
    idx = LexicalIndex()
    idx.add("a", ["apple", "pie"])
    idx.add("b", ["banana"])
    assert [k for k, _ in idx.search(["apple"], 10)] == ["a"]
    assert idx.search([], 10) == [] and idx.search(["zzz"], 10) == []
    assert LexicalIndex().search(["x"], 5) == []
    assert 0 < idx.search(["apple"], 1)[0][1] < idx.query_bound(["apple"])


def test_vector_index_exact_and_sketch_paths_agree_on_the_top_hit() -> None:
    rng = np.random.default_rng(0)
    mat = rng.standard_normal((3000, 64)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    exact = VectorIndex(64)
    sketch = VectorIndex(64, exact_limit=100, candidates=300)
    keys = [f"k{i}" for i in range(3000)]
    exact.add_many(keys, mat)
    sketch.add_many(keys, mat)
    for i in (5, 700, 2999):
        q = mat[i] + 0.05 * rng.standard_normal(64).astype(np.float32)
        q /= np.linalg.norm(q)
        assert exact.search(q, 1)[0][0] == sketch.search(q, 1)[0][0] == f"k{i}"
    assert exact.remove("k5") and not exact.remove("k5")
    assert exact.search(mat[5], 1)[0][0] != "k5"
    assert exact.get("k2999") is not None and len(exact) == 2999


def test_fusion_uses_either_half_alone() -> None:
    idx = HybridIndex(4)
    idx.add("dense-only", ["zzz"], np.array([1, 0, 0, 0], dtype=np.float32))
    idx.add("both", ["apple"], np.array([0.6, 0.8, 0, 0], dtype=np.float32))
    idx.add("lex-only", ["apple", "pie"], None)
    q = np.array([1, 0, 0, 0], dtype=np.float32)
    assert idx.search([], q, 3)[0].key == "dense-only"
    assert {h.key for h in idx.search(["apple", "pie"], None, 3)} == {"both", "lex-only"}
    fused = idx.search(["apple"], q, 3)
    assert fused[0].key in ("both", "dense-only") and all(h.score > 0 for h in fused)
    ranked = idx.rank(["pie"], None, ["both", "lex-only", "dense-only"])
    assert ranked[0].key == "lex-only" and len(ranked) == 3


def test_fusion_normalises_both_halves_the_same_way() -> None:
    # A strong keyword match must be able to beat a slightly better cosine: both halves span 0..1.
    lexical = np.array([9.0, 0.0, 1.0], dtype=np.float32)
    dense = np.array([0.50, 0.55, 0.40], dtype=np.float32)
    assert fuse(lexical, dense, dense_weight=0.5).argmax() == 0
    assert fuse(lexical, dense, dense_weight=20.0).argmax() == 1
    assert minmax(np.array([3.0, 3.0])).tolist() == [0.0, 0.0]
    assert minmax(np.array([], dtype=np.float32)).size == 0


def test_floor_uses_absolute_relevance_not_the_per_query_score() -> None:
    idx = HybridIndex(4)
    idx.add("far", ["zzz"], np.array([0, 1, 0, 0], dtype=np.float32))
    q = np.array([1, 0, 0, 0], dtype=np.float32)
    # the only candidate is best within the query, but nothing about it is relevant
    assert idx.search([], q, 3)[0].key == "far"
    assert idx.search([], q, 3, min_score=0.3) == []


def test_bulk_add_of_documents_without_words() -> None:
    # 64+ turns like "Is it?" have no index terms; the vectorised path raised IndexError on them.
    idx = LexicalIndex()
    idx.add_many([(f"e{i}", []) for i in range(70)])
    idx.add_many([(f"m{i}", [] if i % 2 else ["word"]) for i in range(70)])
    assert len(idx) == 140
    assert {k for k, _ in idx.search(["word"], 100)} == {f"m{i}" for i in range(0, 70, 2)}
    assert dict(idx.term_counts("m0")) == {"word": 1.0} and idx.term_counts("e1") == []


def test_bulk_add_equals_one_by_one() -> None:
    corpus = _corpus(500, seed=5)
    one = LexicalIndex()
    one.add("pre", ["w1", "w2"])
    for i, toks in enumerate(corpus):
        one.add(f"d{i}", toks)
    bulk = LexicalIndex()
    bulk.add("pre", ["w1", "w2"])
    bulk.add_many([(f"d{i}", toks) for i, toks in enumerate(corpus)] + [("pre", ["w3"])])
    one.add("pre", ["w3"])
    keys = ["pre"] + [f"d{i}" for i in range(500)]
    for query in (["w1"], ["w3", "w3", "w40"], ["w59", "zzz"]):
        np.testing.assert_allclose(bulk.score_array(query, keys), one.score_array(query, keys), rtol=1e-5)
    for i in range(0, 500, 3):
        assert bulk.remove(f"d{i}") and one.remove(f"d{i}")
    np.testing.assert_allclose(bulk.score_array(["w2", "w7"], keys), one.score_array(["w2", "w7"], keys), rtol=1e-5)
