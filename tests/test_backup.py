"""`homeagent backup` / `homeagent restore` on real data directories (real SQLite, real files, the real CLI).

The daemon-as-a-process round trip is in test_backup_e2e.py; here the stores are
written in-process, as the daemon writes them, including while the backup runs.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import threading
from pathlib import Path

import pytest

from homeagent.backup import MANIFEST_NAME, BackupError, create_backup, restore_backup, verify
from homeagent.cli.main import main
from homeagent.config import ConfigRegistry, core_defs
from homeagent.datalock import DataDirLock
from homeagent.memory.cleaners import CleanerChain
from homeagent.memory.context import ContextEvent, RelevanceContext
from homeagent.memory.documents import DocumentStore


def make_data_dir(root: Path) -> Path:
    """A data directory with every kind of file the daemon leaves there."""
    reg = ConfigRegistry(root / "config.db")
    for d in core_defs(root):
        reg.register_def(d)
    reg.set("core.agent.max_tool_turns", 17)
    reg.close()
    docs = DocumentStore(root / "memory" / "documents.db", None)
    docs.commit("The boat registration number is PT-4471-LX.", "boat registration")
    docs.close()
    ctx = RelevanceContext(root / "memory" / "context.json", None, None, CleanerChain())
    ctx.append(ContextEvent(kind="user", input="my name is Zed", ts=1.0))
    ctx.save_sync()  # a snapshot holding the first event...
    ctx.append(ContextEvent(kind="user", input="I live in Lisbon", ts=2.0))
    ctx._journal.sync()  # ...and the second one only in the journal, as a running daemon has it
    (root / "memory" / "text").mkdir()
    (root / "memory" / "text" / "turns.jsonl").write_bytes(b'{"input": "hello"}\n{"input": "half a li')
    (root / "knowledge" / "boat").mkdir(parents=True)
    (root / "knowledge" / "boat" / "content.md").write_text("# Boat\nMoored in Cascais.\n")
    plugin = root / "plugins" / "echo"
    plugin.mkdir(parents=True)
    (plugin / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (plugin / "run.sh").chmod(0o755)
    (root / "memory" / "graph.db.corrupt-20260101-000000").write_bytes(b"garbage")
    (root / "daemon.lock").write_text("")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "cli.sock"))
    sock.close()
    return root


def test_backup_then_restore_gives_back_every_store_and_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make_data_dir(tmp_path / "d")
    assert main(["--data-dir", str(src), "backup", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "backed up" in out and "2 SQLite stores" in out
    assert "skipped memory/graph.db.corrupt-20260101-000000: set aside as damaged" in out
    manifest = json.loads((tmp_path / "b" / MANIFEST_NAME).read_text())
    paths = {f["path"]: f for f in manifest["files"]}
    assert set(paths) == {
        "config.db", "memory/documents.db", "memory/context.json", "memory/context.journal",
        "memory/text/turns.jsonl", "knowledge/boat/content.md", "plugins/echo/run.sh",
    }
    assert manifest["source"] == str(src) and manifest["created"]
    assert all(len(f["sha256"]) == 64 and f["size"] >= 0 for f in manifest["files"])
    assert not list(src.glob("**/*-wal")) and not list(src.glob("**/*-shm"))  # the source is left as it was

    new = tmp_path / "restored"
    assert main(["restore", str(tmp_path / "b"), "--data-dir", str(new)]) == 0
    assert f"homeagent --data-dir {new} run" in capsys.readouterr().out
    reg = ConfigRegistry(new / "config.db")
    assert reg.get("core.agent.max_tool_turns") == 17
    reg.close()
    docs = DocumentStore(new / "memory" / "documents.db", None)
    assert [d.content for d in docs.query("boat registration", 1)] == ["The boat registration number is PT-4471-LX."]
    docs.close()
    ctx = RelevanceContext(new / "memory" / "context.json", None, None, CleanerChain(), read_only=True)
    assert [e.input for e in ctx.timeline()] == ["my name is Zed", "I live in Lisbon"]
    assert (new / "memory" / "text" / "turns.jsonl").read_bytes() == b'{"input": "hello"}\n'  # no torn line
    assert (new / "knowledge" / "boat" / "content.md").read_text() == "# Boat\nMoored in Cascais.\n"
    assert os.access(new / "plugins" / "echo" / "run.sh", os.X_OK)
    assert not (new / "cli.sock").exists() and not (new / "daemon.lock").exists()
    assert (new / "log").is_dir() and (new.stat().st_mode & 0o777) == 0o700


def test_sqlite_store_backed_up_while_it_is_written_is_a_consistent_snapshot(tmp_path: Path) -> None:
    src = make_data_dir(tmp_path / "d")
    db_path = src / "plugin_data" / "busy" / "rows.db"
    db_path.parent.mkdir(parents=True)
    writer = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (n INTEGER, pad TEXT)")
    stop = threading.Event()
    written = [0]

    def write() -> None:
        while not stop.is_set():
            writer.execute("BEGIN")
            writer.execute("INSERT INTO t VALUES (?, ?)", (written[0], "x" * 500))
            writer.execute("INSERT INTO t VALUES (?, ?)", (written[0], "y" * 500))  # two rows per transaction
            writer.execute("COMMIT")
            written[0] += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        while written[0] < 200:
            threading.Event().wait(0.01)
        before = written[0]
        create_backup(src, tmp_path / "b")
        after = written[0]
    finally:
        stop.set()
        thread.join()
        writer.close()
    restore_backup(tmp_path / "b", tmp_path / "r")
    copy = sqlite3.connect(tmp_path / "r" / "plugin_data" / "busy" / "rows.db")
    assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = copy.execute("SELECT COUNT(*), COUNT(DISTINCT n) FROM t").fetchone()
    copy.close()
    assert rows[0] == 2 * rows[1]  # whole transactions only
    assert before <= rows[1] <= after + 1


def test_backup_refuses_a_non_empty_destination_one_inside_the_data_dir_and_a_non_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = make_data_dir(tmp_path / "d")
    dest = tmp_path / "b"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    assert main(["--data-dir", str(src), "backup", str(dest)]) == 1
    assert "is not empty" in capsys.readouterr().err
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]
    with pytest.raises(BackupError, match="inside the data directory"):
        create_backup(src, src / "backups" / "today")
    assert not (src / "backups").exists()
    with pytest.raises(BackupError, match=r"no config\.db"):
        create_backup(tmp_path / "b", tmp_path / "b2")


def test_a_damaged_backup_is_named_and_nothing_is_restored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make_data_dir(tmp_path / "d")
    create_backup(src, tmp_path / "b")
    docs_copy = tmp_path / "b" / "data" / "memory" / "documents.db"
    good = docs_copy.read_bytes()

    docs_copy.write_bytes(good[:-100])  # truncated
    assert main(["restore", str(tmp_path / "b"), "--data-dir", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert "data/memory/documents.db" in err and "truncated" in err
    assert not (tmp_path / "r").exists()

    docs_copy.write_bytes(good[:5000] + bytes([good[5000] ^ 1]) + good[5001:])  # one bit flipped
    with pytest.raises(BackupError, match=r"data/memory/documents.db does not match its sha256"):
        restore_backup(tmp_path / "b", tmp_path / "r")
    assert main(["restore", "--check", str(tmp_path / "b")]) == 1
    assert not (tmp_path / "r").exists() and not list(tmp_path.glob(".r.restoring-*"))

    docs_copy.write_bytes(good)
    (tmp_path / "b" / "data" / "config.db").unlink()
    with pytest.raises(BackupError, match=r"data/config\.db is missing"):
        restore_backup(tmp_path / "b", tmp_path / "r")

    (tmp_path / "b" / MANIFEST_NAME).unlink()  # as an interrupted backup leaves it
    with pytest.raises(BackupError, match="interrupted"):
        restore_backup(tmp_path / "b", tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_manifest_cannot_write_outside_the_target(tmp_path: Path) -> None:
    src = make_data_dir(tmp_path / "d")
    create_backup(src, tmp_path / "b")
    manifest_path = tmp_path / "b" / MANIFEST_NAME
    doc = json.loads(manifest_path.read_text())
    doc["files"][0]["path"] = "../../escaped"
    manifest_path.write_text(json.dumps(doc))
    with pytest.raises(BackupError, match="unsafe path"):
        restore_backup(tmp_path / "b", tmp_path / "r")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "r").exists()


def test_restore_refuses_a_data_dir_in_use_or_not_empty_and_fills_an_empty_one(tmp_path: Path) -> None:
    src = make_data_dir(tmp_path / "d")
    create_backup(src, tmp_path / "b")
    # the source itself: a daemon runs on it
    lock = DataDirLock(src / "daemon.lock")
    lock.acquire()
    try:
        with pytest.raises(BackupError, match=re.escape(f"daemon (pid {os.getpid()}) is running on {src}")):
            restore_backup(tmp_path / "b", src)
    finally:
        lock.release()
    with pytest.raises(BackupError, match="is not empty"):
        restore_backup(tmp_path / "b", src)
    assert json.loads(verify(tmp_path / "b").to_json())["source"] == str(src)
    empty = tmp_path / "empty"
    empty.mkdir()
    manifest = restore_backup(tmp_path / "b", empty)
    assert {f.path for f in manifest.files} <= {p.relative_to(empty).as_posix() for p in empty.rglob("*")}


def test_the_context_window_is_copied_consistently_while_the_daemon_appends_and_compacts(tmp_path: Path) -> None:
    """Every backup holds a prefix of the appended turns (no gap, no torn line), whatever compactions ran meanwhile."""
    src = make_data_dir(tmp_path / "d")
    ctx = RelevanceContext(src / "memory" / "context.json", None, None, CleanerChain(), top_k=10_000)
    base = [e.input for e in ctx.timeline()]
    stop = threading.Event()

    def daemon_like_writer() -> None:
        i = 0
        while not stop.is_set():
            ctx.append(ContextEvent(kind="user", input=f"turn {i}", ts=10.0 + i))
            ctx._journal.sync()
            if i % 3 == 2:
                ctx.save_sync()  # compaction: a new snapshot, the journal emptied
            i += 1

    thread = threading.Thread(target=daemon_like_writer)
    thread.start()
    try:
        copies = []
        for n in range(8):
            create_backup(src, tmp_path / f"b{n}")
            copies.append(tmp_path / f"b{n}" / "data" / "memory" / "context.json")
    finally:
        stop.set()
        thread.join()
    seen = set()
    for copy in copies:
        inputs = [e.input for e in RelevanceContext(copy, None, None, CleanerChain(), read_only=True).timeline()]
        assert inputs[: len(base)] == base
        turns = inputs[len(base):]
        assert turns == [f"turn {i}" for i in range(len(turns))], f"a gap in {copy}: {turns}"
        seen.add(len(turns))
    assert len(seen) > 1  # the backups really ran while the window grew


def test_a_tar_gz_backup_restores_and_a_truncated_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make_data_dir(tmp_path / "d")
    archive = tmp_path / "home.tar.gz"
    assert main(["--data-dir", str(src), "backup", str(archive)]) == 0
    assert archive.is_file() and (archive.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no folder left behind
    assert main(["--data-dir", str(src), "backup", str(archive)]) == 1
    assert "exists" in capsys.readouterr().err

    assert main(["restore", "--check", str(archive)]) == 0
    assert "is whole" in capsys.readouterr().out
    assert main(["restore", str(archive), "--data-dir", str(tmp_path / "r")]) == 0
    docs = DocumentStore(tmp_path / "r" / "memory" / "documents.db", None)
    assert docs.count() == 1
    docs.close()

    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    assert main(["restore", str(cut), "--data-dir", str(tmp_path / "r2")]) == 1
    err = capsys.readouterr().err
    assert f"backup {cut} is damaged or truncated" in err
    assert not (tmp_path / "r2").exists() and not list(tmp_path.glob(".homeagent-unpack-*"))


def test_a_path_setting_outside_the_data_dir_is_named_not_copied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make_data_dir(tmp_path / "d")
    outside = tmp_path / "elsewhere" / "graph.db"
    reg = ConfigRegistry(src / "config.db")
    for d in core_defs(src):
        reg.register_def(d)
    reg.set("core.memory.graph", str(outside))
    reg.set("core.log.path", "logs/daemon")  # relative: inside, nothing to say
    reg.close()
    assert main(["--data-dir", str(src), "backup", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert f"core.memory.graph points outside the data directory ({outside}); it is not in this backup" in err
    assert "core.log.path" not in err
    assert verify(tmp_path / "b").outside == [{"key": "core.memory.graph", "path": str(outside)}]


def test_a_context_journal_without_a_snapshot_yet_is_backed_up_to_its_last_whole_line(tmp_path: Path) -> None:
    src = tmp_path / "d"
    reg = ConfigRegistry(src / "config.db")
    reg.close()
    ctx = RelevanceContext(src / "memory" / "context.json", None, None, CleanerChain())
    ctx.append(ContextEvent(kind="user", input="first words", ts=1.0))
    ctx._journal.sync()
    assert not (src / "memory" / "context.json").exists()
    with (src / "memory" / "context.journal").open("ab") as fh:
        fh.write(b'{"s":2,"op":"add","event":{"kind":"user","input":"cut sh')  # a write in progress
    manifest = create_backup(src, tmp_path / "b")
    assert [(f.path, f.kind) for f in manifest.files if f.path.startswith("memory/")] == [
        ("memory/context.journal", "journal")
    ]
    restore_backup(tmp_path / "b", tmp_path / "r")
    journal = (tmp_path / "r" / "memory" / "context.journal").read_bytes()
    assert journal.endswith(b"\n") and b"cut sh" not in journal
    restored = RelevanceContext(tmp_path / "r" / "memory" / "context.json", None, None, CleanerChain(), read_only=True)
    assert [e.input for e in restored.timeline()] == ["first words"]


def test_a_damaged_file_inside_a_tar_gz_is_named_with_the_archive(tmp_path: Path) -> None:
    import tarfile

    src = make_data_dir(tmp_path / "d")
    create_backup(src, tmp_path / "b")
    (tmp_path / "b" / "data" / "config.db").write_bytes(b"SQLite format 3\x00 but not really")
    with tarfile.open(tmp_path / "bad.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "b", arcname=".")
    with pytest.raises(BackupError, match=re.escape(f"backup {tmp_path / 'bad.tar.gz'} is damaged: data/config.db has")):
        restore_backup(tmp_path / "bad.tar.gz", tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_tar_gz_without_a_manifest_is_refused_by_its_own_name(tmp_path: Path) -> None:
    import tarfile

    src = make_data_dir(tmp_path / "d")
    create_backup(src, tmp_path / "b")
    (tmp_path / "b" / MANIFEST_NAME).unlink()
    with tarfile.open(tmp_path / "partial.tgz", "w:gz") as tar:
        tar.add(tmp_path / "b", arcname=".")
    with pytest.raises(BackupError, match=re.escape(f"{tmp_path / 'partial.tgz'} has no {MANIFEST_NAME}")):
        restore_backup(tmp_path / "partial.tgz", tmp_path / "r")
