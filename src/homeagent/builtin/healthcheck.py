"""Built-in ``healthcheck``: what the daemon can say about its own health, as tools.

``healthcheck`` (summary and problems), ``healthcheck_plugins``,
``healthcheck_tools``, ``healthcheck_memory``, ``healthcheck_perf``,
``healthcheck_report`` (all of it, as text and data) and
``healthcheck_selftest``, which runs a short agent turn against the current
LLM handing it only read-only tools.

Where the numbers come from: the host gives built-in factories the daemon's
:class:`~homeagent.plugins.services.PluginServices` (tool registry with its
per-tool stats, event bus with its drop counts, LLM control with source
states, memory layers) and the plugin registry (plugin states). What neither
has — when the daemon started, what the agent loop is doing — comes from a
:class:`HealthSources` the daemon passes to the factory. Loop lag is measured
by this plugin's own probe task: it sleeps a fixed interval and records how
late it wakes.

The self-test runs its turn on a private runner: no stage handlers, a
throw-away history, its own event bus (so the web UI does not show it as a
chat reply) and a tool filter, so it cannot touch memory, files or commands
even if the model tries.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import resource
import statistics
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homeagent.agent.memory_port import RecentTurns
from homeagent.agent.process import TurnRunner, TurnSettings
from homeagent.agent.stages import StageHost
from homeagent.config.values import parse_duration
from homeagent.events import EventBus
from homeagent.io.manager import InputMessage
from homeagent.sdk.api import PluginSDK, ServiceUnavailable
from homeagent.sdk.types import ConfigDef, InjectOptions, Stage, StageContext, ToolDef

if TYPE_CHECKING:
    from homeagent.plugins.registry import PluginRegistry
    from homeagent.plugins.services import PluginServices

__all__ = ["SELFTEST_TOOLS", "HealthSources", "HealthcheckPlugin", "LagProbe", "create_plugin"]

SELFTEST_TOOLS = frozenset({
    "memory_recall", "memory_introspect", "doc_query", "knowledge_search", "knowledge_list", "person_query",
    "person_network", "llm_list_sources", "output_list_channels", "terminal_list", "files_list", "files_ls",
})
"""The only tools the self-test turn offers the model (those that exist)."""

SELFTEST_PROMPT = (
    "This is an automatic self-test. Call one or two of the tools you have (for example llm_list_sources or "
    "memory_introspect) to check that they answer, then reply with one short sentence saying what you found."
)
LAG_WARN_MS = 100.0

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


@dataclass
class HealthSources:
    """What the daemon knows that the plugin SDK and PluginServices do not expose.

    Every field is optional; a missing one shows up as ``unknown`` in the reports.
    """

    started_at: float | None = None
    """Epoch seconds when the daemon started (``Daemon.started_at``)."""
    agent_status: Callable[[], Mapping[str, Any]] | None = None
    """The agent loop's state (``Agent.status``: busy, turns, interrupts, queued)."""
    memory_stats: Callable[[], Awaitable[Mapping[str, Any]] | Mapping[str, Any]] | None = None
    """Extra memory numbers (e.g. the layered memory's own stats), merged into healthcheck_memory."""
    run_llm: Callable[..., Coroutine[Any, Any, Any]] | None = None
    """The provider run function for the self-test (default: ``services.llm.manager.run``)."""
    sandbox: Callable[[], Mapping[str, Any]] | None = None
    """Whether commands and plugins are confined (``Sandbox.status``); unconfined by accident is a problem."""


class LagProbe:
    """Measures event-loop lag: how late a sleep of ``interval`` seconds wakes up."""

    def __init__(self, interval: float = 0.5, keep: int = 240) -> None:
        self.interval = interval
        self.samples: deque[float] = deque(maxlen=keep)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="healthcheck-lag-probe")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(self.interval)
            self.samples.append(max(0.0, (loop.time() - t0 - self.interval) * 1000))

    def summary(self) -> dict[str, Any]:
        s = sorted(self.samples)
        if not s:
            return {"samples": 0}
        return {
            "samples": len(s),
            "last_ms": round(self.samples[-1], 2),
            "mean_ms": round(statistics.fmean(s), 2),
            "p95_ms": round(s[min(len(s) - 1, int(len(s) * 0.95))], 2),
            "max_ms": round(s[-1], 2),
            "interval_s": self.interval,
        }


