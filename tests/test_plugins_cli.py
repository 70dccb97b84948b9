"""`homeagent plugin …` without a daemon: scaffolds that work, pack, install, list, enable/disable."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from homeagent.cli.main import main
from homeagent.cli.plugin_cmd import scaffold
from homeagent.plugins.package import inspect_package
from homeagent.sdk.types import ToolCall
from tests.conftest import run_cli
from tests.fakes.plugins_host import plugin_host


@pytest.mark.parametrize("kind", ["lua", "python", "skill"])
async def test_scaffolds_load_and_work(kind: str, data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        folder = host.plugins_dir / f"hello-{kind}"
        for rel, content in scaffold(folder.name, kind).items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(content)
        summary = await host.registry.load_all()
        assert summary["states"] == {"running": 1}, summary
        info = host.registry.info(folder.name)
        assert info["warnings"] == []
        if kind == "skill":
            result = await host.services.tools.execute(ToolCall("c", "skill_read", {"name": folder.name}))
            assert "Step-by-step instructions" in result.result["body"]
        else:
            tool = folder.name.replace("-", "_") + "_hello"
            result = await host.services.tools.execute(ToolCall("c", tool, {"who": "Ada"}))
            assert result.result == {"greeting": "Hello, Ada!"}


@dataclass
class Out:
    code: int
    out: str
    err: str


def cli(capsys: pytest.CaptureFixture[str], data_dir: Path, *args: str) -> Out:
    """The real command-line entry point, in-process (the subprocess path is covered below)."""
    code = main(["--data-dir", str(data_dir), *args])
    captured = capsys.readouterr()
    return Out(code, captured.out, captured.err)


def test_init_pack_install_list_offline(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    created = cli(capsys, data_dir, "plugin", "init", "hello", "--kind", "lua", "--dir", str(work))
    assert created.code == 0 and "created lua plugin hello" in created.out
    exists = cli(capsys, data_dir, "plugin", "init", "hello", "--dir", str(work))
    assert exists.code == 1 and "already exists" in exists.err
    bad = cli(capsys, data_dir, "plugin", "init", "../x", "--dir", str(work))
    assert bad.code == 1 and "invalid plugin name" in bad.err

    packed = cli(capsys, data_dir, "plugin", "pack", str(work / "hello"), "-o", str(work / "hello.hmap"))
    assert packed.code == 0 and "packed hello 0.1.0 (lua)" in packed.out
    digest = inspect_package(work / "hello.hmap").sha256
    assert digest in packed.out

    installed = cli(capsys, data_dir, "plugin", "install", str(work / "hello.hmap"))
    assert installed.code == 0, installed.err
    assert f"sha256 {digest}" in installed.out and "next `homeagent run`" in installed.out
    again = cli(capsys, data_dir, "plugin", "install", str(work / "hello.hmap"))
    assert again.code == 1 and "use --upgrade" in again.err
    upgraded = cli(capsys, data_dir, "plugin", "install", "--upgrade", str(work / "hello.hmap"))
    assert upgraded.code == 0 and "upgraded hello" in upgraded.out

    disabled = cli(capsys, data_dir, "plugin", "disable", "hello")
    assert disabled.code == 0 and "hello: disabled" in disabled.out
    listed = cli(capsys, data_dir, "plugin", "list", "--json")
    states = {p["name"]: p["state"] for p in json.loads(listed.out)}
    assert states["pluginmgr"] == "not running" and states["hello"] == "disabled"

    info = cli(capsys, data_dir, "plugin", "info", "hello")
    assert info.code == 0 and "disabled" in info.out and digest in info.out
    missing = cli(capsys, data_dir, "plugin", "info", "nope")
    assert missing.code == 1 and "no plugin named 'nope'" in missing.err

    reload = cli(capsys, data_dir, "plugin", "reload")
    assert reload.code == 3 and "no daemon is running" in reload.err
    removed = cli(capsys, data_dir, "plugin", "remove", "hello")
    assert removed.code == 0 and not (data_dir / "plugins" / "hello").exists()


async def test_pack_reports_a_broken_manifest_in_a_subprocess(data_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "plugin.json").write_text('{"name": "broken", "entry": 5}')
    result = await run_cli(data_dir, "plugin", "pack", str(tmp_path / "broken"))
    assert result.code == 1
    assert "'version' is missing" in result.err and "'entry' must be a string, got number" in result.err
