"""The text log: every turn, as JSONL, rotated by size.

Appends are buffered and written by a background task in a worker thread,
so a slow disk never stalls a turn; ``close`` flushes what is left.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

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

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._task = asyncio.get_running_loop().create_task(self._writer(), name="textlog-writer")

    def append(self, role: str, content: str, *, channel: str = "", **extra: Any) -> None:
        record = {"ts": time.time(), "role": role, "content": content, "channel": channel, **extra}
        self._pending.append(json.dumps(record, ensure_ascii=False, default=str))
        self._wakeup.set()

    async def _writer(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            await asyncio.sleep(0.2)  # batch what arrives together
            await self.flush()

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

    def _write(self, lines: list[str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size > self.max_bytes:
            self._rotate()
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
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
