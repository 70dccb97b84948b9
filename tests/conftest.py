"""Shared fixtures: a real daemon on a temporary data directory, and the real CLI."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from tests.fakes.webui_fixtures import Web, start_web

if sys.version_info[:3] < (3, 11, 8):
    # gh-106905: before 3.11.8 the AST converter's recursion counter is shared by all threads, and two threads
    # building ASTs at once fail at random with "SystemError: AST constructor recursion depth mismatch". Under
    # load that hit test_webui_api.py: pytest rewrites a test module's asserts (an AST, on the main thread) while
    # a daemon thread formats a traceback, whose caret line (``~~~^^^``) 3.11 finds by parsing the source line
    # with ``ast``. Without carets no traceback parses anything; the daemon's own .npy reading avoids ``ast``
    # (homeagent.npyfile). CI runs 3.11.7, so requiring 3.11.8 is not an option.
    import traceback

    traceback._extract_caret_anchors_from_line_segment = lambda segment: None  # type: ignore[attr-defined]

LLM_ENV = (
    "HOMEAGENT_LLM_BASE_URL",
    "HOMEAGENT_LLM_API_KEY",
    "HOMEAGENT_LLM_MODEL",
    "HOMEAGENT_LLM_ADAPTER",
    "HOMEAGENT_LLM_VISION",
    "LLM_API_KEY",
    "DEEPSEEK_API_KEY",
    "HOMEAGENT_SOCKET",
    "HOMEAGENT_DATA_DIR",
    # every test talks to loopback servers; a proxy from the environment would send that traffic elsewhere
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture(autouse=True)
def _clean_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never pick up a developer's real LLM keys, data directory or proxy."""
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOMEAGENT_OLLAMA_URL", "off")  # nor a local Ollama (tests of it point this at a fake)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    # Unix socket paths are limited to ~107 bytes; keep the data dir short.
    path = tmp_path / "d"
    path.mkdir()
    return path


@dataclass
class CLIResult:
    code: int
    out: str
    err: str


async def run_cli(
    data_dir: Path, *args: str, stdin: str | None = None, timeout: float = 60, env: dict[str, str] | None = None
) -> CLIResult:
    """Run the real `homeagent` command in a subprocess (the event loop keeps serving meanwhile)."""
    full_env = {**os.environ, **(env or {})}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "homeagent",
        "--data-dir",
        str(data_dir),
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=full_env,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
    assert proc.returncode is not None
    return CLIResult(proc.returncode, out.decode(), err.decode())


@pytest.fixture
async def daemon(data_dir: Path) -> AsyncIterator[Daemon]:
    """An in-process daemon on the offline provider (tests that need a fake LLM set env first)."""
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


@pytest.fixture
async def web(daemon: Daemon) -> AsyncIterator[Web]:
    """``daemon``'s web UI (its own wiring) on a free loopback port, closed after the test."""
    w = await start_web(daemon)
    try:
        yield w
    finally:
        await w.server.close()


async def offline_tool(daemon: Daemon, name: str, args: dict[str, Any]) -> Any:
    """Run tool ``name`` through the offline provider (``/tool NAME {json}``) over the real socket; its result.

    The tool must succeed; a JSON text result is decoded.
    """
    import json

    from homeagent.cli.client import Client

    client = await Client.connect(daemon.paths.socket)
    try:
        frames = [f async for f in client.chat(f"/tool {name} {json.dumps(args)}")]
    finally:
        await client.close()
    done = next(f for f in frames if f["type"] == "tool_call" and f.get("status") != "running")
    assert done["status"] == "ok", json.dumps(done)[:2000]
    result = done["result"]
    return json.loads(result) if isinstance(result, str) else result
