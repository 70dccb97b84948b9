"""StageHost: concurrency on one shared context, isolation, timeouts, permissions, own-tools filtering."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest

from homeagent.agent.stages import StageHost, StagePermissionError, writable_fields
from homeagent.sdk.types import STAGES, MemItem, Stage, StageContext, ToolCall, ToolResult


async def test_twenty_concurrent_handlers_lose_no_appends() -> None:
    host = StageHost()
    started = 0
    all_started = asyncio.Event()

    def make(i: int) -> Any:
        async def handler(ctx: StageContext) -> None:
            nonlocal started
            started += 1
            if started == 20:
                all_started.set()
            await asyncio.wait_for(all_started.wait(), 2)  # only passes if all 20 run at once
            async with ctx.lock:
                ctx.context_msgs.append({"role": "system", "content": f"plain {i}"})
            async with ctx.lock:  # read-modify-write with a suspension point in the middle
                msgs = list(ctx.context_msgs)
                await asyncio.sleep(0)
                ctx.context_msgs = [*msgs, {"role": "system", "content": f"rmw {i}"}]

        return handler

    for i in range(20):
        host.register(Stage.PRE_ACTION, make(i), plugin=f"p{i}")
    ctx = StageContext(context_msgs=[{"role": "user", "content": "hi"}])
    assert await host.run("pre_action", ctx) is False
    assert ctx.errors == []
    contents = [m["content"] for m in ctx.context_msgs]
    assert len(contents) == 41
    assert {f"plain {i}" for i in range(20)} | {f"rmw {i}" for i in range(20)} | {"hi"} == set(contents)
    assert ctx.phase is Stage.PRE_ACTION


async def test_the_lock_handlers_see_is_the_shared_one() -> None:
    """Without the lock the same read-modify-write loses updates, so the test above proves the lock is shared."""
    host = StageHost()

    async def unlocked(ctx: StageContext) -> None:
        msgs = list(ctx.context_msgs)
        await asyncio.sleep(0)
        ctx.context_msgs = [*msgs, {"role": "system", "content": "x"}]

    for i in range(20):
        host.register("pre_action", unlocked, plugin=f"p{i}")
    ctx = StageContext()
    await host.run("pre_action", ctx)
    assert len(ctx.context_msgs) < 20


async def test_response_short_circuits() -> None:
    host = StageHost()

    async def block(ctx: StageContext) -> None:
        if ctx.user_id == "blocked":
            ctx.response = "已被限制使用"

    host.register("on_input", block, plugin="guard")
    assert await host.run("on_input", StageContext(user_id="alice")) is False
    ctx = StageContext(user_id="blocked")
    assert await host.run("on_input", ctx) is True
    assert ctx.response == "已被限制使用"
    # a response set before the stage (by the kernel) is reported even with nobody registered
    assert await host.run("before_output", StageContext(response="x")) is True


async def test_exception_is_isolated_logged_and_recorded(caplog: pytest.LogCaptureFixture) -> None:
    host = StageHost()
    ran: list[str] = []

    async def good(ctx: StageContext) -> None:
        await asyncio.sleep(0.01)
        ran.append("good")
        ctx.extra["good"] = True

    async def boom(ctx: StageContext) -> None:
        raise RuntimeError("kaput")

    def sync_good(ctx: StageContext) -> None:
        ran.append("sync")

    host.register("post_action", good, plugin="a")
    host.register("post_action", boom, plugin="b")
    host.register("post_action", sync_good, plugin="c")
    ctx = StageContext()
    with caplog.at_level(logging.ERROR, logger="homeagent.stages"):
        assert await host.run("post_action", ctx) is False
    assert sorted(ran) == ["good", "sync"]
    assert ctx.extra == {"good": True}
    assert ctx.errors == ["b/boom: RuntimeError: kaput"]
    [record] = [r for r in caplog.records if r.name == "homeagent.stages"]
    assert record.exc_info is not None and "kaput" in caplog.text and "Traceback" in caplog.text
    infos = {i.plugin: i for i in host.handlers("post_action")}
    assert infos["b"].failures == 1 and infos["a"].failures == 0 and infos["a"].calls == 1


async def test_plain_function_handlers_and_ones_returning_awaitables() -> None:
    host = StageHost()

    async def later(ctx: StageContext) -> None:
        await asyncio.sleep(0.01)
        ctx.extra["later"] = True

    def plain(ctx: StageContext) -> None:
        ctx.extra["plain"] = True

    def bad_plain(ctx: StageContext) -> None:
        ctx.final_text = "nope"

    host.register("pre_action", plain, plugin="a")
    host.register("pre_action", lambda ctx: later(ctx), plugin="b", name="deferred")
    host.register("pre_action", bad_plain, plugin="c")
    ctx = StageContext()
    await host.run("pre_action", ctx)
    assert ctx.extra == {"plain": True, "later": True}
    assert len(ctx.errors) == 1 and ctx.errors[0].startswith("c/bad_plain: StagePermissionError")
    assert [(i.name, i.calls, i.failures) for i in host.handlers("pre_action")] == [
        ("plain", 1, 0),
        ("deferred", 1, 0),
        ("bad_plain", 1, 1),
    ]


async def test_hanging_handler_is_cut_by_its_timeout_others_finish() -> None:
    host = StageHost(default_timeout=5)
    cancelled = asyncio.Event()
    done_at: list[float] = []

    async def hang(ctx: StageContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def quick(ctx: StageContext) -> None:
        await asyncio.sleep(0.02)
        done_at.append(time.perf_counter())

    host.register("pre_action", hang, plugin="slow", timeout=0.2)
    host.register("pre_action", quick, plugin="fast")
    ctx = StageContext()
    t0 = time.perf_counter()
    await host.run("pre_action", ctx)
    wall = time.perf_counter() - t0
    assert 0.19 <= wall < 1.0
    assert done_at and done_at[0] - t0 < 0.15  # the quick one was not held back
    assert cancelled.is_set()
    assert ctx.errors == ["slow/hang: timed out after 0.2s"]
    [info] = [i for i in host.handlers("pre_action") if i.plugin == "slow"]
    assert info.timeouts == 1 and info.failures == 1


async def test_handler_that_swallows_cancellation_cannot_hold_the_turn() -> None:
    host = StageHost(cancel_grace=0.05)
    release = asyncio.Event()

    async def stubborn(ctx: StageContext) -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                pass

    host.register("before_output", stubborn, plugin="bad", timeout=0.1)
    ctx = StageContext(final_text="hello")
    t0 = time.perf_counter()
    await host.run("before_output", ctx)
    assert time.perf_counter() - t0 < 0.8
    assert ctx.errors == ["bad/stubborn: timed out after 0.1s"]
    assert host.stragglers == 1
    release.set()
    for _ in range(50):
        if host.stragglers == 0:
            break
        await asyncio.sleep(0.02)
    assert host.stragglers == 0


async def test_cancelling_run_cancels_handlers_and_propagates() -> None:
    host = StageHost()
    entered = asyncio.Event()
    handler_cancelled = asyncio.Event()

    async def long(ctx: StageContext) -> None:
        entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            handler_cancelled.set()
            raise

    host.register("pre_action", long, plugin="p")
    turn = asyncio.create_task(host.run("pre_action", StageContext()))
    await asyncio.wait_for(entered.wait(), 2)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    assert handler_cancelled.is_set()


# permissions ------------------------------------------------------------------------

_SAMPLE: dict[str, Any] = {
    "raw_message": "changed",
    "context_msgs": [{"role": "system", "content": "x"}],
    "llm_text": "changed",
    "tool_calls": [ToolCall("9", "t")],
    "tool_call": ToolCall("9", "t"),
    "tool_results": [ToolResult("9", "t")],
    "tool_result": ToolResult("9", "t"),
    "final_text": "changed",
    "response": "changed",
    "memory": [MemItem("user", "x")],
    "no_memory": True,
    "extra": {"k": 1},
    "errors": None,  # assigned its own list back, so the host's error records survive
}


EVERY = "on_input pre_action post_action before_toolcall after_toolcall before_output after_output"

# The permission matrix as plugin authors read it (docs/protocol.md, "writable in"): the oracle of the
# tests below, written out so that a change to the code's WRITABLE fails them instead of moving with it.
MATRIX: dict[str, set[str]] = {
    "raw_message": {"on_input"},
    "context_msgs": {"pre_action"},
    "llm_text": {"post_action"},
    "tool_calls": {"post_action", "before_toolcall"},
    "tool_call": {"before_toolcall"},
    "tool_results": {"after_toolcall"},
    "tool_result": {"after_toolcall"},
    "final_text": {"before_output"},
    "response": set(EVERY.split()) - {"after_output"},
    "memory": {"on_input", "pre_action"},
    "no_memory": {"on_input", "pre_action"},
    "extra": set(EVERY.split()),
    "errors": set(EVERY.split()),
}


def test_the_pinned_matrix_is_the_one_in_the_protocol_document() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text(encoding="utf-8")
    table = doc[doc.index("| field | JSON | writable in |"):]
    table = table[: table.index("\n\n")]
    documented: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        fields_cell, _, where = (c.strip() for c in row.strip("|").split("|")[:3])
        where = where.split(" — ")[0]
        stages = set(EVERY.split()) if where.startswith("every stage") else set(re.findall(r"[a-z_]+", where))
        if where.startswith("every stage but "):
            stages -= set(re.findall(r"[a-z_]+", where[len("every stage but "):]))
        for name in re.findall(r"`([a-z_]+)`", fields_cell):
            documented[name] = stages if where != "—" else set()
    assert {f: st for f, st in documented.items() if st} == MATRIX
    assert all(not st for f, st in documented.items() if f not in MATRIX)  # user_id, phase, …: read-only


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.value)
async def test_matrix_assignment_allowed_exactly_where_the_sdk_says(stage: Stage) -> None:
    """Every matrix field assigned in every stage: the write lands iff allowed, else that handler alone fails."""
    host = StageHost()
    outcome: dict[str, str] = {}

    def make(field: str) -> Any:
        async def handler(ctx: StageContext) -> None:
            try:
                setattr(ctx, field, ctx.errors if field == "errors" else _SAMPLE[field])
                outcome[field] = "written"
            except StagePermissionError as e:
                assert field in str(e) and stage.value in str(e)
                outcome[field] = "denied"
                raise

        return handler

    assert set(_SAMPLE) == set(MATRIX)
    for field in _SAMPLE:
        host.register(stage, make(field), plugin=field)
    ctx = StageContext(tool_call=ToolCall("1", "t"), tool_result=ToolResult("1", "t"))
    await host.run(stage, ctx)
    for field in _SAMPLE:
        allowed = stage.value in MATRIX[field]
        assert outcome[field] == ("written" if allowed else "denied"), (field, stage)
        if allowed and field != "errors":
            assert getattr(ctx, field) == _SAMPLE[field]
    denied = [f for f in _SAMPLE if stage.value not in MATRIX[f]]
    assert len([e for e in ctx.errors if "StagePermissionError" in e]) == len(denied)
    assert set(writable_fields(stage)) == {f for f in MATRIX if stage.value in MATRIX[f]}


async def test_in_place_mutation_of_read_only_fields_fails_only_that_handler() -> None:
    host = StageHost()
    attempts = {
        "append_context": lambda c: c.context_msgs.append({"role": "system", "content": "sneaky"}),
        "edit_message": lambda c: c.context_msgs[0].__setitem__("content", "sneaky"),
        "usage": lambda c: c.token_usage.__setitem__("total", 0),
        "deny_other_call": lambda c: setattr(c.tool_calls[0], "denied", True),
        "edit_args": lambda c: c.tool_calls[0].arguments.__setitem__("path", "/etc"),
        "results": lambda c: c.tool_results.append(ToolResult("2", "t")),
        "phase": lambda c: setattr(c, "phase", Stage.ON_INPUT),
        "user": lambda c: setattr(c, "user_id", "root"),
        "new_attr": lambda c: setattr(c, "my_state", 1),
    }
    for name, fn in attempts.items():
        host.register("before_output", fn, plugin="p", name=name)

    async def allowed(ctx: StageContext) -> None:
        ctx.extra.setdefault("seen", []).append(len(ctx.tool_calls))
        ctx.final_text = ctx.final_text.upper()

    host.register("before_output", allowed, plugin="ok")
    ctx = StageContext(
        user_id="alice",
        final_text="hello",
        context_msgs=[{"role": "user", "content": "hi"}],
        token_usage={"total": 10},
        tool_calls=[ToolCall("1", "files_write", {"path": "/tmp/x"})],
    )
    await host.run("before_output", ctx)
    failed = {e.split(":")[0].removeprefix("p/") for e in ctx.errors}
    assert failed == set(attempts)
    assert ctx.context_msgs == [{"role": "user", "content": "hi"}]
    assert ctx.token_usage == {"total": 10}
    assert ctx.tool_calls[0].denied is False and ctx.tool_calls[0].arguments == {"path": "/tmp/x"}
    assert ctx.tool_results == [] and ctx.extra == {"seen": [1]}
    assert ctx.final_text == "HELLO" and ctx.user_id == "alice" and ctx.phase is Stage.BEFORE_OUTPUT
    assert any("AttributeError" in e and "ctx.extra" in e for e in ctx.errors)


async def test_before_toolcall_may_deny_or_change_arguments_but_not_the_result() -> None:
    host = StageHost()

    async def audit(ctx: StageContext) -> None:
        assert ctx.tool_call is not None
        if ctx.tool_call.arguments.get("path", "").startswith("/etc"):
            ctx.tool_call.denied = True
            ctx.tool_call.deny_reason = "system files are off limits"
        ctx.tool_call.arguments["checked"] = True

    async def peek_result(ctx: StageContext) -> None:
        ctx.tool_result = ToolResult("1", "files_write")

    host.register("before_toolcall", audit, plugin="files")
    host.register("before_toolcall", peek_result, plugin="x")
    call = ToolCall("1", "files_write", {"path": "/etc/passwd"}, plugin="files")
    ctx = StageContext(tool_call=call)
    await host.run("before_toolcall", ctx)
    assert call.denied and call.deny_reason == "system files are off limits" and call.arguments["checked"] is True
    assert ctx.tool_result is None
    assert len(ctx.errors) == 1 and ctx.errors[0].startswith("x/peek_result: StagePermissionError")


async def test_after_output_reads_final_text_but_cannot_respond() -> None:
    host = StageHost()
    seen: list[str] = []

    async def log_it(ctx: StageContext) -> None:
        seen.append(ctx.final_text)
        ctx.response = "late"

    host.register("after_output", log_it, plugin="stats")
    ctx = StageContext(final_text="bye")
    assert await host.run("after_output", ctx) is False
    assert seen == ["bye"] and ctx.response is None and len(ctx.errors) == 1


async def test_view_rejects_writes_after_its_stage_finished() -> None:
    host = StageHost()
    kept: list[StageContext] = []

    async def keep(ctx: StageContext) -> None:
        kept.append(ctx)

    host.register("before_output", keep)
    ctx = StageContext(final_text="a")
    await host.run("before_output", ctx)
    with pytest.raises(StagePermissionError, match="already finished"):
        kept[0].final_text = "b"
    assert ctx.final_text == "a" and kept[0].final_text == "a"


# own tools, registration --------------------------------------------------------------


async def test_own_tools_handlers_only_see_their_plugins_calls() -> None:
    host = StageHost()
    seen: list[tuple[str, str]] = []

    def make(tag: str) -> Any:
        async def handler(ctx: StageContext) -> None:
            seen.append((tag, ctx.phase.value))

        return handler

    host.register("before_toolcall", make("qq-own"), plugin="qq", own_tools=True)
    host.register("after_toolcall", make("qq-own"), plugin="qq", own_tools=True)
    host.register("before_toolcall", make("all"), plugin="audit")
    host.register("on_input", make("qq-input"), plugin="qq", own_tools=True)  # degrades to a normal handler

    await host.run("before_toolcall", StageContext(tool_call=ToolCall("1", "web_fetch", plugin="web")))
    assert seen == [("all", "before_toolcall")]
    seen.clear()
    await host.run("before_toolcall", StageContext(tool_call=ToolCall("2", "qq_send_text", plugin="qq")))
    assert sorted(seen) == [("all", "before_toolcall"), ("qq-own", "before_toolcall")]
    seen.clear()
    await host.run("after_toolcall", StageContext(tool_result=ToolResult("2", "qq_send_text", plugin="qq")))
    await host.run("after_toolcall", StageContext(tool_result=ToolResult("3", "web_fetch", plugin="web")))
    await host.run("on_input", StageContext())
    assert seen == [("qq-own", "after_toolcall"), ("qq-input", "on_input")]
    assert [i.own_tools for i in host.handlers("on_input")] == [False]
    with pytest.raises(ValueError, match="plugin"):
        host.register("before_toolcall", make("x"), own_tools=True)


async def test_undo_and_unregister_plugin() -> None:
    host = StageHost()
    calls: list[str] = []

    def make(tag: str) -> Any:
        async def handler(ctx: StageContext) -> None:
            calls.append(tag)

        return handler

    undo_a = host.register("on_input", make("a1"), plugin="a")
    host.register("pre_action", make("a2"), plugin="a")
    host.register("on_input", make("b"), plugin="b")
    undo_a()
    undo_a()  # idempotent
    await host.run("on_input", StageContext())
    assert calls == ["b"]
    assert host.unregister_plugin("a") == 1
    assert host.unregister_plugin("a") == 0
    assert host.handlers("pre_action") == [] and not host.has_handlers("pre_action")
    [info] = host.handlers(Stage.ON_INPUT)
    assert (info.plugin, info.name, info.calls) == ("b", "handler", 1)


def test_bad_registrations_are_rejected_clearly() -> None:
    host = StageHost()

    async def h(ctx: StageContext) -> None:
        return None

    with pytest.raises(ValueError, match=r"unknown stage 'on_inpt'.*on_input, pre_action"):
        host.register("on_inpt", h)
    with pytest.raises(ValueError, match="timeout"):
        host.register("on_input", h, timeout=0)
    with pytest.raises(TypeError):
        host.register("on_input", "not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown stage"):
        host.handlers("nope")


async def test_empty_stage_is_cheap() -> None:
    host = StageHost()
    ctx = StageContext()
    t0 = time.perf_counter()
    for _ in range(1000):
        for stage in STAGES:
            await host.run(stage, ctx)
    per_turn = (time.perf_counter() - t0) / 1000
    assert per_turn < 0.0005  # 7 empty stages: well under the 2 ms kernel budget


async def test_handlers_are_started_eagerly_but_stay_isolated() -> None:
    """Handlers run up to their first wait without a task of their own; each still sees its own
    copy of the context variables, a later wait is still concurrent and still timed out, and a
    handler that raises (even CancelledError) on its first step fails alone."""
    import contextvars

    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")
    host = StageHost(default_timeout=0.3)
    seen: dict[str, str] = {}
    both_waiting = asyncio.Event()
    waiting = 0

    async def setter(ctx: StageContext) -> None:
        marker.set("setter")
        seen["setter-before"] = marker.get()
        nonlocal waiting
        waiting += 1
        if waiting == 2:
            both_waiting.set()
        await asyncio.wait_for(both_waiting.wait(), 1)  # needs the other handler to be running too
        seen["setter-after"] = marker.get()

    async def reader(ctx: StageContext) -> None:
        seen["reader"] = marker.get()
        nonlocal waiting
        waiting += 1
        if waiting == 2:
            both_waiting.set()
        await asyncio.wait_for(both_waiting.wait(), 1)

    async def instant(ctx: StageContext) -> None:
        ctx.extra["instant"] = True

    async def raises_cancelled(ctx: StageContext) -> None:
        raise asyncio.CancelledError

    async def sleeps_forever(ctx: StageContext) -> None:
        await asyncio.sleep(3600)

    for i, handler in enumerate((setter, reader, instant, raises_cancelled, sleeps_forever)):
        host.register("pre_action", handler, plugin=f"p{i}")
    ctx = StageContext()
    started = time.perf_counter()
    assert await host.run("pre_action", ctx) is False
    assert time.perf_counter() - started < 2
    assert seen == {"setter-before": "setter", "setter-after": "setter", "reader": "unset"}
    assert marker.get() == "unset"  # nothing leaked into the turn
    assert ctx.extra["instant"] is True
    assert any("raises_cancelled" in e and "CancelledError" in e for e in ctx.errors)
    assert any("sleeps_forever" in e and "timed out" in e for e in ctx.errors)
    stats = {h.name: h for h in host.handlers("pre_action")}
    assert stats["instant"].calls == 1 and stats["instant"].failures == 0
    assert stats["sleeps_forever"].timeouts == 1
