"""Built-in ``timer``: reminders that interrupt the agent when they are due.

``timer_set`` takes exactly one of a ``duration`` (``90s``, ``2m``, ``1h30m``
or a number of seconds), an ``at`` time (ISO 8601; without an offset it is
local time) or a ``cron`` expression (croniter syntax, repeating). When a
timer fires, ``timer: <message>`` is delivered through
``inject_interrupt_text`` with ``no_memory``: it cancels the LLM call in
flight and reaches the model before its next call, or starts a turn when the
agent is idle.

Timers live in SQLite in the plugin's data folder, so they survive a
restart. A timer that came due while the daemon was down fires once when the
plugin starts, marked late (a cron timer fires once for all the runs it
missed, then keeps its schedule). The row is updated before the interrupt is
sent: a crash at that exact moment loses one reminder rather than repeating
it forever.

One scheduler task sleeps until the earliest due time (at most 30 s at a time,
so a wall-clock jump is noticed) and is woken whenever the set of timers
changes. ``max_duration`` (24h) bounds one-off timers; ``max_timers`` bounds
how many may be active. ``min_interval`` (60s, owner-only) is the shortest
gap a repeating timer may have: a prompt-injected ``* * * * * *`` would
otherwise wake the agent (and spend LLM calls) every second, forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from homeagent.config.values import format_duration, parse_duration
from homeagent.sdk.api import PluginSDK
from homeagent.sdk.types import ConfigDef, InjectOptions, Origin, ToolDef

__all__ = ["Timer", "TimerPlugin", "TimerStore", "create_plugin"]

log = logging.getLogger("homeagent.plugin.timer")

LATE_AFTER = 2.0  # seconds past due before a firing is reported as late
MAX_SLEEP = 30.0
KEEP_DONE_DAYS = 30
MAX_MESSAGE_CHARS = 2000
CRON_SAMPLES = 200  # firings looked at to find a cron expression's shortest gap


def _err(message: str) -> dict[str, Any]:
    return {"isError": True, "content": message}


@dataclass
class Timer:
    id: int
    kind: str  # once | cron
    message: str
    spec: str  # what the user gave: the duration, the ISO time or the cron expression
    due: float  # epoch seconds of the next firing
    created: float
    state: str = "active"  # active | fired | cancelled
    fired_count: int = 0
    last_fired: float | None = None
    origin: Origin | None = None  # the chat it was set from: its reply goes there

    @property
    def label(self) -> str:
        return f"t{self.id}"


def _origin(stored: str | None) -> Origin | None:
    """A timer's stored origin (None for timers of older versions or an unreadable value)."""
    if not stored:
        return None
    try:
        data = json.loads(stored)
        return Origin(str(data["channel"]), str(data.get("user_id", "")), str(data.get("group_id", "")))
    except (ValueError, KeyError, TypeError):
        return None


class TimerStore:
    """The timers table; every method is blocking (call it from a worker thread)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=5)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS timers (id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
            "message TEXT NOT NULL, spec TEXT NOT NULL, due REAL NOT NULL, created REAL NOT NULL, "
            "state TEXT NOT NULL DEFAULT 'active', fired_count INTEGER NOT NULL DEFAULT 0, last_fired REAL)"
        )
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(timers)")}
        if "origin" not in columns:  # timers of older versions reply through core.agent.proactive_channels
            self._db.execute("ALTER TABLE timers ADD COLUMN origin TEXT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @staticmethod
    def _row(r: tuple[Any, ...]) -> Timer:
        return Timer(int(r[0]), r[1], r[2], r[3], float(r[4]), float(r[5]), r[6], int(r[7]), r[8], _origin(r[9]))

    _COLS = "id, kind, message, spec, due, created, state, fired_count, last_fired, origin"

    def active(self) -> list[Timer]:
        with self._lock:
            rows = self._db.execute(f"SELECT {self._COLS} FROM timers WHERE state = 'active' ORDER BY due").fetchall()
        return [self._row(r) for r in rows]

    def recent_done(self, limit: int = 20) -> list[Timer]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._COLS} FROM timers WHERE state != 'active' ORDER BY COALESCE(last_fired, created) DESC "
                "LIMIT ?", (limit,)
            ).fetchall()
        return [self._row(r) for r in rows]

    def get(self, timer_id: int) -> Timer | None:
        with self._lock:
            row = self._db.execute(f"SELECT {self._COLS} FROM timers WHERE id = ?", (timer_id,)).fetchone()
        return self._row(row) if row else None

    def add(self, kind: str, message: str, spec: str, due: float, origin: Origin | None = None) -> Timer:
        now = time.time()
        stored = json.dumps(dataclasses.asdict(origin)) if origin is not None else None
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO timers (kind, message, spec, due, created, origin) VALUES (?, ?, ?, ?, ?, ?)",
                (kind, message, spec, due, now, stored),
            )
        assert cur.lastrowid is not None
        return Timer(cur.lastrowid, kind, message, spec, due, now, origin=origin)

    def save(self, t: Timer) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE timers SET due = ?, state = ?, fired_count = ?, last_fired = ? WHERE id = ?",
                (t.due, t.state, t.fired_count, t.last_fired, t.id),
            )

    def prune(self, older_than: float) -> int:
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM timers WHERE state != 'active' AND COALESCE(last_fired, created) < ?", (older_than,)
            )
        return cur.rowcount


# ---------------------------------------------------------------- time parsing


def _zone(name: str) -> tzinfo | None:
    """The configured zone, or None for the machine's local time."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("timer: unknown timezone %r; using local time", name)
        return None


