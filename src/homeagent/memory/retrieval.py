"""Hybrid retrieval: dense vectors and BM25, fused into one score.

Dense similarity finds paraphrases and cross-lingual matches; BM25 finds
exact names and rare words. The fused score is a normalised sum::

    score = cosine + lexical_weight * bm25 / bound(query)

where ``bound`` is the highest BM25 score any document could reach for the
query, so the lexical term is the share of the query's information a
document matches (0..1) and means the same for every query. Unlike
reciprocal-rank fusion (``rrf_fuse``, kept for comparison) it does not give a
weak keyword match at rank 1 the same credit as a strong one, and the score
is absolute, so a relevance floor can be applied. bench/bench_memory.py
compares both on the synthetic conversation (docs/memory.md has the numbers).
Either half works alone when the other has nothing.

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

from homeagent.memory.lexical import LexicalIndex, pick, top_keys

RRF_K = 60
"""The usual reciprocal-rank constant: flattens the difference between rank 1 and rank 5."""


def rrf_fuse(
    rankings: Sequence[Sequence[str]], *, k: int = RRF_K, weights: Sequence[float] | None = None
) -> dict[str, float]:
    """Reciprocal-rank fusion: ``sum(w / (k + rank))`` over the rankings a key appears in."""
    fused: dict[str, float] = {}
    for i, ranking in enumerate(rankings):
        w = 1.0 if weights is None else float(weights[i])
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + w / (k + rank)
    return fused


@dataclass
class Hit:
    """One retrieved key; ``dense`` is the cosine, ``lexical`` the BM25 score (0 when absent)."""

    key: str
    score: float
    dense: float = 0.0
    lexical: float = 0.0


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

    def score_keys(self, query: np.ndarray, keys: Sequence[str]) -> list[float | None]:
        """Cosine of each key (``None`` for keys without a vector)."""
        q = np.asarray(query, dtype=np.float32).reshape(self.dim)
        with self._lock:
            rows = [self._row_of.get(k) for k in keys]
            present = [r for r in rows if r is not None]
            sims = self._mat[present] @ q if present else np.zeros(0, dtype=np.float32)
            it = iter(sims.tolist())
            return [None if r is None else next(it) for r in rows]


LEXICAL_WEIGHT = 0.4
"""Weight of the lexical share in the fused score (bench: 0.2-0.5 all do well; lower favours paraphrase)."""


class HybridIndex:
    """Dense and lexical indexes over the same keys, searched together."""

    def __init__(self, dim: int | None, *, exact_limit: int = 20_000, lexical_weight: float = LEXICAL_WEIGHT) -> None:
        self.vectors: VectorIndex | None = VectorIndex(dim, exact_limit=exact_limit) if dim else None
        self.lexical = LexicalIndex()
        self.lexical_weight = lexical_weight

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

    def _dense_ok(self, qvec: np.ndarray | None) -> bool:
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
        """Top ``k`` fused hits; candidates are each half's top ``depth``, scored by both halves."""
        depth = depth or max(50, 5 * k)
        dense = self.vectors.search(qvec, depth) if self._dense_ok(qvec) else []  # type: ignore[union-attr,arg-type]
        lex_scores: np.ndarray | None = None
        lexical: list[tuple[str, float]] = []
        if tokens:
            lex_scores, lex_keys = self.lexical.scores(tokens)
            lexical = top_keys(lex_scores, lex_keys, depth)
        keys = list(dict.fromkeys([key for key, _ in dense] + [key for key, _ in lexical]))
        if not keys:
            return []
        dense_arr = np.zeros(len(keys), dtype=np.float32)
        if dense:
            known = dict(dense)
            missing = [i for i, key in enumerate(keys) if key not in known]
            for i, key in enumerate(keys):
                dense_arr[i] = known.get(key, 0.0)
            if missing:
                assert self.vectors is not None and qvec is not None
                sims, _ = self.vectors.score_array(qvec, [keys[i] for i in missing])
                dense_arr[missing] = sims
        lex_arr = np.zeros(len(keys), dtype=np.float32)
        bound = 0.0
        if lex_scores is not None:
            bound = self.lexical.query_bound(tokens)
            lex_arr = pick(lex_scores, self.lexical.rows(keys))
        fused = dense_arr + (self.lexical_weight / bound if bound > 0 else 0.0) * lex_arr
        order = np.lexsort((-dense_arr, -fused))
        hits = [Hit(keys[i], float(fused[i]), float(dense_arr[i]), float(lex_arr[i])) for i in order.tolist()]
        if min_score is not None:
            hits = [h for h in hits if h.score >= min_score]
        return hits[:k]

    def rank(self, tokens: Sequence[str], qvec: np.ndarray | None, keys: Sequence[str]) -> list[Hit]:
        """Fused relevance of every given key (all of them, best first): the prune order."""
        keys = list(keys)
        dense = np.zeros(len(keys), dtype=np.float32)
        if self._dense_ok(qvec):
            assert self.vectors is not None and qvec is not None
            dense, _ = self.vectors.score_array(qvec, keys)
        lex = np.zeros(len(keys), dtype=np.float32)
        bound = self.lexical.query_bound(tokens) if tokens else 0.0
        if bound > 0:
            lex = self.lexical.score_array(tokens, keys)
        fused = dense + (self.lexical_weight / bound if bound > 0 else 0.0) * lex
        order = np.lexsort((-dense, -fused))
        return [Hit(keys[i], float(fused[i]), float(dense[i]), float(lex[i])) for i in order.tolist()]
