"""run_detached: background work a stopping process does not wait for."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from homeagent.threads import run_detached


async def test_result_and_exception_come_back_to_the_caller() -> None:
    assert await run_detached(lambda: threading.current_thread().daemon, name="t") is True

    def boom() -> None:
        raise ValueError("bad weights file")

    with pytest.raises(ValueError, match="bad weights file"):
        await run_detached(boom, name="t")


def test_a_process_exits_without_waiting_for_a_slow_detached_job() -> None:
    """asyncio.to_thread would keep this process alive for the whole 30 s sleep."""
    script = textwrap.dedent(
        """
        import asyncio, time
        from homeagent.threads import run_detached

        async def main():
            task = asyncio.ensure_future(run_detached(lambda: time.sleep(30), name="slow-load"))
            await asyncio.sleep(0.1)
            task.cancel()

        asyncio.run(main())
        print("done")
        """
    )
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=25)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"
    assert time.perf_counter() - started < 10


async def test_a_job_finishing_after_its_loop_closed_is_harmless(monkeypatch: pytest.MonkeyPatch) -> None:
    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    release = threading.Event()
    done = threading.Event()

    def job() -> int:
        release.wait(5)
        done.set()
        return 1

    async def start_and_leave() -> None:
        task = asyncio.ensure_future(run_detached(job, name="late"))
        await asyncio.sleep(0.05)
        task.cancel()

    await asyncio.to_thread(lambda: asyncio.run(start_and_leave()))  # that loop is closed now
    release.set()
    assert await asyncio.to_thread(done.wait, 5)
    await asyncio.sleep(0.2)  # the thread hands its result to the closed loop
    assert errors == []
