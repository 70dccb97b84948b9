"""The campaign's result rows and the table they print as (the issue's figures, one line per surface)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Row:
    """One surface's outcome: `ok` is whether it met its target; `figures` are the counts that show it."""

    surface: str
    figures: dict[str, str | int | float] = field(default_factory=dict)
    ok: bool = True
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def fail(self, note: str) -> None:
        self.ok = False
        self.notes.append(note)


def _fmt(value: str | int | float) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return value


def table(rows: list[Row], size: str) -> str:
    """A Markdown table (it goes into docs/RELIABILITY.md as printed) and the notes of every row after it."""
    lines = [f"campaign size: {size}", "", "| surface | result | figures | time |", "|---|---|---|---|"]
    for row in rows:
        figures = "; ".join(f"{k} {_fmt(v)}" for k, v in row.figures.items())
        lines.append(f"| {row.surface} | {'ok' if row.ok else 'FAIL'} | {figures} | {row.seconds:.0f} s |")
    notes = [(row.surface, note) for row in rows for note in row.notes]
    if notes:
        lines.append("")
        lines += [f"- {surface}: {note}" for surface, note in notes]
    return "\n".join(lines)
