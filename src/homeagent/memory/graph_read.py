"""Reading the memory graph inside one SQLite transaction: keyword matching and the recall walk.

Why a module of its own: recall is the graph's hottest and most intricate
read (exact, alias and bigram-substring matches, then a bounded breadth-first
walk that respects the two clocks); these functions take a connection and
return rows or model objects, and ``GraphDB`` runs them on its reader threads.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from homeagent.memory.graph_model import RETRACTED, Entity, Recall, Relation, name_bigrams

T = TypeVar("T")

RELATION_COLS = (
    "id, subject_id, relation, object_id, confidence, sentence_id, scene, source, valid_from, valid_to, "
    "recorded_at, retired_at, retire_reason, mention_count"
)


def with_aliases(entity: Entity, aliases: tuple[str, ...]) -> Entity:
    if not aliases:
        return entity
    return Entity(
        entity.id, entity.name, entity.type, entity.mention_count, entity.created_at, entity.updated_at, aliases
    )


def chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def match_entities(conn: sqlite3.Connection, keywords: list[str], limit: int) -> list[int]:
    ranked: dict[int, tuple[int, int, int]] = {}  # id -> (tier, -mentions, length)

    def add(eid: int, tier: int, mentions: int, length: int) -> None:
        key = (tier, -mentions, length)
        if eid not in ranked or key < ranked[eid]:
            ranked[eid] = key

    for kw in keywords:
        for eid, mentions, length, tier in conn.execute(
            "SELECT id, mention_count, length(norm), 0 FROM entities WHERE norm = ?1 UNION ALL "
            "SELECT e.id, e.mention_count, length(e.norm), 1 FROM aliases a JOIN entities e ON e.id = a.entity_id "
            "WHERE a.alias_norm = ?1",
            (kw,),
        ):
            add(int(eid), int(tier), int(mentions), int(length))
        tokens = name_bigrams(kw)
        if not tokens:
            continue
        if len(tokens) > 4:
            # Every bigram of a long keyword is in a name that contains it: four spread-out ones
            # narrow the candidates as well as a phrase of all of them, at a fraction of the cost.
            step = (len(tokens) - 1) / 3
            tokens = list(dict.fromkeys(tokens[round(i * step)] for i in range(4)))
        phrase = " AND ".join(f'"{t}"' for t in tokens)
        for eid, mentions, length in conn.execute(
            "SELECT e.id, e.mention_count, length(e.norm) FROM "
            "(SELECT rowid FROM entity_fts WHERE entity_fts MATCH ? LIMIT 400) f "
            "JOIN entities e ON e.id = f.rowid WHERE instr(e.norm, ?) > 0",
            (phrase, kw),
        ):
            add(int(eid), 2, int(mentions), int(length))
    return [eid for eid, _ in sorted(ranked.items(), key=lambda kv: kv[1])[:limit]]

def relation_rows(conn: sqlite3.Connection, ids: list[int], include_history: bool, as_of: float | None
) -> list[tuple[Any, ...]]:
    """Rows of ``ids`` (in the given order) that ``_edges`` would also return under the same filter."""
    by_id: dict[int, tuple[Any, ...]] = {}
    for chunk in chunks(ids, 500):
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(f"SELECT {RELATION_COLS} FROM relations WHERE id IN ({marks})", chunk):
            retired_at, reason, valid_from, valid_to = row[11], row[12], row[8], row[9]
            if as_of is not None:
                if (valid_from is not None and valid_from > as_of) or (valid_to is not None and valid_to <= as_of):
                    continue
                if reason in RETRACTED:
                    continue
            elif not include_history and retired_at is not None:
                continue
            by_id[int(row[0])] = row
    return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]

def edges(conn: sqlite3.Connection, node: int, limit: int, include_history: bool, as_of: float | None
) -> list[tuple[Any, ...]]:
    cols = RELATION_COLS
    if not include_history and as_of is None:
        return conn.execute(
            f"SELECT * FROM (SELECT {cols} FROM relations WHERE subject_id = ?1 AND retired_at IS NULL "
            "ORDER BY recorded_at DESC LIMIT ?2) UNION ALL "
            f"SELECT * FROM (SELECT {cols} FROM relations WHERE object_id = ?1 AND retired_at IS NULL "
            "ORDER BY recorded_at DESC LIMIT ?2)",
            (node, limit),
        ).fetchall()
    where = ""
    params: tuple[Any, ...] = (node, limit)
    if as_of is not None:
        where = (
            " AND (valid_from IS NULL OR valid_from <= ?3) AND (valid_to IS NULL OR valid_to > ?3)"
            f" AND (retire_reason IS NULL OR retire_reason NOT IN {RETRACTED!r})"
        )
        params = (node, limit, as_of)
    return conn.execute(
        f"SELECT * FROM (SELECT {cols} FROM relations WHERE subject_id = ?1{where} "
        "ORDER BY recorded_at DESC LIMIT ?2) UNION ALL "
        f"SELECT * FROM (SELECT {cols} FROM relations WHERE object_id = ?1{where} "
        "ORDER BY recorded_at DESC LIMIT ?2)",
        params,
    ).fetchall()

def recall_in(conn: sqlite3.Connection,
    keywords: list[str],
    extra_ids: list[int],
    depth: int,
    include_history: bool,
    as_of: float | None,
    sort: str,
    max_seeds: int,
    fanout: int,
    max_relations: int,
    relation_ids: Sequence[int] = (),
) -> Recall:
    seeds = match_entities(conn, keywords, max_seeds)
    direct = relation_rows(conn, list(relation_ids), include_history, as_of)[:max_relations]
    for eid in [e for row in direct for e in (row[1], row[3])] + extra_ids:
        if len(seeds) >= max_seeds:
            break
        if eid not in seeds:
            seeds.append(int(eid))
    if not seeds:
        return Recall()
    entity_rows = entities_by_id(conn, seeds)
    seeds = [s for s in seeds if s in entity_rows]  # vector seeds may name merged/deleted entities
    seen: dict[int, int] = {s: 0 for s in seeds}
    rels: dict[int, tuple[tuple[Any, ...], int]] = {}
    rank: dict[int, int] = {}
    for row in direct:
        rank[row[0]] = len(rank)
        rels[row[0]] = (row, 0)
        for eid in (row[1], row[3]):
            if eid not in seen:  # an endpoint past max_seeds: shown with its fact, not walked from
                seen[eid] = 1
    frontier = list(seeds)
    for hop in range(1, depth + 1):
        nxt: list[int] = []
        for node in frontier:
            if len(rels) >= max_relations:
                break
            for row in edges(conn, node, fanout, include_history, as_of):
                if row[0] in rels:
                    continue
                if len(rels) >= max_relations:
                    break
                rels[row[0]] = (row, hop)
                other = row[3] if row[1] == node else row[1]
                if other not in seen:
                    seen[other] = hop
                    nxt.append(other)
        frontier = nxt
        if not frontier:
            break
    entity_rows.update(entities_by_id(conn, [e for e in seen if e not in entity_rows]))
    sentence_ids = {row[5] for row, _ in rels.values() if row[5] is not None}
    sentences = sentences_by_id(conn, sentence_ids)
    relations: list[Relation] = []
    for row, hop in rels.values():
        s, o = entity_rows.get(row[1]), entity_rows.get(row[3])
        if s is None or o is None:
            continue
        relations.append(
            Relation(
                row[0], s.name, row[2], o.name, row[1], row[3], row[4],
                sentences.get(row[5]) if row[5] is not None else None,
                row[6], row[7], row[8], row[9], row[10], row[11], row[12], row[13], hop,
            )
        )  # fmt: skip
    # Relations that matched the query themselves (hop 0) lead in their match order, whatever the sort.
    if sort == "recent":
        relations.sort(key=lambda r: (rank.get(r.id, len(rank)), -r.recorded_at))
    else:
        relations.sort(
            key=lambda r: (
                rank.get(r.id, len(rank)), r.hop, not r.current, -r.mention_count, -r.confidence, -r.recorded_at
            )
        )  # fmt: skip
    aliases = aliases_of(conn, seeds)
    seed_entities = [with_aliases(entity_rows[s], aliases.get(s, ())) for s in seeds]
    others = sorted(
        (entity_rows[e] for e in seen if e in entity_rows and e not in seeds),
        key=lambda e: (seen[e.id], -e.mention_count),
    )
    return Recall(seeds=seed_entities, entities=seed_entities + others, relations=relations)

def entities_by_id(conn: sqlite3.Connection, ids: Iterable[int]) -> dict[int, Entity]:
    out: dict[int, Entity] = {}
    for chunk in chunks(list(ids), 500):
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(
            f"SELECT id, name, type, mention_count, created_at, updated_at FROM entities WHERE id IN ({marks})",
            chunk,
        ):
            out[int(row[0])] = Entity(int(row[0]), row[1], row[2], int(row[3]), row[4], row[5])
    return out

def sentences_by_id(conn: sqlite3.Connection, ids: Iterable[int]) -> dict[int, str]:
    out: dict[int, str] = {}
    for chunk in chunks(list(ids), 500):
        marks = ",".join("?" * len(chunk))
        for sid, text in conn.execute(f"SELECT id, text FROM sentences WHERE id IN ({marks})", chunk):
            out[int(sid)] = text
    return out

def aliases_of(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, tuple[str, ...]]:
    out: dict[int, list[str]] = {}
    for chunk in chunks(list(ids), 500):
        marks = ",".join("?" * len(chunk))
        for eid, alias in conn.execute(
            f"SELECT entity_id, alias FROM aliases WHERE entity_id IN ({marks}) ORDER BY alias", chunk
        ):
            out.setdefault(int(eid), []).append(alias)
    return {k: tuple(v) for k, v in out.items()}
