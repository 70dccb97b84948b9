"""The tool registry: what the model may call, how a call is checked, run and scheduled.

Why it is shaped this way:

* A bad call must come back to the model as a result it can act on, never as
  an exception in the tool loop: unknown names (with close matches), arguments
  that are not JSON, arguments that do not fit the schema, handler exceptions
  and timeouts all become ``{"isError": true, "content": "..."}`` with
  ``success=False`` and ``status="error"``.
* Schemas are checked against their meta-schema and compiled once at
  registration, so a broken plugin fails when it registers, not on the first
  call. Formats (``"format": "date-time"``) are annotations, not checked.
* Sync handlers run in a worker thread (``asyncio.to_thread``) so a slow one
  never stalls the loop; on timeout the registry stops waiting, but Python
  cannot kill the thread, which runs to completion in the background.
* ``run_batch`` keeps the model's call order in the results while running
  consecutive parallel-safe calls concurrently.
* A call already marked ``denied`` (by a ``before_toolcall`` handler) is not
  run: ``execute`` returns a ``status="denied"`` result naming the reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import enum
import inspect
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError, ValidationError, relevance
from jsonschema.protocols import Validator

from homeagent.sdk.types import ToolCall, ToolDef, ToolHandler, ToolResult

logger = logging.getLogger("homeagent.tools")

__all__ = [
    "DuplicateToolError",
    "ToolRegistry",
    "ToolStats",
    "error_result",
    "interrupted_result",
    "jsonable",
    "result_text",
]

_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_ERRORS_SHOWN = 3
_MAX_MESSAGE = 300
_DEFAULT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class DuplicateToolError(ValueError):
    """A tool of that name is already registered; the first registration keeps working."""

    def __init__(self, name: str, owner: str) -> None:
        who = f"plugin {owner!r}" if owner else "the core"
        super().__init__(f"tool {name!r} is already registered by {who}")
        self.name = name
        self.owner = owner


@dataclass(frozen=True)
class ToolStats:
    """Per-tool health numbers; times in milliseconds.

    ``calls`` counts handler runs (``errors`` and ``timeouts`` among them);
    ``rejected`` counts calls refused before the handler: invalid arguments, denied.
    """

    name: str
    plugin: str
    calls: int
    errors: int
    timeouts: int
    rejected: int
    total_ms: float
    max_ms: float

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.calls if self.calls else 0.0


@dataclass(eq=False)
class _Tool:
    tool: ToolDef
    handler: ToolHandler
    validator: Validator
    is_async: bool
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    rejected: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0


def error_result(call: ToolCall, content: str, *, plugin: str = "", status: str = "error") -> ToolResult:
    """The result the model sees for a call that did not work."""
    return ToolResult(
        call_id=call.id,
        name=call.name,
        plugin=plugin or call.plugin,
        success=False,
        result={"isError": True, "content": content},
        status=status,
    )


def interrupted_result(call: ToolCall) -> ToolResult:
    """A synthetic result for a call cut off by an interrupt, keeping the message history valid."""
    return error_result(call, f"{call.name} was interrupted before it finished", status="interrupted")


def jsonable(value: Any, _depth: int = 0) -> Any:
    """``value`` made JSON-serialisable: dataclasses → dict, sets → lists, unknown objects → str."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        if isinstance(value, enum.Enum):
            return jsonable(value.value, _depth + 1)
        return value
    if _depth > 64:
        return str(value)
    if isinstance(value, enum.Enum):
        return jsonable(value.value, _depth + 1)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v, _depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        items = [jsonable(v, _depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name), _depth + 1) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)  # pydantic models, e.g. MCP results
    if callable(dump):
        try:
            return jsonable(dump(mode="json"), _depth + 1)
        except Exception:
            pass
    return str(value)


def result_text(result: ToolResult) -> str:
    """What goes back to the model: strings as they are, anything else as JSON (non-ASCII kept)."""
    value = result.result
    if isinstance(value, str):
        return value
    return json.dumps(jsonable(value), ensure_ascii=False)


def _is_async(handler: Any) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def _compile(tool: ToolDef) -> Validator:
    schema = tool.parameters or _DEFAULT_SCHEMA
    if not isinstance(schema, dict):
        raise ValueError(f"tool {tool.name!r}: parameters must be a JSON Schema object, got {type(schema).__name__}")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        where = e.json_path if e.path else "$"
        raise ValueError(
            f"tool {tool.name!r}: parameters is not a valid JSON Schema: {where}: {_short(e.message)}"
        ) from None
    declared = schema.get("type")
    if declared is not None and declared != "object" and not (isinstance(declared, list) and "object" in declared):
        raise ValueError(
            f"tool {tool.name!r}: parameters must describe an object (tool arguments are a JSON object), got type {declared!r}"
        )
    validator: Validator = cls(schema)
    return validator


