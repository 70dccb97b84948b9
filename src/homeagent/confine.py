"""Confinement of the programs the agent starts: bubblewrap when it works, and saying so when it does not.

Why bubblewrap (``bwrap``, Debian package ``bubblewrap``) rather than more
checks of our own: name-based refusals (``cmd_run``'s shell detection, the
deny-list, ``files``' path walk) can be walked around by a renamed copy of a
shell, a symlink made by the program itself, or any interpreter. Kernel
namespaces cannot. One module builds every ``bwrap`` command line, so
``cmd_run``, PTY terminals and subprocess plugins get the same rules:

* **A read-only system.** ``/usr`` and the usual ``/bin``, ``/lib*``,
  ``/sbin`` (as symlinks where the host has them as symlinks), and a short
  list of ``/etc`` files programs need (loader cache, passwd/group, name
  service, certificates, alternatives, time zone). Not ``/etc/shadow``, not
  ``/home``, not ``/root``. The root itself is a tmpfs remounted read-only.
* **Only the folders the caller names.** The workspace read-write for
  commands and terminals; a plugin's own folder read-only and its state
  folder read-write (a plugin that declares ``files`` sees the host
  read-only, less the private paths below). Everything else the owner wants
  visible is listed in ``core.sandbox.ro_paths``.
* **No data dir.** The daemon's private paths (the data dir with
  ``config.db``, the socket, the web token; memory and log folders moved
  elsewhere) are never mounted; where a mounted folder contains one, a tmpfs
  (a folder) or ``/dev/null`` (a file) is mounted over it, deepest last, so a
  workspace inside the data dir stays reachable while the rest is not.
* **Private /tmp, /proc, /dev, PID and IPC namespaces.** The program
  sees only its own processes (it cannot signal or ``ptrace`` the daemon,
  and ``/proc/self/root`` is the sandbox's root); when the command exits,
  the PID namespace ends and every process it left behind is killed.
  ``--die-with-parent`` ties the sandbox to the daemon.
* **No capabilities.** As root, ``--cap-drop ALL``: root in the sandbox
  cannot mount, ptrace or load modules.
* **Network off unless allowed.** ``--unshare-net`` leaves only a private
  loopback: the daemon's web UI and the LAN are out of reach.
  ``core.sandbox.network`` turns it on for commands and terminals; a
  plugin gets it when its manifest declares the ``net`` capability.

Process groups and time limits stay with the callers (``cmd_run`` kills the
group of the ``bwrap`` process it started; the PID namespace takes the rest).
The child's environment is built by :mod:`homeagent.childenv` as before.

Whether ``bwrap`` works is found out once, at start, by running ``true``
under the very options commands get (a container without user namespaces,
or a kernel that refuses them, fails here rather than at the first
command). ``core.sandbox.mode``: ``auto`` confines when the probe passed
and otherwise runs unconfined, saying so in ``homeagent status``, the web
UI's overview and every ``cmd_run`` result; ``bwrap`` refuses to start
anything unconfined; ``off`` is the owner's explicit choice of the weaker
mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "MODES",
    "Confinement",
    "Launch",
    "Probe",
    "Sandbox",
    "SandboxSettings",
    "SandboxUnavailable",
    "python_paths",
]

log = logging.getLogger("homeagent.confine")

MODES = ("auto", "bwrap", "off")
PROBE_TIMEOUT = 10.0
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "ld.so.cache", "passwd", "group", "nsswitch.conf", "hosts", "resolv.conf", "services", "ssl",
    "ca-certificates", "alternatives", "localtime", "timezone",
)
"""What programs commonly need from /etc: the loader cache, users, name service, certificates, Debian's
alternatives, the time zone. Secrets (shadow, ssh host keys, sudoers) are not in it. Kept short on purpose:
each entry is a mount, and mounts are most of what a sandboxed start costs (docs/PERFORMANCE.md)."""


class SandboxUnavailable(RuntimeError):
    """``core.sandbox.mode`` is ``bwrap`` and bubblewrap does not work here: nothing is started unconfined."""


@dataclass(frozen=True)
class SandboxSettings:
    """The owner's ``core.sandbox.*`` settings, read for each launch."""

    mode: str = "auto"
    network: bool = False
    binary: str = "bwrap"
    ro_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class Probe:
    """What the start-up check found."""

    usable: bool
    binary: str = ""
    version: str = ""
    reason: str = ""
    took_ms: float = 0.0


@dataclass(frozen=True)
class Launch:
    """What to execute: ``argv`` (bwrap and its options, or the program itself) and how it is confined."""

    argv: list[str]
    confined: bool
    network: bool
    label: str  # "bwrap (network off)", "none: …" — shown to the model and the owner


