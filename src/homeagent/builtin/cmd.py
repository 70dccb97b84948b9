"""Built-in ``cmd``: ``cmd_run`` runs one program and returns its output.

Choices, and why:

* **No shell.** The command is split like a POSIX shell would split words
  (quotes respected, ``shlex``), and the first word is executed directly.
  Pipes, redirections and ``&&`` are refused with a clear message rather than
  passed on as literal arguments. A shell is available only when the user
  turns on ``allow_shell`` (then ``shell: true`` runs ``/bin/sh -c``).
* **The whole process tree dies.** Each command leads its own session
  (``start_new_session``); on timeout, when the turn is cancelled, and for
  background children left behind after the command exits, the entire process
  group gets SIGTERM and, after a short grace, SIGKILL. (A program that calls
  ``setsid`` itself leaves the group and is out of reach; cgroups would be
  needed for that.)
* **Confined working directory.** ``workdir`` is resolved inside
  ``core.agent.workdir`` (or the plugin's data folder when that is empty) by
  the same symlink-safe walk as the files plugin, and the child gets the
  directory through ``/proc/self/fd/N`` of an already-open descriptor, so a
  directory swapped for a symlink after the check cannot move it elsewhere.
* **Program lists.** With ``allow_list`` set, only those programs run, and
  only by bare name (looked up on PATH: no ``./git`` impostors); the deny-list
  is then ignored. ``deny_list`` alone only stops the obvious: it is not a
  sandbox (``env``, ``python -c``, ``find -exec`` run anything).
* **Secrets stay home.** The child's environment is the daemon's minus
  variables that look like credentials (``*KEY*``, ``*TOKEN*``, ``*SECRET*``,
  ``*PASSW*``, …) and every ``HOMEAGENT_*`` variable, so ``env`` cannot show
  the model the LLM API key.
* **Bounded output.** stdout and stderr are each capped at
  ``max_output_bytes``; the beginning and the end are kept with a note of how
  much was left out, and the pipes keep being drained so the child never
  blocks on a full pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from homeagent.builtin.files import Confined, PathError
from homeagent.config.values import parse_duration
from homeagent.sdk.api import PluginSDK
from homeagent.sdk.types import ConfigDef, ToolDef

__all__ = ["CmdPlugin", "CmdResult", "create_plugin", "run_process", "scrubbed_env"]

KILL_GRACE = 0.5
POLL = 0.1
PIPE_GRACE = 0.5
MAX_COMMAND_CHARS = 100_000
DEFAULT_DENY = "sudo,su,doas,pkexec,shutdown,reboot,poweroff,halt,mkfs"
SHELL_OPERATORS = frozenset({"|", "||", "&&", ";", ";;", "&", "|&", ">", ">>", "<", "<<", "<<<", "2>", "2>>", "&>",
                             "2>&1", ">&2", "1>&2"})
_SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|COOKIE|SESSION|AUTH", re.IGNORECASE)


def _err(message: str) -> dict[str, Any]:
    return {"isError": True, "content": message}


def _seconds(value: Any, default: float) -> float:
    """A duration setting or argument in seconds: numbers are seconds, strings like 30s/2m/1h30m."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        return parse_duration(text)


def _names(value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        items = [str(v) for v in value]
    else:
        items = re.split(r"[,\s]+", str(value or ""))
    return [i.strip() for i in items if i.strip()]


def scrubbed_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a command gets: the daemon's minus credentials and HOMEAGENT_* variables."""
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if not k.startswith("HOMEAGENT_") and not _SECRET_ENV.search(k)}


# ---------------------------------------------------------------- output capture


