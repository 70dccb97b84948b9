"""The daemon's periodic media GC pass, so a store left running for years keeps to its cap and sheds strays.

One pass (drop references whose owner is gone, mark, sweep after
``gc_min_age``, repair, cap) every
``core.memory.media.gc_interval``, read again before each wait so a change
applies at the next round. A failing pass is logged and retried after a
longer wait (interval × 2ⁿ, at most × 16); it never stops the daemon.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from homeagent.memory.media.owners import MediaOwners, gc_pass
from homeagent.memory.media.store import MediaStore

__all__ = ["MediaGCLoop"]

log = logging.getLogger("homeagent.memory.media")

MAX_BACKOFF = 16


class MediaGCLoop:
    def __init__(
        self,
        store: MediaStore,
        interval: Callable[[], float],
        *,
        owners: MediaOwners | None = None,
        first_delay: float = 300.0,
    ) -> None:
        self.store = store
        self.owners = owners
        self.interval = interval
        self.first_delay = first_delay
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._forever(), name="media-gc")

    async def _forever(self) -> None:
        await asyncio.sleep(self.first_delay)
        failures = 0
        while True:
            try:
                report = await gc_pass(self.store, self.owners)
            except Exception:
                failures += 1
                log.exception("media GC pass failed (attempt %d); retrying later", failures)
            else:
                failures = 0
                log.info(
                    "media GC: %d references of gone owners dropped, %d swept (%d bytes), %d evicted for the cap, "
                    "%d stored (%d bytes) in %.2fs",
                    report.refs_dropped, report.swept, report.swept_bytes, report.cap_evicted, report.present,
                    report.present_bytes, report.seconds,
                )
            await asyncio.sleep(max(60.0, self.interval()) * min(2**failures, MAX_BACKOFF))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