class Confinement(Protocol):
    """What cmd, terminals and the plugin supervisor need from the sandbox (daemon.py passes a :class:`Sandbox`)."""

    def wrap(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        writable: Sequence[str | Path] = (),
        readable: Sequence[str | Path] = (),
        network: bool | None = None,
        home: str | None = None,
    ) -> Launch:
        """``argv`` as it should be executed; raises SandboxUnavailable when confinement is required but broken.

        The caller starts it in a new session (``start_new_session``; a PTY terminal makes its PTY the
        controlling terminal), so the sandbox never shares the daemon's terminal; bwrap's own
        ``--new-session`` would take ctrl_c away from terminals and the process group from cmd_run's kills.
        """
        ...

    def status(self) -> dict[str, Any]:
        """For ``homeagent status`` and the web UI: mode, whether confinement is in force, and why not."""
        ...


def python_paths() -> list[str]:
    """Folders the daemon's Python needs to run ``python -m homeagent.sdk.run``: prefixes and sys.path entries."""
    found: list[str] = []
    candidates: list[str] = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                             os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(sys.executable)]
    candidates += [p for p in sys.path if p]
    for raw in candidates:
        path = os.path.abspath(raw)
        if os.path.isdir(path) and path not in found:
            found.append(path)
    return found


def system_mounts() -> list[str]:
    """bwrap options for the read-only system: /usr, the /bin and /lib* links or folders, the /etc list."""
    out: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            out += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            out += ["--ro-bind", path, path]
    for name in ETC_FILES:
        path = f"/etc/{name}"
        if os.path.lexists(path):
            out += ["--ro-bind-try", path, path]
    return out


def _find(binary: str) -> tuple[str, str]:
    """The bwrap program's path and, when it cannot be used, why (blocking: PATH lookup and stat)."""
    found = shutil.which(binary) if "/" not in binary else binary
    if not found or not os.path.isfile(found):
        return binary, f"bubblewrap ({binary!r}) is not installed"
    if not os.access(found, os.X_OK):
        return found, f"{found} is not executable"
    return found, ""


def _inside(path: str, folder: str) -> bool:
    folder = folder.rstrip("/") or "/"
    return path == folder or path.startswith(folder if folder == "/" else folder + "/")


