"""Importing conversation history (JSONL) into L2 documents.

One line per turn: ``{"role", "content", "timestamp"?, "speaker"?, "session"?, "id"?}``.
Each turn becomes a document with its original timestamp, its speaker
(``speaker``, else ``role``) and its session (``session``; without one, the
document store assigns one by time gap), so retrieval can score a turn with
its neighbours. Re-importing the same file changes nothing: a turn's
document id is its ``id`` or, without one, a hash of role, content and
timestamp. A line that is not UTF-8, not JSON, nested absurdly deep, or
misses a field is reported with its number and skipped; every other line is
imported, and a failing batch is retried line by line so one bad record
never costs its neighbours. Lone UTF-16 surrogates (valid JSON, not valid
text) are replaced with U+FFFD.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from homeagent.memory.documents import DocDraft, DocumentStore, content_id
from homeagent.text import scrub_text

ProgressFn = Callable[[int, int, int], None]
"""``progress(bytes_done, bytes_total, records_done)``."""

log = logging.getLogger(__name__)

MAX_FIELD_CHARS = 200
"""Longest speaker, session or id accepted (they are labels, not text)."""


@dataclass
class ImportReport:
    lines: int = 0
    imported: int = 0
    duplicates: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "imported": self.imported,
            "duplicates": self.duplicates,
            "errors": [{"line": n, "error": msg} for n, msg in self.errors],
            "seconds": round(self.seconds, 3),
        }


def parse_timestamp(value: Any) -> float:
    """Epoch seconds (or milliseconds) as a number or numeric string, or an ISO 8601 date-time."""
    if isinstance(value, bool):
        raise ValueError("timestamp must be a number or an ISO 8601 string")
    if isinstance(value, int | float):
        try:
            ts = float(value)
        except OverflowError:
            raise ValueError("timestamp is out of range") from None
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        if len(text) > 64:
            raise ValueError("timestamp is out of range (more than 64 characters)")
        try:
            ts = float(text)
        except ValueError:
            try:
                dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"timestamp {value!r} is neither a number nor ISO 8601") from None
            ts = dt.timestamp() if dt.tzinfo else dt.astimezone().timestamp()
    else:
        raise ValueError("timestamp must be a number or an ISO 8601 string")
    if ts > 1e11:  # milliseconds
        ts /= 1000.0
    if not (0 < ts < 4e9):  # also NaN and infinities
        raise ValueError(f"timestamp {value!r} is out of range")
    return ts


def iter_records(path: Path) -> Iterator[tuple[int, int, dict[str, Any] | None, str]]:
    """``(line_number, bytes_read, record | None, error)`` for every non-blank line."""
    done = 0
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            done += len(raw)
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield lineno, done, None, f"invalid UTF-8 at byte {exc.start} of the line"
                continue
            if lineno == 1 and text.startswith("\ufeff"):
                text = text[1:]
            try:
                rec = json.loads(text)
            except json.JSONDecodeError as exc:
                yield lineno, done, None, f"not valid JSON ({exc.msg} at column {exc.colno})"
                continue
            except RecursionError:
                yield lineno, done, None, "JSON nested too deeply"
                continue
            except ValueError as exc:  # e.g. an integer longer than Python converts
                yield lineno, done, None, f"not valid JSON ({exc})"
                continue
            if not isinstance(rec, dict):
                yield lineno, done, None, "not a JSON object"
                continue
            yield lineno, done, rec, ""


def _label(rec: dict[str, Any], name: str) -> str:
    """An optional short label field (speaker, session, id) as text; raises ValueError if it is not one."""
    value = rec.get(name)
    if value is None or value == "":
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"'{name}' must be a string or an integer")
    text = scrub_text(str(value)).strip()
    if len(text) > MAX_FIELD_CHARS:
        raise ValueError(f"'{name}' is longer than {MAX_FIELD_CHARS} characters")
    return text


def record_to_draft(rec: dict[str, Any], now: float) -> DocDraft:
    """Validate one record; raises ValueError naming what is wrong."""
    role = rec.get("role")
    content = rec.get("content")
    if role is None and rec.get("speaker") not in (None, ""):
        role = "user"  # a chat export names its speakers, not roles: each speaker is a person talking
    if not isinstance(role, str) or not role.strip():
        raise ValueError("missing 'role' (or 'speaker')")
    if not isinstance(content, str):
        raise ValueError("missing 'content' (must be a string)")
    if not content.strip():
        raise ValueError("empty 'content'")
    role = scrub_text(role).strip()
    content = scrub_text(content)
    ts = parse_timestamp(rec["timestamp"]) if rec.get("timestamp") not in (None, "") else now
    speaker = _label(rec, "speaker")
    session = _label(rec, "session")
    raw_id = _label(rec, "id")
    doc_id = raw_id or "imp-" + content_id(role, content, repr(rec.get("timestamp")))
    tags = [role] + ([speaker] if speaker and speaker != role else [])
    return DocDraft(
        content=content, tags=tags, ts=ts, id=doc_id, source=f"import:{role}", speaker=speaker or role, session=session
    )


def import_jsonl(
    path: Path, docs: DocumentStore, *, batch: int = 256, progress: ProgressFn | None = None
) -> ImportReport:
    """Import ``path`` into ``docs``; synchronous (run it in a thread from async code)."""
    report = ImportReport()
    t0 = time.perf_counter()
    total = path.stat().st_size
    pending: list[tuple[int, DocDraft]] = []
    now = time.time()
    records = 0

    def count(results: list[tuple[str, bool]]) -> None:
        for _, inserted in results:
            if inserted:
                report.imported += 1
            else:
                report.duplicates += 1

    def flush() -> None:
        nonlocal pending
        if not pending:
            return
        batch, pending = pending, []
        try:
            count(docs.insert_many([d for _, d in batch]))
            return
        except Exception as exc:  # one bad record must not cost the batch: retry one by one
            log.warning("import: a batch of %d failed (%s: %s); retrying line by line", len(batch), type(exc).__name__, exc)
        for lineno, draft in batch:
            try:
                count(docs.insert_many([draft]))
            except Exception as exc:
                report.errors.append((lineno, f"could not be stored ({type(exc).__name__}: {exc})"))

    done = 0
    for lineno, done, rec, error in iter_records(path):
        report.lines = lineno
        if rec is None:
            report.errors.append((lineno, error))
            continue
        try:
            pending.append((lineno, record_to_draft(rec, now)))
        except (ValueError, KeyError) as exc:
            report.errors.append((lineno, str(exc)))
            continue
        records += 1
        if len(pending) >= batch:
            flush()
            if progress:
                progress(done, total, records)
    flush()
    if progress:
        progress(total, total, records)
    report.seconds = time.perf_counter() - t0
    return report