def next_cron(expr: str, after: float, zone: tzinfo | None) -> float:
    """Epoch seconds of the first run of ``expr`` strictly after ``after``."""
    base = datetime.fromtimestamp(after, zone) if zone is not None else datetime.fromtimestamp(after)
    nxt = croniter(expr, base).get_next(datetime)
    return float(nxt.timestamp())  # naive = local time; aware = its zone


def shortest_cron_gap(expr: str, after: float, zone: tzinfo | None, samples: int = CRON_SAMPLES) -> float:
    """The shortest time between two consecutive runs of ``expr`` among its next ``samples`` runs.

    Every field repeats its pattern, so a burst (every second on Mondays) shows
    up within the first runs of that burst; a few hundred runs are enough.
    """
    base = datetime.fromtimestamp(after, zone) if zone is not None else datetime.fromtimestamp(after)
    it = croniter(expr, base)
    last = float(it.get_next(datetime).timestamp())
    gap = float("inf")
    for _ in range(samples - 1):
        nxt = float(it.get_next(datetime).timestamp())
        gap = min(gap, nxt - last)
        last = nxt
    return gap


def parse_at(text: str, zone: tzinfo | None) -> float:
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"at {text!r} is not an ISO 8601 time (e.g. 2025-06-01T08:30 or 2025-06-01T08:30:00+02:00)") from None
    if when.tzinfo is None and zone is not None:
        when = when.replace(tzinfo=zone)
    return when.timestamp()


def _iso(ts: float, zone: tzinfo | None) -> str:
    return datetime.fromtimestamp(ts, zone).isoformat(timespec="seconds") if zone else (
        datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")
    )


