"""The stage pipeline host: runs plugin hooks at the seven points of a turn.

Why it is shaped this way:

* All handlers of a stage run concurrently on the one shared
  :class:`StageContext`, as the original's goroutines did, so a stage costs
  the slowest handler, not the sum. Each handler is started eagerly: it runs
  up to its first real wait right away, and only one that actually waits gets
  a task (with its own copy of the context variables, as a task would have).
  A handler that waits for nothing therefore costs no task and no loop pass.
  No order among handlers of one stage is promised. Handlers that read-modify-write a
  field (or mutate a list while another handler might replace it) hold
  ``ctx.lock``.
* A plugin must not break a turn: every handler is isolated (its exception is
  logged with the traceback and recorded in ``ctx.errors`` as
  ``"<plugin>/<handler>: <ExcType>: <message>"``) and has a timeout after which
  its task is cancelled and the turn moves on. A handler that swallows the
  cancellation is abandoned after a short grace period (``cancel_grace``), so
  it cannot hold the turn either; it is logged as a straggler.
* The permission matrix of the plugin SDK is enforced, not just documented:
  each handler sees a :class:`StageView` of the shared context. Writes to a
  field the stage may not write raise :class:`StagePermissionError`, and
  containers that are not writable come back as read-only copies (``tuple``,
  ``MappingProxyType``, ``frozenset``; dataclass items such as ``ToolCall`` as
  :class:`ReadOnlyView`), recursively, so in-place mutation fails too. Writable
  fields are the shared objects themselves, so changes land directly.
* Nothing registered for a stage costs a dict lookup and a comparison.

Choices beyond the SDK matrix (the matrix itself is :data:`homeagent.sdk.stageview.WRITABLE`,
shared with the subprocess SDK, which checks a handler's writes the same way):

* ``extra`` and ``errors`` are writable in every stage; ``memory`` and
  ``no_memory`` in ``on_input`` and ``pre_action`` (later the memory has been
  used already). The host itself still sets ``no_memory`` later, on the
  shared context, when the model calls a ``no_memory`` tool (agent/process.py),
  so ``after_output`` handlers see the turn's final decision. ``tool_call``
  (the call being executed) is writable in ``before_toolcall`` — deny with
  ``ctx.tool_call.denied = True`` and ``deny_reason``, or change
  ``arguments``; ``tool_result`` in ``after_toolcall``.
* ``user_id``, ``group_id``, ``channel``, ``source``, ``speaker``, ``reasoning_content``,
  ``token_usage``, ``phase`` and ``lock`` are read-only everywhere: they
  describe where the message came from or what the host did.
* Reads are allowed everywhere. A non-writable container is re-frozen on
  every read (a copy proportional to its size): read it once into a local.
* Setting a name that is not a StageContext field raises ``AttributeError``
  (plugin state belongs in ``ctx.extra``). After its stage has finished a view
  rejects all writes, so an abandoned handler cannot change a later stage.
* Plain (non-async) handlers are accepted and called directly on the event
  loop, without a task: they must be quick (no I/O); they cannot be timed
  out, and one that blocks the loop for more than 50 ms is logged. If one
  returns an awaitable, that is awaited like an async handler.
* ``own_tools`` handlers of ``before_toolcall``/``after_toolcall`` run only
  when ``ctx.tool_call.plugin`` (``ctx.tool_result.plugin`` after the call)
  equals their plugin; in other stages the flag changes nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any

from homeagent.sdk.stageview import (
    WRITABLE,
    ReadOnlyView,
    StagePermissionError,
    StageView,
    parse_stage,
    writable_fields,
)
from homeagent.sdk.types import STAGES, Stage, StageContext, StageHandler

logger = logging.getLogger("homeagent.stages")

__all__ = [
    "WRITABLE",
    "HandlerInfo",
    "ReadOnlyView",
    "StageHost",
    "StagePermissionError",
    "StageView",
    "parse_stage",
    "writable_fields",
]

_TOOL_STAGES = frozenset({Stage.BEFORE_TOOLCALL, Stage.AFTER_TOOLCALL})
_SLOW_SYNC_S = 0.05


@dataclass(frozen=True)
class HandlerInfo:
    """One registration as shown on health pages; ``total_time`` in seconds."""

    stage: Stage
    plugin: str
    name: str
    own_tools: bool
    timeout: float
    calls: int
    failures: int
    timeouts: int
    total_time: float

    @property
    def mean_ms(self) -> float:
        return self.total_time * 1000 / self.calls if self.calls else 0.0


@dataclass(eq=False)
class _Entry:
    stage: Stage
    handler: StageHandler
    plugin: str
    name: str
    own_tools: bool
    timeout: float
    calls: int = 0
    failures: int = 0
    timeouts: int = 0
    total_time: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.plugin or 'core'}/{self.name}"

    def info(self) -> HandlerInfo:
        return HandlerInfo(
            self.stage,
            self.plugin,
            self.name,
            self.own_tools,
            self.timeout,
            self.calls,
            self.failures,
            self.timeouts,
            self.total_time,
        )


def _handler_name(handler: Any) -> str:
    name = getattr(handler, "__qualname__", None) or getattr(handler, "__name__", None)
    return str(name).rsplit("<locals>.", 1)[-1] if name else type(handler).__name__


def _check_timeout(timeout: float) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not (timeout > 0 and math.isfinite(timeout))
    ):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


class StageHost:
    """Holds the stage handlers and runs one stage of a turn at a time."""

    def __init__(self, *, default_timeout: float = 10.0, cancel_grace: float = 0.05) -> None:
        self._default_timeout = _check_timeout(default_timeout)
        self._grace = cancel_grace
        self._entries: dict[Stage, tuple[_Entry, ...]] = {s: () for s in STAGES}
        self._stragglers: set[asyncio.Task[None]] = set()

    # registration -----------------------------------------------------------------

    def register(
        self,
        stage: Stage | str,
        handler: StageHandler,
        *,
        plugin: str = "",
        own_tools: bool = False,
        timeout: float | None = None,
        name: str = "",
    ) -> Callable[[], None]:
        """Add a handler to ``stage``; returns a function that removes exactly this registration."""
        st = parse_stage(stage)
        if not callable(handler):
            raise TypeError(f"stage handler must be callable, got {type(handler).__name__}")
        if own_tools and not plugin:
            raise ValueError("own_tools=True needs the plugin name the tools belong to")
        entry = _Entry(
            stage=st,
            handler=handler,
            plugin=plugin,
            name=name or _handler_name(handler),
            own_tools=own_tools and st in _TOOL_STAGES,
            timeout=self._default_timeout if timeout is None else _check_timeout(timeout),
        )
        self._entries[st] = (*self._entries[st], entry)  # copy-on-write: a running stage keeps its snapshot

        def undo() -> None:
            self._entries[st] = tuple(e for e in self._entries[st] if e is not entry)

        return undo

    def unregister_plugin(self, plugin: str) -> int:
        """Remove every handler of ``plugin``; returns how many there were."""
        removed = 0
        for st, entries in self._entries.items():
            kept = tuple(e for e in entries if e.plugin != plugin)
            removed += len(entries) - len(kept)
            self._entries[st] = kept
        return removed

    def handlers(self, stage: Stage | str) -> list[HandlerInfo]:
        return [e.info() for e in self._entries[parse_stage(stage)]]

    def has_handlers(self, stage: Stage | str) -> bool:
        return bool(self._entries[parse_stage(stage)])

    @property
    def stragglers(self) -> int:
        """Handler tasks that ignored cancellation and are still running."""
        return len(self._stragglers)

    # running ----------------------------------------------------------------------

    async def run(self, stage: Stage | str, ctx: StageContext) -> bool:
        """Run every handler of ``stage`` on ``ctx``; True when ``ctx.response`` is set (jump to after_output)."""
        st = stage if type(stage) is Stage else parse_stage(stage)
        ctx.phase = st
        entries = self._entries[st]
        if entries:
            if st in _TOOL_STAGES:
                entries = _own_tools_filter(st, ctx, entries)
            if entries:
                await self._run_entries(st, ctx, entries)
        return ctx.response is not None

    async def _run_entries(self, stage: Stage, ctx: StageContext, entries: tuple[_Entry, ...]) -> None:
        loop = asyncio.get_running_loop()
        view = StageView(ctx, stage)
        start = loop.time()
        tasks: dict[asyncio.Task[None], _Entry] = {}
        try:
            # Every handler is started right here, up to its first real wait (as Python 3.12's
            # eager tasks do): a handler that waits for nothing costs no task and no loop pass.
            for e in entries:
                started = self._start(e, view, ctx)
                if started is not None:
                    waiting, context, t0 = started
                    tasks[loop.create_task(self._finish(e, ctx, waiting, t0), context=context)] = e
            if not tasks:
                return
            # One loop pass lets every handler whose wait is already over finish, saving the
            # two extra passes asyncio.wait() costs; only real waiters reach the loop below.
            await asyncio.sleep(0)
            pending = {t for t in tasks if not t.done()}
            deadline = {t: start + tasks[t].timeout for t in pending}
            expired: list[asyncio.Task[None]] = []
            while pending:
                nearest = min(deadline[t] for t in pending)
                _, pending = await asyncio.wait(pending, timeout=max(0.0, nearest - loop.time()))
                now = loop.time()
                for t in [t for t in pending if deadline[t] <= now]:
                    t.cancel()
                    pending.discard(t)
                    expired.append(t)
                    self._record_timeout(tasks[t], ctx)
            if expired:
                await self._reap(expired, tasks)
        except BaseException as exc:  # the turn was interrupted (or the process is going down)
            for t in tasks:
                t.cancel()
            if tasks and isinstance(exc, asyncio.CancelledError):
                await self._reap(list(tasks), tasks)
            raise
        finally:
            view._close()

    def _start(
        self, entry: _Entry, view: StageView, ctx: StageContext
    ) -> tuple[Awaitable[Any], contextvars.Context | None, float] | None:
        """Call a handler and run it up to its first real wait; None when it has finished.

        A coroutine runs in its own copy of the context variables, as it would in
        a task of its own, and its task later continues in that same copy. A
        handler's exception here is its failure, never the stage's; so is a
        ``CancelledError`` it raises itself (nothing can cancel a synchronous step).
        """
        t0 = time.perf_counter()
        try:
            result = entry.handler(view)
            if asyncio.iscoroutine(result):
                context = contextvars.copy_context()
                try:
                    first = context.run(result.send, None)
                except StopIteration:
                    pass
                else:
                    return _Resumed(result, first), context, t0
            elif inspect.isawaitable(result):
                return result, None, t0
        except (Exception, asyncio.CancelledError) as exc:
            self._record_failure(entry, ctx, exc)
        elapsed = time.perf_counter() - t0
        entry.calls += 1
        entry.total_time += elapsed
        if elapsed > _SLOW_SYNC_S:
            logger.warning("stage handler %s blocked the event loop for %.0f ms", entry.label, elapsed * 1000)
        return None

    async def _finish(self, entry: _Entry, ctx: StageContext, waiting: Awaitable[Any], t0: float) -> None:
        try:
            await waiting
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._record_failure(entry, ctx, exc)
        finally:
            entry.calls += 1
            entry.total_time += time.perf_counter() - t0

    def _record_failure(self, entry: _Entry, ctx: StageContext, exc: BaseException) -> None:
        entry.failures += 1
        logger.error("stage handler %s failed in %s", entry.label, entry.stage.value, exc_info=exc)
        ctx.errors.append(f"{entry.label}: {type(exc).__name__}: {exc}")

    def _record_timeout(self, entry: _Entry, ctx: StageContext) -> None:
        entry.failures += 1
        entry.timeouts += 1
        logger.warning("stage handler %s timed out after %gs in %s", entry.label, entry.timeout, entry.stage.value)
        ctx.errors.append(f"{entry.label}: timed out after {entry.timeout:g}s")

    async def _reap(self, cancelled: list[asyncio.Task[None]], tasks: dict[asyncio.Task[None], _Entry]) -> None:
        """Give cancelled handler tasks a moment to unwind; abandon the ones that ignore it."""
        _, still = await asyncio.wait(cancelled, timeout=self._grace)
        for t in still:
            logger.warning("stage handler %s ignored cancellation; abandoned", tasks[t].label)
            self._stragglers.add(t)
            t.add_done_callback(self._stragglers.discard)


def _own_tools_filter(stage: Stage, ctx: StageContext, entries: tuple[_Entry, ...]) -> tuple[_Entry, ...]:
    if not any(e.own_tools for e in entries):
        return entries
    owner: str | None = None
    if stage is Stage.AFTER_TOOLCALL and ctx.tool_result is not None:
        owner = ctx.tool_result.plugin
    elif ctx.tool_call is not None:
        owner = ctx.tool_call.plugin
    return tuple(e for e in entries if not e.own_tools or e.plugin == owner)


class _Resumed:
    """Awaitable that carries on a coroutine already run up to its first wait.

    ``first`` is what the coroutine yielded (the future it waits for, or None
    for a bare yield); it is handed to the task as if the task had stepped the
    coroutine itself, and everything after is forwarded the way ``await`` does.
    """

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self._coro, self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation (or anything thrown in) goes to the coroutine
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value
