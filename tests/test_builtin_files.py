"""The files plugin: confinement (many escape attempts, races), atomic writes, edits, and the agent loop."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from homeagent.builtin.files import Confined, PathError, read_text
from homeagent.plugins.services import PluginServices
from tests.fakes.builtins_host import attached, llm_daemon, run_tool, started, tool_messages, tool_value
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.plugins_host import make_services

SECRET = "TOP SECRET outside the folder"


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "notes.txt").write_text("line one\nline two\nline three\n")
    (root / "sub" / "inner.txt").write_text("inner text\n")
    links = {
        "link_in": "sub/inner.txt",
        "link_abs_in": str(root / "sub" / "inner.txt"),
        "link_out": "../outside/secret.txt",
        "link_out_abs": str(outside / "secret.txt"),
        "dir_out": "../outside",
        "dir_out_abs": str(outside),
        "chain1": "chain2",
        "chain2": "../outside/secret.txt",
        "sub/up": "..",
        "sub/upup": "../..",
        "loop1": "loop2",
        "loop2": "loop1",
        "devnull": "/dev/null",
        "root_link": "/",
        "in_then_out": "sub/up/../outside",
    }
    for name, target in links.items():
        os.symlink(target, root / name)
    os.mkfifo(root / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock"))
    sock.close()
    return {"root": root, "outside": outside, "tmp": tmp_path}


@pytest.fixture
async def files_host(tmp_path: Path, layout: dict[str, Path]) -> AsyncIterator[PluginServices]:
    services = make_services(tmp_path / "data")
    services.config.register_default("plugin.files.dir", str(layout["root"]))
    async with started(services, "files"):
        yield services


def _escapes(layout: dict[str, Path]) -> list[str]:
    root, outside = layout["root"], layout["outside"]
    return [
        "../outside/secret.txt",
        "../../etc/passwd",
        "/etc/passwd",
        str(outside / "secret.txt"),
        "sub/../../outside/secret.txt",
        "./../outside/secret.txt",
        "sub/../sub/../../outside/secret.txt",
        f"{root}/../outside/secret.txt",
        "//etc/passwd",
        "link_out",
        "link_out_abs",
        "link_out/",
        "dir_out/secret.txt",
        "dir_out_abs/secret.txt",
        "chain1",
        "sub/upup/outside/secret.txt",
        "sub/up/../outside/secret.txt",
        "in_then_out/secret.txt",
        "root_link/etc/passwd",
        "loop1",
        "devnull",
        "fifo",
        "sock",
        "nul\x00byte",
        "sub",
        "",
    ]


async def test_read_refuses_every_escape_variant(files_host: PluginServices, layout: dict[str, Path]) -> None:
    variants = _escapes(layout)
    assert len(variants) >= 20
    for path in variants:
        result = await asyncio.wait_for(run_tool(files_host, "files_read", {"path": path}), 5)
        text = json.dumps(result.result)
        assert result.success is False, f"{path!r} was read: {text}"
        assert result.result["isError"] is True
        assert SECRET not in text and "root:" not in text, path


async def test_refusals_say_why(files_host: PluginServices, layout: dict[str, Path]) -> None:
    async def reason(path: str) -> str:
        return str((await run_tool(files_host, "files_read", {"path": path})).result["content"])

    assert "outside the allowed folder" in await reason("../outside/secret.txt")
    assert "outside the allowed folder" in await reason("/etc/passwd")
    assert "symbolic link" in await reason("link_out")
    assert "too many levels" in await reason("loop1")
    assert "fifo" in await reason("fifo")
    assert "socket" in await reason("sock")
    assert "NUL" in await reason("nul\x00byte")
    assert "folder" in await reason("sub")


async def test_links_and_paths_that_stay_inside_work(files_host: PluginServices, layout: dict[str, Path]) -> None:
    root = layout["root"]
    for path in ("link_in", "link_abs_in", "sub/up/sub/inner.txt", "sub/../sub/inner.txt", str(root / "sub/inner.txt")):
        value = await tool_value(files_host, "files_read", {"path": path})
        assert value.get("content") == "inner text\n", (path, value)


async def test_writes_and_edits_never_leave_the_folder(files_host: PluginServices, layout: dict[str, Path]) -> None:
    outside = layout["outside"]
    before = sorted(p.name for p in outside.iterdir())
    for path in ("link_out", "link_out_abs", "dir_out/new.txt", "../new.txt", str(outside / "new.txt"),
                 "in_then_out/new.txt", "chain1", "devnull", "fifo", "root_link/tmp/x.txt"):
        for tool, args in (
            ("files_write", {"path": path, "content": "pwned"}),
            ("files_write", {"path": path, "content": "pwned", "mode": "append"}),
            ("files_edit", {"path": path, "edits": [{"old": "TOP", "new": "pwned"}]}),
        ):
            result = await asyncio.wait_for(run_tool(files_host, tool, args), 5)
            assert result.success is False, (tool, path, result.result)
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (outside / "secret.txt").read_text() == SECRET


async def test_ls_is_confined_and_shows_types(files_host: PluginServices, layout: dict[str, Path]) -> None:
    for path in ("..", "dir_out", "/", "root_link", "sub/upup"):
        result = await run_tool(files_host, "files_ls", {"path": path})
        assert result.success is False, path
    listing = await tool_value(files_host, "files_ls", {})
    types = {e["name"]: e["type"] for e in listing["entries"]}
    assert types["sub"] == "dir" and types["notes.txt"] == "file"
    assert types["link_out"] == "symlink" and types["fifo"] == "fifo" and types["sock"] == "socket"
    assert listing["entries"][0]["type"] == "dir"
    limited = await tool_value(files_host, "files_ls", {"limit": 2})
    assert len(limited["entries"]) == 2 and limited["truncated"] is True


def test_swapping_a_folder_for_a_symlink_never_leaks(layout: dict[str, Path]) -> None:
    root, outside = layout["root"], layout["outside"]
    (root / "flip").mkdir()
    (root / "flip" / "secret.txt").write_text("inside copy\n")
    os.symlink(str(outside), root / "spare")
    confined = Confined.at(root)
    stop = threading.Event()

    def flipper() -> None:
        while not stop.is_set():
            os.rename(root / "flip", root / "hold")
            os.rename(root / "spare", root / "flip")
            os.rename(root / "hold", root / "spare")

    thread = threading.Thread(target=flipper)
    thread.start()
    seen = {"inside": 0, "refused": 0}
    reads = 0
    deadline = time.monotonic() + 20.0
    try:
        # until both outcomes were seen (a busy machine can give the flipper whole GIL slices)
        while reads < 3000 or (min(seen.values()) == 0 and time.monotonic() < deadline):
            reads += 1
            try:
                value = read_text(confined, "flip/secret.txt", 1, 10, 1 << 20)
            except (PathError, OSError):
                seen["refused"] += 1
                continue
            assert SECRET not in json.dumps(value)
            if value.get("content") == "inside copy\n":
                seen["inside"] += 1
    finally:
        stop.set()
        thread.join()
    assert seen["inside"] > 0 and seen["refused"] > 0


async def test_write_modes_are_atomic_and_keep_the_mode(files_host: PluginServices, layout: dict[str, Path]) -> None:
    root = layout["root"]
    target = root / "notes.txt"
    target.chmod(0o600)
    inode = target.stat().st_ino
    value = await tool_value(files_host, "files_write", {"path": "notes.txt", "content": "new\n"})
    assert value["bytes"] == 4 and value["created"] is False
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.stat().st_ino != inode  # replaced, not rewritten in place
    await tool_value(files_host, "files_write", {"path": "notes.txt", "content": "tail\n", "mode": "append"})
    await tool_value(files_host, "files_write", {"path": "notes.txt", "content": "middle", "mode": "insert", "line": 2})
    assert target.read_text() == "new\nmiddle\ntail\n"
    bad = await run_tool(files_host, "files_write", {"path": "notes.txt", "content": "x", "mode": "insert", "line": 9})
    assert bad.success is False and "line 9" in bad.result["content"]
    exists = await run_tool(files_host, "files_write", {"path": "notes.txt", "content": "x", "mode": "create"})
    assert exists.success is False and "already exists" in exists.result["content"]
    made = await tool_value(files_host, "files_write", {"path": "deep/er/new.txt", "content": "hi", "mode": "create"})
    assert made["created"] is True and (root / "deep/er/new.txt").read_text() == "hi"
    assert not [p for p in root.rglob("*.tmp")]
    schema = await run_tool(files_host, "files_write", {"path": "x.txt", "content": "x", "mode": "truncate"})
    assert schema.success is False and "mode" in schema.result["content"]


async def test_edit_is_all_or_nothing(files_host: PluginServices, layout: dict[str, Path]) -> None:
    target = layout["root"] / "notes.txt"
    original = target.read_text()
    missing = await run_tool(files_host, "files_edit", {"path": "notes.txt", "edits": [
        {"old": "line one", "new": "LINE 1"}, {"old": "line nine", "new": "x"}]})
    assert missing.success is False and "edit 2" in missing.result["content"] and "not found" in missing.result["content"]
    ambiguous = await run_tool(files_host, "files_edit", {"path": "notes.txt", "edits": [{"old": "line", "new": "x"}]})
    assert ambiguous.success is False and "3 places" in ambiguous.result["content"]
    assert target.read_text() == original
    done = await tool_value(files_host, "files_edit", {"path": "notes.txt", "edits": [
        {"old": "line one", "new": "LINE 1"}, {"old": "two", "new": "2"}]})
    assert done["edits"] == 2
    assert target.read_text() == "LINE 1\nline 2\nline three\n"


async def test_read_windows_binary_and_size_limit(files_host: PluginServices, layout: dict[str, Path]) -> None:
    root = layout["root"]
    (root / "many.txt").write_text("".join(f"row {i}\n" for i in range(1, 101)))
    part = await tool_value(files_host, "files_read", {"path": "many.txt", "offset": 10, "limit": 3})
    assert part["content"] == "row 10\nrow 11\nrow 12\n" and part["total_lines"] == 100 and part["truncated"]
    (root / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    binary = await run_tool(files_host, "files_read", {"path": "blob.bin"})
    assert binary.success is False and "binary" in binary.result["content"]
    files_host.config.set("plugin.files.max_file_bytes", 1024)
    (root / "big.txt").write_text("x" * 5000)
    big = await run_tool(files_host, "files_read", {"path": "big.txt"})
    assert big.success is False and "max_file_bytes" in big.result["content"]
    files_host.config.set("plugin.files.read_only", True)
    ro = await run_tool(files_host, "files_write", {"path": "a.txt", "content": "x"})
    assert ro.success is False and "read-only" in ro.result["content"]


async def test_default_folder_is_the_plugin_data_dir(tmp_path: Path) -> None:
    services = make_services(tmp_path / "data")
    async with started(services, "files"):
        assert services.config.get("plugin.files.dir") == ""
        await tool_value(services, "files_write", {"path": "hello.txt", "content": "hi"})
        assert (tmp_path / "data" / "plugin_data" / "files" / "hello.txt").read_text() == "hi"
        escape = await run_tool(services, "files_read", {"path": "/etc/hostname"})
        assert escape.success is False


async def test_files_through_the_agent_loop(data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d:
        work = tmp_path / "work"
        work.mkdir()
        d.config.set("plugin.files.dir", str(work))
        async with attached(d, "files"):
            fake.script(
                Turn.tool_calls([("files_write", {"path": "todo.md", "content": "- buy milk\n"})]),
                Turn.tool_calls([("files_edit", {"path": "todo.md", "edits": [{"old": "milk", "new": "oat milk"}]}),
                                 ("files_read", {"path": "../../etc/passwd"})]),
                Turn.tool_calls([("files_read", {"path": "todo.md"})]),
                Turn.text("Your list says: buy oat milk."),
            )
            result = await d.io.inject_sync("test", "test", "note that I need milk", timeout=30)
        assert result.ok and result.text == "Your list says: buy oat milk."
        assert (work / "todo.md").read_text() == "- buy oat milk\n"
        second: list[dict[str, Any]] = tool_messages(fake.requests[2].body)
        assert len(second) == 3  # write, edit, and the refused read
        assert "isError" in second[2]["content"] and "outside" in second[2]["content"]
        last = tool_messages(fake.requests[3].body)[-1]
        assert json.loads(last["content"])["content"] == "- buy oat milk\n"
