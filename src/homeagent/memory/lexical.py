"""Words for the lexical half of retrieval, and an incremental BM25 index over them.

Dense vectors miss exact names, numbers and rare words, and every embedder we
tried was fooled by unrelated sentences that share words; BM25 covers the
first and fusion (``retrieval.py``) the second.

Why not ``bm25s`` for the index: it precomputes a sparse score matrix for a
fixed corpus, so every insert or delete means re-indexing everything. L1 adds
and removes events every turn and L2 adds, consumes and removes documents all
the time (bench/bench_memory.py measures both: re-indexing 10k documents with
bm25s costs ~0.1 s per change, our add costs tens of microseconds).
``LexicalIndex`` keeps an inverted index of numpy-viewable arrays, scores
with the same Lucene BM25 formula as bm25s (a test checks they agree) and
compacts its postings when many documents were removed.

Tokens: Chinese (Han) runs give their character bigrams plus the jieba words
that bigrams do not cover (one character, or three and more); kana/hangul
runs give bigrams; other words are NFKC-folded, lower-cased and, for Latin
script, Snowball-stemmed. jieba's dictionary takes about a second to load, so
the ``Analyzer`` loads it once, lazily, and callers warm it up off the loop.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import unicodedata
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

ANALYZER_VERSION = "a2"
"""Stored next to persisted tokens; a change forces re-tokenisation on load."""

MAX_LEXICAL_CHARS = 20_000
"""Text beyond this is not tokenised (jieba runs at ~200k chars/s); the stored original is untouched."""

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_KANA_HANGUL = "\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af"
_RUN = re.compile(rf"([{_HAN}]+)|([{_KANA_HANGUL}]+)|([^\W_]+(?:['’][^\W_]+)*)")
_HAN_ONLY = re.compile(rf"[{_HAN}]+")
_LATIN = re.compile(r"[a-z]")

# Function words that carry no topic; everything else is left to IDF.
EN_STOPWORDS = frozenset(
    """a an the and or but if then else of to in on at by for with from as is are was were be been being am
    do does did doing have has had having i me my mine we us our you your he him his she her it its they them
    their this that these those there here what which who whom whose when where why how not no so too very
    can could will would shall should may might must just than also into onto about over under again once
    s t d ll m re ve don didn doesn isn aren wasn weren""".split()
)
ZH_STOPWORDS = frozenset(
    "的 了 着 过 是 在 和 与 及 或 也 都 就 还 而 又 吗 呢 吧 啊 呀 哦 嗯 么 之 其 这 那 个 把 被 让 给 对 从".split()
)
# Particles: a bigram containing one ("我的", "了吗") says nothing about the topic.
ZH_PARTICLES = frozenset("的了着过吗呢吧啊呀哦嗯么")
# Question and pronoun bigrams that occur in every question and most statements.
ZH_STOP_BIGRAMS = frozenset(
    "什么 哪里 哪个 哪些 哪儿 怎么 怎样 多少 为什 我们 你们 他们 她们 它们 一个 这个 那个 这些 那些 没有 不是 就是 还是 可以 我是 你是".split()
)


class Analyzer:
    """Turns text into index terms; one instance is shared by L1, L2 and the indexer."""

    def __init__(self, *, log: logging.Logger | None = None) -> None:
        self._log = log or logging.getLogger(__name__)
        self._jieba: Any = None
        self._stemmer: Any = None
        self._init_lock = threading.Lock()
        self.version = ANALYZER_VERSION

    def warmup(self) -> None:
        """Load jieba's dictionary and the stemmer (~1 s); call it in a worker thread."""
        self._segmenter()
        self._stem_fn()

    def _segmenter(self) -> Any:
        if self._jieba is None:
            with self._init_lock:
                if self._jieba is None:
                    import marshal
                    import os
                    import tempfile

                    import jieba

                    jieba.setLogLevel(logging.WARNING)
                    # jieba's global tokenizer, not a private ``jieba.Tokenizer()``: a plugin or library that
                    # calls ``jieba.lcut`` loads that one anyway, and each copy of the dictionary costs ~60 MiB
                    # of RSS (bench/bench_footprint.py --imports).
                    tok = jieba.dt
                    # jieba reads its own cache (jieba.cache in the temp dir) with marshal.load on a file
                    # object, ~1.2 s and most of what the first reply waited for; marshal.loads of the bytes
                    # gives the same dict in ~0.5 s. Any problem leaves it to initialize(), which also
                    # builds and writes a missing cache.
                    with tok.lock:
                        if not tok.initialized and tok.dictionary == jieba.DEFAULT_DICT:
                            cache = os.path.join(tok.tmp_dir or tempfile.gettempdir(), tok.cache_file or "jieba.cache")
                            try:
                                with open(cache, "rb") as f:
                                    freq, total = marshal.loads(f.read())
                                if isinstance(freq, dict) and freq and isinstance(total, int):
                                    tok.FREQ, tok.total, tok.initialized = freq, total, True
                            except Exception:  # missing or unreadable: initialize() rebuilds it
                                pass
                    tok.initialize()  # a no-op once the cache was read
                    self._jieba = tok
        return self._jieba

    def _stem_fn(self) -> Any:
        if self._stemmer is None:
            with self._init_lock:
                if self._stemmer is None:
                    import Stemmer

                    self._stemmer = Stemmer.Stemmer("english")
        return self._stemmer

    def dictionary(self) -> tuple[Mapping[str, int], int]:
        """jieba's word frequencies and their total (loads the dictionary): an IDF for keyword ranking."""
        tok = self._segmenter()
        return tok.FREQ, int(tok.total)

    def segment(self, text: str) -> list[str]:
        """jieba words of ``text`` (used for keywords and by word-vector embedders)."""
        return [w for w in self._segmenter().lcut(text) if w.strip()]

    def tokens(self, text: str) -> list[str]:
        """Index terms of ``text``, in order, with repetitions (term frequency matters)."""
        if not text:
            return []
        text = unicodedata.normalize("NFKC", text[:MAX_LEXICAL_CHARS]).lower()
        out: list[str] = []
        latin: list[str] = []
        for m in _RUN.finditer(text):
            han, other_cjk, word = m.group(1), m.group(2), m.group(3)
            if han:
                self._han_tokens(han, out)
            elif other_cjk:
                _bigrams(other_cjk, out)
            elif word:
                # A word mixing scripts ("python3入门") is split on its Han part.
                if _HAN_ONLY.search(word):
                    for part in re.split(rf"([{_HAN}]+)", word):
                        if not part:
                            continue
                        if _HAN_ONLY.fullmatch(part):
                            self._han_tokens(part, out)
                        elif part not in EN_STOPWORDS:
                            out.append(part)
                    continue
                if word in EN_STOPWORDS:
                    continue
                if _LATIN.search(word) and word.isascii():
                    latin.append(word)
                    out.append("\0" + word)  # placeholder, stemmed in one batch below
                else:
                    out.append(word)
        if latin:
            stems = iter(self._stem_fn().stemWords(latin))
            out = [next(stems) if t.startswith("\0") else t for t in out]
        return out

    def _han_tokens(self, run: str, out: list[str]) -> None:
        if len(run) == 1:
            if run not in ZH_STOPWORDS:
                out.append(run)
            return
        _bigrams(run, out)
        for w in self._segmenter().lcut(run, HMM=True):
            if (len(w) == 1 and w not in ZH_STOPWORDS) or len(w) >= 3:
                out.append(w)


