"""Turning what a user typed (or a plugin passed) into a value of a setting's type.

Every setting has a type from its ``ConfigDef``; the CLI and the web UI hand us
strings, plugins hand us Python values. One coercion routine serves both, so
``homeagent config set core.agent.max_tool_turns 20`` and
``settings.set("max_tool_turns", 20)`` end up storing the same thing, and a bad
value is refused with a message that says what would have been accepted.
Messages never echo a secret value.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from homeagent.msg import Msg
from homeagent.sdk.types import ConfigDef


class ConfigError(Exception):
    """A setting could not be read or written; ``message`` is meant for the user."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        # a Msg: str(exc) is the English "key: message"; the web UI translates the message part
        super().__init__(Msg("{key}: {message}", key=key, message=message) if key else message)


# Canonical names for the type spellings ConfigDef accepts.
_TYPE_ALIASES: dict[str, str] = {
    "": "string",
    "string": "string",
    "str": "string",
    "text": "string",
    "password": "string",
    "int": "int",
    "integer": "int",
    "float": "float",
    "number": "float",
    "bool": "bool",
    "boolean": "bool",
    "duration": "duration",
    "select": "select",
    "json": "json",
}

KNOWN_TYPES: frozenset[str] = frozenset(_TYPE_ALIASES)


def base_type(type_name: str) -> str:
    """The canonical type (string/int/float/bool/duration/select/json) of a def's ``type``."""
    try:
        return _TYPE_ALIASES[type_name.strip().lower()]
    except KeyError:
        raise ValueError(
            f"unknown setting type {type_name!r}; use one of {', '.join(sorted(t for t in KNOWN_TYPES if t))}"
        ) from None


# ---------------------------------------------------------------- durations

_DURATION_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d)")
DURATION_HINT = Msg("use a number with a unit, e.g. 250ms, 30s, 10m, 1h30m, 2d")
MAX_DURATION_SECONDS = 100 * 365 * 86400.0
"""Longest duration anything accepts (100 years): past it, date arithmetic and timers overflow."""


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration ("30s", "10m", "1h30m", "250ms", "1.5h", "2d").

    A bare "0" is accepted; any other number needs a unit, because "30" could
    mean seconds or minutes and guessing wrong is worse than asking.
    """
    s = text.strip().replace(" ", "")
    if s in ("0", "0.0"):
        return 0.0
    if not s:
        raise ValueError(Msg("an empty value is not a duration; {hint}", hint=DURATION_HINT))
    if s.startswith("-"):
        raise ValueError(Msg("{text!r} is negative; a duration here must be zero or more", text=text.strip()))
    s = s.removeprefix("+")
    pos = 0
    total = 0.0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or pos == 0:
        if re.fullmatch(r"\d+(?:\.\d+)?", s):
            raise ValueError(Msg("{text!r} has no unit; did you mean {s}s? ({hint})", text=text.strip(), s=s, hint=DURATION_HINT))
        raise ValueError(Msg("{text!r} is not a duration; {hint}", text=text.strip(), hint=DURATION_HINT))
    if not total <= MAX_DURATION_SECONDS:  # (also infinity, from a 400-digit number)
        raise ValueError(Msg("{shown} is longer than the longest duration allowed (100 years)", shown=_show(text.strip())))
    return total


def format_duration(seconds: float) -> str:
    """A canonical duration string for a number of seconds (90 -> "1m30s", 0.25 -> "250ms")."""
    if seconds < 0 or math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(Msg("{seconds!r} is not a valid number of seconds", seconds=seconds))
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(Msg("{seconds:g} seconds is longer than the longest duration allowed (100 years)", seconds=seconds))
    if seconds == 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        return f"{round(ms)}ms" if abs(ms - round(ms)) < 1e-9 else f"{ms:g}ms"
    whole = int(seconds)
    frac = seconds - whole
    if frac > 1e-9:
        return f"{seconds:g}s"
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        n, whole = divmod(whole, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)


# ---------------------------------------------------------------- scalars

_TRUE = frozenset({"true", "1", "yes", "y", "on"})
_FALSE = frozenset({"false", "0", "no", "n", "off"})


def parse_bool(value: Any) -> bool:
    """A bool from True/False, 1/0 or the strings true/false, yes/no, on/off, 1/0."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        s = value.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    raise ValueError(Msg("{shown} is not true or false (use true/false, yes/no, on/off or 1/0)", shown=_show(value)))


