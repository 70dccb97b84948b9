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
* **A sandbox when bubblewrap works.** With a :class:`~homeagent.confine.Confinement`
  (the daemon passes its :class:`~homeagent.confine.Sandbox`), the program runs under
  ``bwrap``: read-only system, the workspace read-write, no data dir, private
  ``/tmp``/``/proc``, its own PID namespace (so nothing it starts survives it and it
  cannot signal the daemon), network per ``core.sandbox.network``. Every result says
  which (``sandbox``), so the model and the owner know when the weaker mode is in use.
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
from homeagent.childenv import scrubbed_env
from homeagent.config.values import parse_duration
from homeagent.confine import Confinement, Launch, SandboxUnavailable
from homeagent.sdk.api import PluginSDK
from homeagent.sdk.types import ConfigDef, ToolDef

__all__ = ["CmdPlugin", "CmdResult", "create_plugin", "run_process", "scrubbed_env"]

KILL_GRACE = 0.5
POLL = 0.1
PIPE_GRACE = 0.5
MAX_COMMAND_CHARS = 100_000
DEFAULT_DENY = "sudo,su,doas,pkexec,shutdown,reboot,poweroff,halt,mkfs"
# Programs that are a shell whatever their arguments, and interpreters whose inline-code
# flags make them one (python -c, perl -e, node -e, php -r, ...). Matched by base name,
# also of the resolved path (/usr/bin/python3 -> python3.11, /bin/sh -> dash).
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "pdksh", "ash", "yash", "fish", "csh", "tcsh",
                    "rbash", "posh", "busybox", "toybox", "rc", "es", "xonsh", "nu", "elvish", "pwsh", "powershell"})
_INTERPRETERS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = (
    # (program name, an argument that carries code to run)
    (re.compile(r"(python|pypy)[0-9.]*"), re.compile(r"-[A-Za-z]*c.*")),
    (re.compile(r"perl[0-9.]*"), re.compile(r"-[A-Za-z0-9]*[eE].*")),
    (re.compile(r"ruby[0-9.]*|jruby"), re.compile(r"-[A-Za-z0-9]*e.*")),
    (re.compile(r"node(js)?[0-9.]*|bun|deno"), re.compile(r"-[A-Za-z]*[ep].*|--eval(=.*)?|--print(=.*)?|eval")),
    (re.compile(r"php[0-9.]*"), re.compile(r"-[A-Za-z]*r.*|--run(=.*)?")),
    (re.compile(r"lua[0-9.]*|luajit"), re.compile(r"-[A-Za-z]*e.*")),
    (re.compile(r"tclsh[0-9.]*|wish[0-9.]*|expect"), re.compile(r"-c.*")),
)
# Programs that run the program named in their arguments (env sh, timeout 5 bash, ...).
WRAPPERS = frozenset({"env", "nice", "nohup", "timeout", "stdbuf", "setsid", "time", "xargs", "ionice", "chrt",
                      "taskset", "unbuffer", "flock", "script", "exec", "command", "builtin", "watch", "strace",
                      "ltrace", "chroot", "unshare", "nsenter", "runuser", "firejail", "systemd-run"})
_EXPANSION_START = re.compile(r"[A-Za-z_0-9({@*#?$!-]")


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


def shell_syntax(command: str) -> str | None:
    """The first piece of ``command`` a POSIX shell would interpret, or None.

    Why: without a shell such syntax reaches the program as plain text, and the model
    would be told "ok" for a pipeline, redirection or substitution that never ran.
    Quoting follows sh: inside single quotes everything is literal; inside double
    quotes only ``$``-expansions and backquotes are interpreted; a backslash makes the
    next character literal. So ``grep "a|b" file`` and ``grep a\\|b`` pass ``a|b`` to
    grep, while ``echo a|wc``, ``echo "$(id)"`` and a newline between commands are
    refused. Globs (``*``, ``?``) and ``~`` are not expanded and reach the program as
    written (a missing file then fails visibly); they are not refused.
    """
    quote = ""
    word_start = True
    i, n = 0, len(command)
    while i < n:
        ch = command[i]
        if quote == "'":
            if ch == "'":
                quote = ""
            i += 1
            continue
        if ch == "\\":
            i += 2
            word_start = False
            continue
        if ch == "`":
            return "`"
        if ch == "$" and i + 1 < n and _EXPANSION_START.match(command[i + 1]):
            name = re.match(r"[A-Za-z_0-9]+", command[i + 1:])
            return "$" + (name.group(0) if name else command[i + 1])
        if quote == '"':
            if ch == '"':
                quote = ""
            i += 1
            continue
        if ch in "'\"":
            quote = ch
            word_start = False
        elif ch in ";|&<>":
            j = i
            while j < n and command[j] in ";|&<>":
                j += 1
            return command[i:j]
        elif ch in "()":
            return ch
        elif ch in "\n\r":
            return "a newline"
        elif ch == "#" and word_start:
            return "#"
        word_start = ch in " \t"
        i += 1
    return None


