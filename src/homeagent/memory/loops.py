"""The memory heartbeats: distill (L1 → L2), archive (cold L2 → L3), merge, review, and the rule distiller.

Each loop is its own task with its own interval (read from config on every
round, so a change applies at the next tick). A loop never blocks a user
turn: it runs in the background, its graph writes are short transactions on
the graph's writer thread, and a failing loop backs off (interval × 2ⁿ, at
most × 16) instead of hammering a broken LLM. Every run logs what it changed,
and ``stats()`` reports the last run, counts and the last error of each loop.

LLM replies are data, not instructions: a reply must be JSON matching a
schema and may only name entities/relations it was shown. Anything else is
rejected with a log line and the job is retried at the next (backed-off)
tick; a rejected reply changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema

from homeagent.memory.distill import RuleDistiller, extract
from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_model import RETIRE_EDITED, Entity, GraphError, Triple, bigram_jaccard, norm_name

log = logging.getLogger("homeagent.memory.loops")

LLMCall = Callable[[str], Awaitable[str]]
"""Send one prompt (a single user message) to the model; return its text reply."""

JACCARD_THRESHOLD = 0.75
MAX_BACKOFF_FACTOR = 16
BLOCK_ROUNDS_AFTER_NO = 10
ARCHIVE_ATTEMPTS_BEFORE_RULES = 3


class ReplyRejected(Exception):
    """The LLM's reply was not usable; nothing was applied."""


class ColdDocs(Protocol):
    """What the archive loop needs from the document store (L2)."""

    async def afind_cold(self, age_hours: float = 72, max_access: int = 2, limit: int = 100) -> list[Any]: ...

    async def aremove(self, doc_id: str) -> bool: ...


# --------------------------------------------------------------------------- LLM replies
def parse_reply(text: str, schema: Mapping[str, Any]) -> Any:
    """JSON (optionally in a ```json fence) that matches ``schema``; ``ReplyRejected`` otherwise."""
    body = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", body, re.S)
    if fence:
        body = fence.group(1).strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ReplyRejected(f"not JSON ({exc.msg} at {exc.pos}): {text[:120]!r}") from None
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as exc:
        raise ReplyRejected(f"JSON does not match the expected shape: {exc.message[:200]}") from None
    return data


TRIPLES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["triples"],
    "properties": {
        "triples": {
            "type": "array",
            "maxItems": 50,
            "items": {
                "type": "object",
                "required": ["subject", "relation", "object"],
                "properties": {
                    "subject": {"type": "string", "minLength": 1, "maxLength": 200},
                    "relation": {"type": "string", "minLength": 1, "maxLength": 64},
                    "object": {"type": "string", "minLength": 1, "maxLength": 200},
                    "sentence_text": {"type": "string", "maxLength": 2000},
                },
            },
        }
    },
}
MERGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["decisions"],
    "properties": {
        "decisions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["a", "b", "same"],
                "properties": {
                    "a": {"type": "string"},
                    "b": {"type": "string"},
                    "same": {"type": "boolean"},
                    "keep": {"type": "string"},
                },
            },
        }
    },
}
REVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["verdicts"],
    "properties": {
        "verdicts": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "verdict"],
                "properties": {
                    "id": {"type": "integer"},
                    "verdict": {"enum": ["keep", "wrong", "fix"]},
                    "relation": {"type": "string", "minLength": 1, "maxLength": 64},
                    "object": {"type": "string", "minLength": 1, "maxLength": 200},
                },
            },
        }
    },
}


# --------------------------------------------------------------------------- reports
@dataclass
class LoopReport:
    changed: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**self.counts, "changed": self.changed, **({"notes": self.notes} if self.notes else {})}


# --------------------------------------------------------------------------- merge
def _squash(name: str) -> str:
    return re.sub(r"[\W_]+", "", name.casefold())


async def merge_candidates(
    graph: GraphDB, *, max_entities: int = 5000
) -> tuple[list[tuple[str, str]], list[tuple[str, str, float]]]:
    """(automatic merges, pairs for the LLM): same name but for spacing/punctuation, then bigram Jaccard > 0.75."""
    entities = await graph.all_entities(limit=max_entities)
    blocked = await graph.merge_blocked()
    return await asyncio.to_thread(_candidates, entities, blocked)