def parse_int(value: Any) -> int:
    """An int from an int, a whole float or a string such as "30" or "10_000"."""
    if isinstance(value, bool):
        raise ValueError(Msg("{shown} is not a whole number", shown=_show(value)))
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        try:
            return int(s, 10)
        except ValueError:
            pass
        try:
            f = float(s)
        except ValueError:
            f = math.nan
        if f.is_integer():
            return int(f)
    raise ValueError(Msg("{shown} is not a whole number", shown=_show(value)))


def parse_float(value: Any) -> float:
    """A finite float from a number or a numeric string."""
    if isinstance(value, bool):
        raise ValueError(Msg("{shown} is not a number", shown=_show(value)))
    f: float
    if isinstance(value, int | float):
        f = float(value)
    elif isinstance(value, str):
        try:
            f = float(value.strip())
        except ValueError:
            raise ValueError(Msg("{shown} is not a number", shown=_show(value))) from None
    else:
        raise ValueError(Msg("{shown} is not a number", shown=_show(value)))
    if math.isnan(f) or math.isinf(f):
        raise ValueError(Msg("{shown} is not a finite number", shown=_show(value)))
    return f


# Whole-number settings: 18 digits at most, inside SQLite's 64-bit integers with room to spare
INT_MAX = 10**18 - 1
INT_MIN = -INT_MAX


MAX_KEY = 256
"""Longest setting name: plugin and source names are 64 characters at most, keys far less."""


def key_problem(key: str) -> str:
    """Why ``key`` cannot name a new setting ("" when it can): a name is shown, typed and stored, so no
    control characters, spaces, replacement characters (a broken encoding) or empty dot-separated parts."""
    if len(key) > MAX_KEY:
        return Msg("a setting's name is at most {max} characters (this one has {n})", max=MAX_KEY, n=len(key))
    bad = next((c for c in key if c.isspace() or not c.isprintable() or c == "\ufffd"), None)
    if bad is not None:
        return Msg("a setting's name cannot contain {bad!r}", bad=bad)
    if any(not part for part in key.split(".")):
        return Msg("a setting's name has no empty parts (no leading, trailing or doubled dots)")
    return ""


