"""The documentation's code runs as written: the Python plugin example of docs/plugins.md, loaded by a daemon."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from homeagent.daemon import Daemon
from tests.conftest import offline_tool

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _first_python_block(doc: Path) -> str:
    match = re.search(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert match, f"no python block in {doc.name}"
    return match.group(1)


async def test_the_python_plugin_example_in_plugins_md_runs(daemon: Daemon) -> None:
    folder = daemon.paths.plugins / "pydemo"
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(json.dumps({"name": "pydemo", "version": "1.0.0", "entry": "main.py"}))
    (folder / "main.py").write_text(_first_python_block(DOCS / "plugins.md"), encoding="utf-8")
    await daemon.plugins.reload_all()
    info = daemon.plugins.info("pydemo")
    assert info["state"] == "running", info
    assert await offline_tool(daemon, "pydemo_add", {"a": 2, "b": 3}) == {"sum": 5}
    sent = await offline_tool(daemon, "output_send__pydemo", {"payload": "hello"})
    assert sent["status"] == "sent"
    result = await daemon.io.inject_sync("test", "test", "my name is Zed", timeout=30)
    assert result.text.endswith("(pydemo)"), result.text  # its before_output stage ran


# ---------------------------------------------------------------- every command of the docs, as written

ROOT = DOCS.parent
PLACEHOLDER = re.compile(r"\[|\||…|\b(?:NAME|FILE|QUERY|TEXT|DEST|SRC|ID|N)\b")
# Commands that are not run here, each with why; a new command in the docs must be run or listed here.
SKIP = {
    "homeagent --data-dir ~/homeagent-restored run": "a second daemon in the foreground (restore: test_backup_e2e.py)",
    "homeagent llm test ds": "sends a request to the provider's own server (no network here; test_webui_setup.py)",
    "homeagent plugin install ./my-plugin.hmap": "an example file name (install: test_plugins_cli.py)",
    "homeagent approvals allow 3f9a2c --always --pattern 'git log *'": "needs the id of a waiting request "
    "(test_approvals.py)",
}
# Commands the docs show failing on purpose, with what the error says.
EXPECT_FAIL = {"homeagent config set core.llm.modle gpt-4o": 'did you mean "core.llm.model"'}
# Shell lines that are not homeagent commands but belong to a documented sequence.
OTHER_LINES = {"cp -r weather ~/.local/share/homeagent/plugins/"}
INLINE = ["homeagent --help", "homeagent status", "homeagent status --json", "homeagent plugin list --json"]


def doc_blocks() -> list[tuple[str, list[str]]]:
    """(file, command lines) of every shell block in README.md and docs/ that runs homeagent."""
    out = []
    for doc in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for block in re.findall(r"```(?:sh|bash|shell|console)?\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
            lines = [ln.strip().removeprefix("$ ") for ln in block.splitlines()]
            lines = [ln for ln in lines if ln.startswith("homeagent ") or ln in OTHER_LINES]
            if any(ln.startswith("homeagent ") for ln in lines):
                out.append((doc.name, lines))
    return out


def bare(line: str) -> str:
    """The command without its trailing comment."""
    return re.sub(r"\s+#\s.*$", "", line).strip()


def test_doc_commands_are_all_classified() -> None:
    lines = [bare(ln) for _, block in doc_blocks() for ln in block]
    assert len(lines) > 40
    assert set(SKIP) <= set(lines), "a skipped command is no longer in the docs: drop it from SKIP"
    assert set(EXPECT_FAIL) <= set(lines)


@pytest.mark.xdist_group("processes")
@pytest.mark.timeout(600)  # some 50 CLI processes, each a Python start-up
async def test_every_documented_command_runs_against_a_real_daemon(tmp_path: Path) -> None:
    """Each shell block of the docs, line by line in one shell per line, as a user would type it.

    HOME is a fresh folder, so ``~`` and the default data directory are the
    test's own; the daemon is ``homeagent run --no-web`` in the background.
    """
    import asyncio
    import os
    import shutil
    import signal
    import sys
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="hd"))  # short: the socket path must stay under 108 bytes
    work = home / "work"
    shims = home / "bin"
    for folder in (work, shims):
        folder.mkdir()
    shim = shims / "homeagent"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m homeagent "$@"\n')
    shim.chmod(0o755)
    src = str(ROOT / "src")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOMEAGENT_", "XDG_")) and k not in (
        "LLM_API_KEY", "DEEPSEEK_API_KEY")}
    env.update(HOME=str(home), PATH=f"{shims}:{env.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in (src, str(ROOT), env.get("PYTHONPATH", "")) if p))
    data = home / ".local" / "share" / "homeagent"
    log = (home / "daemon.log").open("w")
    daemon = await asyncio.create_subprocess_exec(shim, "run", "--no-web", stdout=log, stderr=log, env=env,
                                                  cwd=work)

    async def sh(line: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec("bash", "-c", line, cwd=work, env=env,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        return proc.returncode or 0, out.decode("utf-8", "replace")

    try:
        for _ in range(300):
            if (data / "cli.sock").exists():
                break
            await asyncio.sleep(0.1)
        failures: list[str] = []
        ran = 0
        for name, block in [("inline", INLINE), *doc_blocks()]:
            for line in block:
                command = bare(line)
                if command in SKIP or PLACEHOLDER.search(command):
                    continue
                code, out = await sh(line)
                ran += 1
                if command in EXPECT_FAIL:
                    if code == 0 or EXPECT_FAIL[command] not in out:
                        failures.append(f"{name}: {command!r} should fail saying {EXPECT_FAIL[command]!r}: {out}")
                elif code != 0:
                    failures.append(f"{name}: {command!r} exited {code}: {out.strip()[-600:]}")
        assert not failures, "\n".join(failures)
        assert ran > 40, ran
        listed = (await sh("homeagent plugin list"))[1]
        assert "weather" in listed and "running" in listed.split("weather", 1)[1].splitlines()[0]
        assert (work / "weather-0.1.0.hmap").is_file()
        # plugins.md: a plugin that fails to load is listed as `failed` with its error
        broken = data / "plugins" / "broken"
        broken.mkdir()
        (broken / "plugin.json").write_text('{"name": "broken", "version": "1.0.0", "entry": "main.lua"}')
        (broken / "main.lua").write_text("this is not lua (")
        assert (await sh("homeagent plugin reload broken"))[0] in (0, 1)
        listed = (await sh("homeagent plugin list"))[1]
        row = next(line for line in listed.splitlines() if line.startswith("broken "))
        assert "failed" in row and "  error: " in listed.split(row, 1)[1].splitlines()[1], listed
        assert (home / "backups" / "homeagent-2026-12-04").is_dir()
        assert (home / "homeagent-restored" / "config.db").exists() or any((home / "homeagent-restored").iterdir())
    finally:
        if daemon.returncode is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(daemon.wait(), 20)
            except TimeoutError:
                daemon.kill()
        log.close()
        shutil.rmtree(home, ignore_errors=True)
