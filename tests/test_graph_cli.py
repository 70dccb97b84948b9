"""`homeagent memory graph` and `memory run-loop` on a data directory, with no daemon running."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from homeagent.cli.graph_cmd import register_memory_graph
from homeagent.memory.distill import RuleDistiller
from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_model import Triple


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="homeagent")
    parser.add_argument("--data-dir")
    sub = parser.add_subparsers(dest="command")
    memory = sub.add_parser("memory")
    register_memory_graph(memory.add_subparsers(dest="memory_command"))
    return parser


def cli(capsys: pytest.CaptureFixture[str], data: Path, *argv: str) -> tuple[int, str, str]:
    args = _parser().parse_args(["--data-dir", str(data), "memory", *argv])
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"

    async def seed() -> None:
        graph = await GraphDB.open(root / "memory" / "graph.db")
        await graph.commit(
            [
                Triple("用户", "lives_in", "北京", sentence="我住在北京", valid_from=1.0),
                Triple("用户", "likes", "咖啡"),
                Triple("咖啡", "is_a", "饮料"),
                Triple('Alice "Al"', "knows", "用户"),
            ]
        )
        await graph.commit([Triple("用户", "lives_in", "上海", valid_from=2.0)])
        await graph.close()

    asyncio.run(seed())
    return root


def test_tree(capsys: pytest.CaptureFixture[str], data: Path) -> None:
    code, out, _ = cli(capsys, data, "graph", "--entity", "用户", "--depth", "2")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "用户 (Person)  [4 mentions]"
    assert "--lives_in--> 上海 (Location)" in out and "北京" not in out
    assert any(line.endswith('<--knows-- Alice "Al"') for line in lines)
    coffee = next(i for i, line in enumerate(lines) if "--likes--> 咖啡" in line)
    assert lines[coffee + 1].strip("│ ").startswith("└── --is_a--> 饮料")
    _, shallow, _ = cli(capsys, data, "graph", "--entity", "用户", "--depth", "1")
    assert "饮料" not in shallow
    _, history, _ = cli(capsys, data, "graph", "--entity", "用户", "--depth", "1", "--history")
    assert "--lives_in--> 北京 (Location)  (我住在北京; retired: superseded" in history


def test_dot_and_json(capsys: pytest.CaptureFixture[str], data: Path) -> None:
    code, dot, _ = cli(capsys, data, "graph", "--entity", "咖啡", "--format", "dot")
    assert code == 0 and dot.startswith("digraph memory {") and dot.rstrip().endswith("}")
    assert '[label="likes"]' in dot and '[label="Alice \\"Al\\""]' in dot
    code, text, _ = cli(capsys, data, "graph", "--entity", "咖啡", "--depth", "1", "--format", "json")
    data_out = json.loads(text)
    assert data_out["center"] == ["咖啡"]
    assert {(r["subject"], r["relation"], r["object"]) for r in data_out["relations"]} == {
        ("用户", "likes", "咖啡"),
        ("咖啡", "is_a", "饮料"),
    }


def test_default_centers_and_errors(capsys: pytest.CaptureFixture[str], data: Path, tmp_path: Path) -> None:
    code, out, _ = cli(capsys, data, "graph", "--depth", "1")
    assert code == 0 and out.startswith("用户 (Person)")
    code, _, err = cli(capsys, data, "graph", "--entity", "咖")
    assert code == 1 and "no entity named '咖'" in err
    code, _, err = cli(capsys, data, "graph", "--entity", "咖啡豆")
    assert code == 1 and "no entity named" in err
    code, _, err = cli(capsys, tmp_path / "empty", "graph")
    assert code == 1 and "no memory graph yet" in err


def test_run_loop_without_daemon(capsys: pytest.CaptureFixture[str], data: Path) -> None:
    async def record() -> None:
        graph = await GraphDB.open(data / "memory" / "graph.db")
        await RuleDistiller(graph).record("我喜欢绿茶。")
        await graph.commit([Triple("user", "owns", "New York Times"), Triple("user", "reads", "new-york times")])
        await graph.close()

    asyncio.run(record())
    code, out, _ = cli(capsys, data, "run-loop", "rules", "--json")
    assert code == 0 and json.loads(out)["facts"] == ["user --likes--> 绿茶"]
    code, out, _ = cli(capsys, data, "run-loop", "merge", "--json")
    assert code == 0 and json.loads(out)["merged"] == 1
    code, _, err = cli(capsys, data, "run-loop", "archive")
    assert code == 3 and "needs the running daemon" in err
