"""The whole pipeline on the offline provider: socket, CLI, stages, tools, config."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from homeagent.cli.client import Client
from homeagent.daemon import AlreadyRunning, Daemon
from homeagent.paths import DataPaths
from homeagent.sdk.types import Stage, StageContext, ToolDef
from tests.conftest import run_cli


async def chat(daemon: Daemon, text: str) -> list[dict[str, Any]]:
    client = await Client.connect(daemon.paths.socket)
    try:
        return [frame async for frame in client.chat(text)]
    finally:
        await client.close()


def response_of(frames: list[dict[str, Any]]) -> dict[str, Any]:
    assert frames[-1]["type"] == "response", frames
    return frames[-1]


async def test_socket_is_private(daemon: Daemon) -> None:
    mode = stat.S_IMODE(os.stat(daemon.paths.socket).st_mode)
    assert mode == 0o600


async def test_offline_reply_streams_and_is_labelled(daemon: Daemon) -> None:
    frames = await chat(daemon, "hello there")
    deltas = "".join(f["text"] for f in frames if f["type"] == "content_delta")
    final = response_of(frames)
    assert final["ok"] is True
    assert final["text"].startswith("[offline]")
    assert deltas == final["text"]
    assert final["source"] == "offline"


async def test_offline_remembers_what_the_user_said(daemon: Daemon) -> None:
    await chat(daemon, "my name is Alice Liddell")
    final = response_of(await chat(daemon, "what is my name?"))
    assert "Alice Liddell" in final["text"]


async def test_tool_call_runs_through_the_tool_loop(daemon: Daemon) -> None:
    frames = await chat(daemon, "/tool llm_list_sources {}")
    tool_frames = [f for f in frames if f["type"] == "tool_call"]
    assert tool_frames and tool_frames[0]["tool"] == "llm_list_sources" and tool_frames[0]["status"] == "ok"
    assert "offline" in tool_frames[0]["result"]
    assert "The tool returned" in response_of(frames)["text"]


async def test_bad_tool_arguments_get_a_clear_error_for_the_model(daemon: Daemon) -> None:
    frames = await chat(daemon, '/tool llm_set_source {"nome": "x"}')
    tool = next(f for f in frames if f["type"] == "tool_call")
    assert tool["status"] == "error"
    assert "name" in tool["result"]
    assert response_of(frames)["ok"] is True  # the turn itself survives


async def test_malformed_frame_gets_error_and_connection_stays_usable(daemon: Daemon) -> None:
    client = await Client.connect(daemon.paths.socket)
    try:
        client.writer.write(b"{not json\n")
        client.writer.write(b'["no type"]\n')
        await client.writer.drain()
        first = await asyncio.wait_for(client.frames.get(), 5)
        second = await asyncio.wait_for(client.frames.get(), 5)
        assert first["type"] == "error" and "malformed" in first["message"]
        assert second["type"] == "error"
        frames = [f async for f in client.chat("still there?")]
        assert response_of(frames)["ok"]
        assert (await client.call("status"))["pid"] == os.getpid()
    finally:
        await client.close()


async def test_second_daemon_on_same_data_dir_refuses(daemon: Daemon) -> None:
    other = Daemon(DataPaths(daemon.paths.root), web=False)
    with pytest.raises(AlreadyRunning, match="already running"):
        await other.start()
    # the first one is untouched
    assert response_of(await chat(daemon, "ping"))["ok"]


async def test_on_input_short_circuit_skips_the_llm(daemon: Daemon) -> None:
    seen: list[str] = []

    async def block(ctx: StageContext) -> None:
        if "secret" in ctx.raw_message:
            ctx.response = "blocked by policy"

    async def after(ctx: StageContext) -> None:
        seen.append(ctx.final_text)

    daemon.stages.register(Stage.ON_INPUT, block, plugin="guard")
    daemon.stages.register(Stage.AFTER_OUTPUT, after, plugin="guard")
    final = response_of(await chat(daemon, "tell me the secret"))
    assert final["text"] == "blocked by policy"
    assert seen == ["blocked by policy"]
    assert not [e for e in daemon.events.recent() if e.type == "agent_llm_chain"]


async def test_every_stage_runs_in_order(daemon: Daemon) -> None:
    order: list[str] = []
    for stage in Stage:

        async def handler(ctx: StageContext, name: str = stage.value) -> None:
            order.append(name)

        daemon.stages.register(stage, handler, plugin="probe")
    await chat(daemon, "/tool output_list_channels {}")
    assert order == [
        "on_input",
        "pre_action",
        "post_action",
        "before_toolcall",
        "after_toolcall",
        "post_action",
        "before_output",
        "after_output",
    ]


async def test_stage_handler_that_raises_or_hangs_does_not_break_the_turn(daemon: Daemon) -> None:
    async def boom(ctx: StageContext) -> None:
        raise RuntimeError("plugin bug")

    async def hang(ctx: StageContext) -> None:
        await asyncio.sleep(3600)

    async def rewrite(ctx: StageContext) -> None:
        ctx.final_text = ctx.final_text.upper()

    daemon.stages.register(Stage.PRE_ACTION, boom, plugin="bad")
    daemon.stages.register(Stage.POST_ACTION, hang, plugin="slow", timeout=0.3)
    daemon.stages.register(Stage.BEFORE_OUTPUT, rewrite, plugin="good")
    started = time.perf_counter()
    final = response_of(await chat(daemon, "hello"))
    assert time.perf_counter() - started < 3
    assert final["ok"] and final["text"].startswith("[OFFLINE]")


async def test_pre_action_can_inject_context(daemon: Daemon) -> None:
    async def inject(ctx: StageContext) -> None:
        async with ctx.lock:
            ctx.context_msgs.append({"role": "user", "content": "my name is Injected Person"})

    daemon.stages.register(Stage.PRE_ACTION, inject, plugin="ctx")
    assert "Injected Person" in response_of(await chat(daemon, "what is my name?"))["text"]


async def test_before_toolcall_can_deny(daemon: Daemon) -> None:
    async def deny(ctx: StageContext) -> None:
        assert ctx.tool_call is not None
        ctx.tool_call.denied = True
        ctx.tool_call.deny_reason = "not today"

    daemon.stages.register(Stage.BEFORE_TOOLCALL, deny, plugin="audit")
    frames = await chat(daemon, "/tool output_list_channels {}")
    tool = next(f for f in frames if f["type"] == "tool_call")
    assert tool["status"] == "denied"
    assert "not today" in tool["result"]


async def test_tool_that_raises_returns_error_to_model(daemon: Daemon) -> None:
    def broken(args: dict[str, Any]) -> Any:
        raise ValueError("disk on fire")

    daemon.tools.register(ToolDef(name="broken_tool", description="always fails", plugin="t"), broken)
    frames = await chat(daemon, "/tool broken_tool {}")
    tool = next(f for f in frames if f["type"] == "tool_call")
    assert tool["status"] == "error" and "disk on fire" in tool["result"]
    assert response_of(frames)["ok"]


async def test_cli_ask_status_and_json(daemon: Daemon) -> None:
    result = await run_cli(daemon.paths.root, "ask", "hello", "world")
    assert result.code == 0, result.err
    assert result.out.startswith("[offline]")
    result = await run_cli(daemon.paths.root, "ask", "--json", "/tool output_list_channels {}")
    payload = json.loads(result.out)
    assert payload["ok"] is True and payload["tool_calls"][0]["tool"] == "output_list_channels"
    status = await run_cli(daemon.paths.root, "status")
    assert status.code == 0 and "idle" in status.out and str(daemon.paths.socket) in status.out


async def test_cli_without_daemon_fails_clearly(data_dir: Path) -> None:
    result = await run_cli(data_dir, "ask", "hi")
    assert result.code == 3
    assert "no HomeAgent daemon" in result.err and "homeagent run" in result.err


async def test_config_via_cli_with_daemon_validates(daemon: Daemon) -> None:
    bad = await run_cli(daemon.paths.root, "config", "set", "core.agent.max_tool_turns", "lots")
    assert bad.code == 1 and "max_tool_turns" in bad.err
    assert daemon.config.get("core.agent.max_tool_turns") == 10
    good = await run_cli(daemon.paths.root, "config", "set", "core.agent.max_tool_turns", "4")
    assert good.code == 0, good.err
    assert daemon.config.get("core.agent.max_tool_turns") == 4
    got = await run_cli(daemon.paths.root, "config", "get", "core.agent.max_tool_turns")
    assert got.out.strip() == "4"
    typo = await run_cli(daemon.paths.root, "config", "get", "core.agent.max_tool_turn")
    assert typo.code == 1 and "max_tool_turns" in typo.err


async def test_config_secrets_are_masked(daemon: Daemon) -> None:
    daemon.config.set("core.llm.sources.mine.api_key", "sk-verysecretvalue1234")
    listing = await run_cli(daemon.paths.root, "config", "list", "core.llm.sources")
    assert "sk-verysecret" not in listing.out
    assert "1234" in listing.out
    got = await run_cli(daemon.paths.root, "config", "get", "core.llm.sources.mine.api_key")
    assert "verysecret" not in got.out


async def test_config_without_daemon_works_on_the_data_dir(data_dir: Path) -> None:
    result = await run_cli(data_dir, "config", "set", "plugin.timer.max_duration", "2h")
    assert result.code == 0, result.err
    result = await run_cli(data_dir, "config", "get", "plugin.timer.max_duration")
    assert result.out.strip() == "2h"


async def test_tool_turn_limit_ends_the_loop(daemon: Daemon) -> None:
    daemon.config.set("core.agent.max_tool_turns", 2)
    calls = 0

    async def again(args: dict[str, Any]) -> Any:
        nonlocal calls
        calls += 1
        return "call me again"

    daemon.tools.register(ToolDef(name="again", plugin="t"), again)

    # a provider that always asks for the tool while tools are offered
    from homeagent.providers.base import ChatRequest, ChatResponse, ToolCallOut

    class Greedy:
        name = "greedy"

        async def chat(self, request: ChatRequest) -> ChatResponse:
            if request.tools:
                return ChatResponse(tool_calls=[ToolCallOut(id=f"c{calls}", name="again")], source="greedy")
            return ChatResponse(content="done", source="greedy")

        async def chat_stream(self, request: ChatRequest):  # type: ignore[no-untyped-def]
            response = await self.chat(request)
            from homeagent.providers.base import StreamChunk, ToolCallDelta

            for i, call in enumerate(response.tool_calls):
                yield StreamChunk(tool_calls=[ToolCallDelta(index=i, id=call.id, name=call.name, arguments="{}")])
            if response.content:
                yield StreamChunk(content=response.content)
            yield StreamChunk(finish_reason="stop")

    daemon.llm.manager.set_sources([Greedy()])
    final = response_of(await chat(daemon, "loop forever"))
    assert calls == 2
    assert final["text"] == "done"


async def test_offline_answers_questions_from_recalled_documents(daemon: Daemon) -> None:
    await daemon.docs.acommit("The bicycle is parked behind the library on Elm Street.", "bicycle parking spot")
    final = response_of(await chat(daemon, "where is my bicycle parked?"))
    assert "From memory" in final["text"] and "bicycle parking spot" in final["text"]
    # a statement is not answered from memory
    assert "From memory" not in response_of(await chat(daemon, "the bicycle needs new tyres"))["text"]


async def test_spawned_child_agent_runs_and_reports(daemon: Daemon) -> None:
    frames = await chat(daemon, '/tool spawn_child {"task": "my name is Child Task"}')
    spawned = next(f for f in frames if f["type"] == "tool_call")
    assert spawned["status"] == "ok" and "child_1" in spawned["result"]
    frames = await chat(daemon, '/tool child_result {"task_id": "child_1", "wait": 10}')
    result = next(f for f in frames if f["type"] == "tool_call")
    assert "done" in result["result"] and "[offline]" in result["result"]