def _base(word: str) -> str:
    return os.path.basename(word)


def shell_in(argv: list[str], resolved: str | None = None) -> tuple[str, str] | None:
    """The shell or interpreter ``argv`` amounts to running and why, or None.

    A shell program (``sh``, ``bash -c``, ``busybox sh``), an interpreter given code
    inline (``python3 -c``, ``perl -e``, ``node -e``, ``php -r``, ``lua -e``), or
    either of them behind a wrapper (``env sh``, ``timeout 5 bash``, ``xargs sh -c``).
    ``resolved`` is argv[0]'s real path when known (so a symlink named otherwise is seen
    for what it is). Name-based: a renamed copy of a shell is not recognised (the
    bubblewrap sandbox is what confines those).
    """
    for k, word in enumerate(argv):
        names = {_base(word)}
        if k == 0 and resolved:
            names.add(_base(resolved))
        if names & SHELLS:
            shell = sorted(names & SHELLS)[0]
            return shell, f"{shell!r} is a shell" if k == 0 else f"{_base(argv[0])!r} runs the shell {shell!r}"
        for program, inline in _INTERPRETERS:
            name = next((m for m in sorted(names) if program.fullmatch(m)), None)
            if name is None:
                continue
            for arg in argv[k + 1:]:
                if arg == "--" or (not arg.startswith("-") and not inline.fullmatch(arg)):
                    break  # a script file: its arguments are its own
                if inline.fullmatch(arg):
                    return name, f"{name!r} with {arg[:12]!r} runs code given on the command line, like a shell"
            return None
        if k == 0 and not names & WRAPPERS:
            return None
        if _base(argv[0]) == "env" and (word.startswith("-S") or word.startswith("--split-string")):
            return "env -S", "'env -S' splits a command line like a shell"
        if k > 0 and not word.startswith("-") and "=" not in word and not word.replace(".", "").isdigit():
            if _base(word) not in WRAPPERS:
                return None  # the wrapped program is neither a shell nor an interpreter
    return None


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
    contained: bool = False,
) -> CmdResult:
    """Run ``argv`` in its own process group; kill the whole group on timeout or cancellation.

    ``contained``: ``argv`` runs the command in its own PID namespace (the sandbox), which the kernel empties
    when the command ends, so no sweep for background children is needed (it would find only zombies, and
    scanning /proc costs more than the command).
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
        elif not contained and _group_alive_quick(pgid) and await asyncio.to_thread(_group_has_live_members, pgid):
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
    def __init__(self, name: str, sandbox: Confinement | None = None) -> None:
        self.name = name
        self._sdk: PluginSDK | None = None
        self._sandbox = sandbox  # None: the weaker mode only (bare-services tests; the daemon always passes one)

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
                      "PATH) and the deny-list is ignored.", placeholder="git,ls,cat,python3", owner_only=True),
            ConfigDef(key="deny_list", default=DEFAULT_DENY, type="string", category="cmd",
                      display_name="Denied programs", description="Comma-separated program names that never run. "
                      "Not a sandbox: env, sh, python and friends can run anything; use the allow-list for that.",
                      owner_only=True),
            ConfigDef(key="allow_shell", default=False, type="bool", category="cmd", display_name="Allow shell",
                      description="Let the model pass shell: true to run the command with /bin/sh -c (pipes, "
                      "redirections). The program lists then see only 'sh'.", owner_only=True),
        ):
            s.register_def(d)
        sdk.register_tool(
            ToolDef(
                name="cmd_run",
                description="Run one program (no shell: no pipes or redirections) and return "
                            "{status, stdout, stderr, exit_code, command, sandbox}. Quotes group words as in a "
                            "shell. Usually sandboxed (see sandbox in the result): the system is read-only, the "
                            "working folder is the only writable place, and the network may be off.",
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

    def _allow_listed(self, name: str) -> bool:
        """A shell or interpreter the user named in the allow-list runs as asked (their choice)."""
        return name in _names(self._get("allow_list", ""))

    def _check_resolved(self, argv: list[str], env: Mapping[str, str], cwd: str) -> str | None:
        """The shell check again on argv[0]'s real path (``python3`` -> ``python3.11``). Blocking."""
        program = argv[0]
        found = os.path.join(cwd, program) if "/" in program else shutil.which(program, path=env.get("PATH"))
        if not found:
            return None
        use = shell_in(argv, os.path.realpath(found))
        if use is None or self._allow_listed(use[0]) or self._allow_listed(_base(program)):
            return None
        return (f"cmd_run refuses this: {use[1]}, and a shell is off (the user can turn on the "
                "plugin.cmd.allow_shell setting; then pass shell: true).")

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
            allow_shell = bool(self._get("allow_shell", False))
            how = ("pass shell: true to run it with /bin/sh -c" if allow_shell else
                   "a shell is off (the user can turn on the plugin.cmd.allow_shell setting; then pass shell: true)")
            syntax = shell_syntax(command)
            if syntax:
                return _err(f"cmd_run runs one program without a shell, so {syntax!r} would not do what a shell does "
                            "(it would reach the program as plain text and nothing of it would run). Run the "
                            f"programs one at a time (write files with the files tools), or quote it; {how}.")
            program = argv[0]
            if not allow_shell:
                use = shell_in(argv)
                if use and not self._allow_listed(use[0]):
                    return _err(f"cmd_run refuses this: {use[1]}, and {how}.")
        env = scrubbed_env()
        root, create = self._root()
        workdir = str(args.get("workdir") or "")

        check_shell = not args.get("shell") and not self._get("allow_shell", False)

        def prepare() -> tuple[int, str, str, str, str, str | None]:
            fd, shown, cwd, real_root, real_cwd = _open_workdir(root, create, workdir)
            try:
                refusal = self._check_program(program, env, cwd)
                if refusal is None and check_shell:
                    refusal = self._check_resolved(argv, env, cwd)
                return fd, shown, cwd, real_root, real_cwd, refusal
            except BaseException:
                os.close(fd)
                raise

        try:
            fd, shown, cwd, real_root, real_cwd, refusal = await asyncio.to_thread(prepare)
        except PathError as e:
            return _err(f"workdir: {e}")
        except OSError as e:
            return _err(f"workdir: {e.strerror or e}")
        try:
            if refusal:
                return _err(refusal)
            try:
                launch = self._launch(argv, real_root, real_cwd)
            except SandboxUnavailable as e:
                return _err(str(e))
            if launch.confined:
                env.pop("TMPDIR", None)  # the sandbox has its own /tmp; the daemon's TMPDIR is not mounted
            try:
                result = await run_process(launch.argv, timeout=timeout, cwd=cwd, env=env, contained=launch.confined,
                                           max_output_bytes=int(self._get("max_output_bytes", 32000)))
            except FileNotFoundError:
                return _err(f"program {program!r} was not found (PATH and workdir {shown!r} searched)")
            except PermissionError:
                return _err(f"program {program!r} cannot be executed (permission denied)")
            except OSError as e:
                return _err(f"cannot start {program!r}: {e.strerror or e}")
        finally:
            os.close(fd)
        if launch.confined and result.exit_code == 1 and result.stderr.startswith("bwrap: "):
            return _err(_sandbox_failure(program, result.stderr))
        out: dict[str, Any] = {
            "status": result.status,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_code": result.exit_code,
            "command": command,
            "workdir": shown,
            "duration_ms": round(result.duration_ms, 1),
            "sandbox": launch.label,
        }
        if result.truncated:
            out["truncated"] = True
        if notes or result.notes:
            out["note"] = "; ".join([*notes, *result.notes])
        return out

    def _launch(self, argv: list[str], root: str, cwd: str) -> Launch:
        """``argv`` under the sandbox (the workspace its only writable folder), or as it is in the weaker mode."""
        if self._sandbox is None:
            return Launch(list(argv), False, True, "none (no sandbox configured)")
        return self._sandbox.wrap(argv, cwd=cwd, writable=[root], home="/tmp")


