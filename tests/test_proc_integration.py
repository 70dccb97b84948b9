"""Subprocess plugins in context: the same code in-process and out, and a real daemon driving one."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from homeagent.cli.client import Client
from homeagent.daemon import Daemon
from homeagent.sdk.types import Stage, StageContext
from tests.fakes.proc_host import FIXTURES, pid_alive, proc_host


async def test_same_plugin_code_in_process_and_as_subprocess(tmp_path: Path) -> None:
    async with proc_host(tmp_path / "d") as h:
        h.add("pyecho", "pyin", runtime="in-process")
        h.add("pyecho", "pyout")
        await h.registry.load_all()
        assert h.registry.info("pyin")["kind"] == "python" and h.registry.get("pyin").plugin is not None  # type: ignore[union-attr]
        inside = await h.call("pyin_echo", {"text": "same"})
        outside = await h.call("pyout_echo", {"text": "same"})
        assert inside.result["echo"] == outside.result["echo"] == "same"
        assert inside.result["pid"] == os.getpid() != outside.result["pid"]
        for name in ("pyin", "pyout"):
            ctx = StageContext(raw_message=f"!{name} x")
            await h.services.stages.run(Stage.ON_INPUT, ctx)
            assert ctx.raw_message == "X"
        assert sorted(h.registry.info("pyin")["tools"]) == sorted(
            t.replace("pyout", "pyin") for t in h.registry.info("pyout")["tools"]
        )


async def test_daemon_chat_runs_a_subprocess_tool(daemon: Daemon) -> None:
    """End to end: socket chat → agent → tool loop → subprocess plugin (loaded by the daemon's own registry) → reply."""
    plugins_dir = daemon.paths.plugins
    (plugins_dir / "raw").mkdir(parents=True)
    for item in (FIXTURES / "raw").iterdir():
        (plugins_dir / "raw" / item.name).write_bytes(item.read_bytes())
    (plugins_dir / "raw" / "rawplugin").chmod(0o755)
    await daemon.plugins.reload_all()
    assert daemon.plugins.info("raw")["state"] == "running", daemon.plugins.info("raw")
    client = await Client.connect(daemon.paths.socket)
    try:
        frames: list[dict[str, Any]] = [f async for f in client.chat('/tool raw_echo {"q": "from chat"}')]
    finally:
        await client.close()
    tool = next(f for f in frames if f["type"] == "tool_call")
    assert tool["tool"] == "raw_echo" and tool["status"] == "ok" and "from chat" in tool["result"]
    assert frames[-1]["type"] == "response" and frames[-1]["ok"]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_a_javascript_plugin_written_from_the_protocol_document(tmp_path: Path) -> None:
    async with proc_host(tmp_path / "d") as h:
        h.add("nodeecho")
        await h.registry.load_all()
        assert h.registry.info("nodeecho")["state"] == "running", h.registry.info("nodeecho")
        hello = await h.call("nodeecho_hello", {"who": "Ada"})
        assert hello.result == {"greeting": "Hello, Ada!"}
        missing = await h.call("nodeecho_hello", {})
        assert missing.status == "error" and "who" in missing.result["content"], "the host validated the schema"
        ctx = StageContext(raw_message="hi from the test")
        await h.services.stages.run(Stage.PRE_ACTION, ctx)
        assert ctx.context_msgs == [{"role": "system", "content": "nodeecho read: hi from the test"}]
        assert h.plugin("nodeecho").health()["sdk_version"] == "node-example"


async def test_a_python_plugin_that_is_its_own_executable(tmp_path: Path) -> None:
    async with proc_host(tmp_path / "d") as h:
        folder = h.plugins_dir / "selfexec"
        folder.mkdir()
        (folder / "plugin.json").write_text('{"name": "selfexec", "version": "1.0.0", "entry": "plugin"}')
        (folder / "plugin").write_text(
            f"#!{sys.executable}\n"
            + textwrap.dedent(
                """
                from homeagent.sdk.run import run_plugin

                class P:
                    name = "selfexec"

                    def start(self, sdk):
                        print("stray output goes to the log, not into the protocol")
                        sdk.register_tool("selfexec_where", lambda args: {"dir": str(sdk.plugin_dir)})

                    def stop(self):
                        pass

                if __name__ == "__main__":
                    run_plugin(lambda name, config: P())
                """
            )
        )
        (folder / "plugin").chmod(0o755)
        await h.registry.load_all()
        result = await h.call("selfexec_where")
        assert result.status == "ok" and result.result == {"dir": str(folder)}
        health = h.plugin("selfexec").health()
        assert health["protocol_errors"]["malformed_frames"] == 0, "print() did not reach the protocol pipe"


async def test_reloading_a_subprocess_plugin_starts_a_new_process(tmp_path: Path) -> None:
    async with proc_host(tmp_path / "d") as h:
        folder = h.add("raw")
        await h.registry.load_all()
        first = h.plugin("raw").pid
        (folder / "plugin.json").write_text((folder / "plugin.json").read_text().replace('"stages"', '"stages", "net"'))
        info = await h.registry.reload_one("raw")
        assert info["state"] == "running" and "net" in info["capabilities"]
        second = h.plugin("raw").pid
        assert second != first and first is not None and not pid_alive(first)
        assert (await h.call("raw_echo")).result["pid"] == second
        await h.registry.disable("raw")
        assert [t.name for t in h.services.tools.tools()] == [] and h.supervisor.children == []
