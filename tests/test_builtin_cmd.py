"""The cmd plugin: real subprocesses, process-tree kills, confinement, program lists, and the agent loop."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from homeagent.config import core_defs
from homeagent.plugins.services import PluginServices
from tests.fakes.builtins_host import attached, llm_daemon, run_tool, started, tool_messages, tool_value
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.plugins_host import make_services

PY = sys.executable


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for a non-reaping init counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


async def wait_dead(pid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await asyncio.sleep(0.02)
    return False


def running_with(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker`` (seen from outside any sandbox, by real pid)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmdline and "bwrap" not in cmdline.split(" ", 1)[0] and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.fixture
async def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    (path / "sub").mkdir(parents=True)
    return path


@pytest.fixture
async def cmd_host(tmp_path: Path, work: Path) -> AsyncIterator[PluginServices]:
    services = make_services(tmp_path / "data")
    for definition in core_defs(tmp_path / "data"):
        services.config.register_def(definition)
    services.config.set("core.agent.workdir", str(work))
    async with started(services, "cmd"):
        yield services


async def test_runs_one_program_with_quoted_words(cmd_host: PluginServices, work: Path) -> None:
    value = await tool_value(cmd_host, "cmd_run", {"command": 'echo hello "big  world" \'x y\''})
    assert value["status"] == "ok" and value["exit_code"] == 0
    assert value["stdout"] == "hello big  world x y\n" and value["stderr"] == ""
    assert value["command"] == 'echo hello "big  world" \'x y\''
    (work / "bad.py").write_text("import sys; print('bad', file=sys.stderr); sys.exit(3)")
    failed = await tool_value(cmd_host, "cmd_run", {"command": f"{PY} bad.py"})
    assert failed["status"] == "failed" and failed["exit_code"] == 3 and failed["stderr"] == "bad\n"
    assert cmd_host.tools.get("cmd_run").no_memory is True  # type: ignore[union-attr]


async def test_shell_syntax_is_refused_unless_allowed(cmd_host: PluginServices) -> None:
    for command, word in (("ls | grep x", "|"), ("echo a > out.txt", ">"), ("true && rm -rf x", "&&")):
        result = await run_tool(cmd_host, "cmd_run", {"command": command})
        assert result.success is False and repr(word) in result.result["content"], command
    quotes = await run_tool(cmd_host, "cmd_run", {"command": 'echo "unclosed'})
    assert quotes.success is False and "quotes" in quotes.result["content"]
    shell = await run_tool(cmd_host, "cmd_run", {"command": "echo a | tr a b", "shell": True})
    assert shell.success is False and "allow_shell" in shell.result["content"]
    cmd_host.config.set("plugin.cmd.allow_shell", True)
    piped = await tool_value(cmd_host, "cmd_run", {"command": "echo a | tr a b", "shell": True})
    assert piped["stdout"] == "b\n"


async def test_timeout_kills_the_whole_tree(cmd_host: PluginServices, work: Path) -> None:
    cmd_host.config.set("plugin.cmd.allow_shell", True)  # these tree tests need a shell
    started_at = time.monotonic()
    value = await tool_value(cmd_host, "cmd_run", {"command": "sh -c 'sleep 30 & echo $! > gc.pid; sleep 30'",
                                                   "timeout": 1})
    assert value["status"] == "timeout" and "killed" in value["note"]
    assert time.monotonic() - started_at < 4
    grandchild = int((work / "gc.pid").read_text())
    assert await wait_dead(grandchild), "the grandchild outlived the timeout"


async def test_background_children_do_not_outlive_a_finished_command(cmd_host: PluginServices) -> None:
    cmd_host.config.set("plugin.cmd.allow_shell", True)
    started_at = time.monotonic()
    value = await tool_value(cmd_host, "cmd_run", {"command": "sh -c 'sleep 30 & echo $!'"})
    assert time.monotonic() - started_at < 3
    assert value["status"] == "ok" and "background" in value["note"]
    assert await wait_dead(int(value["stdout"].strip()))


async def test_cancelling_the_call_kills_the_tree(cmd_host: PluginServices, work: Path) -> None:
    cmd_host.config.set("plugin.cmd.allow_shell", True)
    task = asyncio.ensure_future(run_tool(cmd_host, "cmd_run", {"command": "sh -c 'sleep 30 & echo $! > gc.pid; wait'"}))
    for _ in range(200):
        if (work / "gc.pid").exists() and (work / "gc.pid").read_text().strip():
            break
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_dead(int((work / "gc.pid").read_text()))


async def test_output_is_capped_with_a_note(cmd_host: PluginServices) -> None:
    cmd_host.config.set("plugin.cmd.max_output_bytes", 1000)
    cmd_host.config.set("plugin.cmd.allow_shell", True)  # python -c counts as a shell
    value = await tool_value(cmd_host, "cmd_run", {"command": f"{PY} -c \"print('a' * 100000 + 'END')\""})
    assert value["truncated"] is True and value["status"] == "ok"
    assert "output truncated" in value["stdout"] and value["stdout"].rstrip().endswith("END")
    assert len(value["stdout"]) < 1200
    endless = await tool_value(cmd_host, "cmd_run", {"command": "yes", "timeout": "300ms"})
    assert endless["status"] == "timeout" and len(endless["stdout"]) < 1200


async def test_workdir_is_confined(cmd_host: PluginServices, work: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", work / "out_link")
    os.symlink("sub", work / "in_link")
    here = await tool_value(cmd_host, "cmd_run", {"command": "pwd", "workdir": "sub"})
    assert here["stdout"].strip() == str((work / "sub").resolve())
    via_link = await tool_value(cmd_host, "cmd_run", {"command": "pwd", "workdir": "in_link"})
    assert via_link["stdout"].strip() == str((work / "sub").resolve())
    for workdir in ("..", "../elsewhere", "/tmp", "out_link", "sub/../../", str(tmp_path / "elsewhere"), "missing"):
        result = await run_tool(cmd_host, "cmd_run", {"command": "pwd", "workdir": workdir})
        assert result.success is False and "workdir" in result.result["content"], workdir


async def test_default_workdir_is_the_plugin_data_dir(tmp_path: Path) -> None:
    services = make_services(tmp_path / "data")
    async with started(services, "cmd"):
        value = await tool_value(services, "cmd_run", {"command": "pwd"})
    assert value["stdout"].strip() == str((tmp_path / "data" / "plugin_data" / "cmd").resolve())


async def test_allow_and_deny_lists(cmd_host: PluginServices, work: Path) -> None:
    sudo = await run_tool(cmd_host, "cmd_run", {"command": "sudo ls"})
    assert sudo.success is False and "deny-list" in sudo.result["content"]
    cmd_host.config.set("plugin.cmd.deny_list", "rm")
    os.symlink("/bin/rm", work / "myrm")
    (work / "victim").write_text("x")
    for command in ("rm victim", "/bin/rm victim", "./myrm victim"):
        result = await run_tool(cmd_host, "cmd_run", {"command": command})
        assert result.success is False and "'rm'" in result.result["content"], command
    assert (work / "victim").exists()
    cmd_host.config.set("plugin.cmd.allow_list", "echo, pwd")
    assert (await tool_value(cmd_host, "cmd_run", {"command": "echo ok"}))["stdout"] == "ok\n"
    for command in ("ls", "/bin/echo hi", "./myrm victim", "sudo ls"):
        result = await run_tool(cmd_host, "cmd_run", {"command": command})
        assert result.success is False and "allow-list" in result.result["content"], command


async def test_secrets_are_not_passed_to_commands(cmd_host: PluginServices, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOMEAGENT_LLM_API_KEY", "sk-leak-1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leak-2")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-leak-3")
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    value = await tool_value(cmd_host, "cmd_run", {"command": "env"})
    assert "leak" not in value["stdout"] and "HARMLESS_SETTING=visible" in value["stdout"]


async def test_bad_input_gets_clear_errors(cmd_host: PluginServices) -> None:
    cases = {
        "definitely-not-a-program-xyz": "not found",
        "   ": "empty",
    }
    for command, expected in cases.items():
        result = await run_tool(cmd_host, "cmd_run", {"command": command})
        assert result.success is False and expected in result.result["content"], command
    bad_timeout = await run_tool(cmd_host, "cmd_run", {"command": "true", "timeout": "soon"})
    assert bad_timeout.success is False and "timeout" in bad_timeout.result["content"]
    cmd_host.config.set("plugin.cmd.max_timeout", "1s")
    clamped = await tool_value(cmd_host, "cmd_run", {"command": "true", "timeout": 60})
    assert clamped["status"] == "ok" and "max_timeout" in clamped["note"]


async def test_running_a_command_never_blocks_the_loop(cmd_host: PluginServices) -> None:
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.3)  # this run's baseline: the ticker's gaps with nothing else running
    quiet, gaps[:] = max(gaps), []
    await asyncio.gather(*(tool_value(cmd_host, "cmd_run", {"command": "sleep 0.3"}) for _ in range(4)))
    stop.set()
    await tick
    assert max(gaps) < max(0.1, 5 * quiet), f"the loop stalled for {max(gaps) * 1000:.0f} ms (idle: {quiet * 1000:.0f})"


async def test_cmd_through_the_agent_loop_and_turn_cancel(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d:
        d.config.set("core.agent.workdir", str(work))
        async with attached(d, "cmd"):
            fake.script(Turn.tool_calls([("cmd_run", {"command": "echo from the loop"})]), Turn.text("It printed."))
            result = await d.io.inject_sync("test", "test", "run echo", timeout=30)
            assert result.ok and result.text == "It printed."
            payload = json.loads(tool_messages(fake.requests[1].body)[0]["content"])
            assert payload["stdout"] == "from the loop\n" and payload["status"] == "ok"
            d.config.set("plugin.cmd.allow_shell", True)  # the long command below is a shell

            # the daemon runs it in its sandbox, where pids are the sandbox's own: the grandchild is found
            # by its unusual command line instead
            fake.script(
                Turn.tool_calls([("cmd_run", {"command": "sh -c 'sleep 30.4242 & echo $! > gc.pid; wait'",
                                              "timeout": 60})]),
                Turn.text("unused"),
            )
            turn = asyncio.ensure_future(d.io.inject_sync("test", "test", "run something long", timeout=30))
            pid_file = work / "gc.pid"
            for _ in range(300):
                if pid_file.exists() and pid_file.read_text().strip():
                    break
                await asyncio.sleep(0.02)
            assert running_with("30.4242"), "the command did not start"
            assert d.agent.cancel_turn()
            cancelled = await turn
            assert cancelled.interrupted
            for _ in range(150):
                if not running_with("30.4242"):
                    break
                await asyncio.sleep(0.02)
            assert not running_with("30.4242"), "the grandchild outlived the cancelled turn"


# ---------------------------------------------------- shell parsing (issue 19)


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("echo a; uname", "';'"),
        ("echo a|wc", "'|'"),
        ("echo a>{out}", "'>'"),
        ("echo a &", "'&'"),
        ("cat < /etc/hostname", "'<'"),
        ("echo $(id)", "'$('"),
        ('echo "$(id)"', "'$('"),
        ("echo `id`", "'`'"),
        ("echo ${{HOME}}", "'${'"),
        ("echo $HOME", "'$HOME'"),
        ("echo a\nuname", "'a newline'"),
        ("(echo a)", "'('"),
        ("echo a # not a comment here", "'#'"),
    ],
)
async def test_unquoted_shell_syntax_is_refused(cmd_host: PluginServices, work: Path, command: str, shown: str) -> None:
    out = work / "x"
    result = await run_tool(cmd_host, "cmd_run", {"command": command.format(out=out)})
    assert result.success is False, command
    message = result.result["content"]
    assert shown in message and "without a shell" in message and "allow_shell" in message, message
    assert not out.exists()
    cmd_host.config.set("plugin.cmd.allow_shell", True)  # then the model is told to pass shell: true
    result = await run_tool(cmd_host, "cmd_run", {"command": command.format(out=out)})
    assert result.success is False and "shell: true" in result.result["content"]


@pytest.mark.parametrize(
    ("command", "stdout"),
    [
        ('echo "a|b" "x;y" "1 > 2" "&&"', "a|b x;y 1 > 2 &&\n"),
        ("echo 'a|b' '$(id)' '`id`' '$HOME'", "a|b $(id) `id` $HOME\n"),
        ("echo a\\|b a\\;b \\$HOME", "a|b a;b $HOME\n"),
        ("echo price$ 50% a#b", "price$ 50% a#b\n"),
        ('echo "two\nlines"', "two\nlines\n"),
    ],
)
async def test_quoted_metacharacters_reach_the_program_as_text(cmd_host: PluginServices, command: str,
                                                             stdout: str) -> None:
    value = await tool_value(cmd_host, "cmd_run", {"command": command})
    assert value["status"] == "ok" and value["stdout"] == stdout


async def test_quoted_pipe_is_an_argument_of_grep(cmd_host: PluginServices, work: Path) -> None:
    (work / "f.txt").write_text("a|b\nab\n")
    value = await tool_value(cmd_host, "cmd_run", {"command": 'grep -F "a|b" f.txt'})
    assert value["status"] == "ok" and value["stdout"] == "a|b\n"


@pytest.mark.parametrize(
    "command",
    [
        'sh -c "echo pwned > {out}"',
        'bash -c "echo pwned > {out}"',
        'dash -c "echo pwned > {out}"',
        "/bin/sh -c 'echo pwned > {out}'",
        "sh",
        "env sh -c 'echo pwned > {out}'",
        "env -i PATH=/usr/bin:/bin sh -c 'echo pwned > {out}'",
        "env -S 'sh -c true'",
        "timeout 5 sh -c 'echo pwned > {out}'",
        "nice -n 1 bash -c 'echo pwned > {out}'",
        "busybox sh -c 'echo pwned > {out}'",
        PY + " -c \"open('{out}', 'w').write('pwned')\"",
        "python3 -c \"open('{out}', 'w').write('pwned')\"",
        "python3 -Bc \"open('{out}', 'w').write('pwned')\"",
        "perl -e 'open(F, \">{out}\")'",
        "perl -ne 'print'",
        "ruby -e 'File.write(\"{out}\", \"x\")'",
        "node -e 'require(\"fs\").writeFileSync(\"{out}\", \"x\")'",
        "php -r 'file_put_contents(\"{out}\", \"x\");'",
        "lua -e 'io.open(\"{out}\", \"w\")'",
    ],
)
async def test_shells_and_inline_interpreters_count_as_a_shell(cmd_host: PluginServices, work: Path,
                                                              command: str) -> None:
    out = work / "pwned"
    result = await run_tool(cmd_host, "cmd_run", {"command": command.format(out=out)})
    assert result.success is False, command
    message = result.result["content"]
    assert "allow_shell" in message and ("shell" in message), message
    assert not out.exists()


async def test_symlinked_shell_is_seen_for_what_it_is(cmd_host: PluginServices, work: Path) -> None:
    # a name that is not a shell, resolving to one (like /bin/sh -> dash, python3 -> python3.11)
    (work / "helper").symlink_to("/bin/sh")
    result = await run_tool(cmd_host, "cmd_run", {"command": "./helper -c 'echo pwned'"})
    assert result.success is False and "shell" in result.result["content"]


async def test_scripts_and_ordinary_flags_still_run(cmd_host: PluginServices, work: Path) -> None:
    (work / "hello.py").write_text("import sys; print('hi', sys.argv[1:])")
    value = await tool_value(cmd_host, "cmd_run", {"command": f"{PY} hello.py -c -e"})
    assert value["status"] == "ok" and value["stdout"] == "hi ['-c', '-e']\n"
    value = await tool_value(cmd_host, "cmd_run", {"command": "env LC_ALL=C ls -a"})
    assert value["status"] == "ok" and "hello.py" in value["stdout"]
    value = await tool_value(cmd_host, "cmd_run", {"command": "timeout 5 echo fine"})
    assert value["stdout"] == "fine\n"


async def test_shells_run_when_the_user_allows_them(cmd_host: PluginServices, work: Path) -> None:
    cmd_host.config.set("plugin.cmd.allow_shell", True)
    value = await tool_value(cmd_host, "cmd_run", {"command": "sh -c 'echo from-sh'"})
    assert value["stdout"] == "from-sh\n"
    piped = await tool_value(cmd_host, "cmd_run", {"command": "echo a; echo b | tr b c", "shell": True})
    assert piped["status"] == "ok" and piped["stdout"] == "a\nc\n"


async def test_an_allow_listed_interpreter_may_take_inline_code(cmd_host: PluginServices) -> None:
    name = os.path.basename(PY)
    cmd_host.config.set("plugin.cmd.allow_list", name)
    result = await run_tool(cmd_host, "cmd_run", {"command": f"{name} -c \"print('listed')\""})
    assert result.success is True and result.result["stdout"] == "listed\n"
    cmd_host.config.set("plugin.cmd.allow_list", f"env,{name}")
    result = await run_tool(cmd_host, "cmd_run", {"command": "env sh -c true"})
    assert result.success is False and "'sh'" in result.result["content"]