def _sandbox_failure(program: str, stderr: str) -> str:
    """What the model is told when bwrap itself failed (most often: the program is not inside the sandbox)."""
    line = stderr.strip().splitlines()[0] if stderr.strip() else stderr
    if line.startswith("bwrap: execvp"):
        return (f"program {program!r} was not found inside the sandbox ({line.removeprefix('bwrap: ')}). Only the "
                "system folders (/usr, /bin, /lib…) and the workspace are visible; the owner can add folders with "
                "core.sandbox.ro_paths.")
    return f"the sandbox could not start {program!r}: {line}"


def _open_workdir(root: str, create: bool, workdir: str) -> tuple[int, str, str, str, str]:
    """An open descriptor of the confined workdir, its display name, the cwd that reaches it race-free,
    and the real paths of the root and of the workdir (what the sandbox mounts and enters)."""
    confined = Confined.at(root, create=create)
    fd = confined.open_dir(workdir)
    if os.path.isdir("/proc/self/fd"):
        real_cwd = os.readlink(f"/proc/self/fd/{fd}")
        return fd, confined.display(workdir), f"/proc/self/fd/{fd}", str(confined.real), real_cwd
    real_cwd = str(confined.real / confined.display(workdir))
    return fd, confined.display(workdir), real_cwd, str(confined.real), real_cwd


def create_plugin(name: str, config: Mapping[str, Any], *, sandbox: Confinement | None = None) -> CmdPlugin:
    """The factory; the daemon binds ``sandbox`` with functools.partial (see builtin.catalog)."""
    return CmdPlugin(name, sandbox)
