"""The knowledge base: files, names, hybrid search, its tools and `homeagent knowledge …`."""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from homeagent.agent.tools import ToolRegistry
from homeagent.cli import knowledge_cmd
from homeagent.knowledge.api import KnowledgeService
from homeagent.knowledge.base import KnowledgeBase, KnowledgeError, chunk_text, validate_name
from homeagent.knowledge.tools import knowledge_tools
from homeagent.sdk.types import ToolCall
from tests.fakes.graph_embedder import CharEmbedder, real_embedder

NOTES = {
    "wifi": "# 家里的 Wi-Fi\n\n名称 HomeNet，密码在冰箱上的便签里。路由器在书房。",
    "recipes": "# Recipes\n\nTomato soup: tomatoes, onion, garlic, simmer 20 minutes.\n\nPancakes: flour, eggs, milk.",
    "car": "# 汽车保养\n\n每一万公里换机油，轮胎气压 2.3 bar。保险在每年三月续保。",
}


@pytest.fixture
async def kb(tmp_path: Path) -> KnowledgeBase:
    base = KnowledgeBase(tmp_path / "knowledge", CharEmbedder())
    for name, text in NOTES.items():
        await base.add(name, text)
    return base


@pytest.mark.parametrize("bad", ["", "   ", "../etc", "a/b", "a\\b", ".hidden", "x..y", "..", "a\x00b", "n" * 101])
def test_bad_names_are_rejected(bad: str) -> None:
    with pytest.raises(KnowledgeError):
        validate_name(bad)


def test_good_names() -> None:
    assert validate_name(" 菜谱 2024 ") == "菜谱 2024"
    assert validate_name("my-notes_v1.2") == "my-notes_v1.2"


async def test_files_on_disk_and_listing(kb: KnowledgeBase) -> None:
    assert (kb.root / "wifi" / "content.md").read_text(encoding="utf-8") == NOTES["wifi"]
    entries = await kb.entries()
    assert [e.name for e in entries] == ["car", "recipes", "wifi"]
    assert next(e for e in entries if e.name == "wifi").title == "家里的 Wi-Fi"
    info, replaced = await kb.add("wifi", "# 新 Wi-Fi\n密码改了")
    assert replaced and info.title == "新 Wi-Fi"
    with pytest.raises(KnowledgeError, match="already exists"):
        await kb.add("wifi", "x", overwrite=False)
    with pytest.raises(KnowledgeError, match="empty"):
        await kb.add("blank", "  \n")
    assert await kb.get("blank") is None
    assert not any(p.name.endswith(".tmp") for p in (kb.root / "wifi").iterdir())
    assert await kb.delete("car") and not (kb.root / "car").exists()
    assert not await kb.delete("car")
    assert await KnowledgeService(kb).list() == ["recipes", "wifi"]


async def test_search_chinese_and_english(kb: KnowledgeBase) -> None:
    hits = await kb.search("Wi-Fi 密码是什么", 2)
    assert hits[0].name == "wifi" and "HomeNet" in hits[0].content
    hits = await kb.search("how long to simmer tomato soup")
    assert hits[0].name == "recipes" and "simmer" in hits[0].snippet
    hits = await kb.search("机油")
    assert hits[0].name == "car"
    assert await kb.search("   ") == []


async def test_index_follows_edits_from_outside(kb: KnowledgeBase) -> None:
    assert (await kb.search("garden"))[:1] == [] or (await kb.search("garden"))[0].name != "garden"
    folder = kb.root / "garden"
    folder.mkdir()
    (folder / "content.md").write_text("# Garden\n\nWater the tomatoes every morning.", encoding="utf-8")
    hits = await kb.search("water the garden")
    assert hits[0].name == "garden"
    os.remove(folder / "content.md")
    assert "garden" not in [h.name for h in await kb.search("water the garden")]


async def test_vectors_are_cached_by_content(tmp_path: Path, kb: KnowledgeBase) -> None:
    await kb.search("机油")
    embedder = CharEmbedder()
    fresh = KnowledgeBase(kb.root, embedder)
    await fresh.search("机油")
    assert embedder.calls == 1  # only the query: every chunk came from the cache
    assert (kb.root / ".index").is_dir() and ".index" not in await fresh.names()


async def test_lexical_only_without_embedder(tmp_path: Path) -> None:
    base = KnowledgeBase(tmp_path / "k")
    await base.add("notes", "The spare key is under the blue flower pot.")
    assert (await base.search("where is the spare key"))[0].name == "notes"
    assert await KnowledgeBase(tmp_path / "missing").search("x") == []