class _Capped:
    """Keeps the first ``cap`` bytes and the last ``cap // 4``; counts everything."""

    def __init__(self, cap: int) -> None:
        self.cap = max(1, cap)
        self.tail_cap = max(1, self.cap // 4)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        self.tail += chunk[-self.tail_cap:]
        if len(self.tail) > self.tail_cap:
            del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        if not self.truncated:
            return bytes(self.head).decode("utf-8", errors="replace")
        keep_head = self.cap - self.tail_cap
        omitted = self.total - keep_head - len(self.tail)
        head = bytes(self.head[:keep_head]).decode("utf-8", errors="replace")
        tail = bytes(self.tail).decode("utf-8", errors="replace")
        return (f"{head}\n…[output truncated: {omitted} of {self.total} bytes left out "
                f"(max_output_bytes={self.cap})]…\n{tail}")


async def _drain(stream: asyncio.StreamReader | None, buf: _Capped) -> None:
    if stream is None:
        return
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        buf.add(chunk)


# ---------------------------------------------------------------- process groups


def _group_has_live_members(pgid: int) -> bool:
    """Whether any non-zombie process is still in group ``pgid`` (Linux: /proc; elsewhere: killpg 0)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _exited(proc: asyncio.subprocess.Process, within: float) -> bool:
    """Wait up to ``within`` seconds for the process itself to exit (its pipes may stay open)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    delay = 0.001
    while proc.returncode is None:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, POLL)
    return True


async def _kill_group(proc: asyncio.subprocess.Process, pgid: int) -> None:
    """SIGTERM the group, SIGKILL it after a grace period, and wait for the leader's exit."""
    _signal_group(pgid, signal.SIGTERM)
    if not await _exited(proc, KILL_GRACE):
        _signal_group(pgid, signal.SIGKILL)
        await _exited(proc, 5)
    else:
        _signal_group(pgid, signal.SIGKILL)  # what ignored SIGTERM, beside the leader


@dataclass
class CmdResult:
    """What running one command produced."""

    status: str  # ok | failed | timeout | killed
    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: float
    notes: list[str] = field(default_factory=list)
    truncated: bool = False


async def run_process(
    argv: list[str],
    *,
    timeout: float,
    max_output_bytes: int,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> CmdResult:
    """Run ``argv`` in its own process group; kill the whole group on timeout or cancellation.

    Raises FileNotFoundError / PermissionError when the program cannot be started.
    """
    started = time.perf_counter()
    spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    ))
    try:
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # The command may already run (asyncio would kill only the leader): finish starting it, kill its group.
        with contextlib.suppress(BaseException):
            started_proc = await spawn
            await _kill_group(started_proc, started_proc.pid)
            async with asyncio.timeout(2):
                await started_proc.communicate()
        raise
    pgid = proc.pid
    out, err = _Capped(max_output_bytes), _Capped(max_output_bytes)
    readers = asyncio.gather(_drain(proc.stdout, out), _drain(proc.stderr, err))
    notes: list[str] = []
    status = ""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        # Until the pipes close and the command exits. Process.wait() also waits for the pipes,
        # which a background child may hold, so the exit is watched through returncode.
        while loop.time() < deadline:
            if readers.done():  # pipes closed: Process.wait() now returns as soon as the command exits
                if proc.returncode is None:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max(0.0, deadline - loop.time())):
                            await proc.wait()
                break
            await asyncio.wait({readers}, timeout=min(POLL, max(0.0, deadline - loop.time())))
            if proc.returncode is not None and not readers.done():
                await asyncio.wait({readers}, timeout=PIPE_GRACE)
                break
        if proc.returncode is None:
            status = "timeout"
            notes.append(f"timed out after {timeout:g}s; the command and everything it started were killed")
            await _kill_group(proc, pgid)
        elif _group_alive_quick(pgid) and await asyncio.to_thread(_group_has_live_members, pgid):
            notes.append("background processes it left running were killed (cmd_run is for commands that finish; "
                         "use a terminal for long-running ones)")
            _signal_group(pgid, signal.SIGTERM)
            await asyncio.sleep(0.05)
            _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await asyncio.shield(readers)
    except asyncio.CancelledError:
        killer = asyncio.ensure_future(_kill_group(proc, pgid))
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(killer)
        raise
    finally:
        if not readers.done():
            readers.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await readers
    code = proc.returncode
    if not status:
        if code == 0:
            status = "ok"
        elif code is not None and code < 0:
            status = "killed"
            try:
                notes.append(f"killed by signal {signal.Signals(-code).name}")
            except ValueError:
                notes.append(f"killed by signal {-code}")
        else:
            status = "failed"
    return CmdResult(
        status=status,
        exit_code=code,
        stdout=out.text(),
        stderr=err.text(),
        duration_ms=(time.perf_counter() - started) * 1000,
        notes=notes,
        truncated=out.truncated or err.truncated,
    )


