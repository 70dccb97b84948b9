"""Work in a thread that must not hold up the process when it stops.

``asyncio.to_thread`` runs on the loop's default executor, whose threads are
joined when the loop closes and again when the interpreter exits. That is
right for short jobs, but a model that takes ten seconds to load would make
``homeagent stop`` (or SIGTERM) wait those ten seconds. Such jobs run here in
a daemon thread instead: awaiting them can be cancelled, and nothing waits for
the thread once the daemon has shut down.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def run_detached(fn: Callable[[], T], *, name: str) -> T:
    """Run ``fn`` in a daemon thread and await its result (cancelling the await leaves the thread running)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result = fn()
        except BaseException as exc:  # handed to the awaiting side
            outcome: tuple[T | None, BaseException | None] = (None, exc)
        else:
            outcome = (result, None)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    threading.Thread(target=target, name=name, daemon=True).start()
    return await future
