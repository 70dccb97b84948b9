"""The web UI of a real `homeagent run`: the daemon's own start-up wires it, nothing in the test does."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import LLM_ENV, run_cli

pytestmark = pytest.mark.xdist_group("processes")


async def test_homeagent_run_serves_every_web_feature_and_the_openai_endpoint(data_dir: Path) -> None:
    assert (await run_cli(data_dir, "config", "set", "webui.listen_addr", "127.0.0.1:0")).code == 0
    env = {k: v for k, v in os.environ.items() if k not in LLM_ENV}  # the offline provider answers
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "homeagent", "--data-dir", str(data_dir), "run",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    assert proc.stdout is not None
    url = token = ""
    try:
        async with asyncio.timeout(60):
            while not (url and token):
                line = (await proc.stdout.readline()).decode()
                assert line, f"homeagent run ended early: {(await proc.communicate())[1].decode()[-2000:]}"
                if found := re.search(r"web UI:\s+(http://127\.0\.0\.1:\d+/)", line):
                    url = found.group(1)
                if found := re.search(r"web UI token \(shown once[^)]*\): (\S+)", line):
                    token = found.group(1)
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30, verify=False) as c:
            features = (await c.get("/api/v1/status")).json()["features"]
            assert features and all(features.values()), features
            for path in ("/api/v1/plugins", "/api/v1/memory/stats", "/api/v1/memory/documents",
                         "/api/v1/memory/graph", "/api/v1/knowledge", "/api/v1/adapters", "/api/v1/approvals",
                         "/api/v1/memory/media"):
                response = await c.get(path)
                assert response.status_code == 200, (path, response.text)
            answer = await c.post("/v1/chat/completions",
                                  json={"model": "homeagent", "messages": [{"role": "user", "content": "hello"}]})
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"]
            assert (await c.get("/api/v1/status", headers={"Authorization": "Bearer wrong"})).status_code == 401
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0
