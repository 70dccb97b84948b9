"""ToolRegistry: registration checks, argument validation, execution off the loop, errors, batching."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from homeagent.agent.tools import DuplicateToolError, ToolRegistry, interrupted_result, result_text
from homeagent.sdk.types import ToolCall, ToolDef, ToolResult

WEATHER = ToolDef(
    name="weather_query",
    description="查询指定城市的天气",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city"],
        "additionalProperties": False,
    },
    plugin="weather",
)


async def weather(args: dict[str, Any]) -> dict[str, Any]:
    return {"city": args["city"], "temp": 25, "weather": "晴"}


def call(name: str, args: dict[str, Any] | None = None, raw: str = "", id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=args or {}, raw_arguments=raw)


def content(result: ToolResult) -> str:
    assert isinstance(result.result, dict)
    return str(result.result["content"])


# registration ------------------------------------------------------------------------


async def test_duplicate_name_is_rejected_and_the_first_keeps_working() -> None:
    reg = ToolRegistry()
    reg.register(WEATHER, weather)

    async def impostor(args: dict[str, Any]) -> str:
        return "hijacked"

    with pytest.raises(DuplicateToolError, match="'weather_query' is already registered by plugin 'weather'"):
        reg.register(ToolDef("weather_query", plugin="evil"), impostor)
    result = await reg.execute(call("weather_query", {"city": "北京"}))
    assert result.success and result.result == {"city": "北京", "temp": 25, "weather": "晴"}
    assert result.plugin == "weather" and reg.plugin_of("weather_query") == "weather"


@pytest.mark.parametrize("name", ["", "has space", "dots.not.allowed", "x" * 65, "名字", "ok\n"])
def test_bad_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="1-64 characters"):
        ToolRegistry().register(ToolDef(name), weather)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"type": "object", "properties": {"x": {"type": "strng"}}}, r"not a valid JSON Schema: \$.properties.x.type"),
        ({"type": "object", "required": "city"}, "not a valid JSON Schema"),
        ({"type": "string"}, "must describe an object"),
    ],
)
def test_invalid_schemas_are_rejected(parameters: dict[str, Any], message: str) -> None:
    reg = ToolRegistry()
    with pytest.raises(ValueError, match=message):
        reg.register(ToolDef("t", parameters=parameters), weather)
    assert reg.get("t") is None and reg.generation == 0


async def test_listing_undo_unregister_and_generation() -> None:
    reg = ToolRegistry()
    undo = reg.register(WEATHER, weather)
    reg.register(ToolDef("qq_send", plugin="qq"), weather)
    reg.register(ToolDef("qq_recall", plugin="qq"), weather)
    g = reg.generation
    assert [t.name for t in reg.tools()] == ["weather_query", "qq_send", "qq_recall"]
    assert reg.openai_tools(lambda t: t.plugin == "weather") == [WEATHER.to_openai()]
    assert reg.openai_tools()[1]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert reg.unregister_plugin("qq") == ["qq_send", "qq_recall"] and reg.generation > g
    undo()
    undo()
    assert len(reg) == 0 and reg.get("weather_query") is None and reg.plugin_of("weather_query") == ""
    # undo of an old registration does not remove a newer one of the same name
    reg.register(WEATHER, weather)
    g = reg.generation
    undo()
    assert "weather_query" in reg and reg.generation == g
    assert reg.unregister("weather_query") is True and reg.unregister("weather_query") is False


# validation -------------------------------------------------------------------------


async def test_argument_errors_are_clear_results_and_the_handler_does_not_run() -> None:
    reg = ToolRegistry()
    ran: list[dict[str, Any]] = []

    async def handler(args: dict[str, Any]) -> str:
        ran.append(args)
        return "ok"

    reg.register(WEATHER, handler)
    missing = await reg.execute(call("weather_query", {"days": 3}))
    assert not missing.success and missing.status == "error"
    assert missing.result == {
        "isError": True,
        "content": "invalid arguments for weather_query: $: 'city' is a required property",
    }
    wrong = await reg.execute(call("weather_query", {"city": "Paris", "days": "three"}))
    assert content(wrong) == "invalid arguments for weather_query: $.days: 'three' is not of type 'integer'"
    several = await reg.execute(call("weather_query", {"days": 0, "extra": 1}))
    assert (
        content(several).count("; ") == 2
        and "$.days" in content(several)
        and "'extra' was unexpected" in content(several)
    )
    assert ran == []
    stats = reg.stats()["weather_query"]
    assert (stats.calls, stats.errors, stats.rejected) == (0, 0, 3)  # the model's mistake, not the tool's failure


async def test_malformed_raw_arguments() -> None:
    reg = ToolRegistry()
    reg.register(WEATHER, weather)
    bad = await reg.execute(call("weather_query", raw='{"city": "Paris",'))
    assert not bad.success
    assert content(bad).startswith("invalid arguments for weather_query: $: not valid JSON (")
    assert "line 1 column" in content(bad)
    array = await reg.execute(call("weather_query", raw='["Paris"]'))
    assert content(array) == "invalid arguments for weather_query: $: must be a JSON object, got array"
    good = await reg.execute(call("weather_query", raw='{"city": "Paris"}'))
    assert good.success and good.result["city"] == "Paris"


async def test_unknown_tool_names_close_matches() -> None:
    reg = ToolRegistry()
    reg.register(WEATHER, weather)
    reg.register(ToolDef("web_fetch"), weather)
    result = await reg.execute(call("weather_qeury", {"city": "x"}))
    assert not result.success and result.status == "error"
    assert content(result) == "unknown tool 'weather_qeury'. Did you mean: weather_query?"
    far = await reg.execute(call("zzz"))
    assert content(far) == "unknown tool 'zzz'. Available tools: weather_query, web_fetch"


# execution --------------------------------------------------------------------------


async def test_sync_handler_runs_off_the_loop() -> None:
    reg = ToolRegistry()
    threads: list[int] = []

    def slow(args: dict[str, Any]) -> str:
        threads.append(threading.get_ident())
        time.sleep(0.3)
        return "done"

    reg.register(ToolDef("slow"), slow)
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    result = await reg.execute(call("slow"))
    stop.set()
    await tick
    assert result.success and result.result == "done" and result.duration_ms >= 290
    assert threads and threads[0] != threading.get_ident()
    assert len(gaps) >= 10 and max(gaps) < 0.15  # the loop kept ticking while the handler slept


async def test_exception_becomes_error_result_with_traceback_logged(caplog: pytest.LogCaptureFixture) -> None:
    reg = ToolRegistry()

    def boom(args: dict[str, Any]) -> None:
        raise ValueError("bad input")

    reg.register(ToolDef("boom", plugin="p"), boom)
    with caplog.at_level(logging.ERROR, logger="homeagent.tools"):
        result = await reg.execute(call("boom"))
    assert result.result == {"isError": True, "content": "boom failed: ValueError: bad input"}
    assert not result.success and result.status == "error" and result.plugin == "p"
    assert "Traceback" in caplog.text and "bad input" in caplog.text
    stats = reg.stats()["boom"]
    assert (stats.calls, stats.errors) == (1, 1)


async def test_timeout_and_a_handlers_own_timeout_error() -> None:
    reg = ToolRegistry()
    cancelled = asyncio.Event()

    async def hang(args: dict[str, Any]) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def own_timeout(args: dict[str, Any]) -> None:
        raise TimeoutError("upstream took too long")

    reg.register(ToolDef("hang"), hang)
    reg.register(ToolDef("own"), own_timeout)
    t0 = time.perf_counter()
    result = await reg.execute(call("hang"), timeout=0.2)
    assert time.perf_counter() - t0 < 1.0
    assert content(result) == "hang timed out after 0.2s" and not result.success and cancelled.is_set()
    assert reg.stats()["hang"].timeouts == 1
    other = await reg.execute(call("own"), timeout=5)
    assert content(other) == "own failed: TimeoutError: upstream took too long"
    assert reg.stats()["own"].timeouts == 0


@dataclass
class Point:
    x: int
    tags: set[str]


class Opaque:
    def __str__(self) -> str:
        return "<opaque thing>"


async def test_results_are_made_json_able_and_texted_for_the_model() -> None:
    reg = ToolRegistry()

    async def mixed(args: dict[str, Any]) -> Any:
        return {"point": Point(1, {"b", "a"}), "obj": Opaque(), "text": "你好", 3: (1, 2)}

    async def plain(args: dict[str, Any]) -> str:
        return "just text, 不转义"

    async def soft_error(args: dict[str, Any]) -> dict[str, Any]:
        return {"isError": True, "content": "city not found"}

    reg.register(ToolDef("mixed"), mixed)
    reg.register(ToolDef("plain"), plain)
    reg.register(ToolDef("soft"), soft_error)
    r = await reg.execute(call("mixed"))
    assert r.result == {"point": {"x": 1, "tags": ["a", "b"]}, "obj": "<opaque thing>", "text": "你好", "3": [1, 2]}
    assert (
        result_text(r)
        == '{"point": {"x": 1, "tags": ["a", "b"]}, "obj": "<opaque thing>", "text": "你好", "3": [1, 2]}'
    )
    assert reg.result_text(await reg.execute(call("plain"))) == "just text, 不转义"
    soft = await reg.execute(call("soft"))
    assert not soft.success and soft.status == "error" and reg.stats()["soft"].errors == 1


async def test_denied_call_is_not_run() -> None:
    reg = ToolRegistry()
    ran = []

    async def write(args: dict[str, Any]) -> str:
        ran.append(1)
        return "written"

    reg.register(ToolDef("files_write", plugin="files"), write)
    c = call("files_write")
    c.denied, c.deny_reason = True, "system files are off limits"
    result = await reg.execute(c)
    assert ran == [] and result.status == "denied" and not result.success
    assert content(result) == "files_write was denied: system files are off limits"
    assert interrupted_result(c).status == "interrupted"


async def test_memory_text_respects_no_memory_and_cleaners(caplog: pytest.LogCaptureFixture) -> None:
    reg = ToolRegistry()

    def broken(text: str) -> str:
        raise RuntimeError("cleaner bug")

    reg.register(ToolDef("secret", no_memory=True), weather)
    reg.register(ToolDef("qq", cleaner=lambda t: t.replace("[CQ:face]", "")), weather)
    reg.register(ToolDef("raw"), weather)
    reg.register(ToolDef("broken", cleaner=broken), weather)
    assert reg.memory_text(ToolResult("1", "secret", result="token=abc")) is None
    assert reg.memory_text(ToolResult("1", "qq", result="hi[CQ:face]")) == "hi"
    assert reg.memory_text(ToolResult("1", "raw", result={"a": "冰"})) == '{"a": "冰"}'
    with caplog.at_level(logging.ERROR, logger="homeagent.tools"):
        assert reg.memory_text(ToolResult("1", "broken", result="keep me")) == "keep me"
    assert "cleaner bug" in caplog.text


# batches ----------------------------------------------------------------------------


async def test_batch_parallel_groups_are_concurrent_and_serial_calls_alone_in_order() -> None:
    reg = ToolRegistry()
    timeline: list[tuple[str, str, float]] = []

    def make(tag: str) -> Any:
        async def handler(args: dict[str, Any]) -> str:
            timeline.append(("start", args["id"], time.perf_counter()))
            await asyncio.sleep(0.2)
            timeline.append(("end", args["id"], time.perf_counter()))
            return f"{tag}:{args['id']}"

        return handler

    reg.register(ToolDef("read"), make("read"))
    reg.register(ToolDef("write", serial=True), make("write"))
    reg.register(ToolDef("shell", parallel_safe=False), make("shell"))
    names = ["read", "read", "read", "write", "read", "read", "shell", "nope", "read"]
    calls = [call(n, {"id": str(i)}, id=f"c{i}") for i, n in enumerate(names)]
    t0 = time.perf_counter()
    results = await reg.run_batch(calls, reg.execute)
    wall = time.perf_counter() - t0
    assert [r.call_id for r in results] == [c.id for c in calls]
    assert [r.result for r in results if r.success] == [
        "read:0",
        "read:1",
        "read:2",
        "write:3",
        "read:4",
        "read:5",
        "shell:6",
        "read:8",
    ]
    assert not results[7].success  # unknown tool: an error result in its place
    # groups: {0,1,2} {3} {4,5} {6} {7} {8} → about 5 × 0.2 s, not 8 × 0.2 s
    assert 0.95 < wall < 1.5
    start = {i: t for kind, i, t in timeline if kind == "start"}
    end = {i: t for kind, i, t in timeline if kind == "end"}
    assert max(start[i] for i in "012") < min(end[i] for i in "012")  # truly concurrent
    assert start["3"] >= max(end[i] for i in "012") and end["3"] <= min(start["4"], start["5"])
    assert start["6"] >= max(end["4"], end["5"]) and start["8"] >= end["6"]


async def test_cancelling_a_batch_cancels_in_flight_calls() -> None:
    reg = ToolRegistry()
    started = 0
    cancelled = 0

    async def slow(args: dict[str, Any]) -> str:
        nonlocal started, cancelled
        started += 1
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return "never"

    reg.register(ToolDef("slow"), slow)
    batch = asyncio.create_task(reg.run_batch([call("slow", id=f"c{i}") for i in range(3)], reg.execute))
    await asyncio.sleep(0.1)
    assert started == 3
    t0 = time.perf_counter()
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    assert time.perf_counter() - t0 < 0.5 and cancelled == 3


async def test_a_runner_that_raises_costs_only_its_own_call() -> None:
    reg = ToolRegistry()
    reg.register(ToolDef("a"), weather)

    async def runner(c: ToolCall) -> ToolResult:
        if c.id == "bad":
            raise RuntimeError("stage host exploded")
        return ToolResult(c.id, c.name, result="fine")

    results = await reg.run_batch([call("a", id="ok1"), call("a", id="bad"), call("a", id="ok2")], runner)
    assert [r.success for r in results] == [True, False, True]
    assert content(results[1]) == "a failed: RuntimeError: stage host exploded"
