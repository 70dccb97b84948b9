"""Media in the running daemon: the CLI over the real socket, the memory tools' markers and references, GC, off switch."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from homeagent.cli.client import Client
from homeagent.config import ConfigRegistry, core_defs
from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from homeagent.sdk.types import ToolCall
from tests.conftest import run_cli
from tests.fakes.webui_fixtures import start_web

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(100))
_ids = itertools.count()


def set_config(data_dir: Path, key: str, value: Any) -> None:
    reg = ConfigRegistry(data_dir / "config.db")
    try:
        for definition in core_defs(data_dir):
            reg.register_def(definition)
        reg.set(key, value)
    finally:
        reg.close()


async def tool(daemon: Daemon, tool_name: str, /, **args: Any) -> Any:
    result = await daemon.tools.execute(ToolCall(id=f"c{next(_ids)}", name=tool_name, arguments=args))
    return result.result


async def test_media_through_cli_tools_and_gc(daemon: Daemon, data_dir: Path, tmp_path: Path) -> None:
    image = tmp_path / "flag.gif"  # the name lies: the bytes are a PNG
    image.write_bytes(PNG)
    added = await run_cli(data_dir, "memory", "media", "add", str(image), "--description", "purple-blue-red striped flag")
    assert added.code == 0, added.err
    short = added.out.split("[image/png ", 1)[1][:12]
    assert "stored: [image/png " in added.out and "] purple-blue-red striped flag" in added.out
    listed = await run_cli(data_dir, "memory", "media", "list")
    assert listed.code == 0 and short in listed.out and "refs 0" in listed.out

    doc = await tool(daemon, "doc_commit", content="The flag from the parade", media_digests=[short])
    assert doc["ok"] and doc["media"] == [f"[image/png {short}] purple-blue-red striped flag"]
    fact = await tool(
        daemon, "memory_commit",
        triples=[{"subject": "Alice", "relation": "likes", "object": "striped flags",
                  "sentence_text": "Alice loved the parade flag", "media_digests": [short]}],
    )  # fmt: skip
    assert fact["ok"] and fact["added"] == 1
    recalled = await daemon.graph.recall(["Alice"], 1)
    assert recalled.relations[0].sentence == (
        f"Alice loved the parade flag\n[image/png {short}] purple-blue-red striped flag"
    )
    shown = await run_cli(data_dir, "memory", "media", "show", short)
    assert shown.code == 0, shown.err
    assert f"document {doc['id']}" in shown.out and "graph_sentence " in shown.out and "references:  2" in shown.out

    # an unknown digest is a clear tool error and nothing is written
    docs_before = await daemon.docs.acount()
    bad = await tool(daemon, "doc_commit", content="another", media_digests=["0123456789ab"])
    assert bad["isError"] and "no stored media has the digest 0123456789ab" in bad["content"]
    bad = await tool(
        daemon, "memory_commit",
        triples=[{"subject": "Bob", "relation": "likes", "object": "tea", "media_digests": ["feedfacecafe"]}],
    )  # fmt: skip
    assert bad["isError"] and "feedfacecafe" in bad["content"]
    assert await daemon.docs.acount() == docs_before and not (await daemon.graph.recall(["Bob"], 1)).relations
    assert daemon.media is not None
    too_long = await tool(
        daemon, "memory_commit",
        triples=[{"subject": "Bob", "relation": "likes", "object": "tea", "sentence_text": "x" * 8000,
                  "media_digests": [short]}],
    )  # fmt: skip
    assert too_long["isError"] and "limit is 8000" in too_long["content"]
    assert len(await daemon.media.arefs_of(short)) == 2  # the reference this call added was undone
    shown = await run_cli(data_dir, "memory", "media", "show", "not-a-digest")
    assert shown.code == 1 and "is not a media digest" in shown.err

    # referenced: GC keeps it however old the mark; unreferenced: the bytes go, the description stays
    await daemon.media.aremove_refs("document", doc["id"])
    gc = await run_cli(data_dir, "memory", "media", "gc", "--min-age", "0s")
    assert gc.code == 0 and "swept:               0" in gc.out  # the graph sentence still refers to it
    assert await daemon.media.aget(short) == PNG
    (ref,) = await daemon.media.arefs_of(short)
    await daemon.media.aremove_refs(ref["owner_kind"], ref["owner_id"])
    assert (await daemon.media.agc(0.0)).swept == 1
    shown = await run_cli(data_dir, "memory", "media", "show", short)
    assert "state:       evicted" in shown.out and "purple-blue-red striped flag" in shown.out
    # homeagent ask --image: the file is kept (again) and its marker goes into the message
    asked = await run_cli(data_dir, "ask", "--image", str(image), "this is the parade flag")
    assert asked.code == 0, asked.err
    said = [e.input for e in daemon.context.timeline() if e.kind == "user"]
    assert said[-1] == f"this is the parade flag\n[image/png {short}] purple-blue-red striped flag"
    assert (await daemon.media.ainfo(short)).state == "present"  # storing the bytes again brought them back
    missing = await run_cli(data_dir, "ask", "--image", str(tmp_path / "nope.png"), "hello")
    assert missing.code == 1 and "nope.png" in missing.err and "No such file" in missing.err
    found = await daemon.docs.aquery("purple blue red striped flag", 3, touch=False)
    assert found and f"[image/png {short}] purple-blue-red striped flag" in found[0].content


async def test_media_off_is_plain_text_and_a_corrupt_db_loses_no_bytes(data_dir: Path, tmp_path: Path) -> None:
    set_config(data_dir, "core.memory.media.enabled", False)
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        assert d.media is None
        doc = await tool(d, "doc_commit", content="a note with a picture", media_digests=["0123456789ab"])
        assert doc["ok"] and "media" not in doc
        assert "[" not in (await d.docs.aquery("note with a picture", 1, touch=False))[0].content
        listed = await run_cli(data_dir, "memory", "media", "list")
        assert listed.code == 1 and "the media store is off" in listed.err
    finally:
        await d.stop()

    image = tmp_path / "p.png"
    image.write_bytes(PNG)
    set_config(data_dir, "core.memory.media.enabled", True)
    added = await run_cli(data_dir, "memory", "media", "add", str(image))  # no daemon: the CLI opens the store
    assert added.code == 0, added.err
    stats = await run_cli(data_dir, "memory", "stats")
    assert stats.code == 0 and "media           1 stored, 0.0 MB, 0 references" in stats.out
    (data_dir / "memory" / "media" / "media.db").write_bytes(b"this is not a database" * 100)
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        assert any("media store" in n and "set aside" in n for n in d.notes)
        assert d.media_repair is not None  # adopted at start (media repair), not left to the next GC pass
        await asyncio.wait_for(asyncio.shield(d.media_repair), 60)
        gc = await run_cli(data_dir, "memory", "media", "gc", "--json")
        assert gc.code == 0 and '"adopted": 0' in gc.out
        assert d.media is not None and (await d.media.alist())[0].source == "recovered"
        assert await d.media.aget((await d.media.alist())[0].digest) == PNG
    finally:
        await d.stop()


async def test_web_upload_keeps_the_file_in_the_media_store(daemon: Daemon) -> None:
    web = await start_web(daemon)
    try:
        async with web.client() as c:
            response = await c.post(
                "/api/v1/chat/file", data={"inject": "false"},
                files=[("file", ("flag.gif", PNG, "image/gif")), ("file", ("empty.txt", b"", "text/plain"))],
            )  # fmt: skip
        assert response.status_code == 200, response.text
        flag, empty = response.json()["files"]
        assert flag["media"]["mime"] == "image/png" and flag["media"]["source"] == "webui"
        assert flag["media"]["marker"] == f"[image/png {flag['media']['short']}] flag.gif"
        note = response.json()["note"]  # English whatever the UI's language; the marker comes with the media
        assert note.startswith("[file uploaded in the web UI: flag.gif (116 B), saved at ") and "[image/png" not in note
        assert empty["media"] is None  # refused by the store (0 bytes): still an ordinary upload
        assert daemon.media is not None and await daemon.media.aget(flag["media"]["short"]) == PNG
        doc = await tool(daemon, "doc_commit", content="the flag I uploaded", media_digests=[flag["media"]["short"]])
        assert doc["ok"] and doc["media"] == [f"[image/png {flag['media']['short']}] flag.gif"]

        # the memory browser's media view
        digest = flag["media"]["digest"]
        async with web.client() as c:
            listed = (await c.get("/api/v1/memory/media")).json()
            assert [i["digest"] for i in listed["items"]] == [digest] and listed["stats"]["present"] == 1
            shown = (await c.get(f"/api/v1/memory/media/{digest[:12]}")).json()
            assert shown["refs"] == 1 and shown["references"][0]["owner_id"] == doc["id"]
            raw = await c.get(listed["items"][0]["url"])
            assert raw.content == PNG and raw.headers["content-type"] == "image/png"
            assert "sandbox" in raw.headers["content-security-policy"]
            assert (await c.get(f"/api/v1/memory/media/{'0' * 64}/raw")).status_code == 404
            path = daemon.paths.memory / "media" / "blobs" / digest[:2] / digest
            path.write_bytes(PNG[:-1] + b"!")  # damaged on disk
            damaged = await c.get(f"/api/v1/memory/media/{digest}/raw")
            assert damaged.status_code == 410 and "damaged on disk" in damaged.json()["error"]
            assert (await c.get(f"/api/v1/memory/media/{digest}")).json()["state"] == "quarantined"
            assert (await c.get("/api/v1/memory/media?state=bogus")).status_code == 400
    finally:
        await web.server.close()


async def test_an_unusable_media_folder_leaves_the_daemon_running_on_text(data_dir: Path) -> None:
    (data_dir / "memory").mkdir()
    (data_dir / "memory" / "media").write_text("a file where the media folder should be")
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        assert d.media is None and any("media store" in n and "media stays text" in n for n in d.notes)
        doc = await tool(d, "doc_commit", content="still remembered", media_digests=["0123456789ab"])
        assert doc["ok"]
    finally:
        await d.stop()


async def test_gc_drops_references_whose_owner_is_gone(daemon: Daemon) -> None:
    assert daemon.media is not None
    digest = (await daemon.media.aput_bytes(PNG, description="the lake at dawn")).info.digest
    moved = await tool(daemon, "doc_commit", content="Photo from the lake trip", media_digests=[digest])
    archived = await tool(daemon, "doc_commit", content="Another note on the lake", media_digests=[digest])
    fact = await tool(
        daemon, "memory_commit",
        triples=[{"subject": "Lake Aral", "relation": "visited_by", "object": "me", "media_digests": [digest]}],
    )  # fmt: skip
    assert moved["ok"] and archived["ok"] and fact["ok"] and len(await daemon.media.arefs_of(digest)) == 3
    recalled = await tool(daemon, "doc_query", query="photo from the lake trip", top_k=1)
    assert [d["id"] for d in recalled["documents"]] == [moved["id"]]  # now in the conversation window
    assert await daemon.docs.aremove(archived["id"])  # what the archive loop does after distilling it
    assert (await tool(daemon, "memory_delete_entity", name="Lake Aral"))["ok"]

    client = await Client.connect(daemon.paths.socket)
    try:
        report = await client.call("media.gc", {"min_age": 0})
    finally:
        await client.close()
    assert report["refs_dropped"] == 2 and report["swept"] == 0
    assert await daemon.media.arefs_of(digest) == [
        {"owner_kind": "document", "owner_id": moved["id"], "created": pytest.approx(time.time(), abs=60)}
    ]
    assert await daemon.media.aget(digest) == PNG
