"""A real `homeagent run` process for the campaign: start, wait for its socket, kill -9, stop, and measure it.

Every part of the campaign talks to the product only the way a user's programs do
(the socket, the CLI, HTTP, a subprocess plugin); this module is the one place
that starts and ends the daemon, and reads its footprint from /proc.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homeagent.cli.client import Client, DaemonUnavailable

ENV_DROP = ("HOMEAGENT_LLM_BASE_URL", "HOMEAGENT_LLM_API_KEY", "HOMEAGENT_LLM_MODEL", "HOMEAGENT_LLM_ADAPTER",
            "LLM_API_KEY", "DEEPSEEK_API_KEY", "HOMEAGENT_SOCKET", "HOMEAGENT_DATA_DIR")


def clean_env() -> dict[str, str]:
    """The daemon never picks up a developer's real LLM keys: the offline provider answers every turn."""
    return {k: v for k, v in os.environ.items() if k not in ENV_DROP}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def configure(data_dir: Path, values: dict[str, Any]) -> None:
    """Settings before the first start, written as `homeagent config set` does without a daemon (in-process: fast)."""
    from homeagent.config import ConfigRegistry, core_defs
    from homeagent.control import ConfigControl
    from homeagent.paths import DataPaths

    paths = DataPaths(data_dir)
    paths.ensure()
    registry = ConfigRegistry(paths.config_db)
    try:
        for definition in core_defs(paths.root):
            registry.register_def(definition)
        control = ConfigControl(registry)
        for key, value in {"core.agent.embedding_model_path": "hashing", **values}.items():
            control.set({"key": key, "value": value})
    finally:
        registry.close()


@dataclass
class Footprint:
    """What /proc says about a process: open fds, resident memory, kernel tasks (threads)."""

    fds: int
    rss_mb: float
    tasks: int

    @classmethod
    def of(cls, pid: int) -> Footprint:
        proc = Path(f"/proc/{pid}")
        rss_kb = 0
        for line in (proc / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
        return cls(len(os.listdir(proc / "fd")), rss_kb / 1024, len(os.listdir(proc / "task")))

    def __str__(self) -> str:
        return f"{self.fds} fds, {self.rss_mb:.0f} MB, {self.tasks} tasks"


class DaemonProc:
    """`homeagent run` as a child process; its output goes to a log file next to the data dir."""

    def __init__(self, data_dir: Path, *, web: bool = False, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.web = web
        self.env = {**clean_env(), **(env or {})}  # e.g. HOMEAGENT_LLM_* of a fake LLM
        self.log_path = data_dir.parent / f"{data_dir.name}-daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.token: str | None = None
        self.starts = 0

    @property
    def socket(self) -> Path:
        return self.data_dir / "cli.sock"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def start(self, timeout: float = 60) -> None:
        args = [sys.executable, "-m", "homeagent", "--data-dir", str(self.data_dir), "run"]
        if not self.web:
            args.append("--no-web")
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start {self.starts} =====\n".encode())
            # Popen, not asyncio's: the daemon outlives this call and is waited for from any loop (or none)
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env)  # noqa: ASYNC220
        self.starts += 1
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited early ({self.proc.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"daemon did not answer on its socket:\n{self.tail()}")
            try:
                client = await Client.connect(self.socket, timeout=1.0)
            except (DaemonUnavailable, TimeoutError, OSError):
                await asyncio.sleep(0.05)
                continue
            await client.close()
            break
        if self.web and self.token is None:
            self.token = await self._new_token()

    async def _new_token(self) -> str | None:
        """A fresh API token from `homeagent webui token --json` (the banner's copy may sit in a stdout buffer)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "homeagent", "--data-dir", str(self.data_dir), "webui", "token", "--json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=clean_env())
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        try:
            return str(json.loads(out)["token"])
        except (ValueError, KeyError):
            return None

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(20)

    async def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def footprint(self) -> Footprint:
        return Footprint.of(self.pid)

    def open_files(self) -> set[str]:
        """What the daemon's fds point at (files, sockets, pipes): a diff names what a flood left open."""
        fd_dir = Path(f"/proc/{self.pid}/fd")
        found = set()
        for fd in os.listdir(fd_dir):
            try:
                found.add(f"{fd}:{os.readlink(fd_dir / fd)}")
            except OSError:
                continue
        return found

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    async def status_ok(self, timeout: float = 10) -> bool:
        """A fresh connection answers `status`: the daemon is up and its socket loop serves."""
        try:
            client = await Client.connect(self.socket, timeout=timeout)
        except (DaemonUnavailable, TimeoutError, OSError):
            return False
        try:
            result = await client.call("status", {}, timeout=timeout)
            return isinstance(result, dict) and result.get("pid") == self.pid
        except Exception:
            return False
        finally:
            await client.close()


# Kernel tasks are threads; thread pools (the event loop's default executor: min(32, cpus + 4)) start their threads
# lazily up to their bound and keep them. Idle pool threads started by a flood are not a leak: the headroom is the
# default executor's bound (a baseline read before the pool warmed up had 6 tasks, the flood filled the pool: 11).
TASK_HEADROOM = min(32, (os.cpu_count() or 1) + 4)


STORE_FILES = (".db", ".db-wal", ".db-shm", ".db-journal")


def back_to_baseline(
    baseline: Footprint, after: Footprint, rss_mb: float = 50, opened: Iterable[str] = ()
) -> bool:
    """The issue's "fds/tasks/RSS back to baseline": fds not above, tasks within pool headroom, RSS within `rss_mb`.

    A pool thread keeps its own connection to a store once it used it (the graph opens one per thread): a thread
    started during the flood, or an old one that touched the graph for the first time. So fds of the data dir's
    SQLite files (`opened`: what the diff of `open_files` found) are not counted as a leak while there are at most
    two (a .db and its -wal) per thread; a connection leaked per request would be far past that; anything else is.
    """
    store_fds = sum(1 for f in opened if f.endswith(STORE_FILES))
    store_fds = store_fds if store_fds <= 2 * after.tasks else 0
    return (after.fds - store_fds <= baseline.fds and after.tasks <= baseline.tasks + TASK_HEADROOM
            and after.rss_mb - baseline.rss_mb <= rss_mb)


async def settle_footprint(daemon: DaemonProc, baseline: Footprint, seconds: float = 10.0) -> Footprint:
    """The footprint once transient work has drained: polled until fds and tasks are back or time is up."""
    deadline = time.monotonic() + seconds
    now = daemon.footprint()
    while time.monotonic() < deadline and (now.fds > baseline.fds or now.tasks > baseline.tasks + TASK_HEADROOM):
        await asyncio.sleep(0.5)
        now = daemon.footprint()
    return now
