"""Sub-agents: ``spawn_child`` runs a task in a child agent beside the parent turn.

The parent keeps talking while a child works; it collects the answer later
with ``child_result``. A child is a separate :class:`TurnRunner` (built by the
daemon's ``make_runner``) with its own short context, its own LLM slot and a
restricted tool set: it cannot spawn children of its own, change settings or
manage plugins, so a runaway child cannot reconfigure the daemon or fork
without bound.

Children belong to the parent turn that spawned them (the newest non-child
``raw_input`` event when ``spawn_child`` runs). When that turn ends
*interrupted* (the user pressed stop), its children are cancelled; a parent
turn that ends normally leaves them running. ``close()`` cancels all of them
(daemon stop). At most ``max_children`` run at once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from homeagent.agent.process import TurnRunner
from homeagent.events import Event, EventBus
from homeagent.io.manager import InputMessage, TurnResult
from homeagent.sdk.types import InjectOptions, ToolDef, ToolHandler

__all__ = ["CHILD_PREFIX", "ChildTask", "SubAgents", "child_tool_allowed"]

log = logging.getLogger("homeagent.agent.subagents")

CHILD_PREFIX = (
    "[子任务] You are a sub-agent working for the main agent on exactly one task. Do it with the tools you have "
    "and answer with the result only; the main agent reads your answer.\n\nTask: "
)
MAX_TASK_CHARS = 8000
MAX_WAIT = 60.0
KEEP_DONE = 50

_BLOCKED_NAMES = frozenset({"spawn_child", "child_result", "plgreload", "llm_set_source"})
_BLOCKED_PREFIXES = ("config_", "plugin_")
_BLOCKED_PLUGINS = frozenset({"cfgmgr", "pluginmgr"})


def child_tool_allowed(tool: ToolDef) -> bool:
    """The tools a child may use: everything but sub-agent, settings and plugin management."""
    if tool.name.startswith("output_send__"):
        return True
    if tool.name in _BLOCKED_NAMES or tool.plugin in _BLOCKED_PLUGINS:
        return False
    return not tool.name.startswith(_BLOCKED_PREFIXES)


@dataclass
class ChildTask:
    id: str
    task: str
    parent: str  # input id of the parent turn ("" when unknown)
    input_id: str
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    status: str = "running"  # running | done | error | cancelled
    result: TurnResult | None = None
    error: str = ""
    runner_task: asyncio.Task[TurnResult] | None = None

    def describe(self) -> dict[str, Any]:
        end = self.ended if self.ended is not None else time.monotonic()
        out: dict[str, Any] = {"task_id": self.id, "status": self.status, "task": self.task[:200],
                               "elapsed_s": round(end - self.started, 1)}
        if self.result is not None:
            out["result"] = self.result.text
            out["tools_used"] = [c.get("tool") for c in self.result.tool_calls]
        if self.error:
            out["error"] = self.error
        return out


class SubAgents:
    """The ``spawn_child`` / ``child_result`` tools and the children they run."""

    def __init__(
        self,
        make_runner: Callable[[Callable[[ToolDef], bool]], TurnRunner],
        *,
        events: EventBus | None = None,
        max_children: Callable[[], int] = lambda: 3,
        child_timeout: Callable[[], float] = lambda: 600.0,
        on_done: Callable[[str], None] | None = None,
        tool_filter: Callable[[ToolDef], bool] = child_tool_allowed,
    ) -> None:
        self._make_runner = make_runner
        self._events = events
        self._max_children = max_children
        self._child_timeout = child_timeout
        self._on_done = on_done
        self._filter = tool_filter
        self._children: dict[str, ChildTask] = {}
        self._ids = itertools.count(1)
        self._input_ids: set[str] = set()
        self._unlisten: Callable[[], None] | None = None
        self._last_parent = ""  # input id of the newest non-child turn
        self._closed = False

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        """Watch the event bus so children die with an interrupted parent turn (needs a running loop)."""
        if self._events is not None and self._unlisten is None:
            self._unlisten = self._events.listen(self._on_event, ["raw_input", "agent_output"], name="subagents")

    async def close(self) -> None:
        """Cancel every running child and wait for it to finish."""
        self._closed = True
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        await self.cancel_children(None)

    async def cancel_children(self, parent: str | None) -> int:
        """Cancel the running children of parent turn ``parent`` (None: all); returns how many."""
        tasks = [c.runner_task for c in self._children.values()
                 if c.status == "running" and c.runner_task is not None and (parent is None or c.parent == parent)]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    def _on_event(self, event: Event) -> Any:
        data = event.data
        if event.type == "raw_input":
            input_id = str(data.get("id") or "")
            if input_id and input_id not in self._input_ids:
                self._last_parent = input_id
            return None
        input_id = str(data.get("input_id") or "")
        if data.get("interrupted") and input_id and input_id not in self._input_ids:
            return self.cancel_children(input_id)
        return None

    def _current_parent(self) -> str:
        if self._events is None:
            return ""
        for event in reversed(self._events.recent(types=["raw_input"])):
            input_id = str(event.data.get("id") or "")
            if input_id not in self._input_ids:
                return input_id
        return self._last_parent  # the replay ring moved on (a very busy turn): what the listener saw

    # -- tools ----------------------------------------------------------------

    def tools(self) -> list[tuple[ToolDef, ToolHandler]]:
        return [
            (ToolDef(
                name="spawn_child",
                description="Start a sub-agent on a self-contained task; it runs in the background with its own "
                            "context and most of your tools. Returns its id (child_N); collect the answer with "
                            "child_result. Give it everything it needs in `task`.",
                parameters={"type": "object",
                            "properties": {"task": {"type": "string", "description": "the complete task"}},
                            "required": ["task"], "additionalProperties": False},
                plugin="core", serial=True, parallel_safe=False,
            ), self._spawn),
            (ToolDef(
                name="child_result",
                description="A sub-agent's status (running/done/error/cancelled) and, when done, its answer. "
                            "wait: up to this many seconds for it to finish.",
                parameters={"type": "object",
                            "properties": {"task_id": {"type": "string"},
                                           "wait": {"type": "number", "minimum": 0, "maximum": MAX_WAIT}},
                            "required": ["task_id"], "additionalProperties": False},
                plugin="core", no_memory=True,
            ), self._result),
        ]

    async def _spawn(self, args: dict[str, Any]) -> Any:
        task = str(args.get("task") or "").strip()
        if not task:
            return {"isError": True, "content": "task is empty: describe what the sub-agent should do"}
        if len(task) > MAX_TASK_CHARS:
            return {"isError": True, "content": f"task is longer than {MAX_TASK_CHARS} characters"}
        if self._closed:
            return {"isError": True, "content": "sub-agents are shutting down"}
        running = [c.id for c in self._children.values() if c.status == "running"]
        limit = max(1, int(self._max_children()))
        if len(running) >= limit:
            return {"isError": True, "content": f"{len(running)} sub-agents are already running "
                                                f"({', '.join(running)}; max {limit}); wait for one with child_result"}
        cid = f"child_{next(self._ids)}"
        loop = asyncio.get_running_loop()
        message = InputMessage(CHILD_PREFIX + task, source=cid, channel="subagent",
                               options=InjectOptions(no_memory=True, meta={"child_id": cid}))
        message.reply = loop.create_future()  # the answer goes to child_result, never to an output channel
        child = ChildTask(cid, task, self._current_parent(), message.id)
        self._input_ids.add(message.id)
        try:
            runner = self._make_runner(self._filter)
        except Exception as exc:
            log.exception("sub-agent %s: building its runner failed", cid)
            return {"isError": True, "content": f"could not start a sub-agent: {exc}"}
        child.runner_task = loop.create_task(self._run(child, runner, message), name=f"subagent-{cid}")
        self._children[cid] = child
        self._prune()
        log.info("sub-agent %s started (parent %s): %.80s", cid, child.parent or "?", task)
        return {"task_id": cid, "status": "running"}

    async def _run(self, child: ChildTask, runner: TurnRunner, message: InputMessage) -> TurnResult:
        limit = float(self._child_timeout())
        try:
            async with asyncio.timeout(limit) as scope:
                result = await runner.run(message)
            if scope.expired():  # the runner turns its cancellation into an "interrupted" result
                raise TimeoutError
        except TimeoutError:
            child.status, child.error = "error", f"timed out after {limit:g}s"
            result = TurnResult(ok=False, error=child.error, input_id=message.id)
        except asyncio.CancelledError:
            child.status, child.error = "cancelled", "cancelled (the parent turn was interrupted or the daemon stopped)"
            child.ended = time.monotonic()
            raise
        except Exception as exc:  # a broken runner must not leave the child "running" forever
            log.exception("sub-agent %s failed", child.id)
            child.status, child.error = "error", f"internal error: {type(exc).__name__}: {exc}"
            result = TurnResult(ok=False, error=child.error, input_id=message.id)
        else:
            if result.interrupted:
                child.status, child.error = "cancelled", result.error or "interrupted"
            elif not result.ok:
                child.status, child.error = "error", result.error
            else:
                child.status = "done"
        child.result = result if child.status != "error" or result.text else child.result
        child.ended = time.monotonic()
        log.info("sub-agent %s: %s", child.id, child.status)
        if self._on_done is not None and child.status in ("done", "error"):
            try:
                self._on_done(f"[子任务 {child.id} 已{'完成' if child.status == 'done' else '失败'}] "
                              "call child_result to read it")
            except Exception:
                log.exception("sub-agent %s: on_done failed", child.id)
        return result

    async def _result(self, args: dict[str, Any]) -> Any:
        cid = str(args.get("task_id") or "").strip()
        if cid.isdigit():
            cid = f"child_{cid}"
        child = self._children.get(cid)
        if child is None:
            known = ", ".join(self._children) or "none"
            return {"isError": True, "content": f"no sub-agent {cid!r} (known: {known})"}
        wait = min(float(args.get("wait") or 0), MAX_WAIT)
        if wait > 0 and child.status == "running" and child.runner_task is not None:
            await asyncio.wait({child.runner_task}, timeout=wait)  # never cancels the child
        return child.describe()

    def _prune(self) -> None:
        done = [c for c in self._children.values() if c.status != "running"]
        for c in done[: max(0, len(done) - KEEP_DONE)]:
            self._children.pop(c.id, None)
            self._input_ids.discard(c.input_id)

    def status(self) -> list[dict[str, Any]]:
        return [c.describe() for c in self._children.values()]