def test_chunking_keeps_paragraphs() -> None:
    text = "\n\n".join(f"para {i} " + "x" * 200 for i in range(6))
    chunks = chunk_text(text, 500)
    assert all(len(c) <= 500 for c in chunks) and len(chunks) == 3
    assert chunk_text("y" * 1300, 500) == ["y" * 500, "y" * 500, "y" * 300]


async def test_tools(kb: KnowledgeBase) -> None:
    registry = ToolRegistry()
    for definition, handler in knowledge_tools(kb):
        registry.register(definition, handler)
    assert {d.name for d in registry.tools()} == {
        "knowledge_search",
        "knowledge_create",
        "knowledge_list",
        "knowledge_delete",
    }
    ids = itertools.count()

    async def call(tool: str, **args: object) -> object:
        return (await registry.execute(ToolCall(id=f"k{next(ids)}", name=tool, arguments=dict(args)))).result

    created = await call("knowledge_create", name="猫", content="# 猫\n\n猫粮每天两次。")
    assert created["ok"] and not created["replaced"]
    assert (await call("knowledge_search", query="猫粮", top_k=1))["results"][0]["name"] == "猫"
    assert "猫" in [e["name"] for e in (await call("knowledge_list"))["entries"]]
    bad = await call("knowledge_create", name="../escape", content="x")
    assert bad["isError"] and "path separators" in bad["content"]
    assert not (kb.root.parent / "escape").exists()
    assert (await call("knowledge_delete", name="猫"))["ok"]
    assert (await call("knowledge_delete", name="猫"))["isError"]
    assert (await call("knowledge_search"))["isError"]  # query is required


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="homeagent")
    parser.add_argument("--data-dir")
    knowledge_cmd.register(parser.add_subparsers(dest="command"))
    return parser


def cli(capsys: pytest.CaptureFixture[str], data_dir: Path, *argv: str) -> tuple[int, str, str]:
    args = _parser().parse_args(["--data-dir", str(data_dir), *argv])
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_list_add_search_rm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    note = tmp_path / "note.md"
    note.write_text("# Plants\n\nThe fern needs water twice a week.", encoding="utf-8")
    assert cli(capsys, data, "knowledge", "list")[1].strip() == "(the knowledge base is empty)"
    code, out, _ = cli(capsys, data, "knowledge", "add", "plants", str(note))
    assert code == 0 and "added plants" in out
    monkeypatch.setattr("sys.stdin", io.StringIO("# 购物\n\n牛奶 鸡蛋 面包"))
    assert cli(capsys, data, "knowledge", "add", "shopping")[0] == 0
    code, _, err = cli(capsys, data, "knowledge", "add", "../evil", "--text", "x")
    assert code == 1 and "path separators" in err
    listing = cli(capsys, data, "knowledge", "list")[1]
    assert "plants" in listing and "shopping" in listing
    code, out, _ = cli(capsys, data, "knowledge", "search", "--lexical", "fern", "water")
    assert code == 0 and out.startswith("plants")
    assert cli(capsys, data, "knowledge", "search", "--lexical", "面包")[1].startswith("shopping")
    assert cli(capsys, data, "knowledge", "rm", "plants")[0] == 0
    code, _, err = cli(capsys, data, "knowledge", "rm", "plants")
    assert code == 1 and "no knowledge entry" in err
    assert (data / "knowledge" / "shopping" / "content.md").exists()


def test_cli_in_a_real_process(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code = (
        "import argparse, sys\n"
        "from homeagent.cli import knowledge_cmd\n"
        "p = argparse.ArgumentParser(); p.add_argument('--data-dir')\n"
        "knowledge_cmd.register(p.add_subparsers(dest='command'))\n"
        "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))\n"
    )

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code, "--data-dir", str(data), *argv], capture_output=True, text=True, timeout=60
        )

    assert run("knowledge", "add", "bikes", "--text", "# Bikes\n\nPump the tyres to 4 bar.").returncode == 0
    found = run("knowledge", "search", "--lexical", "tyres", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)[0]["name"] == "bikes"


async def test_search_with_the_default_embedder_crosses_languages(tmp_path: Path) -> None:
    base = KnowledgeBase(tmp_path / "k", real_embedder())  # type: ignore[arg-type]
    await base.add("cats", "# 猫\n\n猫每天要吃两顿猫粮。")
    await base.add("bikes", "# Bikes\n\nPump the tyres to 4 bar.")
    hits = await base.search("kitten food")  # no shared word: only the vectors can link them
    assert hits[0].name == "cats"
