"""The rule distiller: a few personal facts pulled out of what the user says, without an LLM.

Five kinds of statement are recognised, in Chinese and English: the user's
name (我叫X / my name is X), where they live (我住在X / I live in X), what
they like (我喜欢X / I like X), their age (我X岁 / I am N years old) and their
work (我的工作是X / I work as X; also 我在X工作 → works_at). Rules are cheap
and predictable but easily fooled, so every match passes guards before it
becomes a fact:

* questions (``？``, a final 吗/呢, "Do I …", "… ?") are skipped;
* a negation in the same clause (不, 没, not, n't, never …) cancels the match,
  but one in an earlier clause does not ("我不叫小明，我叫小亮");
* a hypothetical, future or reported frame anywhere earlier in the sentence
  (如果, 假如, 等我, 他说：, if, imagine, pretend, said, feel like …) cancels it;
* a match inside quotation marks is someone else's speech;
* the captured object must look like one (no pronouns, question words,
  deictics such as 这里, no 30-character clauses; English names and places
  are capitalised unless the whole message is lower-case).

Only the user's own words are distilled (an assistant saying 我叫小宅 is not
a fact about the user). ``bench/distill_labelled.jsonl`` holds 200 labelled
sentences, including the tricky negatives above; ``bench/bench_graph.py``
reports precision and recall on it.

``RuleDistiller`` keeps raw records in the graph database (``raw_records``),
distils the pending ones every tick (10 min) inside the same transaction that
commits their triples and marks them done, so a crash never applies half a
batch or distils a record twice, and deletes raw records older than 7 days.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_model import GraphError, RawRecord, Triple, clean_name

log = logging.getLogger("homeagent.memory.distill")

SELF = "user"
RETENTION_S = 7 * 24 * 3600.0
TICK_S = 600.0
BATCH = 500

# --------------------------------------------------------------------------- sentence shape
_SENT_END = re.compile(r"(?<=[。！？!?；;\n…])|(?<=\.)(?=\s|$)")
_CLAUSE = re.compile(r"[，,：:]")
_CJK = re.compile(r"[\u3400-\u9fff]")

_ZH_QUESTION_TAIL = re.compile(r"(吗|呢|么|没有|不是|对吧|是吧|来着)[\s。！!~～…]*$")
_ZH_QUESTION_ANY = re.compile(r"是不是|有没有|对不对|你还记得|还记得吗|你知道")
_EN_QUESTION_HEAD = re.compile(
    r"^\s*(?:do|does|did|am|is|are|was|were|can|could|would|will|should|shall|what|where|who|whom|when|why|how|which)\b",
    re.I,
)

_ZH_NEG = re.compile(r"不|没|未|别|并非|非")
_ZH_NEG_OK = re.compile(r"不过|不错|不久|要不然|不少|不管")
_EN_NEG = re.compile(r"\b(?:not|never|no longer|nobody|no one|nor)\b|n't\b|\bnot that\b", re.I)

_ZH_FRAME = re.compile(
    r"如果|假如|要是|假设|假若|万一|若是|倘若|等我|想象|假装|梦见|梦到|希望|但愿|要不是|"
    r"小说|电影里|故事里|角色|(?:说|道|问|写道|声称|表示)\s*[：:“\"「]|(?:说|以为|觉得|认为|听说|猜)我"
)
_EN_FRAME = re.compile(
    r"\b(?:if|suppose|supposing|imagine|pretend|pretending|as if|feel like|feels like|felt like|wish|wished|"
    r"said|says|say|told|tell|tells|claim|claims|claimed|think|thought|believe|dream|dreamt|dreamed|maybe|"
    r"perhaps|whether|unless|when|let's|lets|someday|would|could|might)\b",
    re.I,
)
_QUOTES = (("“", "”"), ("「", "」"), ("『", "』"), ("‘", "’"))

_ZH_QWORDS = re.compile(r"什么|啥|哪|谁|几|多少|怎么|咋")
_ZH_PRONOUN_START = re.compile(r"^(?:你|您|他|她|它|我|咱|们|这|那|哪|自己|大家|人家)")
_ZH_PARTICLE_TAIL = re.compile(r"(?:了|啦|呢|吧|啊|呀|哦|嘛|哈|呐|哟|喔|的说|而已)+$")
_ZH_ADV = r"(?:现在|目前|一直|也|还|就|都|已经|其实|刚|刚刚|真的|本人)?"
_ZH_DEGREE = r"(?:最|很|也|特别|超|真的|非常|挺|还|就|更|蛮|超级|好|巨|十分|尤其|一直|都)*"

_ZH_NUM = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}

# --------------------------------------------------------------------------- patterns
# Chinese objects stop at punctuation, whitespace or a following clause marker.
_ZH_OBJ = r"(?P<x>[^，,。！？!?；;：:\s“”\"「」()（）]{1,30})"
_ZH_NAME_BAD_START = re.compile(r"^(?:了|过|着|你|您|他|她|它|们|车|醒|起|来|去|人|外卖|饭|什|啥|谁|不|是|做|声|喊|我)")

ZH_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("name", re.compile(rf"我{_ZH_ADV}(?:叫做|名叫|叫){_ZH_OBJ}")),
    ("name", re.compile(rf"我的名字(?:是|叫){_ZH_OBJ}")),
    ("name", re.compile(rf"(?:^|可以|就|请|都|大家)(?:叫我|喊我|称呼我){_ZH_OBJ}")),
    ("lives_in", re.compile(rf"我{_ZH_ADV}(?:住在|家在|居住在|搬到了|搬到|搬去了|搬去){_ZH_OBJ}")),
    ("likes_of", re.compile(rf"我{_ZH_DEGREE}(?:喜欢|喜爱)的[^，,。！？!?是]{{1,6}}是{_ZH_OBJ}")),
    ("likes", re.compile(rf"我{_ZH_ADV}{_ZH_DEGREE}(?:喜欢|喜爱){_ZH_OBJ}")),
    (
        "age",
        re.compile(
            r"我(?:今年|现在|已经|都|才|刚|刚满|满)*(?P<x>\d{1,3}|[零〇一二两三四五六七八九十百]{1,4})(?:周)?岁(?!的时候|那年|那会|时|以前|之前|以后|之后|生日)"
        ),
    ),
    ("works_as", re.compile(rf"我的(?:工作|职业)是{_ZH_OBJ}")),
    ("works_as", re.compile(rf"我{_ZH_ADV}是一(?:名|位|个){_ZH_OBJ}")),
    ("works_at", re.compile(rf"我{_ZH_ADV}在(?P<x>[^，,。！？!?；;\s在]{{2,12}}?)(?:工作|上班)")),
]

# Clauses that continue a first-person clause without repeating 我 ("我叫刘洋，住在杭州").
_ZH_CONTINUATION = re.compile(
    r"^(?:现在|目前|今年|也|还)?(?:住在|家在|喜欢|今年|是一名|是一位|的工作是|的职业是|\d{1,3}岁|[一二两三四五六七八九十]{1,4}岁)"
)

_ACTIVITY_VERB = re.compile(r"^(?:吃|喝|看|听|玩|打|踢|弹|读)(?=[\u3400-\u9fff]{2,})")
_ZH_LIST = re.compile(r"和|、|与|跟|以及|还有|或者|及")
_ZH_CUT = re.compile(r"(?:就|的时候|以后|之后|已经|离|附近|那边|这边|三年|好多年|很多年|\d+年)")
_ZH_PLACE_BAD = re.compile(r"^(?:这|那|哪|家里|家|附近|隔壁|楼上|楼下|一起|外面|里面|对面)")
_ZH_WORKPLACE_BAD = re.compile(r"^(?:家|家里|这里|那里|这儿|那儿|哪|公司|外地|国外|单位|学校里)$")

_EN_NAME = r"(?P<x>[A-Za-z][\w'’-]*(?:\s+[A-Z][\w'’-]*){0,3})"
_EN_PLACE = r"(?P<x>[A-Za-z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|of|de|la|del|upon|on|am))*)"
_EN_ADV = r"(?:(?:really|also|just|truly|absolutely|totally|do|quite|kinda|actually|still|now|currently|definitely|genuinely|especially|honestly)\s+)*"
_EN_THING = r"(?P<x>[^,.;!?\"“”]{1,60})"

EN_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("name", re.compile(rf"\bmy name(?:'s|’s|\s+is)\s+{_EN_NAME}", re.I)),
    ("name", re.compile(rf"\bcall me\s+{_EN_NAME}", re.I)),
    ("name", re.compile(rf"\bI(?:'m|’m|\s+am)\s+called\s+{_EN_NAME}", re.I)),
    ("lives_in", re.compile(rf"\bI\s+{_EN_ADV}live\s+in\s+{_EN_PLACE}", re.I)),
    ("lives_in", re.compile(rf"\bI(?:'m|’m|\s+am)\s+{_EN_ADV}living\s+in\s+{_EN_PLACE}", re.I)),
    ("lives_in", re.compile(rf"\bI\s+(?:(?:just|recently|have|'ve)\s+)*moved\s+to\s+{_EN_PLACE}", re.I)),
    ("likes", re.compile(rf"\bI\s+{_EN_ADV}(?:like|love|enjoy|adore)\s+{_EN_THING}", re.I)),
    ("age", re.compile(r"\bI(?:'m|’m|\s+am)\s+(?:now\s+)?(?P<x>\d{1,3})\s+(?:years?\s+old|years\s+of\s+age)\b", re.I)),
    ("works_as", re.compile(rf"\bI\s+{_EN_ADV}work\s+as\s+an?\s+{_EN_THING}", re.I)),
]

_EN_THING_CUT = re.compile(
    r"\s+(?:when|because|but|so|if|since|although|though|a lot|so much|very much|too|especially|at|in|for|"
    r"with|from|on|every|now|these days|nowadays|anymore|and still|right now)\b.*$",
    re.I,
)
_EN_PLACE_CUT = re.compile(r"\s+(?:now|since|for|with|and|but|last|this|next|because|when|these|nowadays)\b.*$", re.I)
_EN_BAD_OBJECT = re.compile(
    r"^(?:it|you|him|her|them|that|this|those|these|me|us|myself|where|what|how|when|who|which|the way|"
    r"not|no|nothing|anything|something|everything|fear|the moment|hell|peace|sin|denial)\b",
    re.I,
)
_EN_NAME_STOP = re.compile(r"^(?:and|but|i|im|from|by|not|the|a|an|on|in|at|is|was|spelled|pronounced|too)$", re.I)
_EN_LIST = re.compile(r"\s*(?:,|\band\b|\bor\b|&)\s*", re.I)


# --------------------------------------------------------------------------- helpers
def zh_number(text: str) -> int | None:
    """Arabic or Chinese numerals (二十二 → 22, 三十 → 30, 十八 → 18, 一百 → 100)."""
    if text.isdigit():
        return int(text)
    if not text or any(ch not in _ZH_NUM and ch not in "十百" for ch in text):
        return None
    total, current = 0, 0
    for ch in text:
        if ch == "百":
            total += (current or 1) * 100
            current = 0
        elif ch == "十":
            total += (current or 1) * 10
            current = 0
        else:
            current = current * 10 + _ZH_NUM[ch] if current else _ZH_NUM[ch]
    return total + current


def _inside_quotes(text: str, pos: int) -> bool:
    before = text[:pos]
    for open_q, close_q in _QUOTES:
        if before.count(open_q) > before.count(close_q):
            return True
    return before.count('"') % 2 == 1


def split_sentences(text: str) -> list[str]:
    parts = [p.strip() for p in _SENT_END.split(text) if p and p.strip()]
    return parts


def _is_question(sentence: str) -> bool:
    s = sentence.strip()
    if s.endswith(("?", "？")):
        return True
    if _CJK.search(s):
        return bool(_ZH_QUESTION_TAIL.search(s) or _ZH_QUESTION_ANY.search(s))
    return bool(_EN_QUESTION_HEAD.match(s))


def _clause_start(sentence: str, pos: int) -> int:
    starts = [m.end() for m in _CLAUSE.finditer(sentence, 0, pos)]
    return starts[-1] if starts else 0


@dataclass
class Candidate:
    relation: str
    object: str
    sentence: str


# --------------------------------------------------------------------------- Chinese
def _zh_clean_object(relation: str, raw: str) -> list[str]:
    x = raw.strip()
    cut = _ZH_CUT.search(x)
    if cut and cut.start() > 0:
        x = x[: cut.start()]
    x = _ZH_PARTICLE_TAIL.sub("", x).strip()
    if not x or _ZH_QWORDS.search(x):
        return []
    if relation == "name":
        if _ZH_NAME_BAD_START.match(x):
            return []
        if _CJK.match(x) and len(x) > 4:
            return []
        return [x]
    if relation == "lives_in":
        if _ZH_PLACE_BAD.match(x) or len(x) > 15:
            return []
        return [x]
    if relation == "age":
        n = zh_number(x)
        return [str(n)] if n is not None and 1 <= n <= 130 else []
    if relation in ("works_as", "works_at"):
        if _ZH_PRONOUN_START.match(x) or x.endswith("的") or x[0] in "不没":
            return []
        if relation == "works_at" and _ZH_WORKPLACE_BAD.match(x):
            return []
        return [x] if len(x) <= 15 else []
    # likes
    if x[0] in "的不没" or _ZH_PRONOUN_START.match(x) or x.startswith(("上了", "上")):
        return []
    out = []
    for item in _ZH_LIST.split(x):
        item = _ACTIVITY_VERB.sub("", item.strip())
        if item and not _ZH_PRONOUN_START.match(item) and len(item) <= 15:
            out.append(item)
    return out


def _zh_candidates(sentence: str) -> list[Candidate]:
    out: list[Candidate] = []
    pos = 0
    prev_self = False
    for clause in _CLAUSE.split(sentence):
        start = pos + len(clause) - len(clause.lstrip())
        pos += len(clause) + 1
        text = clause.strip()
        virtual = not text.startswith("我") and prev_self and bool(_ZH_CONTINUATION.match(text))
        if virtual:
            text = "我" + text
        for relation, pattern in ZH_PATTERNS:
            for m in pattern.finditer(text):
                at = start + max(0, m.start() - int(virtual))
                clause_prefix = text[: m.start()]
                if _ZH_NEG.search(_ZH_NEG_OK.sub("", clause_prefix)):
                    continue
                if _ZH_FRAME.search(sentence[:start] + text[: m.start() + 1]) or _inside_quotes(sentence, at):
                    continue
                rel = "likes" if relation == "likes_of" else relation
                out.extend(Candidate(rel, obj, sentence) for obj in _zh_clean_object(rel, m.group("x")))
        prev_self = text.startswith("我")
    return out


# --------------------------------------------------------------------------- English
def _en_clean_object(relation: str, raw: str, lowercase_message: bool) -> list[str]:
    x = raw.strip().rstrip(".!,;:")
    if relation == "age":
        return [x] if x.isdigit() and 1 <= int(x) <= 130 else []
    if relation == "name":
        words = x.split()
        kept: list[str] = []
        for i, w in enumerate(words):
            if _EN_NAME_STOP.match(w):
                break
            if not w[0].isupper() and not (lowercase_message and i == 0):
                if i == 0:
                    return []
                break
            kept.append(w)
            if lowercase_message:
                break
        return [" ".join(kept)] if kept else []
    if relation == "lives_in":
        x = _EN_PLACE_CUT.sub("", x).strip()
        if not x or _EN_BAD_OBJECT.match(x):
            return []
        if not x[0].isupper():
            if not lowercase_message:
                return []
            x = " ".join(x.split()[:3])
        return [x]
    x = _EN_THING_CUT.sub("", x).strip()
    if relation == "likes":
        if x.lower().startswith("to "):
            x = x[3:]
        if not x or _EN_BAD_OBJECT.match(x):
            return []
        items = [i.strip() for i in _EN_LIST.split(x) if i and i.strip()]
        return [i for i in items if 0 < len(i.split()) <= 4]
    # works_as
    if not x or _EN_BAD_OBJECT.match(x) or len(x.split()) > 4:
        return []
    return [x]


def _en_candidates(sentence: str, lowercase_message: bool) -> list[Candidate]:
    out: list[Candidate] = []
    for relation, pattern in EN_PATTERNS:
        for m in pattern.finditer(sentence):
            clause_prefix = sentence[_clause_start(sentence, m.start()) : m.start()]
            if _EN_NEG.search(clause_prefix):
                continue
            if _EN_FRAME.search(sentence[: m.start()]):
                continue
            if _inside_quotes(sentence, m.start()):
                continue
            for obj in _en_clean_object(relation, m.group("x"), lowercase_message):
                out.append(Candidate(relation, obj, sentence))
    return out


def extract(text: str, *, subject: str = SELF) -> list[Triple]:
    """Facts the user states about themselves in ``text`` (each with its source sentence)."""
    if not text or not text.strip():
        return []
    text = text[:4000]
    lowercase_message = not any(ch.isupper() for ch in text)
    triples: list[Triple] = []
    seen: set[tuple[str, str]] = set()
    for sentence in split_sentences(text):
        if _is_question(sentence):
            continue
        candidates = _zh_candidates(sentence) if _CJK.search(sentence) else []
        candidates += _en_candidates(sentence, lowercase_message)
        for c in candidates:
            key = (c.relation, c.object.casefold())
            if key in seen:
                continue
            seen.add(key)
            triples.append(Triple(subject, c.relation, c.object, sentence=c.sentence, source="rules", confidence=0.8))
    return triples


# --------------------------------------------------------------------------- the loop job
@dataclass
class DistillReport:
    records: int = 0
    triples: int = 0
    added: int = 0
    superseded: list[str] = field(default_factory=list)
    expired: int = 0
    facts: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "triples": self.triples,
            "added": self.added,
            "superseded": self.superseded,
            "expired": self.expired,
            "facts": self.facts,
        }


class RuleDistiller:
    """Raw user messages in, rule-extracted facts out; one transaction per batch."""

    def __init__(
        self,
        graph: GraphDB,
        *,
        retention_s: float = RETENTION_S,
        batch: int = BATCH,
        subject_of: Callable[[str], str] = lambda speaker: SELF,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.graph = graph
        self.retention_s = retention_s
        self.batch = batch
        self.subject_of = subject_of
        self.clock = clock

    async def record(self, text: str, *, role: str = "user", session: str = "", speaker: str = "") -> None:
        """Keep a raw message for the next tick (empty text and non-user roles are kept but never distilled)."""
        if text and text.strip():
            await self.graph.add_raw_record(text[:20_000], role=role, session=session, speaker=speaker, ts=self.clock())

    async def run_once(self) -> DistillReport:
        report = DistillReport()
        while True:
            now = self.clock()
            part = await self.graph.distill_raw_records(
                self._triples, batch=self.batch, expire_before=now - self.retention_s, source="rules", now=now
            )
            report.records += part.records
            report.triples += len(part.triples)
            report.added += part.commit.added
            report.superseded += part.commit.superseded
            report.expired += part.expired
            report.facts += [f"{t.subject} --{t.relation}--> {t.object}" for t in part.triples]
            if part.records < self.batch:
                break
        if report.records or report.expired:
            log.info(
                "rule distiller: %d records, %d facts (%d new, %d superseded), %d expired records removed%s",
                report.records,
                report.triples,
                report.added,
                len(report.superseded),
                report.expired,
                (": " + "; ".join(report.facts[:10])) if report.facts else "",
            )
        return report

    def _triples(self, records: Sequence[RawRecord]) -> list[Triple]:
        """The facts the rules find in the users' records (runs inside the graph's transaction: pure, quick)."""
        triples: list[Triple] = []
        for record in records:
            if record.role != "user":
                continue
            subject = self.subject_of(record.speaker)
            for t in extract(record.content, subject=subject):
                t.valid_from = record.ts
                if subject != SELF:
                    t.subject_type = "Person"  # a named speaker (memory/identity.py) is a person of the social layer
                try:
                    clean_name(t.subject)
                    clean_name(t.object)
                except GraphError:
                    continue  # e.g. an over-long capture: skip the fact, never the batch
                triples.append(t)
        return triples
