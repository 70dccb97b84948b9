"""The product end to end: one real `homeagent run` process, reached only the way a user's programs reach it.

The daemon starts as a subprocess (the campaign's `DaemonProc`) with its web UI on a
loopback port and an OpenAI-compatible fake LLM on another. The fake answers by rule,
from the last message it is sent, so the daemon's own background LLM calls cannot
take a scripted turn meant for a test:

- ``CALL <tool> <json>``: a tool call; the tool's result then comes back as ``result: …``
- anything else: ``echo: <the text>``, streamed in a few pieces.

Nothing here wires a subsystem by hand: the web API, `/v1/chat/completions`, a subprocess
plugin installed with the CLI, a timer and an MCP server are all what `daemon.py` made of
the data directory, as for a user.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from bench.campaign.daemon import DaemonProc, configure, free_port
from homeagent.cli.client import Client
from tests.conftest import run_cli
from tests.fakes.llm_openai import FakeOpenAI, Recorded, Turn

pytestmark = [
    pytest.mark.xdist_group("processes"),
    pytest.mark.timeout(120),
    pytest.mark.asyncio(loop_scope="module"),
]

MCP_SERVER = Path(__file__).parent / "fakes" / "mcp_stdio_server.py"

PLUGIN_MAIN = '''
from typing import Any

from homeagent.sdk import Plugin, PluginSDK


class Greeter:
    async def start(self, sdk: PluginSDK) -> None:
        async def greet(args: dict[str, Any]) -> Any:
            import os
            return {"greeting": f"Hello, {args['who']}!", "pid": os.getpid()}

        sdk.register_tool("greeter_greet", greet, description="Greet someone.",
                          parameters={"type": "object", "properties": {"who": {"type": "string"}},
                                      "required": ["who"]})

    async def stop(self) -> None:
        pass


def create_plugin(name: str, config: dict[str, Any]) -> Plugin:
    return Greeter()
'''


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


class RuleLLM(FakeOpenAI):
    """Answers from the request's last message (see the module docstring), never from a script queue."""

    def __init__(self) -> None:
        super().__init__()
        self._body: dict[str, Any] = {}

    async def record(self, request: Any) -> Recorded:
        rec = await super().record(request)
        self._body = rec.body if isinstance(rec.body, dict) else {}
        return rec

    def next_turn(self) -> Turn | None:
        # called right after record() in the same handler, with no await in between
        messages = self._body.get("messages") or [{}]
        last = messages[-1]
        if last.get("role") == "tool":
            return Turn.text(f"result: {_text_of(last)}", chunks=3)
        text = _text_of(last)
        if text.startswith("CALL "):
            _, name, args = text.split(" ", 2)
            return Turn.tool_calls([(name, json.loads(args))])
        marker = "timer: "
        if marker in text:  # a reminder comes as text that starts the turn or joins it
            return Turn.text("echo: " + text[text.index(marker):], chunks=3)
        return Turn.text(f"echo: {text}", chunks=3)


@dataclass
class Run:
    daemon: DaemonProc
    llm: RuleLLM
    port: int
    work: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def http(self, *, token: bool = True) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.daemon.token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, trust_env=False)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def run(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Run]:
    work = tmp_path_factory.mktemp("e2e")
    data = work / "data"
    port = free_port()
    configure(data, {
        "webui.listen_addr": f"127.0.0.1:{port}",
        "plugin.mcp.servers": json.dumps([{"name": "calc", "command": sys.executable, "args": [str(MCP_SERVER)]}]),
    })
    async with RuleLLM() as llm:
        env = {"HOMEAGENT_LLM_BASE_URL": llm.base_url, "HOMEAGENT_LLM_API_KEY": "sk-e2e-run-000000",
               "HOMEAGENT_LLM_MODEL": "gpt-fake"}
        daemon = DaemonProc(data, web=True, env=env)
        await daemon.start()
        try:
            assert daemon.token, daemon.tail()
            yield Run(daemon, llm, port, work)
        finally:
            await daemon.stop()
    assert daemon.proc is not None and daemon.proc.returncode == 0, daemon.tail()


async def _turn(client: Client, text: str, timeout: float = 30) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    frames: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        async for frame in client.chat(text):
            frames.append(frame)
            if frame.get("type") == "response":
                return frame, frames
    raise AssertionError(f"no response to {text!r}: {frames}")


async def _wait_for_tool(run: Run, name: str, within: float = 30) -> None:
    """A tool shows up in `GET /api/v1/tools` once its plugin (or MCP server) has started."""
    deadline = time.monotonic() + within
    async with run.http() as http:
        while True:
            names = [t.get("name") for t in (await http.get("/api/v1/tools")).json().get("tools", [])]
            if name in names:
                return
            assert time.monotonic() < deadline, f"{name} never appeared; tools: {names}\n{run.daemon.tail()}"
            await asyncio.sleep(0.2)


