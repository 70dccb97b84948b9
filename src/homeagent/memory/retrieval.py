"""Hybrid retrieval: dense vectors and BM25, fused into one score.

Dense similarity finds paraphrases and cross-lingual matches; BM25 finds
exact names and rare words. Each half is min-max normalised over the
query's candidates (BM25 as a share of the best, the cosine min-max over
at least ``MIN_DENSE_SPAN``) and the two are added with a weight chosen on
the LoCoMo dev split (docs/memory.md has the ablation)::

    score = bm25 / max(bm25) + DENSE_WEIGHT * minmax(cosine)

The old form, ``cosine + 0.4 * bm25 / bound(query)``, let the dense half
dominate: a full lexical match reaches only ~0.4 of the bound, so over one
query the lexical term varied ~8x less than the cosine, and on real dialogue
it scored below plain BM25. Normalising both halves the same way makes the
weight mean what it says. That per-query score only orders hits; whether a
hit is relevant at all is judged on an absolute scale, ``relevance`` =
``cosine + 0.4 * bm25 / bound``, which is what a relevance floor (the
embedder's ``relevance_floor``) is compared with.

``conversation.py`` builds on this for dialogue (a turn scored with its
neighbours and its session); ``HybridIndex`` is the plain form for
documents without structure (the context window's prune order, graph
relations).

Dense search is brute force over a float32 matrix (exact up to
``exact_limit`` rows, ~1 ms at 10k x 512). Beyond that a 1-bit sketch of
each vector (64 bytes at 512 dims) picks candidates by Hamming distance and
the exact cosine re-ranks them: scanning 100k full vectors costs ~20-30 ms on
this machine's memory bandwidth, the sketch ~5 ms.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from homeagent.memory.lexical import LexicalIndex, top_keys

DENSE_WEIGHT = 2.0
"""Weight of the normalised dense half against the normalised lexical half.

