"""Retrieval over a conversation: a turn is scored with its neighbours, its session and its speaker.

In dialogue the answer is rarely the turn that shares the question's words:
"Who is your dentist?" is answered by the *next* turn ("Dr. Okafor, since
May"), and "What did Caroline do in May 2023?" names a date that is nowhere
in the turn's text, only in its session's. Measured on LoCoMo (docs/memory.md
has the ablation), indexing turns alone scored 0.65 any@10 with BM25 and
0.62 with the fused dense score; this module reaches 0.88.

What it adds on top of the plain hybrid index (``retrieval.py``):

* **Windows.** Each turn is indexed lexically as its own text (twice, so it
  outweighs its context), its speaker and date, plus the turns around it in
  its session (``BEFORE`` turns before, ``AFTER`` after). A turn that answers
  a question thus carries the question's words.
* **Sessions.** A session's lexical score (all its turns and its date) is
  added to each of its turns, so the conversation that is about the topic
  wins over one stray mention.
* **Speakers.** A query that names a speaker ("What did Melanie paint?")
  prefers that speaker's turns.
* **Dense smoothing.** A turn's cosine is smoothed with its direct
  neighbours', for the same reason as the windows.

Documents without a session (notes saved with ``doc_commit``, imported
records without structure) are single-turn conversations: their own text,
date and speaker, no neighbours.

Not thread-safe on its own: the document store calls it under its lock.
Updates are cheap and lazy (the windows a change touches are re-indexed on
the next search), so a bulk import does not re-index a window per turn.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from homeagent.memory.lexical import Analyzer, LexicalIndex, pick, top_keys
from homeagent.memory.retrieval import (
    DENSE_WEIGHT,
    Hit,
    VectorIndex,
    normalise_dense,
    normalise_lexical,
    relevance,
)

BEFORE = 3
"""Turns before a turn that are indexed with it (dev split: 3 > 2 > 1; the question usually precedes)."""

AFTER = 2
"""Turns after a turn that are indexed with it."""

SELF_WEIGHT = 2
"""How many times a turn's own words count in its window."""

SESSION_WEIGHT = 0.3
"""Weight of the normalised session score."""

SPEAKER_BOOST = 0.8
"""Added to turns by a speaker the query names (when it does not name every speaker)."""

NEIGHBOUR_DENSE = 0.5
"""Share of each direct neighbour's cosine added to a turn's."""

DEPTH = 200
"""Candidates taken from each half before fusing."""


@dataclass(slots=True)
class Turn:
    """Where one document stands in its conversation."""

    key: str
    session: str
    ts: float
    seq: int
    speaker: str


def date_text(ts: float) -> str:
    """The words a date is searched by ("8 May 2023 Monday"), in local time like every shown date."""
    try:
        return datetime.fromtimestamp(ts).strftime("%-d %B %Y %A")
    except (OverflowError, OSError, ValueError):
        return ""