def _candidates(
    entities: Sequence[Entity], blocked: set[tuple[str, str]]
) -> tuple[list[tuple[str, str]], list[tuple[str, str, float]]]:
    auto: list[tuple[str, str]] = []
    by_squash: dict[str, list[Entity]] = defaultdict(list)
    for e in entities:
        key = _squash(e.name)
        if key:
            by_squash[key].append(e)
    merged_away: set[int] = set()
    for group in by_squash.values():
        if len(group) > 1:
            keep = max(group, key=lambda e: e.mention_count)
            for e in group:
                a, b = sorted((norm_name(e.name), norm_name(keep.name)))
                if e.id != keep.id and (a, b) not in blocked:
                    auto.append((e.name, keep.name))
                    merged_away.add(e.id)
    postings: dict[str, list[int]] = defaultdict(list)
    live = [e for e in entities if e.id not in merged_away and len(e.name) >= 2]
    for i, e in enumerate(live):
        n = e.name.casefold()
        for bg in {n[j : j + 2] for j in range(len(n) - 1)}:
            postings[bg].append(i)
    pairs: set[tuple[int, int]] = set()
    for ids in postings.values():
        if len(ids) > 200:  # a bigram shared by hundreds of names says nothing
            continue
        for x in range(len(ids)):
            for y in range(x + 1, len(ids)):
                pairs.add((ids[x], ids[y]))
    ask: list[tuple[str, str, float]] = []
    for x, y in pairs:
        ea, eb = live[x], live[y]
        if ea.type and eb.type and ea.type != eb.type:
            continue
        score = bigram_jaccard(ea.name, eb.name)
        a, b = sorted((norm_name(ea.name), norm_name(eb.name)))
        if score > JACCARD_THRESHOLD and (a, b) not in blocked:
            ask.append((ea.name, eb.name, round(score, 3)))
    ask.sort(key=lambda p: (-p[2], p[0], p[1]))
    return auto, ask


MERGE_PROMPT = """You maintain a personal knowledge graph. Decide for each pair of entity names whether they name the
same thing. Reply with JSON only: {{"decisions": [{{"a": "...", "b": "...", "same": true|false, "keep": "name to keep"}}]}}.
Use the names exactly as given. Pairs:
{pairs}"""


async def merge_pass(graph: GraphDB, llm: LLMCall | None, *, max_pairs: int = 20) -> LoopReport:
    report = LoopReport()
    await graph.tick_merge_blocks()
    auto, ask = await merge_candidates(graph)
    merged = 0
    for source, target in auto:
        try:
            await graph.merge_entities(source, target)
            report.changed.append(f"merged {source!r} into {target!r} (same name)")
            merged += 1
        except GraphError as exc:
            report.notes.append(f"skipped {source!r} → {target!r}: {exc}")
    report.counts = {"merged": merged, "candidates": len(ask)}
    if not ask:
        return report
    if llm is None:
        report.notes.append("no LLM: similar names listed, not merged")
        report.changed.extend(f"candidate {a!r} ~ {b!r} ({s})" for a, b, s in ask[:max_pairs])
        return report
    batch = ask[:max_pairs]
    reply = await llm(MERGE_PROMPT.format(pairs="\n".join(f"- {a} | {b}" for a, b, _ in batch)))
    data = parse_reply(reply, MERGE_SCHEMA)
    shown = {tuple(sorted((a, b))) for a, b, _ in batch}
    decisions = data["decisions"]
    for d in decisions:  # validate everything before applying anything
        if tuple(sorted((d["a"], d["b"]))) not in shown:
            raise ReplyRejected(f"the reply names a pair it was not shown: {d['a']!r} / {d['b']!r}")
        if d.get("keep") not in (None, d["a"], d["b"]):
            raise ReplyRejected(f"'keep' must be one of the pair, got {d.get('keep')!r}")
    for d in decisions:
        if d["same"]:
            keep = d.get("keep") or d["a"]
            drop = d["b"] if keep == d["a"] else d["a"]
            try:
                await graph.merge_entities(drop, keep)
                report.changed.append(f"merged {drop!r} into {keep!r} (LLM)")
                merged += 1
            except GraphError as exc:  # one of them vanished since: skip this one
                report.notes.append(f"skipped {drop!r} → {keep!r}: {exc}")
        else:
            await graph.block_merge(d["a"], d["b"], BLOCK_ROUNDS_AFTER_NO)
            report.changed.append(f"kept {d['a']!r} and {d['b']!r} apart")
    report.counts["merged"] = merged
    return report


