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

``jieba.analyse`` costs ~0.8 s to import and jieba's dictionary ~1 s to load:
``start()`` warms both in a worker thread, and until then a simple
bigram/word splitter stands in, so the first turn never waits for it.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from homeagent.memory.embedder import Embedder
from homeagent.memory.graph import Entity, GraphDB, Recall, Relation
from homeagent.threads import run_detached

log = logging.getLogger("homeagent.memory.indexer")

MAX_TEXT_CHARS = 2_000
TURN_TTL_S = 15 * 60.0

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
    """jieba TF-IDF keywords, loaded once in a worker thread; the fallback splitter until then."""

    def __init__(self, top_k: int = 8) -> None:
        self.top_k = top_k
        self._extract: Callable[..., list[str]] | None = None
        self._lock = threading.Lock()
        self.load_seconds: float | None = None

    @property
    def ready(self) -> bool:
        return self._extract is not None

    def warmup(self) -> None:
        with self._lock:
            if self._extract is not None:
                return
            started = time.perf_counter()
            import jieba
            import jieba.analyse

            jieba.setLogLevel(logging.WARNING)
            jieba.initialize()
            self._extract = jieba.analyse.extract_tags
            self.load_seconds = time.perf_counter() - started
            log.debug("jieba keyword extraction ready in %.2f s", self.load_seconds)

    def keywords(self, text: str) -> list[str]:
        """Call from a worker thread; never loads jieba itself (``warmup`` does)."""
        text = text[:MAX_TEXT_CHARS]
        if self._extract is None:
            return fallback_keywords(text)
        words = [
            w
            for w in self._extract(text, topK=self.top_k)
            if w.strip() and w.lower() not in _STOP and w not in _ZH_STOP
        ]
        # English words are left to the splitter too: jieba's IDF table knows only Chinese.
        for tok in fallback_keywords(text):
            if tok.isascii() and tok not in words:
                words.append(tok)
        short = text.strip()
        if 2 <= len(short) <= 8 and short not in words:
            words.insert(0, short)  # the whole text may be a name ("张三", "Alice")
        return words[: self.top_k + 4]


@dataclass
class IndexBlock:
    text: str | None
    keywords: list[str] = field(default_factory=list)
    seeds: list[Entity] = field(default_factory=list)
    vector_seeds: list[tuple[str, float]] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    tokens: int = 0
    elapsed_ms: float = 0.0


class MemoryIndexer:
    """Builds the ``【记忆索引】`` block; keeps entity vectors in step with the graph."""

    def __init__(
        self,
        graph: GraphDB,
        embedder: Embedder | None = None,
        *,
        token_budget: int = 500,
        depth: int = 2,
        max_seeds: int = 8,
        max_vector_seeds: int = 3,
        fanout: int = 10,
        max_relations: int = 60,
        min_similarity: float = 0.3,
        outlier_z: float = 2.5,
        max_vector_entities: int = 20_000,
        embed_batch: int = 128,
        vector_timeout: float = 0.5,
        keywords: KeywordExtractor | None = None,
    ) -> None:
        self.graph = graph
        self.embedder = embedder
        self.token_budget = token_budget
        self.depth = depth
        self.max_seeds = max_seeds
        self.max_vector_seeds = max_vector_seeds
        self.fanout = fanout
        self.max_relations = max_relations
        self.min_similarity = min_similarity
        self.outlier_z = outlier_z
        self.max_vector_entities = max_vector_entities
        self.embed_batch = embed_batch
        self.vector_timeout = vector_timeout
        self.keywords = keywords or KeywordExtractor()
        self._ids = np.zeros(0, dtype=np.int64)
        self._mat = np.zeros((0, embedder.dim if embedder else 0), dtype=np.float32)
        self._loaded_structure = -1
        self._synced_generation = -1
        self._last_sync = 0.0
        self._sync_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._turn_text: str | None = None
        self._turn_started = 0.0
        self._recalled_entities: set[int] = set()
        self._recalled_relations: set[int] = set()
        self.stats_data: dict[str, Any] = {"builds": 0, "last_build_ms": None, "sync_errors": 0, "embedded": 0}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Warm jieba and sync entity vectors in the background; returns at once."""
        self._spawn(run_detached(self.keywords.warmup, name="warmup-keywords"), "keyword warm-up")
        self._spawn(self.sync(), "entity vector sync")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    def _spawn(self, coro: Any, what: str) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self.stats_data["sync_errors"] += 1
                log.warning("memory indexer: %s failed: %s", what, t.exception())

        task.add_done_callback(done)

    # ------------------------------------------------------------------ vectors
    async def sync(self) -> int:
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
        stale = self._synced_generation != self.graph.generation or time.monotonic() - self._last_sync > 60
        if self.embedder is not None and stale and not self._sync_lock.locked():
            self._spawn(self.sync(), "entity vector sync")

    def _vector_seeds(self, text: str) -> list[tuple[int, float]]:
        ids, mat = self._ids, self._mat
        if self.embedder is None or len(ids) == 0:
            return []
        q = self.embedder.embed([text[:MAX_TEXT_CHARS]])[0]
        if not np.any(q):
            return []
        sims = mat @ q
        k = min(self.max_vector_seeds, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        floor = self.min_similarity
        if len(sims) >= 8:
            floor = max(floor, float(sims.mean() + self.outlier_z * sims.std()))
        return sorted(((int(ids[i]), float(sims[i])) for i in top if sims[i] >= floor), key=lambda p: -p[1])

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
            self._recalled_relations.update(r.id for r in result.relations)
            self._recalled_entities.update(e.id for e in result.seeds)
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
        self._maybe_sync()
        if not text:
            return IndexBlock(None)
        vector_task = asyncio.ensure_future(asyncio.to_thread(self._vector_seeds, text))
        vector_task.add_done_callback(lambda t: t.cancelled() or t.exception())
        keywords = await asyncio.to_thread(self.keywords.keywords, text)
        try:
            # A cold or busy embedder must not cost the turn its memory block: keywords alone then.
            vec = await asyncio.wait_for(asyncio.shield(vector_task), self.vector_timeout)
        except TimeoutError:
            vec = []
            self.stats_data["vector_timeouts"] = self.stats_data.get("vector_timeouts", 0) + 1
        result = await self.graph.recall(
            keywords,
            self.depth,
            entity_ids=[i for i, _ in vec],
            max_seeds=self.max_seeds,
            fanout=self.fanout,
            max_relations=self.max_relations,
        )
        names = {e.id: e.name for e in result.entities}
        block = IndexBlock(
            None, keywords, result.seeds, [(names.get(i, f"#{i}"), round(s, 3)) for i, s in vec], result.relations
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
