"""What the memory graph stores and how names are read: facts, entities, relations, recall results.

Why a module of its own: the distiller, the memory tools, the indexer, the
social view and plugins speak in these types and name rules without needing
the store (``memory/graph.py``) or its SQL (``memory/graph_schema.py``).
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

MAX_NAME_CHARS = 200
MAX_RELATION_CHARS = 64
MAX_SENTENCE_CHARS = 8_000
MAX_TRIPLES_PER_COMMIT = 5_000

SINGLE_VALUED: frozenset[str] = frozenset(
    {
        "name",
        "age",
        "lives_in",
        "works_as",
        "works_at",
        "birthday",
        "gender",
        "nationality",
        "spouse",
        "marital_status",
    }
)
"""Relations a subject has at most one current object for; a new object retires the old one."""

RELATION_ALIASES: dict[str, str] = {
    "is_named": "name",
    "named": "name",
    "name_is": "name",
    "叫": "name",
    "名叫": "name",
    "名字": "name",
    "名字是": "name",
    "live_in": "lives_in",
    "lives_at": "lives_in",
    "living_in": "lives_in",
    "住在": "lives_in",
    "居住": "lives_in",
    "居住在": "lives_in",
    "年龄": "age",
    "岁数": "age",
    "job": "works_as",
    "occupation": "works_as",
    "profession": "works_as",
    "work_as": "works_as",
    "职业": "works_as",
    "工作是": "works_as",
    "work_at": "works_at",
    "employer": "works_at",
    "工作于": "works_at",
    "like": "likes",
    "喜欢": "likes",
    "生日": "birthday",
}
"""Spellings of the same relation folded onto one name, so contradiction detection sees them as one."""

OBJECT_TYPES: dict[str, str] = {
    "name": "Name",
    "age": "Quantity",
    "lives_in": "Location",
    "works_as": "Occupation",
    "works_at": "Organization",
    "birthday": "Date",
}
"""Types given to a new object entity by the relation that introduced it (subject becomes ``Person``)."""

RETIRE_SUPERSEDED = "superseded"  # the world changed: validity ended
RETIRE_EDITED = "edited"  # the record was wrong: retracted
RETIRE_PURGED = "purged"  # removed on request (soft purge): retracted
RETIRE_MERGED = "merged"  # duplicate left behind by an entity merge
RETRACTED = (RETIRE_EDITED, RETIRE_PURGED, RETIRE_MERGED)


class GraphError(ValueError):
    """Bad input or an impossible request; the message says which and nothing was changed."""


class GraphBusy(GraphError):
    """Another process held the database for too long; nothing was written."""


# --------------------------------------------------------------------------- names
_WS = re.compile(r"\s+")


def clean_name(name: Any, what: str = "entity name") -> str:
    """The display form of a name: NFKC, whitespace collapsed; rejects empty and over-long names."""
    if not isinstance(name, str):
        raise GraphError(f"{what} must be a string, got {type(name).__name__}")
    text = _WS.sub(" ", unicodedata.normalize("NFKC", name).replace("\x00", "")).strip()
    if not text:
        raise GraphError(f"{what} is empty")
    if len(text) > MAX_NAME_CHARS:
        raise GraphError(f"{what} is {len(text)} characters long; the limit is {MAX_NAME_CHARS}: {text[:40]!r}…")
    return text


def norm_name(name: str) -> str:
    """The lookup key of a name: its display form, case-folded."""
    return clean_name(name).casefold()


def norm_relation(relation: Any) -> str:
    """Relation names are snake_case-ish and folded through ``RELATION_ALIASES``."""
    if not isinstance(relation, str):
        raise GraphError(f"relation must be a string, got {type(relation).__name__}")
    text = _WS.sub("_", unicodedata.normalize("NFKC", relation).strip().casefold()).strip("_")
    if not text:
        raise GraphError("relation is empty")
    if len(text) > MAX_RELATION_CHARS:
        raise GraphError(f"relation is {len(text)} characters long; the limit is {MAX_RELATION_CHARS}")
    return RELATION_ALIASES.get(text, text)


def name_bigrams(norm: str) -> list[str]:
    """Character bigrams of a normalised name, hex-encoded so the FTS tokenizer keeps them whole."""
    return [norm[i : i + 2].encode("utf-8").hex() for i in range(len(norm) - 1)]


def bigram_jaccard(a: str, b: str) -> float:
    """Similarity of two names by their character-bigram sets (the merge heuristic, > 0.75)."""
    na, nb = a.casefold(), b.casefold()
    sa = {na[i : i + 2] for i in range(len(na) - 1)} or {na}
    sb = {nb[i : i + 2] for i in range(len(nb) - 1)} or {nb}
    return len(sa & sb) / len(sa | sb)


# --------------------------------------------------------------------------- data
@dataclass
class Triple:
    """A fact to commit. ``single`` overrides whether the relation is single-valued."""

    subject: str
    relation: str
    object: str
    sentence: str | None = None
    confidence: float = 1.0
    valid_from: float | None = None
    scene: str | None = None
    source: str = ""
    subject_type: str = ""
    object_type: str = ""
    single: bool | None = None
    media: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "") -> Triple:
        """The tool / SDK shape: ``subject, relation, object, sentence_text, scene, media_digests``."""
        if not isinstance(data, Mapping):
            raise GraphError(f"a triple must be an object with subject, relation and object, got {data!r:.80}")
        missing = [k for k in ("subject", "relation", "object") if data.get(k) in (None, "")]
        if missing:
            raise GraphError(f"triple {dict(data)!r:.120} lacks {', '.join(missing)}")
        subject, relation, obj = (
            str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
            for v in (data["subject"], data["relation"], data["object"])
        )
        sentence = data.get("sentence_text", data.get("sentence"))
        media = data.get("media_digests") or ()
        conf = data.get("confidence", 1.0)
        return cls(
            subject=subject,
            relation=relation,
            object=obj,
            sentence=sentence if isinstance(sentence, str) and sentence.strip() else None,
            confidence=float(conf) if isinstance(conf, int | float) else 1.0,
            scene=data.get("scene") or None,
            source=str(data.get("source") or source),
            media=tuple(str(m) for m in media) if isinstance(media, list | tuple) else (),
        )


class Entity(NamedTuple):
    """An entity (a named tuple: recall builds thousands of these per second)."""

    id: int
    name: str
    type: str
    mention_count: int
    created_at: float
    updated_at: float
    aliases: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "mention_count": self.mention_count}
        if self.aliases:
            out["aliases"] = list(self.aliases)
        return out


class Relation(NamedTuple):
    """A fact; ``hop`` is its BFS distance from the seeds in a recall."""

    id: int
    subject: str
    relation: str
    object: str
    subject_id: int
    object_id: int
    confidence: float
    sentence: str | None
    scene: str | None
    source: str
    valid_from: float | None
    valid_to: float | None
    recorded_at: float
    retired_at: float | None
    retire_reason: str | None
    mention_count: int
    hop: int = 0

    @property
    def current(self) -> bool:
        return self.retired_at is None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "subject": self.subject,
            "relation": self.relation,
            "object": self.object,
            "confidence": round(self.confidence, 3),
        }
        if self.sentence:
            out["sentence"] = self.sentence
        if self.scene:
            out["scene"] = self.scene
        if self.valid_from is not None:
            out["valid_from"] = iso(self.valid_from)
        if not self.current:
            out["current"] = False
            if self.valid_to is not None:
                out["valid_to"] = iso(self.valid_to)
            out["retired_at"] = iso(self.retired_at)
            out["retire_reason"] = self.retire_reason
        return out

    def line(self) -> str:
        return f"{self.subject} --{self.relation}--> {self.object}"


@dataclass
class Recall:
    seeds: list[Entity] = field(default_factory=list)
    entities: list[Entity] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seeds": [e.name for e in self.seeds],
            "entities": [e.to_dict() for e in self.entities],
            "relations": [r.to_dict() for r in self.relations],
        }


@dataclass
class CommitReport:
    added: int = 0
    reinforced: int = 0
    superseded: list[str] = field(default_factory=list)
    historical: int = 0
    entities_created: int = 0
    relation_ids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "reinforced": self.reinforced,
            "superseded": self.superseded,
            "historical": self.historical,
            "entities_created": self.entities_created,
        }


class RawRecord(NamedTuple):
    """A kept raw message (the rule distiller's input)."""

    id: int
    role: str
    speaker: str
    content: str
    ts: float


@dataclass
class RawBatch:
    """What one :meth:`GraphDB.distill_raw_records` step did."""

    records: int = 0
    triples: list[Triple] = field(default_factory=list)
    commit: CommitReport = field(default_factory=CommitReport)
    expired: int = 0


def sentence_hash(text: str) -> str:
    """The key of a stored sentence (``sentences.hash``); media references to a sentence use it as owner id."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


# --------------------------------------------------------------------------- keywords
_KW_SPLIT = re.compile(r"[,，、;；\n]+")


def split_keywords(text: str) -> list[str]:
    """``memory_recall``'s ``query_intent``: comma-separated keywords (spaces stay inside a keyword)."""
    return [k.strip() for k in _KW_SPLIT.split(text or "") if k.strip()]
