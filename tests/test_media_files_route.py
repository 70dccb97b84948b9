"""Files the agent sends to the web UI channel: kept in the media store, served at /files/{digest} behind sign-in.

A real daemon with its web server on loopback; the agent's side is the real
``output_send__webui`` tool, the browser's side real HTTP.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

from homeagent.daemon import Daemon
from homeagent.sdk.types import ToolCall
from tests.fakes.webui_fixtures import start_web

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64))
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
_ids = itertools.count()


async def send(daemon: Daemon, payload: str, type_: str, meta: dict[str, Any] | None = None) -> Any:
    call = ToolCall(id=f"s{next(_ids)}", name="output_send__webui",
                    arguments={"payload": payload, "type": type_, "meta": meta or {}})
    return (await daemon.tools.execute(call)).result


def sent_files(daemon: Daemon) -> list[dict[str, Any]]:
    return [e.data["file"] for e in daemon.events.recent(types=["agent_output"]) if "file" in e.data]


def files_folder(daemon: Daemon) -> Path:
    """The files tool's folder (plugin.files.dir is unset): where the agent's files are."""
    folder = daemon.paths.plugin_data("files")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def test_a_file_sent_to_the_web_channel_is_served_with_its_type_and_name(daemon: Daemon) -> None:
    tmp_path = files_folder(daemon)
    (tmp_path / "chart.png").write_bytes(PNG)
    (tmp_path / "q3 report.bin").write_bytes(PDF)  # the name lies about the type; the bytes say PDF
    (tmp_path / "page.html").write_text("<html><script>alert(1)</script></html>")
    web = await start_web(daemon)
    try:
        image = await send(daemon, str(tmp_path / "chart.png"), "image")
        digest = hashlib.sha256(PNG).hexdigest()
        assert image["status"] == "sent" and image["url"] == f"/files/{digest}?name=chart.png"
        report = await send(daemon, str(tmp_path / "q3 report.bin"), "file", {"name": "Q3 报告.pdf"})
        page = await send(daemon, str(tmp_path / "page.html"), "file")
        files = sent_files(daemon)
        assert [f["name"] for f in files] == ["chart.png", "Q3 报告.pdf", "page.html"]  # what the chat shows
        assert files[0]["mime"] == "image/png" and files[1]["mime"] == "application/pdf"

        async with web.client() as client:
            r = await client.get(image["url"])
            assert r.status_code == 200 and r.content == PNG
            assert r.headers["content-type"] == "image/png"
            assert r.headers["content-disposition"].startswith('inline; filename="chart.png"')
            r = await client.get(report["url"])
            assert r.status_code == 200 and r.content == PDF
            assert r.headers["content-type"] == "application/pdf"
            assert r.headers["content-disposition"] == (
                "attachment; filename=\"Q3 __.pdf\"; filename*=UTF-8''Q3%20%E6%8A%A5%E5%91%8A.pdf")
            r = await client.get(page["url"])  # never rendered as a page of this origin
            assert r.headers["content-disposition"].startswith("attachment;")
            assert "sandbox" in r.headers["content-security-policy"] and r.headers["x-content-type-options"] == "nosniff"
            r = await client.get(f"/files/{digest[:12]}")  # the short digest of a marker works too
            assert r.status_code == 200 and r.content == PNG

        async with web.client(auth=False, follow_redirects=False) as anonymous:
            r = await anonymous.get(image["url"])
            assert r.status_code == 401 and PNG not in r.content
    finally:
        await web.server.close()


async def test_unknown_evicted_and_bad_payloads(daemon: Daemon) -> None:
    assert daemon.media is not None
    tmp_path = files_folder(daemon)
    stored = (await daemon.media.aput_bytes(PNG, description="the striped flag")).info
    web = await start_web(daemon)
    try:
        by_digest = await send(daemon, stored.short, "image")  # a digest from a marker: no file needed
        assert by_digest["url"].startswith(f"/files/{stored.digest}?name=")
        before = len(sent_files(daemon))
        for payload, why in [("notes.txt", "not an absolute file path"),
                             (str(tmp_path / "missing.png"), "missing.png"),
                             ("deadbeefdeadbeef", "no stored media has the digest")]:
            result = await send(daemon, payload, "file")
            assert result["isError"] and why in result["content"], result
        (tmp_path / "empty.png").write_bytes(b"")
        result = await send(daemon, str(tmp_path / "empty.png"), "file")
        assert result["isError"] and "empty" in result["content"]
        assert len(sent_files(daemon)) == before  # nothing reached the chat

        async with web.client() as client:
            r = await client.get("/files/" + "0" * 64)
            assert r.status_code == 404 and "no stored media" in r.json()["error"]
            assert (await client.get("/files/not-a-digest")).status_code == 404
            assert (await daemon.media.agc(0.0)).swept == 1  # nothing referenced it: evicted
            r = await client.get(by_digest["url"])
            assert r.status_code == 410
            body = r.json()
            assert body["state"] == "evicted" and body["description"] == "the striped flag"
            assert body["marker"] == f"[image/png {stored.short}] the striped flag"
        result = await send(daemon, stored.digest, "image")  # an evicted item cannot be sent again
        assert result["isError"] and "evicted" in result["content"]
    finally:
        await web.server.close()


async def test_only_files_the_file_tools_reach_can_be_sent(daemon: Daemon, tmp_path: Path) -> None:
    """The model cannot show the owner's other files, nor the daemon's own, through the chat."""
    folder = files_folder(daemon)
    (folder / "escape.db").symlink_to(daemon.paths.config_db)
    (tmp_path / "elsewhere.png").write_bytes(PNG)
    workspace = daemon.paths.plugin_data("cmd")
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "plot.png").write_bytes(PNG)
    web = await start_web(daemon)
    try:
        before = len(sent_files(daemon))
        for payload in ["/etc/passwd", str(daemon.paths.config_db), str(folder / "escape.db"),
                        str(folder / ".." / ".." / "config.db"), str(tmp_path / "elsewhere.png")]:
            result = await send(daemon, payload, "file")
            assert result["isError"] and "outside the folders the agent may send files from" in result["content"], result
        assert len(sent_files(daemon)) == before
        sent = await send(daemon, str(workspace / "plot.png"), "image")  # the cmd workspace is one of them
        assert sent["status"] == "sent"
    finally:
        await web.server.close()


async def test_a_file_sent_during_a_turn_stays_while_the_turn_is_in_the_window(daemon: Daemon) -> None:
    """The marker in the tool's result is in the context window: its file is referenced and GC keeps it."""
    import json

    folder = files_folder(daemon)
    (folder / "chart.png").write_bytes(PNG)
    assert daemon.media is not None
    web = await start_web(daemon)
    try:
        args = json.dumps({"payload": str(folder / "chart.png"), "type": "image"})
        result = await daemon.io.inject_sync("test", "test", f"/tool output_send__webui {args}")
        assert result.ok, result.error
        digest = hashlib.sha256(PNG).hexdigest()
        refs = await daemon.media.arefs_of(digest)
        assert [r["owner_kind"] for r in refs] == ["context"], refs
        assert (await daemon.media.agc(0.0)).swept == 0
        async with web.client() as client:
            assert (await client.get(f"/files/{digest}")).content == PNG
    finally:
        await web.server.close()