async def test_the_web_api_runs_a_turn_and_refuses_a_stranger(run: Run) -> None:
    async with run.http(token=False) as stranger:
        assert (await stranger.get("/api/v1/status")).status_code == 401
        assert (await stranger.post("/api/v1/chat", json={"text": "hi"})).status_code == 401
    async with run.http() as http:
        status = (await http.get("/api/v1/status")).json()
        assert status["pid"] == run.daemon.pid
        answer = (await http.post("/api/v1/chat", json={"text": "hello from the web"})).json()
        assert answer["ok"] and answer["text"] == "echo: hello from the web"
        events: list[dict[str, Any]] = []
        async with http.stream("POST", "/api/v1/chat/stream", json={"text": "stream this"}) as resp:
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
        deltas = "".join(e.get("text", "") for e in events if e.get("type") == "content_delta")
        assert deltas == "echo: stream this"
        assert events[-1]["type"] == "response" and events[-1]["ok"]
        history = (await http.get("/api/v1/chat/history", params={"limit": 20})).json()
        assert "hello from the web" in json.dumps(history)


async def test_openai_compatible_chat_completions_plain_and_streaming(run: Run) -> None:
    async with run.http() as http:
        body = {"model": "homeagent", "messages": [{"role": "user", "content": "compat plain"}]}
        plain = await http.post("/v1/chat/completions", json=body)
        assert plain.status_code == 200, plain.text
        doc = plain.json()
        assert doc["object"] == "chat.completion"
        assert doc["choices"][0]["message"]["content"] == "echo: compat plain"
        pieces: list[str] = []
        done = False
        async with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True,
                               "messages": [{"role": "user", "content": "compat stream"}]}) as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    chunk = json.loads(line[6:])
                    assert chunk["object"] == "chat.completion.chunk", chunk
                    pieces.append(chunk["choices"][0]["delta"].get("content", ""))
        assert done and "".join(pieces) == "echo: compat stream"
        bad = await http.post("/v1/chat/completions", json={"model": "homeagent", "messages": "not a list"})
        assert bad.status_code == 400 and isinstance(bad.json()["error"]["message"], str)


async def test_a_subprocess_plugin_installed_with_the_cli_is_called_by_the_model(run: Run) -> None:
    src = run.work / "greeter"
    src.mkdir()
    (src / "main.py").write_text(PLUGIN_MAIN)
    (src / "plugin.json").write_text(json.dumps({
        "name": "greeter", "version": "1.0.0", "description": "e2e", "entry": "main.py",
        "runtime": "process", "min_version": "0.1.0", "capabilities": [],
    }))
    data = run.daemon.data_dir
    package = run.work / "greeter.hmap"
    packed = await run_cli(data, "plugin", "pack", str(src), "-o", str(package))
    assert packed.code == 0, packed.err
    installed = await run_cli(data, "plugin", "install", str(package))
    assert installed.code == 0, installed.out + installed.err
    reloaded = await run_cli(data, "plugin", "reload", "greeter")
    assert reloaded.code == 0, reloaded.out + reloaded.err
    await _wait_for_tool(run, "greeter_greet")
    client = await Client.connect(run.daemon.socket)
    try:
        response, frames = await _turn(client, 'CALL greeter_greet {"who": "Ada"}')
    finally:
        await client.close()
    assert response["ok"], response
    assert "Hello, Ada!" in response["text"]
    calls = [f for f in frames if f.get("type") == "tool_call" and f.get("tool") == "greeter_greet"]
    assert calls and calls[-1]["status"] == "ok", frames
    # it ran in a process of its own, not in the daemon
    plugin_pid = json.loads(response["text"].removeprefix("result: "))["pid"]
    assert plugin_pid != run.daemon.pid


async def test_an_mcp_server_s_tool_is_called_by_the_model(run: Run) -> None:
    await _wait_for_tool(run, "calc_add")
    client = await Client.connect(run.daemon.socket)
    try:
        response, frames = await _turn(client, 'CALL calc_add {"a": 20, "b": 22}')
        failing, _ = await _turn(client, "CALL calc_fail {}")
    finally:
        await client.close()
    assert response["ok"] and "42" in response["text"], response
    assert any(f.get("tool") == "calc_add" and f.get("status") == "ok" for f in frames), frames
    # a tool that fails on the server side reaches the model as an error, the turn itself goes on
    assert failing["ok"] and '"isError": true' in failing["text"] and "fail" in failing["text"], failing


async def test_a_timer_fires_and_its_answer_reaches_the_attached_client(run: Run) -> None:
    client = await Client.connect(run.daemon.socket)
    try:
        await client.send({"type": "attach"})
        response, _ = await _turn(client, 'CALL timer_set {"message": "stretch your legs", "duration": "2s"}')
        assert response["ok"] and '"isError"' not in response["text"], response
        outputs: list[dict[str, Any]] = []
        async with asyncio.timeout(30):
            while not any("stretch your legs" in str(o.get("text")) for o in outputs):
                frame = await client.frames.get()
                if frame.get("type") in ("output", "response"):
                    outputs.append(frame)
    finally:
        await client.close()
    reply = next(o for o in outputs if "stretch your legs" in str(o.get("text")))
    assert reply["text"].startswith("echo: timer: stretch your legs"), outputs