class Sandbox:
    """Builds ``bwrap`` command lines from the owner's settings; one per daemon."""

    def __init__(
        self,
        settings: Callable[[], SandboxSettings],
        *,
        hidden: Callable[[], Iterable[str | Path]],
    ) -> None:
        self._settings = settings
        self._hidden = hidden
        self._probe: Probe | None = None
        self._probing: asyncio.Task[Probe] | None = None
        self._system: list[str] | None = None  # the read-only system part of every command line (stat()s once)

    # -- the probe ----------------------------------------------------------------

    @property
    def probed(self) -> Probe | None:
        return self._probe

    async def probe(self) -> Probe:
        """Find out once whether bwrap runs ``true`` with the options commands get; logs the outcome."""
        settings = self._settings()
        started = time.perf_counter()
        self._system = await asyncio.to_thread(system_mounts)
        result = await self._run_probe(settings)
        result = Probe(result.usable, result.binary, result.version, result.reason,
                       round((time.perf_counter() - started) * 1000, 1))
        self._probe = result
        if result.usable:
            log.info("sandbox: %s %s works; commands, terminals and subprocess plugins are confined (mode %s)",
                     result.binary, result.version, settings.mode)
        elif settings.mode == "off":
            log.info("sandbox: off by the owner's choice (core.sandbox.mode)")
        elif settings.mode == "bwrap":
            log.error("sandbox: core.sandbox.mode is bwrap but %s; commands, terminals and subprocess plugins "
                      "will be refused until it works", result.reason)
        else:
            log.warning("sandbox: %s; commands, terminals and subprocess plugins run UNCONFINED (the weaker mode: "
                        "name checks, workdir confinement, stripped secrets). Install the bubblewrap package.",
                        result.reason)
        return result

    def reprobe(self) -> None:
        """The binary setting changed: probe again in the background."""
        if self._probing is not None and not self._probing.done():
            self._probing.cancel()
        self._probing = asyncio.get_running_loop().create_task(self.probe(), name="sandbox-probe")

    async def close(self) -> None:
        task, self._probing = self._probing, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run_probe(self, settings: SandboxSettings) -> Probe:
        binary, problem = await asyncio.to_thread(_find, settings.binary)
        if problem:
            return Probe(False, binary, reason=problem)
        version = ""
        try:
            proc = await asyncio.create_subprocess_exec(
                binary, "--version", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE)
            async with asyncio.timeout(PROBE_TIMEOUT):
                out, _ = await proc.communicate()
            version = out.decode("utf-8", "replace").strip().removeprefix("bubblewrap ").strip()
            argv = self._argv(binary, ["true"], cwd="/", writable=(), readable=(), network=False, home="/tmp",
                              settings=settings)
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, cwd="/")
            async with asyncio.timeout(PROBE_TIMEOUT):
                _, err = await proc.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return Probe(False, binary, version, f"{binary} did not finish a test run within {PROBE_TIMEOUT:g}s")
        except OSError as exc:
            return Probe(False, binary, version, f"{binary} cannot be started: {exc.strerror or exc}")
        if proc.returncode != 0:
            detail = err.decode("utf-8", "replace").strip().splitlines()
            why = detail[-1] if detail else f"exit code {proc.returncode}"
            return Probe(False, binary, version, f"{binary} does not work here ({why})")
        return Probe(True, binary, version)

    # -- status -------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        settings = self._settings()
        probe = self._probe
        usable = probe is not None and probe.usable
        if settings.mode == "off":
            state, summary = "off", "off (the owner's choice): commands and plugins run unconfined"
        elif usable:
            net = "network on" if settings.network else "network off"
            state, summary = "confined", f"bubblewrap {probe.version if probe else ''} ({net} for commands)".replace(
                "  ", " ")
        elif probe is None:
            state, summary = "checking", "checking whether bubblewrap works"
        elif settings.mode == "bwrap":
            state, summary = "refusing", f"required but unavailable ({probe.reason}): commands are refused"
        else:
            state, summary = "weaker", (f"UNCONFINED, weaker mode: {probe.reason}; install bubblewrap "
                                        "(docs/security.md)")
        return {
            "mode": settings.mode,
            "state": state,
            "confined": settings.mode != "off" and usable,
            "network": settings.network,
            "engine": "bwrap" if usable and settings.mode != "off" else "none",
            "binary": probe.binary if probe else settings.binary,
            "version": probe.version if probe else "",
            "reason": probe.reason if probe else "",
            "summary": summary,
        }

    # -- command lines -------------------------------------------------------------

    def wrap(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        writable: Sequence[str | Path] = (),
        readable: Sequence[str | Path] = (),
        network: bool | None = None,
        home: str | None = None,
    ) -> Launch:
        settings = self._settings()
        net = settings.network if network is None else network
        probe = self._probe
        if settings.mode == "off":
            return Launch(list(argv), False, True, "none (core.sandbox.mode is off)")
        if probe is None or not probe.usable:
            why = probe.reason if probe is not None else "the bubblewrap check has not finished yet"
            if settings.mode == "bwrap":
                raise SandboxUnavailable(
                    f"core.sandbox.mode is bwrap (confinement required) but {why}; nothing was started. The owner "
                    "can install bubblewrap or change core.sandbox.mode (docs/security.md).")
            return Launch(list(argv), False, True, f"none: {why} (weaker mode)")
        full = self._argv(probe.binary, list(argv), cwd=cwd, writable=writable, readable=readable, network=net,
                          home=home, settings=settings)
        return Launch(full, True, net, f"bwrap (network {'on' if net else 'off'})")

    def _argv(
        self,
        binary: str,
        argv: list[str],
        *,
        cwd: str,
        writable: Sequence[str | Path],
        readable: Sequence[str | Path],
        network: bool,
        home: str | None,
        settings: SandboxSettings,
    ) -> list[str]:
        # PID (no view of or signals to the daemon; the tree ends with the command) and IPC (no SysV shared
        # memory of the owner's other programs) namespaces. Not UTS or cgroup: without capabilities the
        # hostname cannot be changed anyway, and each namespace costs start time.
        out = [binary, "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
        if not network:
            out.append("--unshare-net")
        if os.geteuid() == 0:
            out += ["--cap-drop", "ALL"]
        # A plugin that declared "files" sees the host read-only (its /tmp too: files to send are often
        # there), less the private paths and the sockets in /run; anything else sees the system only.
        whole = any(os.path.abspath(str(p)) == "/" for p in readable)
        if whole:
            out += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run"]
        else:
            if self._system is None:
                self._system = system_mounts()
            out += self._system
            out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        # Binds sorted by depth so that a parent is mounted before what lies inside it; a private path
        # inside a bound folder is covered right after that folder, before anything bound inside it.
        binds: list[tuple[str, str]] = []
        for extra in settings.ro_paths:
            binds.append(("ro-try", os.path.abspath(os.path.expanduser(extra))))
        for item in readable:
            path = os.path.abspath(str(item))
            if path != "/":
                binds.append(("ro", path))
        for item in writable:
            binds.append(("rw", os.path.abspath(str(item))))
        mounted = [p for _, p in binds] + (["/"] if whole else [])
        hides: list[tuple[str, str]] = []
        for private in self._hidden():
            path = os.path.abspath(str(private))
            if any(_inside(path, m) for m in mounted):  # visible through a bound folder: cover it
                hides.append(("hide", path))
        # one cover per private tree: a covered folder inside another would only show up as an empty mount point
        hides = [h for h in hides if not any(_inside(h[1], o[1]) and h[1] != o[1] for o in hides)]
        order = {"ro-try": 0, "ro": 0, "rw": 0, "hide": 1}
        for kind, path in sorted(binds + hides, key=lambda b: (b[1].rstrip("/").count("/"), order[b[0]])):
            if kind == "ro-try":
                out += ["--ro-bind-try", path, path]
            elif kind == "ro":
                out += ["--ro-bind", path, path]
            elif kind == "rw":
                out += ["--bind", path, path]
            elif os.path.isdir(path):
                out += ["--tmpfs", path]
            elif os.path.lexists(path):
                out += ["--ro-bind", "/dev/null", path]
        out += ["--remount-ro", "/"]
        if home:
            out += ["--setenv", "HOME", home]
        out += ["--chdir", cwd, "--"]
        return out + argv
