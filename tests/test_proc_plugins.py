"""Subprocess plugins doing their job: tools, stages, channels, cleaners, events, settings, capabilities.

One host with four real child processes is shared by the module (starting
Python children is the slow part): ``pyecho``, ``pya`` and ``pyb`` run the same
SDK plugin as subprocesses, ``raw`` is a plugin written without the SDK, from
the protocol document alone. Tests only read or append, so sharing is safe;
anything that crashes a plugin lives in test_proc_crash.py.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from homeagent.memory.cleaners import CleanerChain
from homeagent.sdk.types import Stage, StageContext, ToolCall
from tests.fakes.proc_host import ProcHost, pid_alive, proc_host

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def host(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcHost]:
    data_dir = tmp_path_factory.mktemp("proc") / "d"
    async with proc_host(data_dir, cleaners=CleanerChain()) as h:
        h.add("pyecho")
        h.add("pyecho", "pya")
        h.add("pyecho", "pyb")
        h.add("raw")
        summary = await h.registry.load_all()
        assert summary["states"] == {"running": 4}, h.registry.list()
        yield h


async def test_a_plugin_written_without_the_sdk_works(host: ProcHost) -> None:
    result = await host.call("raw_echo", {"x": 1})
    assert result.status == "ok" and result.result["echo"] == {"x": 1}
    health = host.plugin("raw").health()
    assert health["state"] == "running" and health["sdk_version"] == "raw-1" and health["protocol"] == 1
    assert health["pid"] == result.result["pid"] != os.getpid() and pid_alive(health["pid"])
    info = host.registry.info("raw")
    assert "raw_echo" in info["tools"] and info["stages"] == ["pre_action"]


async def test_tools_behave_as_in_process(host: ProcHost) -> None:
    echo = await host.call("pyecho_echo", {"text": "héllo"})
    assert echo.result["echo"] == "héllo" and echo.result["pid"] == host.plugin("pyecho").pid
    sync = await host.call("pyecho_sync", {"text": "s"})
    assert sync.result == {"echo": "s", "thread": True}, "sync handlers run in a worker thread"
    fail = await host.call("pyecho_fail")
    assert fail.status == "error"
    assert fail.result == {"isError": True, "content": "pyecho_fail failed: ValueError: this tool always fails"}
    bad = await host.call("pyecho_echo", {"text": 5})
    assert bad.status == "error", "arguments are still validated by the host against the schema"
    concurrent = await asyncio.gather(*(host.call("pyecho_sleep", {"seconds": 0.3}) for _ in range(4)))
    assert [r.result for r in concurrent] == ["slept"] * 4


async def test_capabilities_are_enforced_at_the_rpc_boundary(host: ProcHost) -> None:
    settings = (await host.call("pyecho_settings", {"greeting": "hey"})).result
    assert settings["greeting"] == "hey" and host.services.config.get_plugin("pyecho", "greeting") == "hey"
    assert "settings.getCore needs the 'settings.core' capability" in settings["core"]
    memory = (await host.call("pyecho_memory")).result
    assert "memory.recall needs the 'memory.read' capability" in memory["denied"]
    published = (await host.call("pyecho_publish")).result
    assert "subscribe to events but not publish" in published["denied"]
    injected = (await host.call("pyecho_inject", {"text": "from a plugin"})).result
    assert injected["id"] and host.services.io.pending_inputs() >= 1  # io.inject is declared
    # the same refusals for a plugin that does not use the SDK
    answers = {}
    for method, params in (
        ("memory.recall", {"keywords": ["x"]}),
        ("events.publish", {"type": "x"}),
        ("social.addPerson", {"name": "x"}),
        ("no.such.method", {}),
        ("settings.get", {"key": 5}),
        ("stage.lock", {}),
    ):
        answers[method] = (await host.call("raw_call", {"method": method, "params": params})).result["error"]
    assert answers["memory.recall"]["code"] == -32001 and answers["memory.recall"]["data"]["capability"] == "memory.read"
    assert answers["events.publish"]["code"] == -32601 and "not publish" in answers["events.publish"]["message"]
    assert "read-only access to the social graph" in answers["social.addPerson"]["message"]
    assert answers["no.such.method"] == {
        "code": -32601,
        "message": "unknown method 'no.such.method'",
        "data": {"method": "no.such.method"},
    }
    assert answers["settings.get"]["code"] == -32602 and "params.key must be a string" in answers["settings.get"]["message"]
    assert "applies under the context lock" in answers["stage.lock"]["message"]
    assert host.plugin("raw").health()["denied_calls"] >= 1


async def test_stage_changes_from_several_processes_all_land(host: ProcHost) -> None:
    async def in_process(ctx: StageContext) -> None:
        async with ctx.lock:
            ctx.context_msgs.append({"role": "system", "content": "note from the core"})

    undo = host.services.stages.register(Stage.PRE_ACTION, in_process, plugin="core")
    try:
        ctx = StageContext(raw_message="hi", context_msgs=[{"role": "user", "content": "hi"}])
        await host.services.stages.run(Stage.PRE_ACTION, ctx)
    finally:
        undo()
    assert ctx.errors == []
    contents = sorted(m["content"] for m in ctx.context_msgs)
    assert contents == sorted(
        ["hi", "note from the core", "note from pyecho", "note from pya", "note from pyb", "raw saw: hi"]
    ), "every append landed: none overwrote another"
    assert ctx.extra == {"seen_by_pyecho": True, "seen_by_pya": True, "seen_by_pyb": True}


async def test_stage_permissions_and_own_tool_handlers(host: ProcHost) -> None:
    ctx = StageContext(raw_message="!pya make it loud")
    await host.services.stages.run(Stage.ON_INPUT, ctx)
    assert ctx.raw_message == "MAKE IT LOUD" and ctx.errors == []

    ctx = StageContext(raw_message="keep", llm_text="break pyb")
    await host.services.stages.run(Stage.POST_ACTION, ctx)
    assert ctx.raw_message == "keep", "a forbidden write is not applied"
    assert len(ctx.errors) == 1 and "pyb/post_action" in ctx.errors[0]
    assert "ctx.raw_message is read-only in stage 'post_action'" in ctx.errors[0]

    call = ToolCall("c1", "pya_guarded", {"text": "forbidden"}, plugin="pya")
    ctx = StageContext(tool_call=call)
    await host.services.stages.run(Stage.BEFORE_TOOLCALL, ctx)
    assert ctx.tool_call is call and call.denied and call.deny_reason == "pya says no", "updated in place"
    other = ToolCall("c2", "pyb_guarded", {"text": "forbidden"}, plugin="pyb")
    ctx = StageContext(tool_call=other)
    await host.services.stages.run(Stage.BEFORE_TOOLCALL, ctx)
    assert other.denied and other.deny_reason == "pyb says no", "only pyb's own handler ran for pyb's tool"


async def test_output_channel_cleaners_and_events(host: ProcHost) -> None:
    sent = await host.call("output_send__pya", {"payload": "to the channel", "meta": {"to": "x"}})
    assert sent.result == {"status": "sent", "count": 1}
    noisy = await host.call("pyecho_noisy")
    assert noisy.result == "[noise] useful text [noise]", "the model sees the original"
    assert host.services.tools.memory_text(noisy) == "useful text", "memory sees the plugin's cleaner output"
    chain: CleanerChain = host.services.cleaners
    assert chain.clean("[tag]on the loop") == "on the loop"  # a synchronous call from the event loop thread
    assert await asyncio.to_thread(chain.clean, "[tag]in a thread") == "in a thread"

    host.services.events.publish("proc_test", {"n": 1})
    host.services.events.publish("ignored_type", {"n": 2})
    host.services.events.publish("proc_test", {"n": 3})

    async def received() -> list[str]:
        return (await host.call("pya_sent")).result["events"]  # type: ignore[no-any-return]

    for _ in range(100):
        if len(await received()) >= 2:
            break
        await asyncio.sleep(0.02)
    assert await received() == ["proc_test:1", "proc_test:3"]
    assert (await host.call("pya_sent")).result["sent"] == ["to the channel"]


async def test_health_reports_calls_and_latencies(host: ProcHost) -> None:
    for _ in range(20):
        await host.call("pyb_noop")
    health = host.plugin("pyb").health()
    assert health["state"] == "running" and pid_alive(health["pid"]) and health["restarts"] == 0
    calls = health["calls"]["tool.invoke"]
    assert calls["count"] >= 20 and 0 < calls["p50_ms"] <= calls["p95_ms"] <= calls["max_ms"]
    assert health["calls"]["handshake"]["count"] == 1
    assert health["served"]["tool.register"] >= 10 and health["capabilities"] == ["events", "io.inject", "stages"]
    assert health["last_crash"] is None and health["circuit"] == "closed"
    json.dumps(health)  # the CLI and the web UI print it as JSON


async def test_cancelling_a_call_reaches_the_plugin(host: ProcHost) -> None:
    task = asyncio.create_task(host.call("pyb_sleep", {"seconds": 5}))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await host.call("pyb_echo", {"text": "still here"})).result["echo"] == "still here"
    await asyncio.sleep(0.2)
    health = host.plugin("pyb").health()
    assert health["restarts"] == 0 and health["state"] == "running", "a cancelled call is not a hung plugin"
    assert health["protocol_errors"]["unknown_responses"] == 0, "the late 'cancelled' answer was expected"