# --------------------------------------------------------------------------- archive
ARCHIVE_PROMPT = """Extract the durable facts from this memory document as knowledge-graph triples. The user is "user".
Use snake_case relations (lives_in, likes, works_as, knows, owns, …). Only facts the text states; no guesses.
Reply with JSON only: {{"triples": [{{"subject": "...", "relation": "...", "object": "...", "sentence_text": "..."}}]}}
(an empty list when there is nothing durable).

Document (written {when}):
{content}"""


async def archive_pass(
    graph: GraphDB, docs: ColdDocs, llm: LLMCall | None, *, batch: int = 20, age_hours: float = 72, max_access: int = 2
) -> LoopReport:
    """Cold documents → triples → graph. With an LLM a document leaves L2 once its facts are in the graph."""
    report = LoopReport()
    state = await graph.loop_state("archive") or {}
    processed: list[str] = list(state.get("processed", []))
    attempts: dict[str, int] = dict(state.get("attempts", {}))
    done = set(processed)
    cold = [d for d in await docs.afind_cold(age_hours, max_access, limit=batch + len(done)) if d.id not in done][
        :batch
    ]
    committed = removed = 0
    try:
        for doc in cold:
            content = str(doc.content or "")
            ts = float(getattr(doc, "ts", 0.0) or 0.0) or None
            triples: list[Triple]
            use_llm = llm is not None and attempts.get(doc.id, 0) < ARCHIVE_ATTEMPTS_BEFORE_RULES
            if use_llm and llm is not None:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "unknown"
                try:
                    data = parse_reply(
                        await llm(ARCHIVE_PROMPT.format(when=when, content=content[:6000])), TRIPLES_SCHEMA
                    )
                    triples = [Triple.from_dict(t, source="archive") for t in data["triples"]]
                    _check_grounded(triples, content)
                except ReplyRejected:
                    attempts[doc.id] = attempts.get(doc.id, 0) + 1
                    raise
            else:
                triples = extract(content)
            for t in triples:
                t.valid_from = ts
                t.source = "archive"
                if not t.sentence:
                    t.sentence = content[:2000]
            if triples:
                result = await graph.commit(triples, source="archive")
                committed += result.added + result.reinforced
                report.changed.extend(f"{t.subject} --{t.relation}--> {t.object}" for t in triples)
            if use_llm and triples:
                if await docs.aremove(doc.id):
                    removed += 1
            else:
                processed.append(doc.id)
            attempts.pop(doc.id, None)
    finally:
        await graph.set_loop_state("archive", {"processed": processed[-5000:], "attempts": attempts})
    report.counts = {"documents": len(cold), "facts": committed, "documents_removed": removed}
    return report


def _check_grounded(triples: Sequence[Triple], content: str) -> None:
    """Every triple must mention something the document contains (the user aside)."""
    text = content.casefold()
    for t in triples:
        names = [n for n in (t.subject, t.object) if n.casefold() not in ("user", "用户", "我")]
        if names and not any(n.casefold() in text for n in names):
            raise ReplyRejected(f"the reply names entities the document does not mention: {t.subject!r}, {t.object!r}")


# --------------------------------------------------------------------------- review
REVIEW_PROMPT = """Check each stored fact against the sentence it was taken from. Reply with JSON only:
{{"verdicts": [{{"id": <id>, "verdict": "keep"|"wrong"|"fix", "relation": "...", "object": "..."}}]}}
("fix" gives the corrected relation and/or object). Facts:
{facts}"""