def _short(text: str, limit: int = 80) -> str:
    """A user-supplied name cut for an error message (a 5,000-character key must not make a 5 kB error)."""
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def check_plain(value: Any) -> None:
    """A value without a definition (a plugin's own setting) must still be storable JSON that reads back:
    finite numbers, whole numbers of at most 18 digits. Raises ValueError saying what is wrong."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        if isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                raise ValueError(Msg("{shown} is out of range (a whole number of at most 18 digits)", shown=_show(item)))
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(Msg("{item!r} is not a finite number", item=item))
        elif isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                raise ValueError(Msg("an object's keys must be text"))
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        else:
            raise ValueError(Msg("a {kind} cannot be stored as a setting", kind=type(item).__name__))
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise ValueError(Msg("{shown} cannot be stored as JSON", shown=_show(value))) from None


def _no_constant(name: str) -> Any:
    raise ValueError(Msg("{name} is not a number JSON allows", name=name))


def _show(value: Any, secret: bool = False) -> str:
    if secret:
        return Msg("the value")
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's 4,300-digit conversion limit
        return Msg("a number of {bits} bits", bits=value.bit_length()) if isinstance(value, int) else Msg("the value")
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------- coercion


_EXPECTED = {"string": Msg("text"), "int": Msg("a whole number"), "float": Msg("a number"), "bool": Msg("true or false")}


def coerce(d: ConfigDef, value: Any) -> Any:
    """``value`` converted to ``d``'s type and checked against its limits.

    Raises ValueError with a message for the user (no key prefix, no secret).
    Durations are returned as their normalised string; json as the decoded value.
    """
    secret = d.is_secret
    kind = base_type(d.type)
    if value is None:
        raise ValueError(Msg("a value is required (delete the setting to go back to its default)"))
    try:
        result = _coerce_kind(kind, d, value)
    except ValueError:
        if secret:
            raise ValueError(Msg("the value is not valid here (expected {expected})", expected=_EXPECTED.get(kind, kind))) from None
        raise
    if d.required and kind in ("string", "select") and result == "":
        raise ValueError(Msg("this setting is required and cannot be empty"))
    _check_range(d, kind, result)
    return result


def _coerce_kind(kind: str, d: ConfigDef, value: Any) -> Any:
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ValueError(Msg("{shown} is not text", shown=_show(value, d.is_secret)))
    if kind == "int":
        number = parse_int(value)
        if not INT_MIN <= number <= INT_MAX:
            raise ValueError(Msg("{shown} is out of range (a whole number of at most 18 digits)", shown=_show(value, d.is_secret)))
        return number
    if kind == "float":
        return parse_float(value)
    if kind == "bool":
        return parse_bool(value)
    if kind == "duration":
        if isinstance(value, str):
            parse_duration(value)
            return value.strip().replace(" ", "")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return format_duration(float(value))
        raise ValueError(Msg("{shown} is not a duration; {hint}", shown=_show(value), hint=DURATION_HINT))
    if kind == "select":
        return _coerce_select(d, value)
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value, parse_constant=_no_constant)
            except json.JSONDecodeError as e:
                raise ValueError(Msg("is not valid JSON ({reason} at line {line} column {column})", reason=e.msg, line=e.lineno,
                                     column=e.colno)) from None
        try:
            json.dumps(value, allow_nan=False)  # NaN and infinities are not JSON: no reader could load them back
        except (TypeError, ValueError, RecursionError):
            raise ValueError(Msg("{shown} cannot be stored as JSON (finite numbers only)", shown=_show(value))) from None
        return value
    raise ValueError(f"unknown setting type {d.type!r}")  # pragma: no cover - base_type rejects first


def _coerce_select(d: ConfigDef, value: Any) -> str:
    if not isinstance(value, str):
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        else:
            raise ValueError(Msg("{shown} is not one of {options}", shown=_show(value), options=", ".join(d.options)))
    s = value.strip()
    if not d.options or s in d.options:
        return s
    for opt in d.options:
        if opt.lower() == s.lower():
            return opt
    if s == "" and not d.required:
        return s
    raise ValueError(Msg("{value!r} is not one of {options}", value=s, options=", ".join(d.options)))


def _check_range(d: ConfigDef, kind: str, value: Any) -> None:
    if d.min is None and d.max is None:
        return
    if kind in ("int", "float"):
        n = float(value)
    elif kind == "duration":
        n = parse_duration(value)
    else:
        return
    seconds = kind == "duration"
    shown = Msg("the value") if d.is_secret else value if not seconds else f"{value} ({n:g}s)"
    if d.min is not None and n < d.min:
        if seconds:
            raise ValueError(Msg("{shown} is below the minimum of {min:g} seconds", shown=shown, min=d.min))
        raise ValueError(Msg("{shown} is below the minimum of {min:g}", shown=shown, min=d.min))
    if d.max is not None and n > d.max:
        if seconds:
            raise ValueError(Msg("{shown} is above the maximum of {max:g} seconds", shown=shown, max=d.max))
        raise ValueError(Msg("{shown} is above the maximum of {max:g}", shown=shown, max=d.max))


def coerce_lenient(d: ConfigDef, value: Any) -> Any:
    """Like ``coerce`` for reading: a stored value that no longer fits gives ValueError too,
    but range limits are not enforced (a stored value stays readable if limits tighten)."""
    if value is None:
        raise ValueError("no value")
    return _coerce_kind(base_type(d.type), d, value)


# ---------------------------------------------------------------- storage and display


def encode(value: Any) -> str:
    """The text stored in SQLite for a value (JSON)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def decode(raw: str | None) -> Any:
    """The value of a stored row; a row that is not JSON (written by hand or by the Go version) is its raw text."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        return raw


MASK = "****"


def mask(value: Any) -> Any:
    """A secret as it may be shown: empty stays empty, short ones fully hidden, long ones keep their last 4."""
    if value is None or value == "":
        return value
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) < 12:
        return MASK
    return MASK + text[-4:]