def _human(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return format_duration(round(seconds))


# ---------------------------------------------------------------- the plugin


class TimerPlugin:
    def __init__(self, name: str) -> None:
        self.name = name
        self._sdk: PluginSDK | None = None
        self._store: TimerStore | None = None
        self._active: dict[int, Timer] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.fired: list[tuple[int, float, float]] = []  # (id, due, fired at): lateness for the benchmark

    # -- settings -------------------------------------------------------------

    def _get(self, key: str, default: Any) -> Any:
        assert self._sdk is not None
        value = self._sdk.settings.get(key, default)
        return default if value is None or value == "" else value

    def _max_duration(self) -> float:
        value = self._get("max_duration", "24h")
        try:
            return float(value) if isinstance(value, int | float) else parse_duration(str(value))
        except ValueError:
            return 86400.0

    def _zone(self) -> tzinfo | None:
        return _zone(str(self._get("timezone", "")))

    def _min_interval(self) -> float:
        value = self._get("min_interval", "60s")
        try:
            return float(value) if isinstance(value, int | float) else parse_duration(str(value))
        except ValueError:
            return 60.0

    # -- lifecycle ------------------------------------------------------------

    async def start(self, sdk: PluginSDK) -> None:
        self._sdk = sdk
        s = sdk.settings
        s.register_def(ConfigDef(key="max_duration", default="24h", type="duration", category="timer",
                                 display_name="Longest one-off timer",
                                 description="How far ahead a one-off timer (duration or at) may be set.", min=1))
        s.register_def(ConfigDef(key="max_timers", default=100, type="int", category="timer",
                                 display_name="Most active timers", description="How many timers may be active at once.",
                                 min=1))
        s.register_def(ConfigDef(key="timezone", default="", type="string", category="timer", display_name="Time zone",
                                 description="IANA zone for cron expressions and times without an offset "
                                             "(empty: the machine's local time).", placeholder="Europe/Berlin"))
        s.register_def(ConfigDef(key="min_interval", default="60s", type="duration", category="timer",
                                 display_name="Shortest repeat",
                                 description="Shortest gap between two runs of a repeating (cron) timer the agent "
                                             "sets; 0 = no limit.", min=0, owner_only=True))
        data_dir = s.data_dir()
        self._store = store = await asyncio.to_thread(TimerStore, data_dir / "timers.db")
        await asyncio.to_thread(store.prune, time.time() - KEEP_DONE_DAYS * 86400)
        self._active = {t.id: t for t in await asyncio.to_thread(store.active)}
        sdk.register_tool(
            ToolDef(
                name="timer_set",
                description="Set a reminder. Give exactly one of: duration (e.g. 90s, 5m, 1h30m), at (ISO 8601 time), "
                            "cron (repeating, e.g. '0 8 * * 1-5'). When due, 'timer: <message>' interrupts you.",
                parameters={
                    "type": "object",
                    "properties": {
                        "message": {"type": "string", "description": "what to remind about"},
                        "duration": {"type": ["string", "number"], "description": "from now: 5s, 2m, 1h30m, or seconds"},
                        "at": {"type": "string", "description": "ISO 8601 time; local time when no offset is given"},
                        "cron": {"type": "string", "description": "cron expression (5 fields, optional 6th = seconds)"},
                    },
                    "required": ["message"],
                    "additionalProperties": False,
                },
                serial=True,
                parallel_safe=False,
            ),
            self._set,
        )
        sdk.register_tool(
            ToolDef(
                name="timer_list",
                description="List active timers (id, message, when due); include_done adds recently fired/cancelled.",
                parameters={"type": "object", "properties": {"include_done": {"type": "boolean"}}},
                no_memory=True,
            ),
            self._list,
        )
        sdk.register_tool(
            ToolDef(
                name="timer_cancel",
                description="Cancel an active timer by id (as shown by timer_set / timer_list, e.g. t3).",
                parameters={"type": "object", "properties": {"id": {"type": ["string", "integer"]}}, "required": ["id"]},
                serial=True,
                parallel_safe=False,
            ),
            self._cancel,
        )
        self._task = asyncio.get_running_loop().create_task(self._scheduler(), name=f"{self.name}-scheduler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        store, self._store = self._store, None
        if store is not None:
            await asyncio.to_thread(store.close)
        self._active.clear()

    # -- scheduler ------------------------------------------------------------

    async def _scheduler(self) -> None:
        while True:
            now = time.time()
            for t in sorted((t for t in self._active.values() if t.due <= now), key=lambda t: t.due):
                try:
                    await self._fire(t)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("timer %s could not fire", t.label)
            nxt = min((t.due for t in self._active.values()), default=None)
            wait = MAX_SLEEP if nxt is None else min(max(nxt - time.time(), 0.0), MAX_SLEEP)
            self._wake.clear()
            if wait > 0:
                # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancel that races a set()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()

    async def _fire(self, t: Timer) -> None:
        assert self._sdk is not None and self._store is not None
        now = time.time()
        due = t.due
        late = now - due
        t.fired_count += 1
        t.last_fired = now
        if t.kind == "cron":
            try:
                t.due = next_cron(t.spec, now, self._zone())
            except Exception as e:  # the expression stopped being valid (e.g. the zone changed): stop it
                log.warning("timer %s: cron %r cannot be scheduled again (%s); stopping it", t.label, t.spec, e)
                t.state = "fired"
        else:
            t.state = "fired"
        if t.state != "active":
            self._active.pop(t.id, None)
        try:
            await asyncio.to_thread(self._store.save, t)
        except Exception:
            log.exception("timer %s: saving its state failed; it may fire again after a restart", t.label)
        text = f"timer: {t.message}"
        is_late = late > LATE_AFTER
        if is_late:
            text += f" [late: was due at {_iso(due, self._zone())}, {_human(late)} ago — the daemon was not running]"
        origin = t.origin
        self._sdk.inject_interrupt_text(
            "timer", "timer", text,
            options=InjectOptions(
                no_memory=True, priority=3, meta={"timer_id": t.label, "late": is_late},
                deliver_to=origin.channel if origin else "", user_id=origin.user_id if origin else "",
                group_id=origin.group_id if origin else "",
            ),
        )
        self.fired.append((t.id, due, now))
        del self.fired[:-1000]
        self._sdk.publish("timer", {"id": t.label, "message": t.message, "late": is_late, "lateness_s": late})
        log.info("timer %s fired%s", t.label, f" {_human(late)} late" if is_late else "")

    # -- tools ----------------------------------------------------------------

    def _describe(self, t: Timer, now: float) -> dict[str, Any]:
        zone = self._zone()
        out: dict[str, Any] = {"id": t.label, "kind": t.kind, "message": t.message, "spec": t.spec}
        if t.state == "active":
            out["due"] = _iso(t.due, zone)
            out["in"] = _human(t.due - now)
        else:
            out["state"] = t.state
            if t.last_fired:
                out["fired_at"] = _iso(t.last_fired, zone)
        if t.fired_count:
            out["fired_count"] = t.fired_count
        return out

    async def _set(self, args: dict[str, Any]) -> Any:
        assert self._store is not None
        message = str(args.get("message") or "").strip()
        if not message:
            return _err("message is empty: say what the reminder is for")
        if len(message) > MAX_MESSAGE_CHARS:
            return _err(f"message is longer than {MAX_MESSAGE_CHARS} characters")
        given = [k for k in ("duration", "at", "cron") if args.get(k) not in (None, "")]
        if len(given) != 1:
            return _err("give exactly one of duration (e.g. 10m), at (ISO 8601 time) or cron (e.g. '0 8 * * *')"
                        + (f"; got {', '.join(given)}" if given else ""))
        max_timers = int(self._get("max_timers", 100))
        if len(self._active) >= max_timers:
            return _err(f"there are already {len(self._active)} active timers (max_timers={max_timers}); cancel some")
        now = time.time()
        zone = self._zone()
        kind = "once"
        key = given[0]
        raw = args[key]
        if key == "duration":
            if isinstance(raw, bool):
                return _err("duration must be text like 5m or a number of seconds")
            spec = str(raw).strip()
            if isinstance(raw, int | float):
                seconds = float(raw)
            else:
                if croniter.is_valid(spec) and " " in spec:
                    return _err(f"duration {spec!r} looks like a cron expression; pass it as cron")
                try:
                    seconds = parse_duration(spec)
                except ValueError as e:
                    try:
                        parse_at(spec, zone)
                    except ValueError:
                        return _err(f"duration: {e}")
                    return _err(f"duration {spec!r} looks like a point in time; pass it as at")
            if seconds <= 0:
                return _err("duration must be more than 0")
            due = now + seconds
        elif key == "at":
            spec = str(raw).strip()
            try:
                due = parse_at(spec, zone)
            except ValueError as e:
                return _err(str(e))
            if due <= now:
                return _err(f"at {spec!r} is in the past (now is {_iso(now, zone)})")
        else:
            spec = " ".join(str(raw).split())
            if not croniter.is_valid(spec):
                return _err(f"cron {spec!r} is not a valid cron expression (e.g. '*/15 * * * *' or '0 8 * * 1-5')")
            kind = "cron"
            due = next_cron(spec, now, zone)
            floor = self._min_interval()
            if floor > 0:
                gap = await asyncio.to_thread(shortest_cron_gap, spec, now, zone)
                if gap < floor:
                    return _err(f"cron {spec!r} would run every {_human(gap)}; repeating timers may run at most "
                                f"once every {_human(floor)} (min_interval, which only the owner can change with "
                                "`homeagent config set plugin.timer.min_interval ...`)")
        if kind == "once":
            limit = self._max_duration()
            if due - now > limit + 0.5:
                return _err(f"that is {_human(due - now)} from now; one-off timers may be at most "
                            f"{_human(limit)} ahead (max_duration)")
        origin = self._sdk.current_origin() if self._sdk is not None else None
        t = await asyncio.to_thread(self._store.add, kind, message, spec, due, origin)
        self._active[t.id] = t
        self._wake.set()
        return {"status": "set", **self._describe(t, time.time())}

    async def _list(self, args: dict[str, Any]) -> Any:
        now = time.time()
        out: dict[str, Any] = {"timers": [self._describe(t, now) for t in sorted(self._active.values(),
                                                                                   key=lambda t: t.due)]}
        if args.get("include_done") and self._store is not None:
            out["done"] = [self._describe(t, now) for t in await asyncio.to_thread(self._store.recent_done)]
        return out

    async def _cancel(self, args: dict[str, Any]) -> Any:
        assert self._store is not None
        raw = str(args.get("id", "")).strip().lower().removeprefix("t")
        try:
            timer_id = int(raw)
        except ValueError:
            return _err(f"{args.get('id')!r} is not a timer id (ids look like t3)")
        t = self._active.pop(timer_id, None)
        if t is None:
            known = ", ".join(x.label for x in self._active.values()) or "none"
            return _err(f"no active timer t{timer_id} (active: {known})")
        t.state = "cancelled"
        await asyncio.to_thread(self._store.save, t)
        self._wake.set()
        return {"status": "cancelled", "id": t.label, "message": t.message}


def create_plugin(name: str, config: Mapping[str, Any]) -> TimerPlugin:
    return TimerPlugin(name)