def _group_alive_quick(pgid: int) -> bool:
    """A cheap first check (one syscall) before scanning /proc."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------- the plugin


class CmdPlugin:
    def __init__(self, name: str) -> None:
        self.name = name
        self._sdk: PluginSDK | None = None

    def _get(self, key: str, default: Any) -> Any:
        assert self._sdk is not None
        value = self._sdk.settings.get(key, default)
        return default if value is None else value

    def start(self, sdk: PluginSDK) -> None:
        self._sdk = sdk
        s = sdk.settings
        for d in (
            ConfigDef(key="default_timeout", default="30s", type="duration", category="cmd",
                      display_name="Default timeout", description="How long a command may run when the model "
                      "gives no timeout.", min=0.1),
            ConfigDef(key="max_timeout", default="10m", type="duration", category="cmd", display_name="Longest timeout",
                      description="The longest timeout the model may ask for (core.agent.tool_timeout also limits "
                      "every tool call).", min=0.1),
            ConfigDef(key="max_output_bytes", default=32000, type="int", category="cmd",
                      display_name="Output limit", description="stdout and stderr are each cut to this many bytes "
                      "(beginning and end kept).", min=256),
            ConfigDef(key="allow_list", default="", type="string", category="cmd", display_name="Allowed programs",
                      description="Comma-separated program names. When set, only these run (by bare name, found on "
                      "PATH) and the deny-list is ignored.", placeholder="git,ls,cat,python3"),
            ConfigDef(key="deny_list", default=DEFAULT_DENY, type="string", category="cmd",
                      display_name="Denied programs", description="Comma-separated program names that never run. "
                      "Not a sandbox: env, sh, python and friends can run anything; use the allow-list for that."),
            ConfigDef(key="allow_shell", default=False, type="bool", category="cmd", display_name="Allow shell",
                      description="Let the model pass shell: true to run the command with /bin/sh -c (pipes, "
                      "redirections). The program lists then see only 'sh'."),
        ):
            s.register_def(d)
        sdk.register_tool(
            ToolDef(
                name="cmd_run",
                description="Run one program (no shell: no pipes or redirections) and return "
                            "{status, stdout, stderr, exit_code, command}. Quotes group words as in a shell.",
                parameters={
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "program and arguments, e.g. ls -la \"my dir\""},
                        "timeout": {"type": ["number", "string"],
                                    "description": "seconds, or a duration like 30s / 2m (default 30s)"},
                        "workdir": {"type": "string", "description": "working directory, relative to the allowed "
                                    "folder (default: that folder)"},
                        "shell": {"type": "boolean", "description": "run through /bin/sh -c (only if allowed)"},
                    },
                    "required": ["command"],
                    "additionalProperties": False,
                },
                no_memory=True,
            ),
            self.run,
        )

    def stop(self) -> None:
        self._sdk = None

    # -- checks -----------------------------------------------------------

    def _root(self) -> tuple[str, bool]:
        assert self._sdk is not None
        configured = str(self._sdk.settings.get_core("core.agent.workdir", "") or "").strip()
        if configured:
            return configured, False
        return str(self._sdk.settings.data_dir()), True

    def _check_program(self, program: str, env: Mapping[str, str], cwd: str) -> str | None:
        """Why ``program`` may not run, or None. Blocking (PATH lookup): call it from a worker thread."""
        allow = _names(self._get("allow_list", ""))
        if allow:
            if "/" in program:
                return (f"{program!r} is refused: with an allow-list, programs run by bare name only "
                        f"(allowed: {', '.join(allow)})")
            if program not in allow:
                return f"{program!r} is not in the allow-list (allowed: {', '.join(allow)})"
            return None
        deny = set(_names(self._get("deny_list", DEFAULT_DENY)))
        if not deny:
            return None
        names = {os.path.basename(program)}
        found = os.path.join(cwd, program) if "/" in program else shutil.which(program, path=env.get("PATH"))
        if found:
            names.add(os.path.basename(os.path.realpath(found)))
        hit = sorted(names & deny)
        if hit:
            return f"{hit[0]!r} is in the deny-list of the cmd plugin"
        return None

    # -- the tool ---------------------------------------------------------

    async def run(self, args: dict[str, Any]) -> Any:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return _err("command is empty")
        if len(command) > MAX_COMMAND_CHARS:
            return _err(f"command is longer than {MAX_COMMAND_CHARS} characters")
        notes: list[str] = []
        try:
            default_timeout = _seconds(self._get("default_timeout", "30s"), 30.0)
            max_timeout = _seconds(self._get("max_timeout", "10m"), 600.0)
            timeout = _seconds(args.get("timeout"), default_timeout)
        except ValueError as e:
            return _err(f"timeout: {e}")
        if timeout <= 0:
            return _err("timeout must be more than 0")
        if timeout > max_timeout:
            notes.append(f"timeout lowered from {timeout:g}s to max_timeout {max_timeout:g}s")
            timeout = max_timeout
        if args.get("shell"):
            if not self._get("allow_shell", False):
                return _err("shell mode is off (the allow_shell setting); run one program without pipes or "
                            "redirections")
            argv = ["/bin/sh", "-c", command]
            program = "sh"
        else:
            try:
                argv = shlex.split(command)
            except ValueError as e:
                return _err(f"cannot split the command: {e} (check the quotes)")
            if not argv:
                return _err("command is empty")
            operators = [w for w in argv if w in SHELL_OPERATORS]
            if operators:
                return _err(f"cmd_run runs one program without a shell, so {operators[0]!r} would reach the program "
                            "as a plain argument. Run the programs one at a time (and write files with the files "
                            "tools).")
            program = argv[0]
        env = scrubbed_env()
        root, create = self._root()
        workdir = str(args.get("workdir") or "")

        def prepare() -> tuple[int, str, str, str | None]:
            fd, shown, cwd = _open_workdir(root, create, workdir)
            try:
                return fd, shown, cwd, self._check_program(program, env, cwd)
            except BaseException:
                os.close(fd)
                raise

        try:
            fd, shown, cwd, refusal = await asyncio.to_thread(prepare)
        except PathError as e:
            return _err(f"workdir: {e}")
        except OSError as e:
            return _err(f"workdir: {e.strerror or e}")
        try:
            if refusal:
                return _err(refusal)
            try:
                result = await run_process(argv, timeout=timeout, cwd=cwd, env=env,
                                           max_output_bytes=int(self._get("max_output_bytes", 32000)))
            except FileNotFoundError:
                return _err(f"program {program!r} was not found (PATH and workdir {shown!r} searched)")
            except PermissionError:
                return _err(f"program {program!r} cannot be executed (permission denied)")
            except OSError as e:
                return _err(f"cannot start {program!r}: {e.strerror or e}")
        finally:
            os.close(fd)
        out: dict[str, Any] = {
            "status": result.status,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_code": result.exit_code,
            "command": command,
            "workdir": shown,
            "duration_ms": round(result.duration_ms, 1),
        }
        if result.truncated:
            out["truncated"] = True
        if notes or result.notes:
            out["note"] = "; ".join([*notes, *result.notes])
        return out


def _open_workdir(root: str, create: bool, workdir: str) -> tuple[int, str, str]:
    """An open descriptor of the confined workdir, its display name, and the cwd that reaches it race-free."""
    confined = Confined.at(root, create=create)
    fd = confined.open_dir(workdir)
    if os.path.isdir("/proc/self/fd"):
        return fd, confined.display(workdir), f"/proc/self/fd/{fd}"
    return fd, confined.display(workdir), str(confined.real / confined.display(workdir))


def create_plugin(name: str, config: Mapping[str, Any]) -> CmdPlugin:
    return CmdPlugin(name)