LoCoMo dev (docs/memory.md): 2.0 gives any@10 0.878 / all@10 0.763, 1.5 0.880 / 0.767, 1.0 0.870 /
0.757, a flat optimum. 1.5 loses the Chinese check's top-3 answer for "小李在学什么乐器？" (the
character-bigram lexical half leans on the dense half more in Chinese), so 2.0 stays."""

RELEVANCE_LEXICAL_WEIGHT = 0.4
"""Weight of the lexical share in the absolute ``relevance`` that floors are compared with."""


MIN_DENSE_SPAN = 0.3
"""The smallest cosine range that is stretched to 0..1: with a handful of candidates (a new user's
memory) the raw range can be a few hundredths, and stretching that would turn noise into a full point."""


def minmax(values: np.ndarray, *, min_span: float = 0.0) -> np.ndarray:
    """Scale to 0..1 over this query's candidates (the best is 1; all zeros when they are all equal).

    ``min_span`` keeps a narrow range from being stretched: the low end is
    taken at least ``min_span`` below the best.
    """
    values = np.asarray(values, dtype=np.float32)
    if values.size == 0:
        return values
    hi = float(values.max())
    lo = min(float(values.min()), hi - min_span)
    span = hi - lo
    if span <= 1e-12:
        return np.zeros_like(values)
    return (values - lo) / span


def normalise_lexical(values: np.ndarray) -> np.ndarray:
    """BM25 scores as a share of the best one (BM25 is 0 for no match, so 0 is the natural low end)."""
    values = np.asarray(values, dtype=np.float32)
    hi = float(values.max()) if values.size else 0.0
    return values / hi if hi > 0 else np.zeros_like(values)


def normalise_dense(values: np.ndarray) -> np.ndarray:
    return minmax(values, min_span=MIN_DENSE_SPAN)


def fuse(lexical: np.ndarray, dense: np.ndarray | None, *, dense_weight: float = DENSE_WEIGHT) -> np.ndarray:
    """The calibrated score of candidates from their raw BM25 and cosine scores."""
    score = normalise_lexical(lexical)
    if dense is not None:
        score = score + dense_weight * normalise_dense(dense)
    return score


def relevance(lexical_share: np.ndarray, dense: np.ndarray) -> np.ndarray:
    """Absolute evidence that a hit is about the query, comparable across queries (floors use it)."""
    return np.asarray(dense, dtype=np.float32) + RELEVANCE_LEXICAL_WEIGHT * np.asarray(lexical_share, dtype=np.float32)


@dataclass
class Hit:
    """One retrieved key.

    ``score`` orders hits within one query; ``relevance`` is the absolute
    evidence (floors compare with it); ``dense`` is the cosine, ``lexical``
    the BM25 score (0 when absent).
    """

    key: str
    score: float
    dense: float = 0.0
    lexical: float = 0.0
    relevance: float = 0.0


_M8 = np.uint64(0x00FF00FF00FF00FF)
_M16 = np.uint64(0x0000FFFF0000FFFF)
_M32 = np.uint64(0xFFFFFFFF)


class VectorIndex:
    """A growable float32 matrix of L2-normalised rows keyed by strings."""

    def __init__(self, dim: int, *, exact_limit: int = 20_000, candidates: int = 2048) -> None:
        self.dim = dim
        self.exact_limit = exact_limit
        self.candidates = candidates
        self._lock = threading.RLock()
        self._mat = np.zeros((64, dim), dtype=np.float32)
        self._bits = np.zeros((64, (dim + 63) // 64 * 8), dtype=np.uint8)
        self._keys: list[str] = []
        self._row_of: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._row_of

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._keys)

    def _grow(self, need: int) -> None:
        cap = self._mat.shape[0]
        if need <= cap:
            return
        new_cap = max(need, cap * 2)
        mat = np.zeros((new_cap, self.dim), dtype=np.float32)
        mat[:cap] = self._mat
        bits = np.zeros((new_cap, self._bits.shape[1]), dtype=np.uint8)
        bits[:cap] = self._bits
        self._mat, self._bits = mat, bits

    def _sketch(self, vecs: np.ndarray) -> np.ndarray:
        packed = np.packbits(vecs > 0, axis=-1)
        out = np.zeros((*vecs.shape[:-1], self._bits.shape[1]), dtype=np.uint8)
        out[..., : packed.shape[-1]] = packed
        return out

    def add_many(self, keys: Sequence[str], vecs: np.ndarray) -> None:
        vecs = np.asarray(vecs, dtype=np.float32).reshape(len(keys), self.dim)
        with self._lock:
            fresh_keys: list[str] = []
            fresh_rows: list[int] = []
            for i, key in enumerate(keys):
                row = self._row_of.get(key)
                if row is not None:
                    self._mat[row] = vecs[i]
                    self._bits[row] = self._sketch(vecs[i])
                else:
                    fresh_keys.append(key)
                    fresh_rows.append(i)
            if fresh_keys:
                start = len(self._keys)
                self._grow(start + len(fresh_keys))
                block = vecs[fresh_rows]
                self._mat[start : start + len(fresh_keys)] = block
                self._bits[start : start + len(fresh_keys)] = self._sketch(block)
                for j, key in enumerate(fresh_keys):
                    self._row_of[key] = start + j
                self._keys.extend(fresh_keys)

    def add(self, key: str, vec: np.ndarray) -> None:
        self.add_many([key], np.asarray(vec, dtype=np.float32)[None, :])

    def remove(self, key: str) -> bool:
        """O(1): the last row moves into the hole."""
        with self._lock:
            row = self._row_of.pop(key, None)
            if row is None:
                return False
            last = len(self._keys) - 1
            if row != last:
                moved = self._keys[last]
                self._mat[row] = self._mat[last]
                self._bits[row] = self._bits[last]
                self._keys[row] = moved
                self._row_of[moved] = row
            self._keys.pop()
            self._mat[last] = 0.0
            self._bits[last] = 0
            return True

    def get(self, key: str) -> np.ndarray | None:
        with self._lock:
            row = self._row_of.get(key)
            return None if row is None else self._mat[row].copy()

    def search(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Top ``k`` keys by cosine, best first (approximate above ``exact_limit`` rows)."""
        q = np.asarray(query, dtype=np.float32).reshape(self.dim)
        with self._lock:
            n = len(self._keys)
            if n == 0 or k <= 0 or not np.any(q):
                return []
            if n <= self.exact_limit:
                rows = np.arange(n)
                sims = self._mat[:n] @ q
            else:
                dist = self._hamming(self._sketch(q), n)
                c = min(n, max(self.candidates, k))
                rows = np.argpartition(dist, c - 1)[:c] if c < n else np.arange(n)
                sims = self._mat[rows] @ q
            k = min(k, sims.size)
            top = np.argpartition(-sims, k - 1)[:k] if k < sims.size else np.arange(sims.size)
            top = top[np.argsort(-sims[top], kind="stable")]
            return [(self._keys[int(rows[i])], float(sims[i])) for i in top]

    def _hamming(self, qbits: np.ndarray, n: int) -> np.ndarray:
        """Hamming distance of the query sketch to the first ``n`` rows."""
        words = self._bits.shape[1] // 8
        counts = np.bitwise_count(self._bits[:n].view(np.uint64) ^ qbits.view(np.uint64))  # uint8 per word
        if words != 8:
            return counts.sum(axis=1, dtype=np.int32)
        # Sum the 8 byte counts of a row with SWAR adds: 3x faster than .sum(axis=1) on short rows.
        x = counts.view(np.uint64).reshape(n)
        x = (x & _M8) + ((x >> np.uint64(8)) & _M8)
        x = (x & _M16) + ((x >> np.uint64(16)) & _M16)
        return ((x & _M32) + (x >> np.uint64(32))).astype(np.int32)

    def all_scores(self, query: np.ndarray) -> tuple[np.ndarray, dict[str, int]] | None:
        """Exact cosines of every row and the row of each key, when that is cheap (``exact_limit`` rows or fewer).

        One matrix product then serves both the candidates and every further
        lookup (a caller that smooths a score with neighbours needs both).
        """
        q = np.asarray(query, dtype=np.float32).reshape(self.dim)
        with self._lock:
            n = len(self._keys)
            if n > self.exact_limit:
                return None
            return self._mat[:n] @ q, self._row_of

    def key_at(self, row: int) -> str:
        return self._keys[row]

    def score_array(self, query: np.ndarray, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Cosines of ``keys`` as an array, and a mask of the keys that have a vector."""
        q = np.asarray(query, dtype=np.float32).reshape(self.dim)
        with self._lock:
            rows = np.fromiter((self._row_of.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
            has = rows >= 0
            sims = np.zeros(len(keys), dtype=np.float32)
            if has.any():
                sims[has] = self._mat[rows[has]] @ q
            return sims, has



class HybridIndex:
    """Dense and lexical indexes over the same keys, searched together."""

    def __init__(self, dim: int | None, *, exact_limit: int = 20_000, dense_weight: float = DENSE_WEIGHT) -> None:
        self.vectors: VectorIndex | None = VectorIndex(dim, exact_limit=exact_limit) if dim else None
        self.lexical = LexicalIndex()
        self.dense_weight = dense_weight

    def __len__(self) -> int:
        return max(len(self.lexical), len(self.vectors) if self.vectors is not None else 0)

    def add(self, key: str, tokens: Sequence[str], vec: np.ndarray | None) -> None:
        self.lexical.add(key, tokens)
        if vec is not None and self.vectors is not None:
            self.vectors.add(key, vec)

    def add_many(self, items: Iterable[tuple[str, Sequence[str], np.ndarray | None]]) -> None:
        keys: list[str] = []
        vecs: list[np.ndarray] = []
        lexical: list[tuple[str, Sequence[str]]] = []
        for key, tokens, vec in items:
            lexical.append((key, tokens))
            if vec is not None:
                keys.append(key)
                vecs.append(vec)
        self.lexical.add_many(lexical)
        if keys and self.vectors is not None:
            self.vectors.add_many(keys, np.stack(vecs))

    def remove(self, key: str) -> None:
        self.lexical.remove(key)
        if self.vectors is not None:
            self.vectors.remove(key)

    def dense_ok(self, qvec: np.ndarray | None) -> bool:
        """Whether the dense half can take part for this query vector."""
        return self.vectors is not None and qvec is not None and bool(np.any(qvec))

    def search(
        self,
        tokens: Sequence[str],
        qvec: np.ndarray | None,
        k: int,
        *,
        depth: int | None = None,
        min_score: float | None = None,
    ) -> list[Hit]:
        """Top ``k`` fused hits with ``relevance >= min_score``; candidates are each half's top ``depth``."""
        depth = depth or max(50, 5 * k)
        dense = self.vectors.search(qvec, depth) if self.dense_ok(qvec) else []  # type: ignore[union-attr,arg-type]
        lexical: list[tuple[str, float]] = []
        if tokens:
            lex_scores, lex_keys = self.lexical.scores(tokens)
            lexical = top_keys(lex_scores, lex_keys, depth)
        keys = list(dict.fromkeys([key for key, _ in dense] + [key for key, _ in lexical]))
        if not keys:
            return []
        hits = self.rank(tokens, qvec, keys)
        if min_score is not None:
            hits = [h for h in hits if h.relevance >= min_score]
        return hits[:k]

    def rank(self, tokens: Sequence[str], qvec: np.ndarray | None, keys: Sequence[str]) -> list[Hit]:
        """Fused relevance of every given key (all of them, best first): the prune order."""
        keys = list(keys)
        dense: np.ndarray | None = None
        if self.dense_ok(qvec):
            assert self.vectors is not None and qvec is not None
            dense, _ = self.vectors.score_array(qvec, keys)
        lex = np.zeros(len(keys), dtype=np.float32)
        bound = self.lexical.query_bound(tokens) if tokens else 0.0
        if bound > 0:
            lex = self.lexical.score_array(tokens, keys)
        fused = fuse(lex, dense, dense_weight=self.dense_weight)
        cos = dense if dense is not None else np.zeros(len(keys), dtype=np.float32)
        rel = relevance(lex / bound if bound > 0 else lex, cos)
        order = np.lexsort((-cos, -fused))
        return [
            Hit(keys[i], float(fused[i]), float(cos[i]), float(lex[i]), float(rel[i])) for i in order.tolist()
        ]