def _bigrams(run: str, out: list[str]) -> None:
    if len(run) == 1:
        out.append(run)
        return
    for i in range(len(run) - 1):
        bg = run[i : i + 2]
        if bg[0] in ZH_PARTICLES or bg[1] in ZH_PARTICLES or bg in ZH_STOP_BIGRAMS:
            continue
        out.append(bg)


class LexicalIndex:
    """Incremental BM25 (Lucene variant, as in bm25s) keyed by caller-chosen string keys.

    Thread-safe: every public method takes the index lock, so L1/L2 worker
    threads may add, remove and search concurrently.
    """

    def __init__(self, *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        self._vocab: dict[str, int] = {}
        self._terms: list[str] = []  # term id -> term (the reverse of _vocab)
        self._post_docs: list[array[int]] = []  # term id -> doc rows
        self._post_tfs: list[array[float]] = []  # term id -> term frequencies (parallel)
        self._df: list[int] = []  # live documents per term
        self._doc_terms: list[tuple[array[int], array[float]] | None] = []  # row -> (term ids, tfs)
        self._doc_len = array("f")
        self._alive = array("b")
        self._keys: list[str | None] = []
        self._row_of: dict[str, int] = {}
        self._total_len = 0.0
        self._dead = 0

    def __len__(self) -> int:
        return len(self._row_of)

    def __contains__(self, key: object) -> bool:
        return key in self._row_of

    def add(self, key: str, tokens: Sequence[str]) -> None:
        """Index ``tokens`` under ``key``, replacing what ``key`` had."""
        with self._lock:
            if key in self._row_of:
                self._remove_locked(key)
            counts = Counter(tokens)
            row = len(self._keys)
            tids = array("i")
            tfs = array("f")
            for term, tf in counts.items():
                tid = self._vocab.get(term)
                if tid is None:
                    tid = len(self._post_docs)
                    self._vocab[term] = tid
                    self._terms.append(term)
                    self._post_docs.append(array("i"))
                    self._post_tfs.append(array("f"))
                    self._df.append(0)
                self._post_docs[tid].append(row)
                self._post_tfs[tid].append(float(tf))
                self._df[tid] += 1
                tids.append(tid)
                tfs.append(float(tf))
            self._doc_terms.append((tids, tfs))
            length = float(len(tokens))
            self._doc_len.append(length)
            self._alive.append(1)
            self._keys.append(key)
            self._row_of[key] = row
            self._total_len += length

    def add_many(self, items: Iterable[tuple[str, Sequence[str]]]) -> None:
        """Add many documents at once (vectorised: ~4x faster than ``add`` in a loop for big batches)."""
        with self._lock:
            fresh: list[tuple[str, Sequence[str]]] = []
            for key, tokens in items:
                if key in self._row_of or any(key == k for k, _ in fresh[-1:]):
                    self.add(key, tokens)
                else:
                    fresh.append((key, tokens))
            if len(fresh) < 64:
                for key, tokens in fresh:
                    self.add(key, tokens)
                return
            self._add_bulk(fresh)

    def _add_bulk(self, items: list[tuple[str, Sequence[str]]]) -> None:
        if len({k for k, _ in items}) != len(items):  # duplicate keys in the batch: keep add()'s semantics
            for key, tokens in items:
                self.add(key, tokens)
            return
        base = len(self._keys)
        lengths = np.fromiter((len(t) for _, t in items), dtype=np.int64, count=len(items))
        if not lengths.any():  # nothing to post ("Is it?" turns): the vectorised path needs at least one term
            for key, tokens in items:
                self.add(key, tokens)
            return
        vocab = self._vocab
        flat = [vocab.setdefault(tok, len(vocab)) for _, toks in items for tok in toks]
        n_terms = len(vocab)
        self._terms.extend(list(vocab)[len(self._terms) :])
        while len(self._post_docs) < n_terms:
            self._post_docs.append(array("i"))
            self._post_tfs.append(array("f"))
            self._df.append(0)
        tids = np.asarray(flat, dtype=np.int64)
        rows = np.repeat(np.arange(base, base + len(items), dtype=np.int64), lengths)
        pairs, tfs = np.unique(rows * n_terms + tids, return_counts=True)  # sorted by row, then term
        p_rows = pairs // n_terms
        p_tids = pairs % n_terms
        tf_f = tfs.astype(np.float32)
        # per document: its (term ids, tfs), for removals
        bounds = np.searchsorted(p_rows, np.arange(base, base + len(items) + 1))
        p_tids32 = p_tids.astype(np.int32)
        for j, (key, _) in enumerate(items):
            a, b = bounds[j], bounds[j + 1]
            self._doc_terms.append((array("i", p_tids32[a:b].tobytes()), array("f", tf_f[a:b].tobytes())))
            self._keys.append(key)
            self._row_of[key] = base + j
        self._doc_len.frombytes(lengths.astype(np.float32).tobytes())
        self._alive.frombytes(np.ones(len(items), dtype=np.int8).tobytes())
        self._total_len += float(lengths.sum())
        # per term: append its new postings (rows ascending, as add() would)
        order = np.argsort(p_tids, kind="stable")
        s_tids = p_tids[order]
        s_rows = p_rows[order].astype(np.int32)
        s_tfs = tf_f[order]
        starts = np.flatnonzero(np.r_[True, s_tids[1:] != s_tids[:-1]])
        ends = np.r_[starts[1:], s_tids.size]
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            tid = int(s_tids[a])
            self._post_docs[tid].frombytes(s_rows[a:b].tobytes())
            self._post_tfs[tid].frombytes(s_tfs[a:b].tobytes())
            self._df[tid] += b - a

    def remove(self, key: str) -> bool:
        with self._lock:
            if key not in self._row_of:
                return False
            self._remove_locked(key)
            if self._dead > 1000 and self._dead > len(self._row_of) // 3:
                self._compact()
            return True

    def _remove_locked(self, key: str) -> None:
        row = self._row_of.pop(key)
        terms = self._doc_terms[row]
        if terms is not None:
            for tid in terms[0]:
                self._df[tid] -= 1
        self._doc_terms[row] = None
        self._alive[row] = 0
        self._keys[row] = None
        self._total_len -= self._doc_len[row]
        self._dead += 1

    def _compact(self) -> None:
        """Rebuild postings without removed rows (amortised: runs after many removals)."""
        live = [(k, self._doc_terms[r]) for k, r in sorted(self._row_of.items(), key=lambda kv: kv[1])]
        vocab_terms = {tid: term for term, tid in self._vocab.items()}
        self._reset()
        for key, terms in live:
            if terms is None:
                continue
            tokens: list[str] = []
            for tid, tf in zip(terms[0], terms[1], strict=True):
                tokens.extend([vocab_terms[tid]] * int(tf))
            self.add(key, tokens)

    def term_counts(self, key: str) -> list[tuple[str, float]]:
        """The ``(term, frequency)`` pairs indexed under ``key`` (empty for unknown keys).

        Lets a caller compose new documents (a turn with its neighbours) from
        what is indexed already, without keeping every token list twice.
        """
        with self._lock:
            row = self._row_of.get(key)
            terms = self._doc_terms[row] if row is not None else None
            if terms is None:
                return []
            return [(self._terms[tid], tf) for tid, tf in zip(terms[0], terms[1], strict=True)]

    def _query_weights(self, query_tokens: Sequence[str]) -> dict[int, float]:
        """``idf * qtf`` of each query term the index knows (locked by the caller)."""
        n_live = len(self._row_of)
        weights: dict[int, float] = {}
        for term, qtf in Counter(query_tokens).items():
            tid = self._vocab.get(term)
            if tid is None or self._df[tid] <= 0:
                continue
            df = self._df[tid]
            weights[tid] = math.log(1.0 + (n_live - df + 0.5) / (df + 0.5)) * qtf
        return weights

    def scores(self, query_tokens: Sequence[str]) -> tuple[np.ndarray, list[str | None]]:
        """BM25 score of every row (0 for rows without a query term) and the row keys."""
        with self._lock:
            n_rows = len(self._keys)
            scores = np.zeros(n_rows, dtype=np.float32)
            n_live = len(self._row_of)
            if n_live == 0 or not query_tokens:
                return scores, list(self._keys)
            avgdl = max(self._total_len / n_live, 1e-9)
            doc_len = np.frombuffer(self._doc_len, dtype=np.float32)
            norm = self.k1 * (1.0 - self.b + self.b * doc_len / avgdl)
            for tid, weight in self._query_weights(query_tokens).items():
                rows = np.frombuffer(self._post_docs[tid], dtype=np.int32)
                tf = np.frombuffer(self._post_tfs[tid], dtype=np.float32)
                contrib = weight * tf / (tf + norm[rows])
                # bincount over all rows beats a fancy-index add into them (2x on 100k rows with long postings)
                scores += np.bincount(rows, weights=contrib, minlength=n_rows).astype(np.float32)
                del rows, tf
            del doc_len
            if self._dead:
                scores *= np.frombuffer(self._alive, dtype=np.int8)
            return scores, list(self._keys)

    def query_bound(self, query_tokens: Sequence[str]) -> float:
        """An upper bound of any document's score for this query (sum of qtf * idf).

        Dividing a BM25 score by it gives the share of the query's information a
        document matches, a number in [0, 1) comparable across queries.
        """
        with self._lock:
            n_live = len(self._row_of)
            bound = 0.0
            for term, qtf in Counter(query_tokens).items():
                tid = self._vocab.get(term)
                if tid is None or self._df[tid] <= 0:
                    continue
                df = self._df[tid]
                bound += qtf * math.log(1.0 + (n_live - df + 0.5) / (df + 0.5))
            return bound

    def search(self, query_tokens: Sequence[str], k: int = 10) -> list[tuple[str, float]]:
        """Top ``k`` keys with a positive score, best first."""
        scores, keys = self.scores(query_tokens)
        return top_keys(scores, keys, k)

    def rows(self, keys: Sequence[str]) -> np.ndarray:
        """Row of each key in the arrays ``scores`` returns (-1 for unknown keys)."""
        with self._lock:
            return np.fromiter((self._row_of.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))

    def score_array(self, query_tokens: Sequence[str], keys: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``keys`` as an array (0 for unknown keys).

        A few keys out of many (the prompt recall's dozen hits in 100k
        documents) are scored from their own term lists instead of scoring
        every row: the same numbers, without the work over every posting.
        """
        if len(keys) * 64 >= len(self._keys):
            scores, _ = self.scores(query_tokens)
            return pick(scores, self.rows(keys))
        out = np.zeros(len(keys), dtype=np.float32)
        with self._lock:
            n_live = len(self._row_of)
            if n_live == 0 or not query_tokens:
                return out
            weights = self._query_weights(query_tokens)
            avgdl = max(self._total_len / n_live, 1e-9)
            for i, key in enumerate(keys):
                row = self._row_of.get(key)
                terms = self._doc_terms[row] if row is not None else None
                if terms is None or row is None:
                    continue
                norm = self.k1 * (1.0 - self.b + self.b * self._doc_len[row] / avgdl)
                total = 0.0
                for tid, tf in zip(terms[0], terms[1], strict=True):
                    weight = weights.get(tid)
                    if weight is not None:
                        total += weight * tf / (tf + norm)
                out[i] = total
        return out

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"documents": len(self._row_of), "terms": len(self._vocab), "removed_rows": self._dead}


def pick(scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``scores[rows]`` with 0 where a row is -1 or out of range."""
    valid = (rows >= 0) & (rows < scores.size)
    out = np.zeros(rows.size, dtype=np.float32)
    out[valid] = scores[rows[valid]]
    return out


def top_keys(scores: np.ndarray, keys: Sequence[str | None], k: int) -> list[tuple[str, float]]:
    """The ``k`` best positive scores with their keys, best first."""
    if k <= 0 or scores.size == 0:
        return []
    positive = int(np.count_nonzero(scores > 0))
    if positive == 0:
        return []
    k = min(k, positive)
    idx = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    out: list[tuple[str, float]] = []
    for i in idx.tolist():
        key = keys[i]
        if key is not None and scores[i] > 0:
            out.append((key, float(scores[i])))
    return out
