"""The bubblewrap sandbox, for real: escapes that must fail, the daemon that must survive them, and the fallback.

Every escape runs through a real daemon's own ``cmd_run`` (or terminal, or
subprocess plugin) under the real ``bwrap``, with shells allowed (the sandbox
must hold even when the owner turns name checks off). Each attempt is also
shown to work where it should (the workspace, the network when allowed), so
a sandbox that blocked everything would fail these tests too.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from homeagent.cli.client import Client
from homeagent.confine import Sandbox, SandboxSettings, SandboxUnavailable
from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from tests.conftest import run_cli
from tests.fakes.builtins_host import daemon_services, run_tool
from tests.fakes.plugins_host import FIXTURES


def _bwrap_works() -> str:
    """Why bubblewrap cannot run here ('' when it can), found the way the daemon finds out at start."""
    probe = asyncio.run(Sandbox(lambda: SandboxSettings(), hidden=lambda: []).probe())
    return "" if probe.usable else probe.reason


_NO_BWRAP = _bwrap_works()
needs_bwrap = pytest.mark.skipif(bool(_NO_BWRAP), reason=f"{_NO_BWRAP} (apt-get install bubblewrap)")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def exists(path: str) -> bool:
    return Path(path).exists()


def running(prefix: str) -> list[int]:
    """Pids (as the host sees them) of live processes whose command line starts with ``prefix``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if cmdline.startswith(prefix):
            found.append(int(proc.name))
    return found