async def review_pass(graph: GraphDB, llm: LLMCall | None, *, batch: int = 20) -> LoopReport:
    report = LoopReport()
    if llm is None:
        report.notes.append("no LLM: nothing reviewed")
        report.counts = {"reviewed": 0}
        return report
    cursor = int((await graph.loop_state("review") or {}).get("after_id", 0))
    page = [r for r in await graph.current_relations(limit=batch * 3, offset_id=cursor) if r.sentence][:batch]
    if not page:
        await graph.set_loop_state("review", {"after_id": 0})  # start over next time
        report.counts = {"reviewed": 0}
        return report
    facts = "\n".join(f"- id {r.id}: {r.line()} | sentence: {' '.join((r.sentence or '').split())[:300]}" for r in page)
    data = parse_reply(await llm(REVIEW_PROMPT.format(facts=facts)), REVIEW_SCHEMA)
    by_id = {r.id: r for r in page}
    for v in data["verdicts"]:
        if v["id"] not in by_id:
            raise ReplyRejected(f"the reply names fact id {v['id']}, which it was not shown")
        if v["verdict"] == "fix" and not (v.get("relation") or v.get("object")):
            raise ReplyRejected(f"fact {v['id']}: 'fix' without a relation or object")
    wrong = fixed = 0
    for v in data["verdicts"]:
        r = by_id[v["id"]]
        try:
            if v["verdict"] == "wrong":
                wrong += await graph.retire([r.id], RETIRE_EDITED)
                report.changed.append(f"retracted {r.line()}")
            elif v["verdict"] == "fix":
                new = await graph.edit(
                    r.subject, r.relation, r.object, new_relation=v.get("relation"), new_object=v.get("object")
                )
                fixed += 1
                report.changed.append(f"corrected {r.line()} → {new.line()}")
        except GraphError as exc:  # changed since we read it
            report.notes.append(f"fact {r.id}: {exc}")
    await graph.set_loop_state("review", {"after_id": max(by_id)})
    report.counts = {"reviewed": len(page), "retracted": wrong, "corrected": fixed}
    return report


# --------------------------------------------------------------------------- the scheduler
@dataclass
class LoopStats:
    runs: int = 0
    errors: int = 0
    consecutive_failures: int = 0
    last_run: float | None = None
    last_duration_ms: float | None = None
    last_result: dict[str, Any] | None = None
    last_error: str | None = None
    next_run: float | None = None

    def to_dict(self) -> dict[str, Any]:
        fmt = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else None  # noqa: E731
        return {
            "runs": self.runs,
            "errors": self.errors,
            "consecutive_failures": self.consecutive_failures,
            "last_run": fmt(self.last_run),
            "last_duration_ms": self.last_duration_ms,
            "last_result": self.last_result,
            "last_error": self.last_error,
            "next_run": fmt(self.next_run),
        }


