"""The media store's operations as JSON in, JSON out: one shape for the daemon's socket and the CLI.

``homeagent memory media …`` asks the running daemon (``media.list``,
``media.show``, ``media.gc``, ``media.add`` on the local socket) and, when no
daemon runs, opens the store itself and calls the same methods here, so the
output never depends on which of the two answered. Refusals are
:class:`MediaError` with a message meant for the user.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from homeagent.memory.media.errors import MediaError
from homeagent.memory.media.markers import marker
from homeagent.memory.media.owners import MediaOwners, gc_pass
from homeagent.memory.media.repair import MarkerSource, repair
from homeagent.memory.media.store import MediaStore

__all__ = ["OFF", "MediaAPI"]

STATES = ("present", "evicted", "quarantined", "missing")

OFF = "the media store is off"
"""How every refusal because ``core.memory.media.enabled`` is false begins (clients degrade to text on it)."""


class MediaAPI:
    """``owners`` (the daemon's stores) lets ``gc`` drop references whose owner is gone; the CLI alone has none.
    ``sources`` (window, documents, graph) are where ``repair`` finds the markers to reference again."""

    def __init__(self, store: MediaStore, owners: MediaOwners | None = None,
                 sources: Sequence[MarkerSource] = ()) -> None:
        self.store = store
        self.owners = owners
        self.sources = sources

    def methods(self) -> dict[str, Any]:
        """Socket method name → handler."""
        return {"media.list": self.entries, "media.show": self.show, "media.gc": self.gc, "media.add": self.add,
                "media.repair": self.repair}

    async def repair(self, params: dict[str, Any]) -> dict[str, Any]:
        return (await repair(self.store, self.sources)).to_dict()

    async def entries(self, params: dict[str, Any]) -> dict[str, Any]:
        state = params.get("state") or None
        if state is not None and state not in STATES:
            raise MediaError(f"unknown state {state!r}; one of {', '.join(STATES)}")
        limit = int(params.get("limit", 50))
        items = await self.store.alist(limit=limit, offset=int(params.get("offset", 0)), state=state)
        return {"stats": await self.store.astats(), "items": [i.to_dict() for i in items]}

    async def show(self, params: dict[str, Any]) -> dict[str, Any]:
        info = await self.store.ainfo(str(params.get("digest", "")))
        return {**info.to_dict(), "marker": marker(info), "references": await self.store.arefs_of(info.digest)}

    async def gc(self, params: dict[str, Any]) -> dict[str, Any]:
        min_age = params.get("min_age")
        report = await gc_pass(self.store, self.owners, None if min_age is None else float(min_age))
        return {**report.to_dict(), "min_age": self.store.min_age if min_age is None else float(min_age)}

    async def add(self, params: dict[str, Any]) -> dict[str, Any]:
        path = Path(str(params.get("path", "")))
        if not path.is_absolute():
            raise MediaError(f"the path must be absolute, got {str(path)!r}")
        result = await self.store.aput_file(
            path,
            claimed_mime=str(params.get("mime") or ""),
            source=str(params.get("source") or "cli"),
            description=str(params.get("description") or ""),
        )
        info = result.info
        description = str(params.get("description") or "")
        if params.get("overwrite") and description and info.description != " ".join(description.split()):
            info = await self.store.adescribe(info.digest, description)
        return {**info.to_dict(), "new": result.new, "marker": marker(info)}