async def wait_until(predicate: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


@pytest.fixture
async def jailed(daemon: Daemon, tmp_path: Path) -> AsyncIterator[Daemon]:
    """The daemon with its sandbox working, a workspace outside the data dir, and shells allowed."""
    status = daemon.sandbox.status()
    assert status["confined"] and status["engine"] == "bwrap", status  # never run these escapes unconfined
    work = tmp_path / "work"
    work.mkdir()
    daemon.config.set("core.agent.workdir", str(work))
    daemon.config.set("plugin.cmd.allow_shell", True)
    yield daemon


async def sh(d: Daemon, command: str, **extra: Any) -> dict[str, Any]:
    """``command`` through the daemon's own cmd_run with /bin/sh -c; the tool's result."""
    result = await run_tool(daemon_services(d), "cmd_run", {"command": command, "shell": True, **extra})
    assert isinstance(result.result, dict), result
    return result.result


async def alive_and_well(d: Daemon) -> None:
    """The daemon answers on its socket and still runs commands."""
    client = await Client.connect(d.paths.socket)
    try:
        status = await client.call("status", {})
    finally:
        await client.close()
    assert status["pid"] == os.getpid() and status["sandbox"]["confined"]
    again = await sh(d, "echo still here")
    assert again["status"] == "ok" and again["stdout"] == "still here\n"


# ------------------------------------------------------------------ escapes from cmd_run


@needs_bwrap
async def test_the_workspace_is_writable_and_results_say_they_are_confined(jailed: Daemon, tmp_path: Path) -> None:
    value = await sh(jailed, "echo made > made.txt && cat made.txt && pwd && ls /")
    assert value["status"] == "ok", value
    assert value["sandbox"] == "bwrap (network off)"
    assert value["stdout"].splitlines()[:2] == ["made", str((tmp_path / "work").resolve())]
    assert (tmp_path / "work" / "made.txt").read_text() == "made\n"
    top = set(value["stdout"].splitlines()[2:])
    assert {"usr", "etc", "tmp", "proc"} <= top and not top & {"root", "home", "work", "srv", "var"}
    # the system is read-only, /tmp is private and gone afterwards
    system = await sh(jailed, "touch /usr/bin/evil; touch /etc/evil; echo x > /tmp/mine; cat /tmp/mine")
    assert "Read-only file system" in system["stderr"] and system["stdout"] == "x\n"
    assert not exists("/usr/bin/evil") and not exists("/tmp/mine")


@needs_bwrap
async def test_escapes_fail_and_the_daemon_survives(jailed: Daemon, tmp_path: Path) -> None:
    d = jailed
    data, work = d.paths.root, tmp_path / "work"
    config_before, files_before = digest(d.paths.config_db), tree(data)
    os.symlink(data, work / "data_link")  # as if the model had made it (files tools refuse; ln would do)
    os.symlink(d.paths.config_db, work / "config_link")
    attempts = {
        # reading the daemon's settings, tokens and databases: not mounted, through any path
        "read config.db": f"cat {d.paths.config_db}",
        "symlink to the data dir": "cat data_link/config.db",
        "symlink to config.db": "cat config_link",
        "symlink made inside": f"ln -s {data} inner && cat inner/config.db",
        "/proc/self/root": f"cat /proc/self/root{d.paths.config_db}",
        "/proc/1/root": f"cat /proc/1/root{d.paths.config_db}",
        "the daemon's /proc entry": f"cat /proc/{os.getpid()}/environ",
        "/etc/shadow": "cat /etc/shadow",
        "the socket": f"ls -l {d.paths.socket}",
        # writing the data dir
        "write the data dir": f"echo pwned > {data}/pwned",
        "overwrite config.db": f"cp /etc/hostname {d.paths.config_db}",
        "write through a symlink": "echo pwned > data_link/pwned2",
        # killing the daemon
        "kill the daemon": f"kill -9 {os.getpid()}",
        "kill the parent": "kill -9 $PPID",
        "kill everything": "kill -9 -1",
    }
    results = {name: await sh(d, command) for name, command in attempts.items()}
    for name, value in results.items():
        assert value["sandbox"] == "bwrap (network off)", (name, value)
        if name.startswith("kill"):
            continue
        assert value["status"] == "failed", (name, value)
        assert any(w in value["stderr"] for w in ("No such file", "nonexistent", "Permission denied")), (name, value)
    # root in the sandbox has no capabilities: no mounts, no entering pid 1's namespaces, no new user namespace
    for command in ("mount -t tmpfs none /tmp", "nsenter -t 1 -m -p true", "unshare -r true"):
        value = await sh(d, command)
        assert value["status"] == "failed", (command, value)
    # what the kills reached: nothing outside (the sandbox's parent is pid 0 or its own init)
    assert "No such process" in results["kill the daemon"]["stderr"] or results["kill the daemon"]["status"] != "ok"
    parent = await sh(d, "echo $PPID; ls /proc | grep -c '^[0-9]'")
    ppid, visible = parent["stdout"].split()
    assert int(ppid) <= 1 and int(visible) <= 4, parent  # only bwrap's init, the shell, ls and grep
    # nothing changed on disk, and the daemon is alive and serving
    assert digest(d.paths.config_db) == config_before
    assert tree(data) == files_before
    assert not (data / "pwned").exists() and not (data / "pwned2").exists()
    await alive_and_well(d)


@needs_bwrap
async def test_the_network_is_off_unless_the_owner_turns_it_on(jailed: Daemon) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    hits: list[str] = []

    async def hello(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="hello from the host")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        off = await sh(jailed, f"curl -sS -m 5 http://127.0.0.1:{port}/")
        assert off["status"] == "failed" and "hello" not in off["stdout"] and hits == []
        assert off["sandbox"] == "bwrap (network off)"
        jailed.config.set("core.sandbox.network", True)
        on = await sh(jailed, f"curl -sS -m 5 http://127.0.0.1:{port}/")
        assert on["status"] == "ok" and on["stdout"] == "hello from the host" and hits == ["/"]
        assert on["sandbox"] == "bwrap (network on)"
    finally:
        await runner.cleanup()
    await alive_and_well(jailed)


@needs_bwrap
async def test_nothing_a_command_starts_outlives_it(jailed: Daemon) -> None:
    """The PID namespace ends with the command: a daemonised child (setsid, out of the process group) dies too."""
    started = time.monotonic()
    value = await sh(jailed, "setsid sleep 41.5151 & echo started")
    assert value["status"] == "ok" and time.monotonic() - started < 5
    await asyncio.sleep(0.3)
    assert running("sleep 41.5151") == []
    timed = await sh(jailed, "sleep 42.5151", timeout=0.5)
    assert timed["status"] == "timeout"
    await asyncio.sleep(0.3)
    assert running("sleep 42.5151") == []


@needs_bwrap
async def test_a_program_outside_the_sandbox_gets_a_clear_error(jailed: Daemon, tmp_path: Path) -> None:
    tool = tmp_path / "tools" / "mytool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho mytool ran\n")
    tool.chmod(0o755)
    result = await run_tool(daemon_services(jailed), "cmd_run", {"command": str(tool)})
    assert result.success is False
    assert "not found inside the sandbox" in result.result["content"]
    assert "core.sandbox.ro_paths" in result.result["content"]
    jailed.config.set("core.sandbox.ro_paths", str(tool.parent))  # the owner shows it, read-only
    ran = await sh(jailed, f"{tool} && touch {tool.parent}/written")
    assert ran["stdout"] == "mytool ran\n" and "Read-only" in ran["stderr"]
    assert not (tool.parent / "written").exists()


