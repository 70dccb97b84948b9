"""People on top of the memory graph: persons, their traits and how they relate.

A person is an entity of type ``Person``. A trait is a single-valued relation
from the person to a value ("张三 --性格--> 外向": setting it again replaces the
old value, which stays in the history). A relation between two people is
stored in both directions when its converse is known: symmetric relations
(friend, colleague, 朋友 …) as the same relation, known pairs (parent_of /
child_of …) as their converse; any other relation is stored once and read
from both ends, so nothing false is ever written for the other person.

External plugins get ``SocialView``: the same queries, no writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_model import Entity, GraphError, Relation, Triple, clean_name, norm_relation

PERSON = "Person"

SYMMETRIC: frozenset[str] = frozenset(
    {
        "friend",
        "friend_of",
        "friends_with",
        "spouse",
        "married_to",
        "partner",
        "sibling",
        "sibling_of",
        "colleague",
        "colleague_of",
        "classmate",
        "neighbor",
        "neighbour",
        "knows",
        "cousin",
        "朋友",
        "好友",
        "同事",
        "同学",
        "邻居",
        "兄弟",
        "姐妹",
        "兄弟姐妹",
        "配偶",
        "夫妻",
        "恋人",
        "认识",
        "亲戚",
        "表亲",
    }
)
CONVERSE: dict[str, str] = {
    "parent_of": "child_of",
    "child_of": "parent_of",
    "manager_of": "reports_to",
    "reports_to": "manager_of",
    "boss_of": "reports_to",
    "teacher_of": "student_of",
    "student_of": "teacher_of",
    "mentor_of": "mentee_of",
    "mentee_of": "mentor_of",
    "父母": "子女",
    "子女": "父母",
    "上司": "下属",
    "下属": "上司",
    "老师": "学生",
    "学生": "老师",
}


@dataclass
class PersonLink:
    relation: str
    person: str
    direction: str  # "out": this person --relation--> other; "in": other --relation--> this person

    def to_dict(self) -> dict[str, Any]:
        return {"relation": self.relation, "person": self.person, "direction": self.direction}


@dataclass
class Person:
    name: str
    aliases: list[str] = field(default_factory=list)
    traits: dict[str, str] = field(default_factory=dict)
    relations: list[PersonLink] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    mention_count: int = 0
    is_person: bool = True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "traits": self.traits,
            "relations": [r.to_dict() for r in self.relations],
            "mention_count": self.mention_count,
        }
        if self.aliases:
            out["aliases"] = self.aliases
        if self.facts:
            out["facts"] = self.facts
        if not self.is_person:
            out["note"] = "this entity is not marked as a person"
        return out


class SocialView:
    """Read-only social queries (what external plugins get)."""

    def __init__(self, graph: GraphDB) -> None:
        self._graph = graph

    async def _person_entity(self, name: str) -> Entity:
        entity = await self._graph.entity(name)
        if entity is None:
            raise GraphError(f"no person named {clean_name(name)[:80]!r}")
        return entity

    async def query(self, name: str) -> Person:
        entity = await self._person_entity(name)
        result = await self._graph.recall([], 1, entity_ids=[entity.id], max_seeds=1, fanout=200, max_relations=400)
        types = {e.id: e.type for e in result.entities}
        person = Person(
            entity.name, list(entity.aliases), mention_count=entity.mention_count, is_person=entity.type == PERSON
        )
        seen_links: set[tuple[str, str]] = set()
        # Outgoing edges first, so an incoming edge that is only the stored converse of one is skipped.
        for r in sorted(result.relations, key=lambda r: r.subject_id != entity.id):
            out = r.subject_id == entity.id
            other = r.object_id if out else r.subject_id
            if types.get(other) == PERSON:
                other_name = r.object if out else r.subject
                relation = r.relation if out else CONVERSE.get(r.relation, r.relation)
                if not out and (relation, other_name) in seen_links:
                    continue
                seen_links.add((relation, other_name))
                person.relations.append(PersonLink(r.relation, other_name, "out" if out else "in"))
            elif out and r.relation not in person.traits:
                person.traits[r.relation] = r.object
            else:
                person.facts.append(r.line())
        return person

    async def network(self, name: str, depth: int = 2) -> dict[str, Any]:
        """People reachable from ``name`` through person-to-person relations, up to ``depth`` hops."""
        entity = await self._person_entity(name)
        depth = max(1, min(int(depth), 4))
        seen: dict[int, tuple[str, int]] = {entity.id: (entity.name, 0)}
        edges: dict[int, Relation] = {}
        frontier = [entity.id]
        for hop in range(1, depth + 1):
            if not frontier:
                break
            result = await self._graph.recall(
                [], 1, entity_ids=frontier, max_seeds=len(frontier), fanout=100, max_relations=2000
            )
            types = {e.id: e.type for e in result.entities}
            nxt: list[int] = []
            for r in result.relations:
                if types.get(r.subject_id) != PERSON and r.subject_id != entity.id:
                    continue
                if types.get(r.object_id) != PERSON and r.object_id != entity.id:
                    continue
                edges[r.id] = r
                for eid, ename in ((r.subject_id, r.subject), (r.object_id, r.object)):
                    if eid not in seen:
                        seen[eid] = (ename, hop)
                        nxt.append(eid)
            frontier = nxt[:200]
        pairs: set[tuple[str, str, str]] = set()
        links = []
        for r in sorted(edges.values(), key=lambda r: (r.subject, r.relation, r.object)):
            key = (r.subject, r.relation, r.object)
            reverse = (r.object, r.relation, r.subject)
            if reverse in pairs and r.relation in SYMMETRIC:
                continue
            pairs.add(key)
            links.append({"from": r.subject, "relation": r.relation, "to": r.object})
        people = [{"name": n, "hops": h} for _, (n, h) in sorted(seen.items(), key=lambda kv: kv[1][1])]
        return {"center": entity.name, "people": people, "relations": links}


    # -- the SDK's SocialReadAPI ---------------------------------------------------------------

    async def get_person(self, name: str) -> dict[str, Any]:
        return (await self.query(name)).to_dict()

    async def get_network(self, name: str, depth: int = 1) -> dict[str, Any]:
        return await self.network(name, depth)

    async def get_trait(self, person: str, trait: str) -> dict[str, Any]:
        found = await self.query(person)
        name = norm_relation(trait)
        return {"person": found.name, "trait": name, "value": found.traits.get(name)}

    async def get_relations(self, person: str) -> list[dict[str, Any]]:
        return [link.to_dict() for link in (await self.query(person)).relations]

    async def list_persons(self) -> list[dict[str, Any]]:
        return [
            {"name": e.name, "mention_count": e.mention_count}
            for e in await self._graph.entities_of_type(PERSON)
        ]


class Social(SocialView):
    """Social queries plus the writes the agent's person_* tools make."""

    async def set_trait(self, name: str, trait: str, value: str) -> dict[str, Any]:
        trait_name = norm_relation(trait)
        report = await self._graph.commit(
            [Triple(name, trait_name, str(value), subject_type=PERSON, single=True, source="social")]
        )
        out: dict[str, Any] = {"person": clean_name(name), "trait": trait_name, "value": clean_name(str(value))}
        if report.superseded:
            out["replaced"] = report.superseded
        return out

    async def relate(self, person_a: str, relation: str, person_b: str) -> dict[str, Any]:
        a, b = clean_name(person_a, "person_a"), clean_name(person_b, "person_b")
        rel = norm_relation(relation)
        if a.casefold() == b.casefold():
            raise GraphError("a person cannot be related to themselves")
        triples = [Triple(a, rel, b, subject_type=PERSON, object_type=PERSON, single=False, source="social")]
        converse = rel if rel in SYMMETRIC else CONVERSE.get(rel)
        if converse:
            triples.append(
                Triple(b, converse, a, subject_type=PERSON, object_type=PERSON, single=False, source="social")
            )
        await self._graph.commit(triples)
        out: dict[str, Any] = {"stored": [f"{t.subject} --{t.relation}--> {t.object}" for t in triples]}
        if not converse:
            out["note"] = f"no known converse of {rel!r}: stored once, visible from both people"
        return out

    def read_only(self) -> SocialView:
        return SocialView(self._graph)