def _err(message: str) -> dict[str, Any]:
    return {"isError": True, "content": message}


async def _maybe(value: Any) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


def _dir_size(path: Path, limit: int = 200_000) -> dict[str, Any]:
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            files += 1
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, n)).st_size
            if files >= limit:
                return {"bytes": total, "files": files, "partial": True}
    return {"bytes": total, "files": files}


def _process_stats() -> dict[str, Any]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out: dict[str, Any] = {
        "pid": os.getpid(),
        "cpu_user_s": round(usage.ru_utime, 2),
        "cpu_system_s": round(usage.ru_stime, 2),
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "python_threads": threading.active_count(),
    }
    with contextlib.suppress(OSError, ValueError, IndexError):
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        out["rss_mb"] = round(pages * os.sysconf("SC_PAGE_SIZE") / 1_048_576, 1)
    with contextlib.suppress(OSError):
        out["open_fds"] = len(os.listdir("/proc/self/fd"))
    return out


class HealthcheckPlugin:
    def __init__(
        self,
        name: str,
        services: PluginServices | None,
        registry: PluginRegistry | None,
        sources: HealthSources | None = None,
    ) -> None:
        self.name = name
        self._services = services
        self._registry = registry
        self._sources = sources or HealthSources()
        self._sdk: PluginSDK | None = None
        self.probe = LagProbe()
        self._started = time.time()

    # -- lifecycle ------------------------------------------------------------

    def start(self, sdk: PluginSDK) -> None:
        self._sdk = sdk
        s = sdk.settings
        s.register_def(ConfigDef(key="probe_interval", default="500ms", type="duration", category="healthcheck",
                                 display_name="Loop-lag probe interval",
                                 description="How often the event-loop lag is sampled.", min=0.05, max=60))
        s.register_def(ConfigDef(key="selftest_timeout", default="60s", type="duration", category="healthcheck",
                                 display_name="Self-test timeout",
                                 description="How long healthcheck_selftest may take.", min=0.1))
        self.probe.interval = self._seconds("probe_interval", 0.5)
        self.probe.start()
        tools: list[tuple[ToolDef, Handler]] = [
            (ToolDef(name="healthcheck", description="Overall health: status, problems, uptime, agent, LLM sources, "
                     "plugins, tool errors, event-loop lag."), self._health),
            (ToolDef(name="healthcheck_plugins", description="Every plugin with its kind, state and last error."),
             self._plugins),
            (ToolDef(name="healthcheck_tools", description="Per-tool calls, errors, timeouts and timings.",
                     parameters={"type": "object", "properties": {
                         "only_problems": {"type": "boolean", "description": "only tools with errors or timeouts"}}}),
             self._tools),
            (ToolDef(name="healthcheck_memory", description="Memory layers: graph, documents, context, disk use."),
             self._memory),
            (ToolDef(name="healthcheck_perf", description="Event-loop lag, process CPU/memory/threads/fds, slowest "
                     "tools, LLM concurrency."), self._perf),
            (ToolDef(name="healthcheck_report", description="A full health report (all sections) as text and data."),
             self._report),
            (ToolDef(name="healthcheck_selftest",
                     description="Run a short test turn against the current LLM with only read-only tools; reports "
                                 "whether the model answered and the tools it called worked.",
                     parameters={"type": "object", "properties": {
                         "prompt": {"type": "string", "description": "what to ask (default: a built-in check)"}}},
                     serial=True, parallel_safe=False), self._selftest),
        ]
        for tool, handler in tools:
            sdk.register_tool(dataclasses.replace(tool, no_memory=True), _guard(handler))

    async def stop(self) -> None:
        await self.probe.stop()
        self._sdk = None

    def _seconds(self, key: str, default: float) -> float:
        assert self._sdk is not None
        value = self._sdk.settings.get(key, default)
        try:
            return float(value) if isinstance(value, int | float) else parse_duration(str(value))
        except ValueError:
            return default

    # -- collectors (each returns plain data, never raises) -------------------

    def _uptime(self) -> dict[str, Any]:
        started = self._sources.started_at
        if started is None:
            return {"uptime_s": round(time.time() - self._started, 1), "uptime_of": "healthcheck plugin"}
        return {"uptime_s": round(time.time() - started, 1), "uptime_of": "daemon"}

    def _agent(self) -> dict[str, Any]:
        fn = self._sources.agent_status
        if fn is None:
            return {"state": "unknown"}
        try:
            status = dict(fn())
        except Exception as e:
            return {"state": "error", "error": f"{type(e).__name__}: {e}"}
        status.setdefault("state", "busy" if status.get("busy") else "idle")
        return status

    def _llm(self) -> dict[str, Any]:
        llm = self._services.llm if self._services is not None else None
        if llm is None:
            return {"state": "unavailable"}
        try:
            data = llm.sources()
            sources = [
                {k: s.get(k) for k in ("name", "state", "last_error", "cooldown_remaining", "in_flight",
                                        "max_concurrent", "fallback", "model") if s.get(k) not in (None, "")}
                for s in data.get("sources", [])
            ]
            return {"current": data.get("current", ""), "sources": sources, "notes": data.get("notes", [])}
        except Exception as e:
            return {"state": "error", "error": f"{type(e).__name__}: {e}"}

    def _plugin_list(self) -> list[dict[str, Any]]:
        if self._registry is not None:
            out = []
            for p in self._registry.list():
                item = {k: p.get(k) for k in ("name", "kind", "state", "error") if p.get(k)}
                item["tools"] = len(p.get("tools") or [])
                if p.get("load_ms") is not None:
                    item["load_ms"] = p.get("load_ms")
                out.append(item)
            return out
        tools = self._services.tools if self._services is not None else None
        owners: dict[str, int] = {}
        for t in tools.tools() if tools is not None else []:
            owners[t.plugin or "core"] = owners.get(t.plugin or "core", 0) + 1
        return [{"name": n, "state": "running", "tools": c} for n, c in sorted(owners.items())]

    def _tool_stats(self) -> list[dict[str, Any]]:
        tools = self._services.tools if self._services is not None else None
        if tools is None:
            return []
        out = []
        for name, st in sorted(tools.stats().items()):
            out.append({
                "name": name, "plugin": st.plugin or "core", "calls": st.calls, "errors": st.errors,
                "timeouts": st.timeouts, "rejected": st.rejected, "mean_ms": round(st.mean_ms, 2),
                "max_ms": round(st.max_ms, 2),
            })
        return out

    def _events(self) -> dict[str, Any]:
        events = self._services.events if self._services is not None else None
        if events is None:
            return {"state": "unavailable"}
        subs = events.stats()
        dropped = {s["name"] or "?": s["dropped"] for s in subs if s.get("dropped")}
        return {"subscribers": len(subs), "dropped_total": sum(dropped.values()), "dropped_by": dropped}

    def _problems(self, llm: dict[str, Any], plugins: list[dict[str, Any]], tools: list[dict[str, Any]],
                  events: dict[str, Any], lag: dict[str, Any]) -> list[str]:
        problems = []
        for p in plugins:
            if p.get("state") == "failed":
                problems.append(f"plugin {p['name']} failed: {p.get('error', '')}".rstrip(": "))
        real = [s for s in llm.get("sources", []) if not s.get("fallback")]
        for s in real:
            if s.get("state") in ("disabled", "cooldown"):
                problems.append(f"LLM source {s['name']} is {s['state']}: {s.get('last_error', '')}".rstrip(": "))
        if real and all(s.get("state") != "ok" for s in real):
            problems.append("no configured LLM source is usable; replies come from the fallback")
        for t in tools:
            if t["timeouts"]:
                problems.append(f"tool {t['name']} timed out {t['timeouts']} time(s)")
            elif t["calls"] >= 3 and t["errors"] / t["calls"] > 0.5:
                problems.append(f"tool {t['name']} failed {t['errors']} of {t['calls']} calls")
        if events.get("dropped_total"):
            problems.append(f"event subscribers dropped {events['dropped_total']} events (slow consumers)")
        if lag.get("p95_ms", 0) > LAG_WARN_MS:
            problems.append(f"event loop lag p95 is {lag['p95_ms']} ms (something blocks the loop)")
        sandbox = self._sandbox()
        if sandbox.get("state") in ("weaker", "refusing"):  # "off" is the owner's choice, not a fault
            problems.append(f"sandbox: {sandbox.get('summary', '')}")
        return problems

    def _sandbox(self) -> dict[str, Any]:
        source = self._sources.sandbox
        return dict(source()) if source is not None else {}

    # -- tools ----------------------------------------------------------------

    async def _health(self, _: dict[str, Any]) -> Any:
        llm, plugins, tools, events, lag = self._llm(), self._plugin_list(), self._tool_stats(), self._events(), \
            self.probe.summary()
        problems = self._problems(llm, plugins, tools, events, lag)
        states: dict[str, int] = {}
        for p in plugins:
            states[str(p.get("state", "?"))] = states.get(str(p.get("state", "?")), 0) + 1
        version = self._services.version if self._services is not None else ""
        return {
            "status": "ok" if not problems else "degraded",
            "problems": problems,
            "version": version,
            **self._uptime(),
            "agent": self._agent(),
            "llm": {"current": llm.get("current", ""),
                    "sources": {s["name"]: s.get("state", "?") for s in llm.get("sources", [])}},
            "plugins": states,
            "tools": {"count": len(tools), "calls": sum(t["calls"] for t in tools),
                      "errors": sum(t["errors"] for t in tools), "timeouts": sum(t["timeouts"] for t in tools)},
            "events": {"dropped_total": events.get("dropped_total", 0)},
            "loop_lag_ms": lag,
            "sandbox": self._sandbox().get("summary", "unknown"),
        }

    async def _plugins(self, _: dict[str, Any]) -> Any:
        return {"plugins": self._plugin_list()}

    async def _tools(self, args: dict[str, Any]) -> Any:
        stats = self._tool_stats()
        if args.get("only_problems"):
            stats = [t for t in stats if t["errors"] or t["timeouts"]]
        return {"tools": stats}

    async def _memory(self, _: dict[str, Any]) -> Any:
        assert self._sdk is not None
        sdk = self._sdk
        out: dict[str, Any] = {}

        async def section(key: str, get: Callable[[], Any]) -> None:
            try:
                async with asyncio.timeout(10):
                    out[key] = await _maybe(get())
            except ServiceUnavailable:
                out[key] = "unavailable"
            except Exception as e:
                out[key] = {"error": f"{type(e).__name__}: {e}"}

        await section("graph", lambda: sdk.memory.introspect())
        await section("documents", lambda: sdk.doc_memory.stats())
        context = self._services.context if self._services is not None else None
        if context is not None:
            await section("context", context.stats)
        else:
            out["context"] = "unavailable"
        if self._sources.memory_stats is not None:
            await section("extra", self._sources.memory_stats)
        data_dir = self._services.data_dir if self._services is not None else None
        if data_dir is not None and (Path(data_dir) / "memory").is_dir():
            out["disk"] = await asyncio.to_thread(_dir_size, Path(data_dir) / "memory")
        return out

    async def _perf(self, _: dict[str, Any]) -> Any:
        tools = sorted((t for t in self._tool_stats() if t["calls"]), key=lambda t: t["mean_ms"], reverse=True)
        llm = self._llm()
        return {
            "loop_lag_ms": self.probe.summary(),
            "process": await asyncio.to_thread(_process_stats),
            "asyncio_tasks": len(asyncio.all_tasks()),
            "slowest_tools": tools[:5],
            "llm_in_flight": {s["name"]: s.get("in_flight", 0) for s in llm.get("sources", [])},
        }

    async def _report(self, args: dict[str, Any]) -> Any:
        health = await self._health(args)
        plugins = self._plugin_list()
        tools = [t for t in self._tool_stats() if t["calls"]]
        memory = await self._memory(args)
        perf = await self._perf(args)
        lines = [f"# HomeAgent health: {health['status']}", ""]
        lines.append(f"Uptime {health['uptime_s']:.0f}s ({health['uptime_of']}); version {health['version'] or '?'}.")
        agent = health["agent"]
        lines.append(f"Agent: {agent.get('state')}, {agent.get('turns', '?')} turns, "
                     f"{agent.get('interrupts', '?')} interrupts, {agent.get('queued', '?')} queued.")
        lines.append("LLM: current " + (health["llm"]["current"] or "none") + "; " + ", ".join(
            f"{n} {s}" for n, s in health["llm"]["sources"].items()))
        if health["problems"]:
            lines += ["", "## Problems", *[f"- {p}" for p in health["problems"]]]
        lines += ["", "## Plugins", *[f"- {p['name']} ({p.get('kind', '?')}): {p.get('state', '?')}"
                                      + (f" — {p['error']}" if p.get("error") else "") for p in plugins]]
        used = [f"- {t['name']}: {t['calls']} calls, {t['errors']} errors, {t['timeouts']} timeouts, "
                f"mean {t['mean_ms']} ms" for t in tools]
        lines += ["", "## Tools used", *(used or ["- none yet"])]
        lag = perf["loop_lag_ms"]
        lines += ["", "## Performance",
                  f"- loop lag: p95 {lag.get('p95_ms', '?')} ms, max {lag.get('max_ms', '?')} ms "
                  f"over {lag.get('samples', 0)} samples",
                  f"- process: rss {perf['process'].get('rss_mb', '?')} MB, "
                  f"{perf['process'].get('python_threads', '?')} threads, {perf['process'].get('open_fds', '?')} fds",
                  f"- events dropped: {health['events']['dropped_total']}"]
        lines += ["", "## Memory", *[f"- {k}: {v}" for k, v in memory.items()]]
        return {"report": "\n".join(lines), "health": health, "plugins": plugins, "tools": tools,
                "memory": memory, "perf": perf}

    async def _selftest(self, args: dict[str, Any]) -> Any:
        services = self._services
        if services is None:
            return _err("the self-test needs the daemon's services; this healthcheck instance has none")
        run_llm = self._sources.run_llm
        if run_llm is None:
            run_llm = services.llm.manager.run if services.llm is not None else None
        if run_llm is None:
            return _err("the self-test needs an LLM provider manager; none is available")
        allowed = sorted(t.name for t in services.tools.tools() if t.name in SELFTEST_TOOLS)
        inner_events = EventBus(history=50)
        stages = StageHost(default_timeout=5.0)

        def read_only(ctx: StageContext) -> None:  # the filter hides tools; this refuses a call by name anyway
            call = ctx.tool_call
            if call is not None and call.name not in SELFTEST_TOOLS:
                call.denied = True
                call.deny_reason = "the self-test offers only read-only tools"

        stages.register(Stage.BEFORE_TOOLCALL, read_only, plugin=self.name, name="selftest-read-only")
        runner = TurnRunner(
            stages=stages,
            tools=services.tools,
            run_llm=run_llm,
            prompt=services.prompt,
            memory=RecentTurns(max_turns=1),
            events=inner_events,
            settings=TurnSettings(max_tool_turns=lambda: 3, tool_timeout=lambda: 30.0),
            tool_filter=lambda t: t.name in SELFTEST_TOOLS,
        )
        prompt = str(args.get("prompt") or SELFTEST_PROMPT)
        message = InputMessage(prompt, "healthcheck", "healthcheck", InjectOptions(no_memory=True))
        timeout = self._seconds("selftest_timeout", 60.0)
        started = time.perf_counter()
        task = asyncio.get_running_loop().create_task(runner.run(message), name="healthcheck-selftest")
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await inner_events.close()
        elapsed = round((time.perf_counter() - started) * 1000, 1)
        if not done:
            out: dict[str, Any] = {"ok": False, "error": f"the self-test did not finish within {timeout:g}s",
                                   "tools_offered": allowed, "duration_ms": elapsed}
        else:
            result = task.result()
            calls = [{"tool": c.get("tool"), "status": c.get("status")} for c in result.tool_calls]
            ok = result.ok and bool(result.text.strip()) and all(c["status"] == "ok" for c in calls)
            out = {"ok": ok, "reply": result.text[:1000], "error": result.error, "source": result.source,
                   "tools_offered": allowed, "tool_calls": calls, "usage": result.usage, "duration_ms": elapsed}
            if not result.text.strip() and not result.error:
                out["error"] = "the model gave an empty reply"
        if self._sdk is not None:
            self._sdk.publish("healthcheck_selftest", {k: out.get(k) for k in ("ok", "error", "source", "duration_ms")})
        return out


def _guard(fn: Handler) -> Handler:
    async def call(args: dict[str, Any]) -> Any:
        try:
            return await fn(args)
        except (ServiceUnavailable, ValueError, KeyError) as e:
            return _err(str(e))

    return call


def create_plugin(name: str, config: Mapping[str, Any], *, sources: HealthSources | None = None) -> HealthcheckPlugin:
    """The factory; the daemon binds ``sources`` with functools.partial (see builtin.catalog)."""
    return HealthcheckPlugin(name, config.get("services"), config.get("registry"), sources)
