"""L1: the relevance-pruned context window that gives the agent its recent past.

The window holds time-ordered events (user inputs, agent replies with their
tool output, and documents recalled from L2). Before each turn ``prune``
keeps the newest ``keep_recent`` events unconditionally and fills the rest of
``top_k`` with the events most relevant to the current input (dense + BM25,
fused); everything else sinks into L2 with its original timestamp, so
nothing is forgotten, only moved out of the prompt.

Every change is durable at once: it is a line in the append-only journal
``context.journal`` (``memory/journal.py``), fsynced in a worker thread;
``aappend``/``durable()`` return only when it is on disk. ``context.json`` is
a snapshot written atomically (tmp + fsync + rename, the previous good copy
kept as ``.bak``) when the journal grows past its threshold and at close;
loading is snapshot + journal replay, so a kill -9 at any moment loses
nothing that was acknowledged and never leaves a half-written file.

``append`` is cheap and synchronous (no I/O, no embedding: it queues the
journal record and starts a background fsync); ``aappend``, ``durable``,
``prune``, ``flush`` and ``close`` are coroutines that do their I/O in a
worker thread.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from homeagent.memory.cleaners import CleanerChain
from homeagent.memory.documents import DocDraft, DocumentStore
from homeagent.memory.embedder import Embedder
from homeagent.memory.journal import ContextJournal, encode_json, journal_path
from homeagent.memory.lexical import Analyzer
from homeagent.memory.media.markers import MARKER
from homeagent.memory.retrieval import HybridIndex
from homeagent.text import scrub_text

if TYPE_CHECKING:
    from homeagent.agent.memory_port import TurnRecord

EVENT_KINDS = ("user", "agent", "cold_storage")
FILE_VERSION = 1


@dataclass
class ContextEvent:
    """One entry of the timeline.

    ``tool_outputs`` is a list of ``{"tool": name, "text": output, "no_memory": bool}``.
    ``no_memory`` events stay in the timeline but are never embedded or archived.
    A recalled document keeps its L2 identity in ``meta`` (doc_id, summary, tags,
    doc_source), so sinking it again restores the same document.
    """

    kind: str = "user"
    input: str = ""
    response: str = ""
    channel: str = ""
    source: str = ""
    tool_outputs: list[dict[str, Any]] = field(default_factory=list)
    no_memory: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"event kind must be one of {EVENT_KINDS}, not {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ContextEvent:
        return cls(
            kind=str(d.get("kind", "user")),
            input=str(d.get("input", "")),
            response=str(d.get("response", "")),
            channel=str(d.get("channel", "")),
            source=str(d.get("source", "")),
            tool_outputs=[dict(t) for t in d.get("tool_outputs", []) or []],
            no_memory=bool(d.get("no_memory", False)),
            meta=dict(d.get("meta", {}) or {}),
            ts=float(d["ts"]),
            id=str(d["id"]),
        )

    def stored_text(self) -> str:
        """What this event contributes to L2 when it sinks (originals, uncleaned, without tool output)."""
        if self.kind == "agent":  # with the markers of media its tools handed over, when there were any
            return "\n".join(p for p in (self.response, str(self.meta.get("media_text", ""))) if p.strip())
        if self.kind == "cold_storage":
            return "\n".join(p for p in (self.input, self.response) if p)
        return self.input


def event_speaker(event: ContextEvent) -> str:
    """Who said it, for the document layer: the user's id (or "user"), "assistant", or a recalled turn's own."""
    if event.meta.get("speaker"):
        return str(event.meta["speaker"])
    if event.kind == "agent":
        return "assistant"
    if event.kind == "user":
        return str(event.meta.get("user_id") or "user")
    return ""


class SinkMediaRefs(Protocol):
    """What pruning needs from the media store: a document made from an event with media references it.

    Called from the worker thread that prunes (``MediaStore.add_refs`` is thread-safe and blocking).
    """

    def add_refs(self, owner_kind: str, owner_id: str, refs: Sequence[str]) -> list[str]: ...


class RelevanceContext:
    """The L1 window. One per agent; the daemon calls ``close()`` on shutdown."""

    def __init__(
        self,
        path: Path | str,
        embedder: Embedder | None,
        docs: DocumentStore | None,
        cleaners: CleanerChain,
        *,
        top_k: int = 30,
        keep_recent: int = 10,
        analyzer: Analyzer | None = None,
        save_delay: float = 5.0,
        log: logging.Logger | None = None,
        read_only: bool = False,
    ) -> None:
        if top_k < 1 or keep_recent < 0:
            raise ValueError("top_k must be >= 1 and keep_recent >= 0")
        self.path = Path(path)
        self.embedder = embedder
        self.docs = docs
        self.cleaners = cleaners
        self.top_k = top_k
        self.keep_recent = min(keep_recent, top_k)
        self.analyzer = analyzer or (docs.analyzer if docs is not None else Analyzer())
        self.save_delay = save_delay  # no longer used (the journal makes each change durable at once); kept for callers
        self.log = log or logging.getLogger(__name__)
        self.read_only = read_only
        self._lock = threading.RLock()  # events and index
        self._io_lock = threading.Lock()  # file writes
        self._prune_lock = asyncio.Lock()
        self._events: list[ContextEvent] = []
        self._ts_keys: list[float] = []
        self._index = HybridIndex(embedder.dim if embedder is not None else None)
        self._memtext: dict[str, str] = {}
        self._gen = 0
        self._saved_gen = 0
        self._save_task: asyncio.Task[None] | None = None
        self._closed = False
        self._journal = ContextJournal(journal_path(self.path), log=self.log, read_only=read_only)
        self._media: SinkMediaRefs | None = None
        self._load()

    def attach_media(self, media: SinkMediaRefs | None) -> None:
        """The media store (opened after the window): pruned events with media hand their references on."""
        self._media = media

    # -- timeline ----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._events)

    def timeline(self) -> list[ContextEvent]:
        """The events in time order (a copy)."""
        with self._lock:
            return list(self._events)

    def append(self, event: ContextEvent) -> None:
        """Add an event at its place in time (cold_storage events carry an old ``ts``)."""
        if self._closed:
            raise RuntimeError("context is closed")
        event.input = scrub_text(event.input)
        event.response = scrub_text(event.response)
        for out in event.tool_outputs:
            out["text"] = scrub_text(str(out.get("text", "")))
        with self._lock:
            if any(e.id == event.id for e in self._events[-50:]):
                return
            pos = bisect.bisect_right(self._ts_keys, event.ts)
            self._events.insert(pos, event)
            self._ts_keys.insert(pos, event.ts)
            self._journal.add(event.to_dict())  # under the lock: the journal's order is the window's
        self._mark_dirty()

    async def aappend(self, event: ContextEvent) -> None:
        """``append`` and return once the event is on disk (journal fsynced in a worker thread)."""
        self.append(event)
        await self.durable()

    async def durable(self) -> None:
        """Return once every change so far is on disk (one fsync shared by all waiters)."""
        await self._journal.wait()

    def to_messages(
        self, limit: int | None = None, *, group_id: str | None = None, person: str | None = None
    ) -> list[dict[str, Any]]:
        """The timeline as OpenAI-shape chat messages, oldest first (``limit``: only the last N messages).

        user -> ``user``, agent -> ``assistant`` (its reply text), cold_storage ->
        a ``system`` message marked as recalled memory with its original date.
        ``group_id`` keeps one conversation scope: a group's events only, or
        (``""``) only events outside every group; None keeps everything.
        ``person`` keeps one person's private conversation: events of another
        person are left out (events recorded before persons were, and recalled
        memory, stay visible).
        """
        messages: list[dict[str, Any]] = []
        for e in self.timeline():
            if group_id is not None and str(e.meta.get("group_id", "")) != group_id:
                continue
            if person is not None and e.meta.get("person") and e.meta["person"] != person:
                continue
            if e.kind == "user" and e.input:
                messages.append({"role": "user", "content": e.input})
            elif e.kind == "agent" and e.response:
                messages.append({"role": "assistant", "content": e.response})
            elif e.kind == "cold_storage":
                body = "\n".join(p for p in (e.input, e.response) if p)
                if body:
                    when = datetime.fromtimestamp(e.ts).strftime("%Y-%m-%d %H:%M")
                    messages.append({"role": "system", "content": f"【recalled memory · {when}】\n{body}"})
        if limit is not None:
            return messages[-limit:] if limit > 0 else []
        return messages

    def forget_inputs(self, input_ids: Collection[str]) -> int:
        """Take the events of these inputs out of the window; how many there were.

        Why: editing a message of a web conversation, or regenerating its last
        reply, continues the conversation from that message, so the turns after
        it must leave the model's recent past too (``to_messages``). Only the
        window forgets: what already sank into documents stays in long-term
        memory. Events recorded before they carried their input id are not found.
        """
        wanted = {i for i in input_ids if i}
        if not wanted:
            return 0
        with self._lock:
            gone = {e.id for e in self._events if e.meta.get("input_id") in wanted}
            if not gone:
                return 0
            self._drop_locked(gone)
        self._mark_dirty()
        return len(gone)

    def _drop_locked(self, gone: set[str]) -> None:
        """Take events out of the window, its index and its journal; the caller holds the lock."""
        pairs = [(e, t) for e, t in zip(self._events, self._ts_keys, strict=True) if e.id not in gone]
        self._events = [e for e, _ in pairs]
        self._ts_keys = [t for _, t in pairs]
        for event_id in gone:
            self._index.remove(event_id)
            self._memtext.pop(event_id, None)
        self._journal.remove(sorted(gone))

    async def aforget_inputs(self, input_ids: Collection[str]) -> int:
        """``forget_inputs``, returning once the removal is on disk."""
        removed = self.forget_inputs(input_ids)
        if removed:
            await self.durable()
        return removed

    def stats(self) -> dict[str, Any]:
        with self._lock:
            kinds: dict[str, int] = {}
            for e in self._events:
                kinds[e.kind] = kinds.get(e.kind, 0) + 1
            first = self._events[0].ts if self._events else None
            last = self._events[-1].ts if self._events else None
        return {
            "events": len(self._events),
            "by_kind": kinds,
            "oldest": datetime.fromtimestamp(first).isoformat(timespec="seconds") if first else "",
            "newest": datetime.fromtimestamp(last).isoformat(timespec="seconds") if last else "",
            "top_k": self.top_k,
            "keep_recent": self.keep_recent,
            "path": str(self.path),
            "file_bytes": self.path.stat().st_size if self.path.exists() else 0,
        }

    # -- pruning -----------------------------------------------------------------------
    async def prune(self, current_input: str) -> list[ContextEvent]:
        """Keep the newest ``keep_recent`` and the most relevant rest up to ``top_k``; sink the others to L2."""
        async with self._prune_lock:
            kept, changed = await asyncio.to_thread(self.prune_sync, current_input)
        if changed:
            self._mark_dirty()
        return kept

    def prune_sync(self, current_input: str) -> tuple[list[ContextEvent], bool]:
        """``prune`` for worker threads; returns the kept timeline and whether anything was removed."""
        events = self.timeline()
        over = len(events) > self.top_k
        qtext = self.cleaners.clean(current_input) if over else ""
        qvec = self._index_events(events, qtext)  # one embedding batch for new events and the query
        if not over:
            return events, False
        n_recent = self.keep_recent
        candidates = events[: len(events) - n_recent]
        slots = self.top_k - n_recent
        tokens = self.analyzer.tokens(qtext)
        ts_of = {e.id: e.ts for e in candidates}
        hits = self._index.rank(tokens, qvec, [e.id for e in candidates])
        hits.sort(key=lambda h: (-h.score, -h.dense, -ts_of[h.key]))
        keep = {h.key for h in hits[:slots]}
        pruned = [e for e in candidates if e.id not in keep]
        try:
            self._sink(pruned)
        except Exception as exc:
            self.log.warning(
                "context: could not move %d pruned events to documents (%s: %s); keeping them in the window",
                len(pruned),
                type(exc).__name__,
                exc,
            )
            return events, False
        gone = {e.id for e in pruned}
        with self._lock:
            self._drop_locked(gone)
            kept = list(self._events)
        return kept, True

    def _sink(self, pruned: Sequence[ContextEvent]) -> None:
        drafts: list[DocDraft] = []
        media: list[tuple[str, list[str]]] = []  # (document id, digests) for events that carry media
        for e in pruned:
            if e.no_memory or self.cleaners.uses_no_memory_tool(e):
                continue
            content = e.stored_text()
            if not content.strip():
                continue
            doc_id = str(e.meta.get("doc_id") or f"ctx-{e.id}")
            digests = [str(d) for d in e.meta.get("media", []) or []]
            if digests:
                media.append((doc_id, digests))
            index_text = self.docs.index_text(content, str(e.meta.get("summary", ""))) if self.docs else ""
            vec = None
            if index_text and index_text == self._memtext.get(e.id) and self._index.vectors is not None:
                vec = self._index.vectors.get(e.id)
            drafts.append(
                DocDraft(
                    content=content,
                    summary=str(e.meta.get("summary", "")),
                    tags=[str(t) for t in e.meta.get("tags", [])] or [t for t in (e.kind, e.channel) if t],
                    ts=e.ts,
                    id=doc_id,
                    source=str(e.meta.get("doc_source") or f"context:{e.kind}"),
                    vector=vec,
                    index_text=index_text or None,
                    speaker=event_speaker(e),
                    session=str(e.meta.get("session", "")),
                )
            )
        if not drafts:
            return
        if self.docs is None:
            self.log.debug("context: no document store; %d pruned events dropped", len(drafts))
            return
        self.docs.insert_many(drafts)
        self._hand_on_media(media)

    def _hand_on_media(self, media: Sequence[tuple[str, list[str]]]) -> None:
        """Each new document references its event's media before the event (and its ``context`` reference)
        leaves the window, so the bytes outlive the pruning for as long as the document cites them."""
        if self._media is None:
            return
        for doc_id, digests in media:
            for digest in digests:  # one by one: an item whose bytes are gone must not cost the others theirs
                try:
                    self._media.add_refs("document", doc_id, [digest])
                except Exception as exc:
                    self.log.info("context: document %s cannot reference media %s: %s", doc_id, digest[:12], exc)

    def _embed(self, texts: list[str]) -> list[np.ndarray | None]:
        if self.embedder is None or not texts:
            return [None] * len(texts)
        try:
            mat = self.embedder.embed(texts)
        except Exception as exc:
            self.log.warning("context: embedding failed (%s: %s); ranking by keywords only", type(exc).__name__, exc)
            return [None] * len(texts)
        return [mat[i] for i in range(len(texts))]

    def _index_events(self, events: Sequence[ContextEvent], query: str = "") -> np.ndarray | None:
        """Embed and tokenise events not indexed yet, in one batch with ``query``; returns the query's vector."""
        todo = [e for e in events if e.id not in self._memtext]
        texts = [self.cleaners.memory_text_for(e) for e in todo]
        embed_idx = [i for i, t in enumerate(texts) if t]
        batch = [texts[i] for i in embed_idx] + ([query] if query else [])
        out = self._embed(batch) if batch else []
        qvec = out[-1] if query else None
        vecs: list[np.ndarray | None] = [None] * len(todo)
        for i, v in zip(embed_idx, out[: len(embed_idx)], strict=True):
            vecs[i] = v
        if not todo:
            return qvec
        items = [(e.id, self.analyzer.tokens(t), v if t else None) for e, t, v in zip(todo, texts, vecs, strict=True)]
        with self._lock:
            self._index.add_many(items)
            for e, t in zip(todo, texts, strict=True):
                self._memtext[e.id] = t
        return qvec

    # -- persistence -------------------------------------------------------------------
    def _mark_dirty(self) -> None:
        with self._lock:
            self._gen += 1
        if self.read_only:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a worker thread or the CLI): the caller awaits durable() or flushes
        if self._save_task is None or self._save_task.done():
            self._save_task = loop.create_task(self._background_sync())

    async def _background_sync(self) -> None:
        """fsync the journal for changes nobody awaits (``append``, prune); compact once it is past its threshold."""
        try:
            while self._journal.pending():
                await asyncio.to_thread(self._journal.sync)
            if self._journal.needs_compaction():
                await asyncio.to_thread(self.save_sync)
        except Exception as exc:
            self.log.error(
                "context: writing %s failed (%s: %s); will retry on the next change", self.path, type(exc).__name__, exc
            )

    async def flush(self) -> None:
        """Write a snapshot of everything appended so far (atomic) and empty the journal; returns when durable."""
        task = self._save_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._save_task = None
        await asyncio.to_thread(self.save_sync)
        await self.durable()

    async def close(self) -> None:
        """Flush and stop accepting events."""
        if self._closed:
            return
        await self.flush()
        self._closed = True
        await asyncio.to_thread(self._journal.close)

    def save_sync(self) -> None:
        """Compact: write the snapshot now if anything changed since the last one, then drop the journal lines it holds."""
        if self.read_only:
            return
        with self._io_lock:
            with self._lock:
                gen = self._gen
                if gen == self._saved_gen and self.path.exists():
                    return
                seq = self._journal.seq  # records are queued under this lock: the snapshot holds exactly 1..seq
                payload = {
                    "version": FILE_VERSION,
                    "saved_at": time.time(),
                    "journal_seq": seq,
                    "events": [e.to_dict() for e in self._events],
                }
            atomic_write(self.path, encode_json(payload))
            self._journal.drop_through(seq)
            self._saved_gen = gen

    def _load(self) -> None:
        bak = self.path.with_name(self.path.name + ".bak")
        tmp = self.path.with_name(self.path.name + ".tmp")
        if not self.read_only and tmp.exists():
            with contextlib.suppress(OSError):
                tmp.unlink()
        events: list[ContextEvent] | None = None
        snap_seq = 0
        problem = ""
        if self.path.exists():
            try:
                events, snap_seq = parse_context_snapshot(self.path.read_bytes())
            except (OSError, ValueError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
                if not self.read_only:
                    aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
                    os.replace(self.path, aside)
                    self.log.error("context: %s is unreadable (%s); moved it to %s", self.path, problem, aside.name)
        if events is None and bak.exists():
            try:
                events, snap_seq = parse_context_snapshot(bak.read_bytes())
                self.log.warning(
                    "context: restored %d events from %s%s",
                    len(events),
                    bak.name,
                    f" because {self.path.name} was unreadable" if problem else f" ({self.path.name} was missing)",
                )
                if not self.read_only:
                    atomic_write(self.path, bak.read_bytes(), keep_backup=False)
            except (OSError, ValueError) as exc:
                self.log.error("context: backup %s is unreadable too (%s); starting empty", bak, exc)
        if events is None:
            events = []
        events, replayed = self._journal.load_onto(events, snap_seq, ContextEvent.from_dict)
        if replayed:
            self._gen += 1  # the next save (at the latest at close) compacts the journal into the snapshot
        self._events = events
        self._ts_keys = [e.ts for e in events]


def parse_context_file(data: bytes) -> list[ContextEvent]:
    """Events of a context file; raises ValueError (with the reason) on anything malformed."""
    return parse_context_snapshot(data)[0]


def parse_context_snapshot(data: bytes) -> tuple[list[ContextEvent], int]:
    """Events of a context file and the last journal record it holds (0 for files written before the journal)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
        raise ValueError("not a context file (no 'events' list)")
    try:
        return [ContextEvent.from_dict(d) for d in doc["events"]], int(doc.get("journal_seq", 0) or 0)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed event ({type(exc).__name__}: {exc})") from None


def atomic_write(path: Path, data: bytes, *, keep_backup: bool = True) -> None:
    """Write ``data`` so that ``path`` is always either the old or the new complete file.

    tmp file + fsync, then the current file becomes ``.bak`` and the tmp file
    takes its name; the directory is fsynced so the renames survive a power cut.
    """
    tmp = path.with_name(path.name + ".tmp")
    bak = path.with_name(path.name + ".bak")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if keep_backup and path.exists():
        os.replace(path, bak)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class ContextMediaRefs(Protocol):
    """What the recorder needs from the media store: a turn's images are referenced by their context event."""

    async def aadd_refs(self, owner_kind: str, owner_id: str, refs: Sequence[str]) -> list[str]: ...


class ContextTurnMemory:
    """The agent's ``TurnMemory`` port (``agent/memory_port.py``) on top of L1.

    ``history`` prunes against the new input and returns the window as chat
    messages; ``record`` appends the turn's user and agent events (tool output
    of ``no_memory`` tools is marked so it is never embedded or archived) and
    returns once they are durable (one journal fsync for both).
    """

    def __init__(self, context: RelevanceContext, media: ContextMediaRefs | None = None) -> None:
        self.context = context
        self.media = media

    async def history(
        self, user_text: str, channel: str, *, group_id: str = "", speaker: str = ""
    ) -> list[dict[str, Any]]:
        await self.context.prune(user_text)
        return self.context.to_messages(group_id=group_id, person=None if group_id else (speaker or None))

    async def record(self, turn: TurnRecord) -> None:
        ts = turn.ts or time.time()
        common: dict[str, Any] = {"channel": turn.channel, "source": turn.source, "no_memory": turn.no_memory}
        speaker = turn.speaker
        # "person": whose private conversation the turn belongs to (to_messages); both events carry it
        # "input_id": which input the events answer, so a conversation's edit can take them back out
        meta = {key: value for key, value in (("user_id", turn.user_id), ("group_id", turn.group_id),
                                              ("person", speaker), ("input_id", turn.input_id)) if value}
        digests = list(turn.media_digests)
        if turn.user_text:
            said = {**meta, "speaker": speaker} if speaker else dict(meta)  # who said it, when it sinks into L2
            event = ContextEvent(kind="user", input=turn.user_text, ts=ts, meta=said, **common)
            if digests and self.media is not None:
                event.meta["media"] = digests
                await self._reference(event.id, digests)
            self.context.append(event)
        outputs = [{"tool": o.tool, "text": o.text, "no_memory": o.memory_text is None} for o in turn.tool_outputs]
        tool_digests = list(turn.tool_media_digests)
        if turn.reply or outputs or tool_digests:
            agent = ContextEvent(kind="agent", response=turn.reply, tool_outputs=outputs,
                                 ts=ts + 0.001, meta=dict(meta), **common)
            if tool_digests and self.media is not None:  # a tool's images live as long as the turn's input would
                agent.meta["media"] = tool_digests
                agent.meta["media_text"] = turn.tool_media_text
                await self._reference(agent.id, tool_digests)
            if self.media is not None:
                # a marker in a tool's output (a file sent to the web chat, a document recalled with its image)
                # is in the window now: its media stay while it does, one by one (a stale marker only logs)
                for short in dict.fromkeys(m.group(2) for o in turn.tool_outputs for m in MARKER.finditer(o.text)):
                    await self._reference(agent.id, [short])
            self.context.append(agent)
        await self.context.durable()  # on disk before the turn ends: the next turn never starts on unsaved memory

    async def _reference(self, event_id: str, digests: list[str]) -> None:
        """Before the event is in the window: GC never sees a marker in the context without its reference."""
        assert self.media is not None
        try:
            await self.media.aadd_refs("context", event_id, digests)
        except Exception as exc:  # the bytes may be gone already; the marker keeps the description
            self.context.log.warning("context: referencing media %s failed: %s", ", ".join(d[:12] for d in digests), exc)
