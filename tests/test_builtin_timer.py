"""The timer plugin: firing, cron, cancel, validation, restarts (late and on time), and the agent loop."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from homeagent.io.manager import InputMessage
from homeagent.plugins.services import PluginServices
from tests.fakes.builtins_host import attached, llm_daemon, run_tool, started, tool_value
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.plugins_host import make_services


@pytest.fixture
def services(tmp_path: Path) -> PluginServices:
    return make_services(tmp_path / "data")


def timers_db(root: Path) -> Path:
    return root / "plugin_data" / "timer" / "timers.db"


async def next_interrupt(services: PluginServices, within: float = 3.0) -> InputMessage:
    return await asyncio.wait_for(services.io.interrupts.get(), within)


async def test_a_duration_timer_fires_once_as_a_no_memory_interrupt(services: PluginServices) -> None:
    async with started(services, "timer"):
        set_at = time.monotonic()
        value = await tool_value(services, "timer_set", {"duration": "300ms", "message": "tea is ready"})
        assert value["status"] == "set" and value["id"] == "t1" and value["kind"] == "once"
        listed = await tool_value(services, "timer_list", {})
        assert [t["message"] for t in listed["timers"]] == ["tea is ready"]
        message = await next_interrupt(services)
        assert 0.25 < time.monotonic() - set_at < 1.0
        assert message.text == "timer: tea is ready" and message.interrupt
        assert message.options.no_memory is True and message.source == "timer"
        assert (await tool_value(services, "timer_list", {}))["timers"] == []
        done = await tool_value(services, "timer_list", {"include_done": True})
        assert done["done"][0]["state"] == "fired"
        with pytest.raises(TimeoutError):
            await next_interrupt(services, 0.5)
    tool = services.tools.get("timer_set")
    assert tool is None  # unregistered with the plugin


async def test_numbers_iso_times_and_cron(services: PluginServices) -> None:
    async with started(services, "timer"):
        await tool_value(services, "timer_set", {"duration": 0.2, "message": "number"})
        assert (await next_interrupt(services)).text == "timer: number"
        at = (datetime.now().astimezone() + timedelta(milliseconds=300)).isoformat()
        value = await tool_value(services, "timer_set", {"at": at, "message": "iso"})
        assert value["kind"] == "once"
        assert (await next_interrupt(services)).text == "timer: iso"
        services.config.set("plugin.timer.min_interval", "0")  # the owner lifts the repeat floor
        cron = await tool_value(services, "timer_set", {"cron": "* * * * * *", "message": "every second"})
        assert cron["kind"] == "cron"
        first = await next_interrupt(services, 2.5)
        assert first.text == "timer: every second"
        still = await tool_value(services, "timer_list", {})
        assert still["timers"][0]["id"] == cron["id"] and still["timers"][0]["fired_count"] == 1
        assert still["timers"][0]["in"].endswith("ms")  # rescheduled for the next second
        cancelled = await tool_value(services, "timer_cancel", {"id": cron["id"]})
        assert cancelled["status"] == "cancelled"
        while not services.io.interrupts.empty():
            services.io.interrupts.get_nowait()
        with pytest.raises(TimeoutError):
            await next_interrupt(services, 1.1)


async def test_repeating_timers_the_model_sets_have_a_minimum_interval(services: PluginServices) -> None:
    async with started(services, "timer"):
        for cron in ("* * * * * *", "* * * * * */30", "0-30 9 * * * */5", "* * * * 1 */10"):
            result = await run_tool(services, "timer_set", {"cron": cron, "message": "spam"})
            assert result.success is False, cron
            assert "min_interval" in result.result["content"] and "homeagent config set" in result.result["content"]
        assert (await tool_value(services, "timer_list", {}))["timers"] == []
        for cron in ("* * * * *", "*/5 * * * *", "0 8 * * 1-5"):
            assert (await tool_value(services, "timer_set", {"cron": cron, "message": "fine"}))["status"] == "set"
        services.config.set("plugin.timer.min_interval", "10m")
        result = await run_tool(services, "timer_set", {"cron": "*/5 * * * *", "message": "now too often"})
        assert result.success is False and "every 5m" in result.result["content"]


async def test_cancel_before_due(services: PluginServices) -> None:
    async with started(services, "timer"):
        value = await tool_value(services, "timer_set", {"duration": "400ms", "message": "never"})
        assert (await tool_value(services, "timer_cancel", {"id": value["id"]}))["status"] == "cancelled"
        with pytest.raises(TimeoutError):
            await next_interrupt(services, 0.7)
        again = await run_tool(services, "timer_cancel", {"id": value["id"]})
        assert again.success is False and "no active timer" in again.result["content"]
        bad = await run_tool(services, "timer_cancel", {"id": "soon"})
        assert bad.success is False and "not a timer id" in bad.result["content"]


async def test_bad_requests_get_clear_errors(services: PluginServices) -> None:
    past = (datetime.now().astimezone() - timedelta(hours=1)).isoformat()
    far = (datetime.now().astimezone() + timedelta(days=3)).isoformat()
    cases = [
        ({"message": "x"}, "exactly one"),
        ({"message": "x", "duration": "5m", "cron": "* * * * *"}, "exactly one"),
        ({"message": " ", "duration": "5m"}, "message is empty"),
        ({"message": "x", "duration": "5 minutes"}, "duration"),
        ({"message": "x", "duration": "*/5 * * * *"}, "cron expression"),
        ({"message": "x", "duration": "2030-01-01T08:00"}, "point in time"),
        ({"message": "x", "duration": "0s"}, "more than 0"),
        ({"message": "x", "duration": "25h"}, "max_duration"),
        ({"message": "x", "at": past}, "in the past"),
        ({"message": "x", "at": far}, "max_duration"),
        ({"message": "x", "at": "tomorrow morning"}, "ISO 8601"),
        ({"message": "x", "cron": "every day at 8"}, "not a valid cron"),
    ]
    async with started(services, "timer"):
        for args, expected in cases:
            result = await run_tool(services, "timer_set", args)
            assert result.success is False and expected in result.result["content"], (args, result.result)
        services.config.set("plugin.timer.max_duration", "48h")
        ok = await tool_value(services, "timer_set", {"message": "x", "duration": "25h"})
        assert ok["status"] == "set"
        assert services.tools.get("timer_set").serial is True  # type: ignore[union-attr]


async def test_a_pending_timer_survives_a_restart_and_fires_on_time(services: PluginServices) -> None:
    async with started(services, "timer"):
        await tool_value(services, "timer_set", {"duration": "1s", "message": "on time"})
        set_at = time.time()
    await asyncio.sleep(0.2)
    async with started(services, "timer"):
        message = await next_interrupt(services, 3)
        assert message.text == "timer: on time" and not message.options.meta["late"]
        assert 0.85 < time.time() - set_at < 1.5


async def test_a_timer_missed_while_down_fires_once_marked_late(services: PluginServices, tmp_path: Path) -> None:
    async with started(services, "timer"):
        await tool_value(services, "timer_set", {"duration": "2h", "message": "water the plants"})
        await tool_value(services, "timer_set", {"cron": "0 9 * * *", "message": "daily stand-up"})
    with sqlite3.connect(timers_db(tmp_path / "data")) as db:  # as if the daemon had been down for hours
        db.execute("UPDATE timers SET due = ?", (time.time() - 3 * 3600,))
    async with started(services, "timer"):
        first = await next_interrupt(services)
        second = await next_interrupt(services)
        texts = sorted([first.text, second.text])
        assert texts[0].startswith("timer: daily stand-up [late:") and texts[1].startswith("timer: water the plants [late:")
        assert "3h" in texts[1] and first.options.meta["late"]
        listed = await tool_value(services, "timer_list", {})
        assert [t["message"] for t in listed["timers"]] == ["daily stand-up"]  # cron keeps its schedule
    async with started(services, "timer"):
        with pytest.raises(TimeoutError):
            await next_interrupt(services, 0.5)


async def test_timer_fires_during_a_running_turn(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAI() as fake, llm_daemon(data_dir, fake, monkeypatch) as d, attached(d, "timer"):
        fake.script(
            Turn.tool_calls([("timer_set", {"duration": "300ms", "message": "tea is ready"})]),
            Turn.slow("word " * 60, chunks=60, delay=0.05),
            Turn.text("Tea acknowledged."),
        )
        result = await d.io.inject_sync("test", "test", "remind me about tea in a moment, then tell a story",
                                        timeout=30)
        assert result.ok and result.text == "Tea acknowledged."
        # the stream was closed (the fake notices within its 5 ms poll; the retry may finish sooner)
        await asyncio.wait_for(fake.disconnected.wait(), 0.1)
        assert fake.disconnects, "the interrupt did not cancel the streaming LLM call"
        retried = fake.requests[2].body["messages"]
        assert any(m["role"] == "system" and m["content"].startswith("[打断消息]") and "timer: tea is ready" in m["content"]
                   for m in retried)
        await asyncio.sleep(0.2)
        assert d.agent.status()["turns"] == 1  # the interrupt joined the turn; no extra turn


async def test_timer_survives_a_daemon_restart(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAI() as fake:
        async with llm_daemon(data_dir, fake, monkeypatch) as d, attached(d, "timer"):
            fake.script(Turn.tool_calls([("timer_set", {"duration": "1h", "message": "check the oven"})]),
                        Turn.text("I will remind you."))
            result = await d.io.inject_sync("test", "test", "remind me in an hour", timeout=30)
            assert result.ok
        with sqlite3.connect(timers_db(data_dir)) as db:
            db.execute("UPDATE timers SET due = ?", (time.time() - 120,))
        fake.script(Turn.text("The oven! You asked me to remind you."))
        async with llm_daemon(data_dir, fake, monkeypatch) as d, attached(d, "timer"):
            for _ in range(200):
                if len(fake.requests) >= 3:
                    break
                await asyncio.sleep(0.025)
            assert len(fake.requests) == 3
            user = fake.requests[2].body["messages"][-1]
            assert user["role"] == "user" and user["content"].startswith("timer: check the oven [late:")
            await asyncio.sleep(0.3)
            assert len(fake.requests) == 3  # fired exactly once
        with sqlite3.connect(timers_db(data_dir)) as db:
            assert db.execute("SELECT state, fired_count FROM timers").fetchall() == [("fired", 1)]