# ------------------------------------------------------------------ terminals


@needs_bwrap
async def test_a_terminal_runs_in_the_sandbox_and_ctrl_c_still_works(jailed: Daemon, tmp_path: Path) -> None:
    services = daemon_services(jailed)
    created = (await run_tool(services, "terminal_create", {"command": "sh"})).result
    assert created["sandbox"] == "bwrap (network off)", created
    tid = created["id"]
    try:
        await run_tool(services, "terminal_write", {"id": tid, "input": "sleep 30", "key": "enter"})
        await asyncio.sleep(0.3)
        await run_tool(services, "terminal_write", {"id": tid, "key": "ctrl_c"})
        command = f"pwd; cat {jailed.paths.config_db}; echo x > {jailed.paths.root}/pwned; echo done-$((6*7))"
        await run_tool(services, "terminal_write", {"id": tid, "input": command, "key": "enter"})
        output = ""
        deadline = time.monotonic() + 10
        while "done-42" not in output and time.monotonic() < deadline:
            output += (await run_tool(services, "terminal_read", {"id": tid, "wait": 1})).result["output"]
        assert "done-42" in output, output
        assert str((tmp_path / "work").resolve()) in output
        assert "No such file or directory" in output
        assert not (jailed.paths.root / "pwned").exists()
    finally:
        await run_tool(services, "terminal_close", {"id": tid})
    await alive_and_well(jailed)


# ------------------------------------------------------------------ subprocess plugins


async def _load_probe(d: Daemon, name: str, capabilities: list[str]) -> None:
    target = d.paths.plugins / name
    shutil.copytree(FIXTURES.parent / "proc_plugins" / "pyprobe", target)
    manifest = json.loads((target / "plugin.json").read_text())
    manifest.update(name=name, capabilities=capabilities)
    (target / "plugin.json").write_text(json.dumps(manifest))
    await d.plugins.reload_all()
    info = d.plugins.info(name)
    assert info["state"] == "running", info


