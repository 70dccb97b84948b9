"""Stage contexts across the process boundary: the snapshot sent, the changes applied.

There is no shared memory between the host and a plugin process, so a stage
handler works on a copy and the host must merge what it did. Sending the
whole new context back would lose updates: two plugins appending to
``context_msgs`` concurrently would each return "old list + mine" and the
second write would erase the first. So a plugin returns *operations* —
``set`` a field, ``append`` to a list, ``set_key``/``del_key`` in a dict —
and the host applies them under the context lock, in the order the handlers
finish, to whatever the context holds by then.

Every operation is checked against the stage's permission matrix
(:func:`homeagent.agent.stages.writable_fields`) and its value against the
field's type before *any* is applied: a handler's changes land completely or
not at all, and a forbidden write is an error, never a silent one.
``tool_call``/``tool_result`` are updated in place, because the turn runner
keeps its own reference to the call it is about to run (that is how
``denied`` reaches it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from homeagent.sdk.protocol import to_json
from homeagent.sdk.stageview import StagePermissionError, writable_fields
from homeagent.sdk.types import MemItem, Stage, StageContext, ToolCall, ToolResult

__all__ = ["SNAPSHOT_FIELDS", "StageChangeError", "apply_changes", "snapshot"]

SNAPSHOT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StageContext) if f.name != "lock")
"""Every field a stage handler may read (all of them, in every stage)."""


class StageChangeError(ValueError):
    """A change list a plugin returned that cannot be applied (bad shape or type)."""


def snapshot(ctx: StageContext, fields: tuple[str, ...] | list[str] = SNAPSHOT_FIELDS) -> dict[str, Any]:
    """The fields as JSON for ``stage.invoke``."""
    return {name: to_json(getattr(ctx, name)) for name in fields}


def _dataclass_from(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise StageChangeError(f"{where} must be an object, got {type(value).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in value.items() if k in known}
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise StageChangeError(f"{where}: {e}") from None


def _check_fields(cls: type, value: dict[str, Any], where: str) -> None:
    for f in dataclasses.fields(cls):
        if f.name in value and not _type_ok(f.type, value[f.name]):
            raise StageChangeError(f"{where}.{f.name} has the wrong type ({type(value[f.name]).__name__})")


def _type_ok(annotation: Any, value: Any) -> bool:
    text = str(annotation)
    if text == "str":
        return isinstance(value, str)
    if text == "bool":
        return isinstance(value, bool)
    if text == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if text.startswith("dict"):
        return isinstance(value, dict)
    return True


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise StageChangeError(f"{where} must be a string, got {type(value).__name__}")
    return value


def _opt_str(value: Any, where: str) -> str | None:
    return None if value is None else _str(value, where)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise StageChangeError(f"{where} must be true or false, got {type(value).__name__}")
    return value


def _msg(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StageChangeError(f"{where} must be an object, got {type(value).__name__}")
    return value


def _call(value: Any, where: str) -> ToolCall:
    obj: ToolCall = _dataclass_from(ToolCall, value, where)
    _check_fields(ToolCall, value, where)
    return obj


def _result(value: Any, where: str) -> ToolResult:
    obj: ToolResult = _dataclass_from(ToolResult, value, where)
    _check_fields(ToolResult, value, where)
    return obj


def _mem(value: Any, where: str) -> MemItem:
    item: MemItem = _dataclass_from(MemItem, value, where)
    _check_fields(MemItem, value, where)
    return item


_Item = Callable[[Any, str], Any]

# field -> (kind, converter for the whole value or for one item)
_SCALARS: dict[str, _Item] = {
    "raw_message": _str,
    "llm_text": _str,
    "final_text": _str,
    "response": _opt_str,
    "no_memory": _bool,
}
_LISTS: dict[str, _Item] = {
    "context_msgs": _msg,
    "tool_calls": _call,
    "tool_results": _result,
    "memory": _mem,
    "errors": _str,
}
_OBJECTS: dict[str, type] = {"tool_call": ToolCall, "tool_result": ToolResult}
_DICTS = frozenset({"extra"})


def _prepare(
    op: Any, stage: Stage, writable: frozenset[str], index: int, ctx_probe: StageContext
) -> Callable[[StageContext], None]:
    """Check one operation; return the function that applies it."""
    where = f"changes[{index}]"
    if not isinstance(op, dict):
        raise StageChangeError(f"{where} must be an object")
    kind, name = op.get("op"), op.get("field")
    if not isinstance(name, str):
        raise StageChangeError(f"{where}: 'field' must be a field name")
    if name not in SNAPSHOT_FIELDS:
        raise StageChangeError(f"{where}: StageContext has no field {name!r}")
    if name not in writable:
        allowed = ", ".join(sorted(writable))
        raise StagePermissionError(f"ctx.{name} is read-only in stage {stage.value!r} (writable there: {allowed})")
    value = op.get("value")
    label = f"{where} ({name})"
    if kind == "set":
        if name in _SCALARS:
            converted = _SCALARS[name](value, label)
            return lambda ctx: setattr(ctx, name, converted)
        if name in _LISTS:
            if not isinstance(value, list):
                raise StageChangeError(f"{label}: value must be an array")
            conv = _LISTS[name]
            items = [conv(v, f"{label}[{i}]") for i, v in enumerate(value)]
            return lambda ctx: setattr(ctx, name, items)
        if name in _OBJECTS:
            cls = _OBJECTS[name]
            if value is None:
                return lambda ctx: setattr(ctx, name, None)
            if not isinstance(value, dict):
                raise StageChangeError(f"{label} must be an object, got {type(value).__name__}")
            _check_fields(cls, value, label)
            known = {f.name for f in dataclasses.fields(cls)}
            present = {k: v for k, v in value.items() if k in known}

            def set_object(ctx: StageContext) -> None:
                current = getattr(ctx, name)
                if current is None:
                    setattr(ctx, name, _dataclass_from(cls, present, label))
                    return
                for key, item in present.items():  # in place: the turn runner holds this very object
                    setattr(current, key, item)

            if getattr(ctx_probe, name, None) is None:
                _dataclass_from(cls, present, label)  # a new object needs every required field
            return set_object
        if name in _DICTS:
            if not isinstance(value, dict):
                raise StageChangeError(f"{label}: value must be an object")
            return lambda ctx: setattr(ctx, name, dict(value))
    elif kind == "append":
        if name not in _LISTS:
            raise StageChangeError(f"{label}: 'append' works on lists only")
        values = op.get("values", [value] if "value" in op else None)
        if not isinstance(values, list):
            raise StageChangeError(f"{label}: 'values' must be an array")
        conv = _LISTS[name]
        items = [conv(v, f"{label}.values[{i}]") for i, v in enumerate(values)]
        return lambda ctx: getattr(ctx, name).extend(items)
    elif kind in ("set_key", "del_key"):
        if name not in _DICTS:
            raise StageChangeError(f"{label}: '{kind}' works on objects (extra) only")
        key = op.get("key")
        if not isinstance(key, str):
            raise StageChangeError(f"{label}: 'key' must be a string")
        if kind == "set_key":
            return lambda ctx: getattr(ctx, name).__setitem__(key, value)
        return lambda ctx: getattr(ctx, name).pop(key, None)
    raise StageChangeError(f"{where}: unknown op {kind!r} (set, append, set_key, del_key)")


def apply_changes(ctx: StageContext, stage: Stage | str, changes: Any) -> int:
    """Apply a plugin's change list to ``ctx`` (all or nothing); returns how many operations ran.

    Call it holding ``ctx.lock``. ``ctx`` is the shared context (or a StageView
    of it, which re-checks every write).
    """
    st = Stage(stage)
    if changes is None:
        return 0
    if not isinstance(changes, list):
        raise StageChangeError("'changes' must be an array")
    writable = writable_fields(st)
    steps = [_prepare(op, st, writable, i, ctx) for i, op in enumerate(changes)]
    for step in steps:
        step(ctx)
    return len(steps)
