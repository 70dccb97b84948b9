"""The stage permission matrix and the view a stage handler sees, shared by the host and the subprocess SDK.

Why in the SDK: an in-process handler (``agent.stages.StageHost``) and a
subprocess handler (``sdk.run``) must be refused the very same writes, so
both use this one implementation; the SDK side must not import the host.
The rules themselves are described in ``agent/stages.py`` and, for plugin
authors, in docs/protocol.md.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from homeagent.sdk.types import STAGES, Stage, StageContext

__all__ = ["WRITABLE", "ReadOnlyView", "StagePermissionError", "StageView", "parse_stage", "writable_fields"]

_ALL_STAGES = frozenset(STAGES)

WRITABLE: Mapping[str, frozenset[Stage]] = MappingProxyType(
    {
        "raw_message": frozenset({Stage.ON_INPUT}),
        "context_msgs": frozenset({Stage.PRE_ACTION}),
        "llm_text": frozenset({Stage.POST_ACTION}),
        "tool_calls": frozenset({Stage.POST_ACTION, Stage.BEFORE_TOOLCALL}),
        "tool_call": frozenset({Stage.BEFORE_TOOLCALL}),
        "tool_results": frozenset({Stage.AFTER_TOOLCALL}),
        "tool_result": frozenset({Stage.AFTER_TOOLCALL}),
        "final_text": frozenset({Stage.BEFORE_OUTPUT}),
        "response": _ALL_STAGES - {Stage.AFTER_OUTPUT},
        "memory": frozenset({Stage.ON_INPUT, Stage.PRE_ACTION}),
        "no_memory": frozenset({Stage.ON_INPUT, Stage.PRE_ACTION}),
        "extra": _ALL_STAGES,
        "errors": _ALL_STAGES,
    }
)
"""Field name → the stages whose handlers may write it. Every field is readable everywhere."""

_WRITABLE_BY_STAGE: dict[Stage, frozenset[str]] = {
    s: frozenset(f for f, stages in WRITABLE.items() if s in stages) for s in STAGES
}
_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(StageContext))


class StagePermissionError(PermissionError):
    """A stage handler wrote a field its stage may not write."""


def parse_stage(stage: Stage | str) -> Stage:
    """The Stage for a name; ValueError listing the valid names otherwise."""
    if isinstance(stage, Stage):
        return stage
    try:
        return Stage(stage)
    except ValueError:
        valid = ", ".join(s.value for s in STAGES)
        raise ValueError(f"unknown stage {stage!r}; valid stages: {valid}") from None


def writable_fields(stage: Stage | str) -> frozenset[str]:
    """The StageContext fields a handler of ``stage`` may write (for hosts applying remote changes)."""
    return _WRITABLE_BY_STAGE[parse_stage(stage)]


def _denied(path: str, stage: Stage) -> StagePermissionError:
    allowed = ", ".join(sorted(_WRITABLE_BY_STAGE[stage]))
    return StagePermissionError(f"ctx.{path} is read-only in stage {stage.value!r} (writable there: {allowed})")


_SCALARS = (str, int, float, bytes, type(None), enum.Enum)


def _freeze(value: Any, path: str, stage: Stage) -> Any:
    """A read-only rendering of ``value``: containers copied into immutable ones, dataclasses wrapped."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, list | tuple):
        item_path = f"{path}[]"
        return tuple(_freeze(v, item_path, stage) for v in value)
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v, f"{path}[{k!r}]", stage) for k, v in value.items()})
    if isinstance(value, set | frozenset):
        return frozenset(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ReadOnlyView(value, path, stage)
    return value


class ReadOnlyView:
    """Read access to a dataclass item (ToolCall, ToolResult, MemItem) of a field the stage may not write."""

    __slots__ = ("_obj", "_path", "_stage")

    _obj: Any
    _path: str
    _stage: Stage

    def __init__(self, obj: Any, path: str, stage: Stage) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_stage", stage)

    def __getattr__(self, name: str) -> Any:
        return _freeze(getattr(self._obj, name), f"{self._path}.{name}", self._stage)

    def __setattr__(self, name: str, value: Any) -> None:
        raise _denied(f"{self._path}.{name}", self._stage)

    def __delattr__(self, name: str) -> None:
        raise _denied(f"{self._path}.{name}", self._stage)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ReadOnlyView):
            other = other._obj
        return bool(self._obj == other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ReadOnlyView({self._obj!r})"


class StageView(StageContext):
    """What a handler receives: the shared context seen through the stage's permissions.

    Same attribute names as :class:`StageContext` (including ``lock``, the shared
    lock); it is an instance of it, so handlers typed against StageContext work.
    """

    _shared: StageContext
    _stage: Stage
    _writable: frozenset[str]
    _open: bool

    def __init__(self, shared: StageContext, stage: Stage) -> None:  # no dataclass init: state lives in `shared`
        d = self.__dict__
        d["_shared"] = shared
        d["_stage"] = stage
        d["_writable"] = _WRITABLE_BY_STAGE[stage]
        d["_open"] = True

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _FIELD_NAMES:
            raise AttributeError(f"StageContext has no field {name!r}; keep plugin state in ctx.extra")
        object.__setattr__(self, name, value)  # goes through the field's property

    def __delattr__(self, name: str) -> None:
        raise _denied(name, self._stage)

    def _close(self) -> None:
        self.__dict__["_open"] = False


def _field_property(name: str) -> property:
    def fget(self: StageView) -> Any:
        value = getattr(self._shared, name)
        if name in self._writable:
            return value
        return _freeze(value, name, self._stage)

    def fset(self: StageView, value: Any) -> None:
        if name not in self._writable:
            raise _denied(name, self._stage)
        if not self._open:
            raise StagePermissionError(f"ctx.{name}: stage {self._stage.value!r} has already finished")
        setattr(self._shared, name, value)

    return property(fget, fset, doc=f"The shared context's {name}, as the stage permits.")


for _name in _FIELD_NAMES:
    setattr(StageView, _name, _field_property(_name))
del _name