@needs_bwrap
async def test_subprocess_plugins_see_their_folder_their_state_and_declared_network(daemon: Daemon) -> None:
    d = daemon
    assert d.sandbox.status()["confined"]
    await _load_probe(d, "probe", [])
    await _load_probe(d, "netprobe", ["net"])
    services = daemon_services(d)

    async def attempt(plugin: str, action: str, target: str = "", text: str = "") -> dict[str, Any]:
        result = await run_tool(services, f"{plugin}_try", {"action": action, "target": target, "text": text})
        assert result.success, result
        value = result.result
        assert isinstance(value, dict)
        return value

    state = d.paths.root / "plugin_data" / "probe"
    assert (await attempt("probe", "write", str(state / "mine.txt"), "kept"))["ok"]
    assert (state / "mine.txt").read_text() == "kept"
    assert (await attempt("probe", "read", str(d.paths.plugins / "probe" / "main.py")))["ok"]
    assert (await attempt("probe", "env", "HOME"))["value"] == str(state)
    config_before = digest(d.paths.config_db)
    # the data dir holds only the folders the sandbox mounted in it: its own, nothing of the daemon's
    listed = await attempt("probe", "list", str(d.paths.root))
    assert set(listed.get("names", [])) <= {"plugins", "plugin_data"}, listed
    assert (await attempt("probe", "list", str(d.paths.root / "plugin_data")))["names"] == ["probe"]
    assert exists(str(d.paths.root / "plugin_data" / "netprobe"))  # there, but not for probe
    for action, target in (("read", str(d.paths.config_db)),
                           ("read", str(d.paths.plugins / "netprobe" / "main.py")),
                           ("write", str(d.paths.plugins / "probe" / "main.py")),
                           ("write", str(d.paths.root / "plugin_data" / "netprobe" / "theirs.txt")),
                           ("kill", str(os.getpid()))):
        value = await attempt("probe", action, target, "pwned")
        assert value["ok"] is False, (action, target, value)
    assert digest(d.paths.config_db) == config_before
    assert "pwned" not in (d.paths.plugins / "probe" / "main.py").read_text()
    assert d.plugins.info("probe")["health"]["sandbox"] == "bwrap (network off)"
    assert d.plugins.info("netprobe")["health"]["sandbox"] == "bwrap (network on)"

    hits: list[str] = []

    async def hello(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        assert (await attempt("probe", "connect", f"127.0.0.1:{port}"))["ok"] is False  # no "net" declared
        assert (await attempt("netprobe", "connect", f"127.0.0.1:{port}"))["ok"] is True
    finally:
        await runner.cleanup()
    assert {"probe", "netprobe"} <= set(d.plugins.running())


@needs_bwrap
async def test_a_plugin_that_declares_files_reads_the_owners_files_but_never_the_data_dir(
    daemon: Daemon, tmp_path: Path
) -> None:
    d = daemon
    await _load_probe(d, "fileprobe", ["files"])
    outside = tmp_path / "to-send.png"
    outside.write_bytes(b"\x89PNG")
    services = daemon_services(d)

    async def attempt(action: str, target: str) -> dict[str, Any]:
        value = (await run_tool(services, "fileprobe_try", {"action": action, "target": target, "text": "x"})).result
        assert isinstance(value, dict)
        return value

    assert (await attempt("read", str(outside))) == {"ok": True, "bytes": 4}
    assert (await attempt("write", str(outside)))["ok"] is False  # read-only
    assert (await attempt("read", str(d.paths.config_db)))["ok"] is False
    assert (await attempt("list", str(d.paths.root)))["names"] in ([], ["plugin_data", "plugins"])
    assert (await attempt("write", str(d.paths.root / "plugin_data" / "fileprobe" / "ok.txt")))["ok"] is True
    assert (await attempt("env", "TMPDIR"))["value"] == str(d.paths.root / "plugin_data" / "fileprobe")
    assert outside.read_bytes() == b"\x89PNG"


# ------------------------------------------------------------------ without bubblewrap


async def test_auto_falls_back_and_says_so_when_bwrap_is_missing(daemon: Daemon, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-bwrap")
    daemon.config.set("core.sandbox.bwrap", missing)  # checked again in the background
    await wait_until(lambda: daemon.sandbox.status()["binary"] == missing)
    status = daemon.sandbox.status()
    assert status["state"] == "weaker" and status["confined"] is False and "not installed" in status["reason"]
    # commands still run, and say how
    work = tmp_path / "work"
    work.mkdir()
    daemon.config.set("core.agent.workdir", str(work))
    value = (await run_tool(daemon_services(daemon), "cmd_run", {"command": "echo unconfined"})).result
    assert value["status"] == "ok" and value["sandbox"].startswith("none: bubblewrap")
    # homeagent status warns
    shown = await run_cli(daemon.paths.root, "status")
    assert shown.code == 0, shown.err
    line = next(x for x in shown.out.splitlines() if x.startswith("sandbox"))
    assert "WARNING" in line and "UNCONFINED" in line and "not installed" in line
    # so does the health check the model (and the web UI) reads
    health = (await run_tool(daemon_services(daemon), "healthcheck", {})).result
    assert health["status"] == "degraded" and any(p.startswith("sandbox: UNCONFINED") for p in health["problems"])
    # required: nothing starts
    daemon.config.set("core.sandbox.mode", "bwrap")
    refused = await run_tool(daemon_services(daemon), "cmd_run", {"command": "echo never"})
    assert refused.success is False and "core.sandbox.mode is bwrap" in refused.result["content"]
    terminal = await run_tool(daemon_services(daemon), "terminal_create", {"command": "sh"})
    assert terminal.success is False and "nothing was started" in terminal.result["content"]
    assert daemon.sandbox.status()["state"] == "refusing"
    # off: the owner's explicit choice, shown as such
    daemon.config.set("core.sandbox.mode", "off")
    off = (await run_tool(daemon_services(daemon), "cmd_run", {"command": "echo off"})).result
    assert off["sandbox"] == "none (core.sandbox.mode is off)"
    assert daemon.sandbox.status()["state"] == "off"


async def test_a_daemon_started_without_bwrap_starts_and_reports_it(data_dir: Path, tmp_path: Path) -> None:
    """The probe at start, pointed at a missing program: `auto` starts fine, unconfined, and says so."""
    from homeagent.config import ConfigRegistry, core_defs

    registry = ConfigRegistry(DataPaths(data_dir).config_db)
    for definition in core_defs(data_dir):
        registry.register_def(definition)
    registry.set("core.sandbox.bwrap", str(tmp_path / "missing" / "bwrap"))
    registry.close()
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        status = d.status()["sandbox"]
        assert status["state"] == "weaker" and "not installed" in status["summary"]
        assert d.plugins.running()  # everything else came up
    finally:
        await d.stop()


async def test_the_probe_reports_a_binary_that_does_not_work(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    sandbox = Sandbox(lambda: SandboxSettings(binary=str(fake)), hidden=lambda: [tmp_path])
    probe = await sandbox.probe()
    assert probe.usable is False and "No permissions to creating new namespace" in probe.reason
    launch = sandbox.wrap(["true"], cwd=str(tmp_path))
    assert launch.confined is False and launch.argv == ["true"]
    required = Sandbox(lambda: SandboxSettings(mode="bwrap", binary=str(fake)), hidden=lambda: [tmp_path])
    await required.probe()
    with pytest.raises(SandboxUnavailable, match="nothing was started"):
        required.wrap(["true"], cwd=str(tmp_path))


@needs_bwrap
async def test_a_data_dir_inside_the_workspace_is_covered(tmp_path: Path) -> None:
    """The owner points the workspace at a folder that holds the data dir: the data dir is still hidden."""
    data = tmp_path / "home" / ".homeagent"
    data.mkdir(parents=True)
    (data / "config.db").write_text("secret")
    (tmp_path / "home" / "notes.txt").write_text("mine")
    sandbox = Sandbox(lambda: SandboxSettings(), hidden=lambda: [data])
    assert (await sandbox.probe()).usable
    home = str(tmp_path / "home")
    launch = sandbox.wrap(["sh", "-c", f"cat notes.txt; ls -A {data}; cat {data}/config.db"], cwd=home,
                          writable=[home])
    proc = await asyncio.create_subprocess_exec(*launch.argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, start_new_session=True)
    out, err = await proc.communicate()
    assert out.decode() == "mine" and "No such file" in err.decode()
