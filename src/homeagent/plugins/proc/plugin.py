"""A subprocess plugin as the registry sees it: one :class:`ProcPlugin`, however often its process restarts.

Lifecycle (why it is shaped this way):

* The loader (:func:`make_loader`) spawns the child and completes the
  handshake during the registry's *prepare* step, which runs plugins
  concurrently, so slow-starting interpreters overlap; ``start`` then sends
  ``plugin.init`` and ``plugin.start``, during which the plugin registers
  its tools, stages and channels through the :class:`HostSession`.
* When the process exits while it should be running, its session is closed
  at once: every tool, stage handler, channel, cleaner and subscription it
  registered disappears and calls in flight fail with a tool error that
  says the plugin exited. Then it is restarted after an exponential backoff
  (reset once a run has lasted ``stable_after``), unless it opted out with
  ``lifecycle.autoRestart(false)`` or crashed ``breaker_crashes`` times within
  ``breaker_window`` — then it stays down (``state: failed``) and says so in
  the log, in a ``plugin`` event and in :meth:`ProcPlugin.health`.
* A call that times out (or is cancelled from outside) triggers a liveness
  check: the plugin must answer a ``ping`` within ``hang_timeout``, else it is
  considered hung, killed and restarted. A slow tool is not a hung plugin; a
  plugin whose loop is blocked is.
* Where the daemon's sandbox works (:mod:`homeagent.confine`), the process
  runs under bubblewrap: its own folder and the Python runtime read-only, its
  state folder (``plugin_data/<name>``, also its ``HOME``) read-write, nothing
  else of the data dir, the network only when its manifest declares the
  ``net`` capability, and the rest of the filesystem (read-only) only when it
  declares ``files``. ``plugin info`` shows which (``sandbox``).
* Restarts reuse the SDK object the registry gave ``start``; the registry's
  own per-plugin unregistration (``HostSDK.close``) still removes everything
  on unload or reload.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shlex
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homeagent import __version__
from homeagent.childenv import scrubbed_env
from homeagent.confine import Confinement, Launch, SandboxUnavailable, python_paths
from homeagent.plugins.manifest import Manifest, entry_kind
from homeagent.plugins.proc.capabilities import Capabilities
from homeagent.plugins.proc.connection import CallTimeout, ConnectionStats, Pipes, PluginGone
from homeagent.plugins.proc.host import HostSession, PluginControl, SessionOptions
from homeagent.plugins.proc.limits import ResourceLimits, explain_exit
from homeagent.plugins.proc.supervisor import Child, ChildExit, Supervisor
from homeagent.sdk.api import Plugin, PluginSDK
from homeagent.sdk.protocol import MAX_FRAME, PROTOCOL_VERSION, RPCError

if TYPE_CHECKING:
    from homeagent.events import EventBus
    from homeagent.plugins.registry import PluginSource

__all__ = ["LaunchError", "ProcOptions", "ProcPlugin", "command_for", "is_process_manifest", "make_loader"]

log = logging.getLogger("homeagent.plugins.proc")

class LaunchError(RuntimeError):
    """The plugin process could not be started or did not complete the handshake."""


@dataclass
class ProcOptions:
    """Timeouts and restart policy for subprocess plugins (seconds unless noted)."""

    handshake_timeout: float = 10.0
    start_timeout: float = 30.0
    call_timeout: float = 60.0
    stop_timeout: float = 3.0
    kill_grace: float = 2.0
    hang_timeout: float = 5.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    stable_after: float = 60.0
    breaker_crashes: int = 5
    breaker_window: float = 120.0
    max_frame: int = MAX_FRAME
    max_inflight: int = 64
    inject_rate: float = 20.0
    inject_burst: float = 100.0
    cleaner_timeout: float = 0.5
    log_rate: float = 50.0
    log_burst: float = 200.0
    python: str = field(default_factory=lambda: sys.executable)
    # The memory and CPU-time limits of the named plugin, read at each (re)start.
    limits: Callable[[str], ResourceLimits] = field(default=lambda name: ResourceLimits())
    # Confines each (re)start of the process; None: run it as the daemon's user (the weaker mode).
    sandbox: Confinement | None = None

    def session(self) -> SessionOptions:
        return SessionOptions(
            call_timeout=self.call_timeout,
            cleaner_timeout=self.cleaner_timeout,
            max_frame=self.max_frame,
            max_inflight=self.max_inflight,
            inject_rate=self.inject_rate,
            inject_burst=self.inject_burst,
            log_rate=self.log_rate,
            log_burst=self.log_burst,
        )


def is_process_manifest(manifest: Manifest) -> bool:
    """True when this plugin runs as a subprocess: an executable entry, or ``"runtime": "process"``."""
    return manifest.extra.get("runtime") == "process" or entry_kind(manifest.entry) == "process"


def command_for(folder: Path, manifest: Manifest, python: str = sys.executable) -> list[str]:
    """The argv that starts the plugin; ValueError saying what is wrong with the entry."""
    entry = manifest.entry
    if entry_kind(entry) == "python":
        return [python, "-m", "homeagent.sdk.run", str(folder)]
    base = folder.resolve()
    path = (folder / entry).resolve()
    if not path.is_relative_to(base):
        raise ValueError(f"entry {entry!r} points outside the plugin folder")
    if not path.is_file():
        raise ValueError(f"entry {entry!r} does not exist in {folder}")
    if os.access(path, os.X_OK):
        return [str(path)]
    with path.open("rb") as f:
        first = f.readline(512)
    if first.startswith(b"#!"):  # a script unpacked without its executable bit: run its interpreter
        interpreter = shlex.split(first[2:].decode("utf-8", "replace").strip())
        if interpreter:
            return [*interpreter, str(path)]
    raise ValueError(f"entry {entry!r} is not executable; run: chmod +x {path}")


def _child_env(
    name: str, folder: Path, python: str, keep: tuple[str, ...] = (), confined_state: Path | None = None
) -> dict[str, str]:
    """The daemon's environment minus credentials (bar those the manifest's ``env`` names), plus the plugin's identity.

    ``confined_state``: the state folder of a sandboxed plugin, its only writable place, so its temporary files.
    """
    env = scrubbed_env(keep=keep, keep_prefixes=("HOMEAGENT_PLUGIN_",))
    if confined_state is not None:
        env["TMPDIR"] = str(confined_state)
    env.update(
        HOMEAGENT_PLUGIN_NAME=name,
        HOMEAGENT_PLUGIN_DIR=str(folder),
        HOMEAGENT_PROTOCOL=str(PROTOCOL_VERSION),
        HOMEAGENT_PYTHON=python,
        PYTHONUNBUFFERED="1",
    )
    return env


def _tail(lines: tuple[str, ...] | list[str], n: int = 3) -> str:
    shown = [line for line in lines if line.strip()][-n:]
    return ("; stderr: " + " | ".join(shown)) if shown else ""


class ProcPlugin(Plugin):
    """A plugin whose code runs in a child process (any language speaking protocol v1)."""

    def __init__(
        self,
        name: str,
        folder: Path,
        manifest: Manifest,
        *,
        supervisor: Supervisor,
        options: ProcOptions | None = None,
        plugins: PluginControl | None = None,
        events: EventBus | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.folder = Path(folder)
        self.manifest = manifest
        self.options = options or ProcOptions()
        self.argv = command_for(self.folder, manifest, self.options.python)
        self.capabilities, self.warnings = Capabilities.from_manifest(manifest.capabilities)
        self.log = logging.getLogger(f"homeagent.plugin.{name}")
        self._supervisor = supervisor
        self._plugins = plugins
        self._events = events
        self._data_dir = data_dir
        self._state = "stopped"
        self._child: Child | None = None
        self._session: HostSession | None = None
        self._sdk: PluginSDK | None = None
        self._auto_restart = True
        self._status: dict[str, Any] | None = None
        self._kill_reason = ""
        self._hello: dict[str, Any] = {}
        self._started_at = 0.0
        self._crash_times: collections.deque[float] = collections.deque(maxlen=max(1, self.options.breaker_crashes))
        self._consecutive = 0
        self._restart_task: asyncio.Task[Any] | None = None
        self._hang_check: asyncio.Task[Any] | None = None
        self._next_restart = 0.0
        self.restarts = 0
        self.crashes = 0
        self.last_crash: dict[str, Any] | None = None
        self.error = ""
        self._stats = ConnectionStats()  # across restarts
        self._limits = ResourceLimits()
        self._log_dropped = 0  # by sessions that have ended
        self._sandbox_label = ""

    # ---------------------------------------------------------------- public lifecycle

    @property
    def state(self) -> str:
        """starting | running | restarting | crashed | failed | stopping | stopped."""
        return self._state

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None and self._child.running else None

    async def launch(self) -> None:
        """Spawn the child and complete the handshake (the loader's part; concurrent across plugins)."""
        if self._state == "stopped":
            self._state = "starting"
        try:
            await self._launch()
        except BaseException:
            if self._state == "starting":
                self._state = "stopped"
            raise

    async def start(self, sdk: PluginSDK) -> None:
        """``plugin.init`` + ``plugin.start``: the plugin registers everything through ``sdk`` meanwhile."""
        self._sdk = sdk
        self._state = "starting"
        try:
            if self._child is None or not self._child.running:
                await self._launch()
            await self._init_and_start(sdk)
        except LaunchError as e:
            self._state = "stopped"
            await self._discard_child()
            raise ValueError(str(e)) from None
        except BaseException:
            self._state = "stopped"
            await self._discard_child()
            raise
        self._running()

    async def stop(self) -> None:
        """Ask the plugin to stop, then end its process (SIGTERM/SIGKILL to its group if it lingers)."""
        previous, self._state = self._state, "stopping"
        for task in (self._restart_task, self._hang_check):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        child, session = self._child, self._session
        if child is not None and child.running:
            if session is not None and not session.closed and previous == "running":
                with contextlib.suppress(Exception):
                    await session.call("plugin.stop", {}, timeout=self.options.stop_timeout)
            child.close_stdin()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(child.exited.wait(), self.options.kill_grace)
            if child.running:
                await child.terminate(self.options.kill_grace)
        if session is not None:
            session.close("the plugin was stopped")
        self._state = "stopped"

    def health(self) -> dict[str, Any]:
        """State, pid, restarts, last crash, call counts and latencies: for `plugin info` and the web UI."""
        session = self._session
        stats = self._stats
        out: dict[str, Any] = {
            "kind": "process",
            "state": self._state,
            "pid": self.pid,
            "command": list(self.argv),
            "protocol": self._hello.get("protocol"),
            "sdk_version": self._hello.get("sdk_version", ""),
            "uptime_s": round(time.time() - self._started_at, 3) if self._state == "running" else 0.0,
            "restarts": self.restarts,
            "crashes": self.crashes,
            "auto_restart": self._auto_restart,
            "status": self._status,
            "circuit": "open" if self._state == "failed" else "closed",
            "last_crash": self.last_crash,
            "error": self.error,
            "capabilities": self.capabilities.to_list(),
            "calls": {m: s.summary() for m, s in stats.calls.items()},
            "served": dict(stats.served),
            "protocol_errors": stats.to_dict(),
            "denied_calls": session.denied if session is not None else 0,
            "cleaner_skipped": session.cleaner_skipped if session is not None else 0,
            "registrations": session.registrations() if session is not None else [],
            "limits": self._limits.to_dict(),
            "sandbox": self._sandbox_label,
            "log_dropped": self._log_dropped + (session.log_dropped if session is not None else 0),
        }
        if self._state == "restarting":
            out["next_restart_in_s"] = round(max(0.0, self._next_restart - time.time()), 3)
        return out

    # ---------------------------------------------------------------- internals: one process

    async def _launch(self) -> None:
        early: list[bytes] = []
        holder: list[HostSession] = []

        def on_stdout(data: bytes) -> None:
            if holder:
                holder[0].connection.feed(data)
            else:
                early.append(data)

        self._kill_reason = ""
        if self._session is not None:
            self._log_dropped += self._session.log_dropped
            self._session.log_dropped = 0
        self._limits = self.options.limits(self.name)
        try:
            launch = await self._confined()
        except SandboxUnavailable as e:
            raise LaunchError(str(e)) from None
        except OSError as e:
            raise LaunchError(f"cannot create its state folder: {e.strerror or e}") from None
        self._sandbox_label = launch.label
        try:
            child = await self._supervisor.spawn(
                self.name,
                launch.argv,
                cwd=self.folder,
                env=_child_env(self.name, self.folder, self.options.python, self.manifest.env,
                               self._data_dir if launch.confined else None),
                on_stdout=on_stdout,
                on_exit=self._on_exit,
                logger=self.log,
                limits=self._limits,
            )
        except OSError as e:
            raise LaunchError(f"cannot start {self.argv[0]}: {e.strerror or e}") from None
        session = HostSession(
            self.name,
            Pipes(
                write=child.write,
                backlog=child.backlog,
                pause_reading=child.pause_reading,
                read_fd=child.fd(1),
                write_fd=child.fd(0),
            ),
            self.capabilities,
            options=self.options.session(),
            on_fatal=lambda why: self._kill(child, why),
            on_auto_restart=self._set_auto_restart,
            on_status=self._set_status,
            on_call_problem=lambda: self._check_alive(session),
            plugins=self._plugins,
            detach=self._supervisor.detach,
            plugin_log=self.log,
            stats=self._stats,
        )
        self._child, self._session = child, session
        holder.append(session)
        for data in early:
            session.connection.feed(data)
        if not child.running:  # it died before the session existed
            session.close(f"plugin process {child.exit.reason if child.exit else 'exited'}")
        params = {
            "protocol": PROTOCOL_VERSION,
            "core_version": __version__,
            "plugin_name": self.name,
            "capabilities": self.capabilities.to_list(),
            "max_frame": self.options.max_frame,
        }
        try:
            hello = await session.call("handshake", params, timeout=self.options.handshake_timeout)
        except CallTimeout:
            await self._discard_child()
            raise LaunchError(
                f"did not answer the handshake within {self.options.handshake_timeout:g}s"
                f"{_tail(list(child.stderr.tail))}"
            ) from None
        except PluginGone:
            await child.exited.wait()
            reason = self._exit_reason(child.exit) if child.exit else "exited"
            raise LaunchError(
                f"process {reason} before completing the handshake{_tail(list(child.stderr.tail))}"
            ) from None
        except RPCError as e:
            await self._discard_child()
            raise LaunchError(f"refused the handshake: {e.message}") from None
        problem = self._check_hello(hello)
        if problem:
            await self._discard_child()
            raise LaunchError(problem)
        self._hello = hello

    async def _confined(self) -> Launch:
        """The command line of this start: under the sandbox when there is one (its folder, its state, its net)."""
        sandbox = self.options.sandbox
        if sandbox is None:
            return Launch(list(self.argv), False, True, "none (no sandbox configured)")
        state = self._data_dir
        if state is not None:
            await asyncio.to_thread(state.mkdir, parents=True, exist_ok=True)
        whole = ["/"] if "files" in self.capabilities.granted else []
        runtime = await asyncio.to_thread(python_paths)  # a stat() per sys.path entry
        return sandbox.wrap(
            self.argv,
            cwd=str(self.folder),
            readable=[*whole, self.folder, *runtime],
            writable=[state] if state is not None else [],
            network="net" in self.capabilities.granted,
            home=str(state) if state is not None else "/tmp",
        )

    @staticmethod
    def _check_hello(hello: Any) -> str:
        if not isinstance(hello, dict):
            return f"answered the handshake with {type(hello).__name__}, not an object"
        version = hello.get("protocol")
        if isinstance(version, bool) or not isinstance(version, int):
            return "answered the handshake without a protocol version"
        if version != PROTOCOL_VERSION:
            return f"speaks protocol version {version}; this HomeAgent speaks version {PROTOCOL_VERSION}"
        return ""

    async def _init_and_start(self, sdk: PluginSDK) -> None:
        session = self._session
        if session is None or session.closed:
            raise LaunchError("the plugin process is not running")
        session.bind(sdk)
        init = {
            "name": self.name,
            "plugin_dir": str(self.folder),
            "data_dir": str(self._data_dir) if self._data_dir is not None else "",
            "manifest": self.manifest.to_dict(),
            "capabilities": self.capabilities.to_list(),
        }
        timeout = self.options.start_timeout
        for method, params in (("plugin.init", init), ("plugin.start", {})):
            try:
                await session.call(method, params, timeout=timeout)
            except CallTimeout:
                raise LaunchError(f"{method} did not finish within {timeout:g}s") from None
            except PluginGone:
                child = self._child
                if child is not None:
                    await child.exited.wait()
                why = self._exit_reason(child.exit) if child is not None and child.exit else "exited"
                tail = _tail(list(child.stderr.tail)) if child is not None else ""
                raise LaunchError(f"process {why} during {method}{tail}") from None
            except RPCError as e:
                raise LaunchError(f"{method} failed: {e.message}") from None

    async def _discard_child(self) -> None:
        child, session = self._child, self._session
        if session is not None:
            session.close("the plugin process was discarded")
        if child is not None and child.running:
            child.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(child.exited.wait(), 5.0)

    def _kill(self, child: Child, reason: str) -> None:
        if child.running:
            self._kill_reason = reason
            self.log.error("plugin %s: %s; killing pid %d", self.name, reason, child.pid)
            child.kill()

    def _set_status(self, state: str, detail: str) -> None:
        """What the plugin says about its own work (e.g. its connection to a chat service), for `plugin info`."""
        self._status = {"state": state, "detail": detail, "at": round(time.time(), 3)}

    def _set_auto_restart(self, enabled: bool) -> None:
        self._auto_restart = enabled
        self.log.info("plugin %s: automatic restart %s", self.name, "on" if enabled else "off")

    def _running(self) -> None:
        self._state = "running"
        self._started_at = time.time()
        self.error = ""

    def _publish(self, state: str, error: str = "") -> None:
        if self._events is None:
            return
        with contextlib.suppress(Exception):
            self._events.publish(
                "plugin", {"name": self.name, "state": state, "error": error, "pid": self.pid, "restarts": self.restarts}
            )

    # ---------------------------------------------------------------- internals: crashes and restarts

    def _exit_reason(self, exit: ChildExit) -> str:
        """How the process ended, and why when a resource limit explains it."""
        _, why = explain_exit(exit.code, exit.stderr_tail, self._limits)
        return f"{exit.reason}: {why}" if why else exit.reason

    def _on_exit(self, child: Child, exit: ChildExit) -> None:
        if child is not self._child:
            return
        reason = f"killed: {self._kill_reason}" if self._kill_reason else f"plugin process {self._exit_reason(exit)}"
        if self._session is not None:
            self._session.close(reason)
        if self._state != "running":
            return  # stopping, or a start/restart in progress that sees the failure itself
        self._crashed(reason, exit)

    def _crashed(self, reason: str, exit: ChildExit | None) -> None:
        now = time.time()
        if self._started_at and now - self._started_at >= self.options.stable_after:
            self._consecutive = 0
        self._consecutive += 1
        self.crashes += 1
        self._crash_times.append(now)
        self.last_crash = {
            "at": now,
            "reason": reason,
            "exit_code": exit.code if exit is not None else None,
            "limit": explain_exit(exit.code, exit.stderr_tail, self._limits)[0] if exit is not None and not self._kill_reason else "",
            "stderr": list(exit.stderr_tail[-10:]) if exit is not None else [],
        }
        self.log.warning("plugin %s crashed: %s%s", self.name, reason, _tail(exit.stderr_tail) if exit else "")
        self._after_crash(reason)

    def _after_crash(self, reason: str) -> None:
        now = time.time()
        if not self._auto_restart:
            self._state = "crashed"
            self.error = f"{reason}; automatic restart is off"
            self._publish("crashed", self.error)
            return
        recent = [t for t in self._crash_times if now - t <= self.options.breaker_window]
        if len(recent) >= self.options.breaker_crashes:
            self._state = "failed"
            self.error = (
                f"crashed {len(recent)} times within {self.options.breaker_window:g}s; not restarting "
                f"(last: {reason}). Fix it, then run: homeagent plugin reload {self.name}"
            )
            self.log.error("plugin %s: %s", self.name, self.error)
            self._publish("failed", self.error)
            return
        self._state = "restarting"
        self.error = reason
        self._publish("restarting", reason)
        self._restart_task = self._supervisor.detach(self._restart_loop(), f"plugin-restart:{self.name}")

    async def _restart_loop(self) -> None:
        while True:
            delay = min(self.options.backoff_max, self.options.backoff_initial * 2 ** max(0, self._consecutive - 1))
            self._next_restart = time.time() + delay
            await asyncio.sleep(delay)
            sdk = self._sdk
            if self._state != "restarting" or sdk is None or getattr(sdk, "closed", False):
                return
            try:
                await self._launch()
                await self._init_and_start(sdk)
            except asyncio.CancelledError:
                await self._discard_child()
                raise
            except Exception as e:
                await self._discard_child()
                if self._state != "restarting":
                    return
                self._crashed(f"restart failed: {e}", None)
                return  # _crashed scheduled the next attempt (or opened the circuit)
            self.restarts += 1
            self._running()
            self.log.info("plugin %s restarted (pid %s, restart #%d)", self.name, self.pid, self.restarts)
            self._publish("running")
            return

    def _check_alive(self, session: HostSession) -> None:
        if self._state != "running" or session is not self._session:
            return
        if self._hang_check is not None and not self._hang_check.done():
            return
        self._hang_check = self._supervisor.detach(self._ping(session), f"plugin-ping:{self.name}")

    async def _ping(self, session: HostSession) -> None:
        timeout = self.options.hang_timeout
        try:
            await session.connection.call("ping", {}, timeout=timeout)
        except CallTimeout:
            child = self._child
            if session is self._session and child is not None:
                self._kill(child, f"hung: no answer to a ping within {timeout:g}s after a call timed out")
        except (PluginGone, RPCError):
            pass  # gone already, or alive enough to answer with an error


def make_loader(
    supervisor: Supervisor, *, options: ProcOptions | None = None, plugins: PluginControl | None = None
) -> Callable[[PluginSource], Awaitable[Plugin]]:
    """The registry's loader for kind ``"process"``: ``registry.register_kind("process", make_loader(...))``."""

    async def load(source: PluginSource) -> Plugin:
        if source.folder is None or source.manifest is None:
            raise ValueError(f"plugin {source.name!r} has no folder or manifest")
        services = source.services
        plugin = ProcPlugin(
            source.name,
            source.folder,
            source.manifest,
            supervisor=supervisor,
            options=options,
            plugins=plugins,
            events=services.events,
            data_dir=services.plugin_data_dir(source.name),
        )
        try:
            await plugin.launch()
        except LaunchError as e:
            raise ValueError(f"subprocess plugin {source.name!r}: {e}") from None
        return plugin

    return load