class ToolRegistry:
    """Every tool the model may call, with its owner, its compiled schema and its health numbers."""

    def __init__(self, *, default_timeout: float | None = None) -> None:
        self._tools: dict[str, _Tool] = {}
        self._default_timeout = default_timeout
        self._generation = 0

    # registration -----------------------------------------------------------------

    def register(self, tool: ToolDef, handler: ToolHandler) -> Callable[[], None]:
        """Add a tool; returns a function that removes exactly this registration."""
        if not isinstance(tool.name, str) or not _NAME_RE.fullmatch(tool.name):
            raise ValueError(f"tool name {tool.name!r} must be 1-64 characters of a-z, A-Z, 0-9, '_' or '-'")
        if not callable(handler):
            raise TypeError(f"tool {tool.name!r}: handler must be callable, got {type(handler).__name__}")
        existing = self._tools.get(tool.name)
        if existing is not None:
            raise DuplicateToolError(tool.name, existing.tool.plugin)
        entry = _Tool(tool, handler, _compile(tool), _is_async(handler))
        self._tools[tool.name] = entry
        self._generation += 1

        def undo() -> None:
            if self._tools.get(tool.name) is entry:
                del self._tools[tool.name]
                self._generation += 1

        return undo

    def unregister(self, name: str) -> bool:
        """Remove a tool; False when there was none of that name."""
        if self._tools.pop(name, None) is None:
            return False
        self._generation += 1
        return True

    def unregister_plugin(self, plugin: str) -> list[str]:
        """Remove every tool of ``plugin``; returns their names."""
        names = [n for n, t in self._tools.items() if t.tool.plugin == plugin]
        for n in names:
            del self._tools[n]
        if names:
            self._generation += 1
        return names

    @property
    def generation(self) -> int:
        """Changes whenever the set of tools changes: cache derived lists against it."""
        return self._generation

    def get(self, name: str) -> ToolDef | None:
        entry = self._tools.get(name)
        return entry.tool if entry is not None else None

    def plugin_of(self, name: str) -> str:
        """The owning plugin's name; "" for core tools and for unknown names."""
        entry = self._tools.get(name)
        return entry.tool.plugin if entry is not None else ""

    def tools(self) -> list[ToolDef]:
        return [t.tool for t in self._tools.values()]

    def openai_tools(self, predicate: Callable[[ToolDef], bool] | None = None) -> list[dict[str, Any]]:
        return [t.tool.to_openai() for t in self._tools.values() if predicate is None or predicate(t.tool)]

    def stats(self) -> dict[str, ToolStats]:
        return {
            n: ToolStats(n, t.tool.plugin, t.calls, t.errors, t.timeouts, t.rejected, t.total_ms, t.max_ms)
            for n, t in self._tools.items()
        }

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    # execution --------------------------------------------------------------------

    async def execute(self, call: ToolCall, *, timeout: float | None = None) -> ToolResult:
        """Run one call; every failure is an error result, only cancellation propagates."""
        start = time.perf_counter()
        entry = self._tools.get(call.name)
        if entry is None:
            return self._timed(error_result(call, self._unknown_message(call.name)), start)
        tool = entry.tool
        if call.denied:
            reason = call.deny_reason or "no reason given"
            entry.rejected += 1
            return self._timed(
                error_result(call, f"{tool.name} was denied: {reason}", plugin=tool.plugin, status="denied"), start
            )
        args, problem = self._arguments(call, entry)
        if problem is not None:
            entry.rejected += 1
            return self._timed(error_result(call, problem, plugin=tool.plugin), start)

        limit = self._default_timeout if timeout is None else timeout
        failed = timed_out = False
        try:
            async with asyncio.timeout(limit) as scope:
                if entry.is_async:
                    value = await entry.handler(args)
                else:
                    value = await asyncio.to_thread(entry.handler, args)
                    if inspect.isawaitable(value):
                        value = await value
            result = ToolResult(call.id, call.name, tool.plugin, result=jsonable(value))
            if isinstance(value, Mapping) and value.get("isError"):
                result.success, result.status = False, "error"
                failed = True
        except TimeoutError as exc:
            if not scope.expired():
                result = self._failure(call, tool, exc)
                failed = True
            else:
                logger.warning("tool %s timed out after %gs", tool.name, limit)
                result = error_result(call, f"{tool.name} timed out after {limit:g}s", plugin=tool.plugin)
                failed = timed_out = True
        except Exception as exc:
            result = self._failure(call, tool, exc)
            failed = True
        self._timed(result, start)
        entry.calls += 1
        entry.errors += failed
        entry.timeouts += timed_out
        entry.total_ms += result.duration_ms
        entry.max_ms = max(entry.max_ms, result.duration_ms)
        return result

    @staticmethod
    def _timed(result: ToolResult, start: float) -> ToolResult:
        result.duration_ms = (time.perf_counter() - start) * 1000
        return result

    @staticmethod
    def _failure(call: ToolCall, tool: ToolDef, exc: BaseException) -> ToolResult:
        logger.error("tool %s failed", tool.name, exc_info=exc)
        return error_result(call, f"{tool.name} failed: {type(exc).__name__}: {_short(str(exc))}", plugin=tool.plugin)

    def _unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self._tools), n=3, cutoff=0.6)
        if close:
            return f"unknown tool {name!r}. Did you mean: {', '.join(close)}?"
        names = list(self._tools)
        shown = ", ".join(names[:20]) + (f" (+{len(names) - 20} more)" if len(names) > 20 else "")
        return f"unknown tool {name!r}. Available tools: {shown or 'none'}"

    @staticmethod
    def _arguments(call: ToolCall, entry: _Tool) -> tuple[dict[str, Any], str | None]:
        """The call's arguments, or why they cannot be used (phrased for the model)."""
        name = entry.tool.name
        args: Any = call.arguments
        if not args and call.raw_arguments.strip():
            try:
                args = json.loads(call.raw_arguments)
            except json.JSONDecodeError as e:
                return {}, (
                    f"invalid arguments for {name}: $: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                    "send the arguments as one JSON object"
                )
        if args is None:
            args = {}
        if not isinstance(args, dict):
            kind = "array" if isinstance(args, list) else type(args).__name__
            return {}, f"invalid arguments for {name}: $: must be a JSON object, got {kind}"
        try:
            errors = sorted(entry.validator.iter_errors(args), key=relevance)
        except Exception as exc:  # e.g. an unresolvable $ref: the schema's fault, not the model's
            logger.error("tool %s: schema could not be applied", name, exc_info=exc)
            return (
                {},
                f"{name} failed: its parameter schema could not be applied: {type(exc).__name__}: {_short(str(exc))}",
            )
        if errors:
            return {}, f"invalid arguments for {name}: " + "; ".join(_describe(e) for e in errors[:_MAX_ERRORS_SHOWN])
        return args, None

    # scheduling -------------------------------------------------------------------

    def _parallel(self, call: ToolCall) -> bool:
        entry = self._tools.get(call.name)
        return entry is not None and entry.tool.parallel_safe and not entry.tool.serial

    async def run_batch(
        self, calls: list[ToolCall], runner: Callable[[ToolCall], Awaitable[ToolResult]]
    ) -> list[ToolResult]:
        """Run one LLM turn's calls through ``runner``; results in call order.

        Consecutive parallel-safe calls run concurrently; serial, not-parallel-safe
        and unknown calls run alone, in order. Cancelling cancels what is in flight.
        """
        results: list[ToolResult | None] = [None] * len(calls)
        i, n = 0, len(calls)
        while i < n:
            j = i + 1
            if self._parallel(calls[i]):
                while j < n and self._parallel(calls[j]):
                    j += 1
            if j - i == 1:
                results[i] = await _run_one(runner, calls[i])
            else:
                async with asyncio.TaskGroup() as tg:
                    tasks = [tg.create_task(_run_one(runner, calls[k])) for k in range(i, j)]
                for k, task in zip(range(i, j), tasks, strict=True):
                    results[k] = task.result()
            i = j
        return [r for r in results if r is not None]

    # text for the model and for memory ---------------------------------------------

    result_text = staticmethod(result_text)

    def memory_text(self, result: ToolResult) -> str | None:
        """What memory may index: None for no_memory tools, else the tool's cleaner over result_text."""
        entry = self._tools.get(result.name)
        text = result_text(result)
        if entry is None:
            return text
        if entry.tool.no_memory:
            return None
        cleaner = entry.tool.cleaner
        if cleaner is None:
            return text
        try:
            cleaned = cleaner(text)
        except Exception as exc:
            logger.error("cleaner of tool %s failed; indexing the raw text", result.name, exc_info=exc)
            return text
        if not isinstance(cleaned, str):
            logger.error(
                "cleaner of tool %s returned %s, not str; indexing the raw text", result.name, type(cleaned).__name__
            )
            return text
        return cleaned


def _describe(error: ValidationError) -> str:
    return f"{error.json_path}: {_short(error.message)}"


async def _run_one(runner: Callable[[ToolCall], Awaitable[ToolResult]], call: ToolCall) -> ToolResult:
    try:
        return await runner(call)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        logger.error("running tool call %s (%s) failed", call.id, call.name, exc_info=exc)
        return error_result(call, f"{call.name} failed: {type(exc).__name__}: {_short(str(exc))}")
