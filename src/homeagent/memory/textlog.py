"""The text log: every turn, as JSONL, rotated by size.

Appends are buffered and written by a background task in a worker thread,
so a slow disk never stalls a turn; ``close`` flushes what is left.

The writer must outlive any single bad record: a record that cannot be
serialised or encoded is logged and skipped (``skipped`` counts them), lone
surrogates become U+FFFD, and only a disk error (``OSError``) keeps a batch
for the next try. An exception that escaped once used to end the writer
task, and no later turn was ever logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from homeagent.sdk.api import TextMemoryAPI
from homeagent.text import scrub_text

log = logging.getLogger("homeagent.textlog")


class TextLog:
    def __init__(self, directory: Path, *, max_bytes: int = 10 * 1024 * 1024, backups: int = 5) -> None:
        self.directory = directory
        self.path = directory / "turns.jsonl"
        self.max_bytes = max_bytes
        self.backups = backups
        self._pending: list[str] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.write_errors = 0
        self.skipped = 0
        """Records dropped because they could not be serialised or encoded (each one is logged)."""

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._task = asyncio.get_running_loop().create_task(self._writer(), name="textlog-writer")

    def append(self, role: str, content: str, *, channel: str = "", **extra: Any) -> None:
        record = {"ts": time.time(), "role": role, "content": content, "channel": channel, **extra}
        try:
            line = json.dumps(record, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError) as exc:  # circular or absurdly deep extras
            self.skipped += 1
            log.error("text log: a %s record could not be serialised (%s); skipped", role, exc)
            return
        # ensure_ascii=False leaves a lone surrogate raw in the line; replaced here it can never reach the file
        self._pending.append(scrub_text(line))
        self._wakeup.set()

    async def _writer(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            await asyncio.sleep(0.2)  # batch what arrives together
            try:
                await self.flush()
            except Exception:  # never let one failure end the writer: every later turn would go unlogged
                log.exception("text log writer: unexpected error; continuing")

    async def flush(self) -> None:
        if not self._pending:
            return
        lines, self._pending = self._pending, []
        try:
            await asyncio.to_thread(self._write, lines)
        except OSError as exc:
            self.write_errors += 1
            self._pending[:0] = lines  # keep them for the next try
            log.error("text log write failed (%s); %d lines kept in memory", exc, len(self._pending))
        except Exception:  # not the disk: retrying the same batch would fail forever, so it is dropped
            self.skipped += len(lines)
            log.exception("text log: a batch of %d records could not be written; skipped", len(lines))

    def _encode(self, lines: list[str]) -> bytes:
        """The batch as UTF-8, one line per record; a line that cannot be encoded is logged and left out."""
        out: list[bytes] = []
        for line in lines:
            try:
                out.append(line.encode("utf-8") + b"\n")
            except UnicodeEncodeError as exc:
                self.skipped += 1
                log.error("text log: a record could not be encoded (%s); skipped: %.120r", exc, line)
        return b"".join(out)

    def _write(self, lines: list[str]) -> None:
        data = self._encode(lines)
        if not data:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size > self.max_bytes:
            self._rotate()
        with open(self.path, "ab") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    def _rotate(self) -> None:
        for index in range(self.backups - 1, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{index}")
            if src.exists():
                os.replace(src, self.path.with_name(f"{self.path.name}.{index + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))

    def read_recent(self, limit: int = 50) -> list[dict[str, Any]]:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                lines = fh.readlines()[-limit:]
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    async def close(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.flush()


class TextMemoryService(TextMemoryAPI):
    """The SDK's ``TextMemoryAPI``: a plugin's line goes into the same log as the agent's turns.

    ``append`` only queues (the writer task does the disk work), so it is
    safe on the event loop.
    """

    def __init__(self, log: TextLog) -> None:
        self._log = log

    async def append(self, role: str, content: str, *, channel: str = "", **extra: Any) -> None:
        self._log.append(role, content, channel=channel, **extra)