class MemoryLoops:
    """Runs the memory heartbeats; ``run_now(name)`` runs one at once (``homeagent memory run-loop``)."""

    def __init__(
        self,
        graph: GraphDB,
        *,
        intervals: Mapping[str, Callable[[], float]],
        distiller: RuleDistiller | None = None,
        docs: ColdDocs | None = None,
        distill_context: Callable[[], Awaitable[Any]] | None = None,
        llm: LLMCall | None = None,
        llm_available: Callable[[], bool] | None = None,
        job_timeout: float = 600.0,
        min_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.graph = graph
        self.intervals = dict(intervals)
        self.distiller = distiller or RuleDistiller(graph)
        self.docs = docs
        self.distill_context = distill_context
        self.llm = llm
        self.llm_available = llm_available
        self.job_timeout = job_timeout
        self.min_interval = min_interval
        self.clock = clock
        self._jobs: dict[str, Callable[[], Awaitable[LoopReport]]] = {
            "rules": self._rules,
            "distill": self._distill,
            "archive": self._archive,
            "merge": self._merge,
            "review": self._review,
        }
        self._stats = {name: LoopStats() for name in self._jobs}
        self._locks = {name: asyncio.Lock() for name in self._jobs}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    # jobs ------------------------------------------------------------------
    def _current_llm(self) -> LLMCall | None:
        """The LLM, unless ``llm_available`` says only the offline provider is there (rules then)."""
        if self.llm is None or (self.llm_available is not None and not self.llm_available()):
            return None
        return self.llm

    async def _rules(self) -> LoopReport:
        r = await self.distiller.run_once()
        return LoopReport(
            changed=r.facts, counts={"records": r.records, "facts": r.triples, "added": r.added, "expired": r.expired}
        )

    async def _distill(self) -> LoopReport:
        if self.distill_context is None:
            return LoopReport(notes=["no context store wired"])
        result = await self.distill_context()
        count = len(result) if isinstance(result, list | tuple) else int(result or 0)
        return LoopReport(counts={"events_moved_to_documents": count})

    async def _archive(self) -> LoopReport:
        if self.docs is None:
            return LoopReport(notes=["no document store wired"])
        return await archive_pass(self.graph, self.docs, self._current_llm())

    async def _merge(self) -> LoopReport:
        return await merge_pass(self.graph, self._current_llm())

    async def _review(self) -> LoopReport:
        return await review_pass(self.graph, self._current_llm())

    # running ---------------------------------------------------------------
    async def run_now(self, name: str) -> dict[str, Any]:
        """Run one loop's job now (waits if it is already running); returns its report or raises."""
        if name not in self._jobs:
            raise ValueError(f"unknown memory loop {name!r}; one of {', '.join(self._jobs)}")
        return await self._run(name)

    async def _run(self, name: str) -> dict[str, Any]:
        stats = self._stats[name]
        async with self._locks[name]:
            started = time.perf_counter()
            stats.last_run = self.clock()
            try:
                report = await asyncio.wait_for(self._jobs[name](), self.job_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                stats.runs += 1
                stats.errors += 1
                stats.consecutive_failures += 1
                stats.last_error = f"{type(exc).__name__}: {exc}"[:500]
                stats.last_duration_ms = round((time.perf_counter() - started) * 1000, 1)
                if isinstance(exc, ReplyRejected):
                    log.warning("memory loop %s: LLM reply rejected, nothing applied; will retry: %s", name, exc)
                else:
                    log.warning("memory loop %s failed (%s); backing off", name, stats.last_error)
                raise
            stats.runs += 1
            stats.consecutive_failures = 0
            stats.last_error = None
            stats.last_duration_ms = round((time.perf_counter() - started) * 1000, 1)
            stats.last_result = report.to_dict()
            if report.changed or any(report.counts.values()):
                log.info(
                    "memory loop %s: %s%s",
                    name,
                    ", ".join(f"{k} {v}" for k, v in report.counts.items()),
                    ("; " + "; ".join(report.changed[:10])) if report.changed else "",
                )
            return stats.last_result

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for name in self._jobs:
            if name in self.intervals:
                self._tasks.append(loop.create_task(self._forever(name), name=f"memory-loop-{name}"))

    async def _forever(self, name: str) -> None:
        stats = self._stats[name]
        while not self._stopping:
            try:
                interval = max(self.min_interval, float(self.intervals[name]()))
            except Exception:
                log.exception("memory loop %s: bad interval; using 10 minutes", name)
                interval = 600.0
            delay = interval * min(MAX_BACKOFF_FACTOR, 2**stats.consecutive_failures)
            stats.next_run = self.clock() + delay
            await asyncio.sleep(delay)
            if self._stopping:
                break
            with contextlib.suppress(Exception):
                await self._run(name)

    async def stop(self) -> None:
        # The flag as well as cancel(): on 3.11 ``wait_for`` can swallow a cancellation that races
        # with its job finishing, and the loop must still end.
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=self.job_timeout)
            for task in pending:
                log.warning("memory loop task %s did not stop", task.get_name())
        self._tasks.clear()

    def stats(self) -> dict[str, Any]:
        return {name: s.to_dict() for name, s in self._stats.items()}
