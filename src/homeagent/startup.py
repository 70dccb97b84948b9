"""Which subsystems of a starting daemon are ready, and what an early RPC waits for.

The socket comes up before memory, plugins and the web UI so that ``status``
answers at once; but a ``plugins.list`` sent then would find no such method,
and a ``config set plugin.timer.max_timers x`` would be stored unchecked
because the plugin had not registered its definitions yet. So each RPC names
the subsystems it needs (:func:`needs`), and :meth:`Startup.gate` waits for
them, bounded, before the method is looked up; past the bound the client is
told the daemon is still starting rather than given a wrong answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

APPROVALS = "approvals"
MEMORY = "memory"
AGENT = "agent"
PLUGINS = "plugins"
WEB = "web"

START_WAIT = 20.0
"""Seconds an early RPC waits for its subsystems before the daemon answers "still starting"."""

# methods served from the moment the socket listens
_ALWAYS = frozenset({"status", "shutdown", "agent.cancel"})
_BY_PREFIX: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("llm.", ()),  # the LLM sources start before the socket
    ("approvals.", (APPROVALS,)),
    ("memory.", (MEMORY,)),
    ("media.", (MEMORY,)),
    ("knowledge.", (MEMORY,)),
    ("plugins.", (PLUGINS,)),
    ("tools.", (PLUGINS,)),
    ("webui.", (WEB,)),
    ("config.", (PLUGINS, WEB)),  # plugins and the web UI register their setting definitions as they start
)


class StillStarting(Exception):
    """The subsystems an RPC needs did not come up within the wait."""


def needs(method: str, everything: Iterable[str]) -> tuple[str, ...]:
    """The subsystems ``method`` needs; an unknown method (a plugin's, say) waits for everything."""
    if method in _ALWAYS:
        return ()
    for prefix, required in _BY_PREFIX:
        if method.startswith(prefix):
            return required
    return tuple(everything)


class Startup:
    """Start-up progress of one daemon: one event per subsystem, set when it is up (or gave up)."""

    def __init__(self, subsystems: Iterable[str], *, wait: float = START_WAIT) -> None:
        self._events = {name: asyncio.Event() for name in subsystems}
        self.wait_s = wait

    def done(self, name: str) -> None:
        """``name`` is up, or failed and will not come: either way nothing should wait for it any more."""
        event = self._events.get(name)
        if event is not None:
            event.set()

    def finish(self) -> None:
        for event in self._events.values():
            event.set()

    @property
    def starting(self) -> list[str]:
        return [name for name, event in self._events.items() if not event.is_set()]

    @property
    def ready(self) -> bool:
        return not self.starting

    async def gate(self, method: str) -> None:
        """Wait until what ``method`` needs is up; raise :class:`StillStarting` after ``wait_s``."""
        pending = [self._events[n] for n in needs(method, self._events) if n in self._events]
        pending = [e for e in pending if not e.is_set()]
        if not pending:
            return
        try:
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in pending)), self.wait_s)
        except TimeoutError:
            raise StillStarting(
                f"the daemon is still starting ({', '.join(self.starting)}); try again in a moment"
            ) from None