class ConversationIndex:
    """Windows, sessions and speakers over the keys of a ``HybridIndex``.

    ``own`` is the hybrid index's lexical half (each document's own words);
    windows are composed from it, so no token list is kept twice.
    """

    def __init__(self, analyzer: Analyzer, own: LexicalIndex, vectors: VectorIndex | None) -> None:
        self.analyzer = analyzer
        self.own = own
        self.vectors = vectors
        self.windows = LexicalIndex()
        self.session_index = LexicalIndex()
        self._turns: dict[str, Turn] = {}
        self._order: dict[str, list[tuple[float, int, str]]] = {}  # session -> (ts, seq, key), sorted
        self._speaker_turns: Counter[str] = Counter()
        self._speaker_words: dict[str, set[str]] = {}  # name token -> speakers
        self._dirty_windows: set[str] = set()
        self._dirty_sessions: set[str] = set()
        self._adjacent: dict[str, tuple[str | None, str | None]] = {}  # key -> (previous, next) in its session
        self._word_cache: dict[str, list[str]] = {}

    def __len__(self) -> int:
        return len(self._turns)

    def __contains__(self, key: object) -> bool:
        return key in self._turns

    # -- structure -----------------------------------------------------------------
    def add(self, key: str, *, session: str, ts: float, seq: int, speaker: str) -> None:
        """Place a document (already in ``own``) in its conversation; re-indexing happens lazily."""
        if key in self._turns:
            self.remove(key)
        turn = Turn(key, session or f"doc:{key}", ts, seq, speaker)
        self._turns[key] = turn
        order = self._order.setdefault(turn.session, [])
        pos = bisect.bisect(order, (ts, seq, key))
        order.insert(pos, (ts, seq, key))
        self._touch(turn.session, pos)
        if speaker:
            self._speaker_turns[speaker] += 1
            for word in self._words(speaker):
                self._speaker_words.setdefault(word, set()).add(speaker)

    def remove(self, key: str) -> None:
        turn = self._turns.pop(key, None)
        if turn is None:
            return
        order = self._order.get(turn.session, [])
        pos = bisect.bisect_left(order, (turn.ts, turn.seq, key))
        if pos < len(order) and order[pos][2] == key:
            del order[pos]
        if order:
            self._touch(turn.session, pos)
        else:
            self._order.pop(turn.session, None)
            self.session_index.remove(turn.session)
            self._dirty_sessions.discard(turn.session)
        self._adjacent.pop(key, None)
        self.windows.remove(key)
        self._dirty_windows.discard(key)
        if turn.speaker:
            self._speaker_turns[turn.speaker] -= 1
            if self._speaker_turns[turn.speaker] <= 0:
                del self._speaker_turns[turn.speaker]
                for word in self._words(turn.speaker):
                    names = self._speaker_words.get(word)
                    if names is not None:
                        names.discard(turn.speaker)
                        if not names:
                            del self._speaker_words[word]

    def reindex(self, key: str) -> None:
        """``key``'s own words changed (re-tokenised): its windows and session are rebuilt on the next search."""
        turn = self._turns.get(key)
        if turn is not None:
            order = self._order.get(turn.session, [])
            self._touch(turn.session, bisect.bisect_left(order, (turn.ts, turn.seq, key)))

    def neighbours(self, key: str, before: int = 1, after: int = 1) -> tuple[list[str], list[str]]:
        """Keys of the turns just before and after ``key`` in its session, in time order."""
        turn = self._turns.get(key)
        if turn is None:
            return [], []
        order = self._order.get(turn.session, [])
        pos = bisect.bisect_left(order, (turn.ts, turn.seq, key))
        return [k for _, _, k in order[max(0, pos - before) : pos]], [k for _, _, k in order[pos + 1 : pos + 1 + after]]

    def turn(self, key: str) -> Turn | None:
        return self._turns.get(key)

    def _touch(self, session: str, pos: int) -> None:
        """Mark the windows that contain position ``pos`` of ``session`` (and the session) for re-indexing."""
        order = self._order.get(session, [])
        for i in range(max(0, pos - AFTER), min(len(order), pos + BEFORE + 1)):
            self._dirty_windows.add(order[i][2])
        self._dirty_sessions.add(session)

    def _words(self, text: str) -> list[str]:
        words = self._word_cache.get(text)
        if words is None:
            if len(self._word_cache) > 4096:
                self._word_cache.clear()
            words = self._word_cache[text] = self.analyzer.tokens(text)
        return words

    # -- indexing ------------------------------------------------------------------
    def _own_tokens(self, key: str) -> list[str]:
        out: list[str] = []
        for term, tf in self.own.term_counts(key):
            out.extend([term] * int(tf))
        return out

    def _window_tokens(self, turn: Turn, own_of: dict[str, list[str]]) -> list[str]:
        def own(key: str) -> list[str]:
            tokens = own_of.get(key)
            if tokens is None:
                tokens = own_of[key] = self._own_tokens(key)
            return tokens

        tokens = (own(turn.key) + self._words(turn.speaker) + self._words(date_text(turn.ts))) * SELF_WEIGHT
        before, after = self.neighbours(turn.key, BEFORE, AFTER)
        for other in (*before, *after):
            tokens.extend(own(other))
        return tokens

    def refresh(self) -> None:
        """Re-index what changed since the last search (at load: everything, in the loading thread)."""
        if self._dirty_windows:
            own_of: dict[str, list[str]] = {}
            items = [
                (key, self._window_tokens(self._turns[key], own_of)) for key in self._dirty_windows if key in self._turns
            ]
            self._dirty_windows = set()
            self.windows.add_many(items)
        if self._dirty_sessions:
            for session in self._dirty_sessions:
                order = self._order.get(session)
                if not order:
                    continue
                keys = [key for _, _, key in order]
                for i, key in enumerate(keys):
                    self._adjacent[key] = (keys[i - 1] if i else None, keys[i + 1] if i + 1 < len(keys) else None)
                # a copy: _words hands out its cached list, and extending that grew every later window of the
                # day by the whole session (turns slowed quadratically and RSS grew with the conversation)
                tokens: list[str] = list(self._words(date_text(order[0][0])))
                for _, _, key in order:
                    tokens.extend(self._own_tokens(key))
                self.session_index.add(session, tokens)
            self._dirty_sessions = set()

    # -- search --------------------------------------------------------------------
    def search(self, tokens: Sequence[str], qvec: np.ndarray | None, k: int, *, min_score: float | None = None) -> list[Hit]:
        """The ``k`` best turns for a query, best first; ``min_score`` floors their ``relevance``."""
        self.refresh()
        if not self._turns or k <= 0:
            return []
        dense_on = self.vectors is not None and qvec is not None and bool(np.any(qvec)) and len(self.vectors) > 0
        win_scores, win_keys = self.windows.scores(tokens) if tokens else (np.zeros(0, dtype=np.float32), [])
        lexical = top_keys(win_scores, win_keys, DEPTH) if tokens else []
        full = self.vectors.all_scores(qvec) if dense_on else None  # type: ignore[union-attr,arg-type]
        if full is not None:
            sims_all, row_of = full
            take = min(DEPTH, sims_all.size)
            top = np.argpartition(-sims_all, take - 1)[:take] if take < sims_all.size else np.arange(sims_all.size)
            dense_keys = [self.vectors.key_at(int(r)) for r in top]  # type: ignore[union-attr]
        else:
            dense_keys = [key for key, _ in self.vectors.search(qvec, DEPTH)] if dense_on else []  # type: ignore[union-attr,arg-type]
        keys = [key for key in dict.fromkeys([key for key, _ in lexical] + dense_keys) if key in self._turns]
        if not keys:
            return []
        lex = pick(win_scores, self.windows.rows(keys)) if tokens else np.zeros(len(keys), dtype=np.float32)
        score = normalise_lexical(lex)
        cos = np.zeros(len(keys), dtype=np.float32)
        if dense_on:
            assert self.vectors is not None and qvec is not None
            adjacent = [self._adjacent.get(key, (None, None)) for key in keys]
            ring = list(dict.fromkeys([*keys, *(k for pair in adjacent for k in pair if k is not None)]))
            if full is not None:
                rows = np.fromiter((row_of.get(k, -1) for k in ring), dtype=np.int64, count=len(ring))
                sims = np.where(rows >= 0, sims_all[np.maximum(rows, 0)], 0.0)
            else:
                sims, _ = self.vectors.score_array(qvec, ring)
            sim_of = dict(zip(ring, sims.tolist(), strict=True))
            cos = np.asarray([sim_of[key] for key in keys], dtype=np.float32)
            smooth = cos + NEIGHBOUR_DENSE * np.asarray(
                [(sim_of[p] if p else 0.0) + (sim_of[n] if n else 0.0) for p, n in adjacent], dtype=np.float32
            )
            score = score + DENSE_WEIGHT * normalise_dense(smooth)
        if tokens:
            score = score + SESSION_WEIGHT * self._session_scores(tokens, keys)
            score = score + self._speaker_boost(tokens, keys)
        bound = self.windows.query_bound(tokens) if tokens else 0.0
        rel = relevance(lex / bound if bound > 0 else lex, cos)
        order = np.lexsort((-cos, -score))
        hits = [Hit(keys[i], float(score[i]), float(cos[i]), float(lex[i]), float(rel[i])) for i in order.tolist()]
        if min_score is not None:
            hits = [h for h in hits if h.relevance >= min_score]
        return hits[:k]

    def _session_scores(self, tokens: Sequence[str], keys: Sequence[str]) -> np.ndarray:
        scores, _ = self.session_index.scores(tokens)
        if scores.size == 0:
            return np.zeros(len(keys), dtype=np.float32)
        rows = self.session_index.rows([self._turns[key].session for key in keys])
        return pick(normalise_lexical(scores), rows)

    def _speaker_boost(self, tokens: Sequence[str], keys: Sequence[str]) -> np.ndarray:
        named: set[str] = set()
        for token in tokens:
            named |= self._speaker_words.get(token, set())
        if not named or len(named) >= len(self._speaker_turns):
            return np.zeros(len(keys), dtype=np.float32)
        return np.asarray([SPEAKER_BOOST if self._turns[key].speaker in named else 0.0 for key in keys], dtype=np.float32)
