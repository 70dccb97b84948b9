"""Who is speaking: one person across channels.

A chat platform names its users by account (QQ number 10001), the web UI and
the CLI by nothing at all (only the owner can reach them). Memory needs a
*person*: the speaker of a remembered turn, the subject of the facts the
rule distiller extracts ("I live in Oslo" said by Ada is about Ada, not about
whoever spoke last in the group). This module is that mapping:

* A table of links ``(channel, account) → person``, kept in SQLite so it
  survives restarts and travels with backups. The owner links accounts with
  ``homeagent identity link``; there is no tool for the model, so a message in
  a chat cannot make its sender somebody else (least of all the owner).
* The owner is an identity too: inputs without a user id (the CLI, the web
  UI, the owner's own timers) are the owner, and so is every account linked
  to the owner. The owner's name is ``core.memory.owner_name`` (default
  ``user``, the name the memory graph has always used for its owner).
* An account nobody linked speaks as ``qq:10001``: a name that never changes
  (group cards and nicknames do, and two strangers may share one). Linking
  it later carries what memory learned about ``qq:10001`` over to the person
  (``renamed``: the daemon merges the graph entities).

Lookups are synchronous dictionary reads (once per turn, on the event loop);
writes go to SQLite off the loop and then replace the dictionary.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("homeagent.identity")

OWNER = "@owner"
"""What the table stores for a link to the owner, so renaming the owner needs no re-linking."""

DEFAULT_OWNER_NAME = "user"
"""The owner's name when ``core.memory.owner_name`` is empty: the memory graph's name for its owner."""

_CHANNEL = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
_SPACE = re.compile(r"\s+")
_NAME_CHARS = 60

SCHEMA = """
CREATE TABLE IF NOT EXISTS links (
    channel TEXT NOT NULL,
    account TEXT NOT NULL,
    person  TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (channel, account)
);
"""


class IdentityError(ValueError):
    """A link that cannot be made or removed (bad channel, account or name; no such link)."""


@dataclass(frozen=True)
class Link:
    channel: str
    account: str
    person: str  # OWNER for the owner
    created: float

    def to_dict(self, owner_name: str) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "account": self.account,
            "person": owner_name if self.person == OWNER else self.person,
            "owner": self.person == OWNER,
            "created": self.created,
        }


def display_name(raw: str) -> str:
    """A chat nickname made safe to use as a name: one line, no brackets, at most 60 characters."""
    text = _SPACE.sub(" ", str(raw or "")).strip().strip("[]()（）【】")
    return text[:_NAME_CHARS].strip()


def _check(channel: str, account: str) -> tuple[str, str]:
    channel, account = str(channel or "").strip(), str(account or "").strip()
    if not _CHANNEL.match(channel):
        raise IdentityError(f"channel must be a channel name such as qq or webui, got {channel!r}")
    if not account or len(account) > 100 or _SPACE.search(account):
        raise IdentityError(f"account must be the user id on that channel (no spaces), got {account!r}")
    return channel, account


class IdentityStore:
    """The link table in one SQLite file; every method blocks (call it through ``asyncio.to_thread``)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    def all(self) -> list[Link]:
        rows = self._db.execute("SELECT channel, account, person, created FROM links ORDER BY person, channel, account")
        return [Link(str(c), str(a), str(p), float(t)) for c, a, p, t in rows.fetchall()]

    def put(self, link: Link) -> None:
        self._db.execute(
            "INSERT INTO links (channel, account, person, created) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (channel, account) DO UPDATE SET person = excluded.person, created = excluded.created",
            (link.channel, link.account, link.person, link.created),
        )

    def remove(self, channel: str, account: str) -> bool:
        return self._db.execute("DELETE FROM links WHERE channel = ? AND account = ?", (channel, account)).rowcount > 0

    def close(self) -> None:
        self._db.close()


class Identities:
    """The daemon's resolver: who a ``(channel, user id)`` is, and the owner's linked accounts."""

    def __init__(
        self,
        store: IdentityStore,
        owner_name: Callable[[], str],
        renamed: Callable[[str, str], Awaitable[Any]] | None = None,
    ) -> None:
        self._store = store
        self._owner_name = owner_name
        self.renamed = renamed  # (the account's own name, the person's): carry memory over on a first link
        self._links: dict[tuple[str, str], Link] = {(k.channel, k.account): k for k in store.all()}
        self._write = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path, owner_name: Callable[[], str]) -> Identities:
        store = await asyncio.to_thread(IdentityStore, path)
        return await asyncio.to_thread(cls, store, owner_name)

    # -- lookups (synchronous: a dictionary read) ------------------------------------
    def owner_name(self) -> str:
        return display_name(self._owner_name() or "") or DEFAULT_OWNER_NAME

    def speaker(self, channel: str, user_id: str, user_name: str = "") -> str:
        """The person speaking: the owner without a user id, the linked person, else the account itself.

        ``user_name`` (a nickname) is not part of the name: it changes, and
        strangers share them; the prompt shows it beside the name.
        """
        if not user_id:
            return self.owner_name()
        link = self._links.get((channel, user_id))
        if link is not None:
            return self.owner_name() if link.person == OWNER else link.person
        return f"{channel}:{user_id}"

    def is_linked_owner(self, channel: str, user_id: str) -> bool:
        """An account the owner linked to themself. Never true for an input without a user id: that is
        the owner only by default, and any plugin can inject such an input."""
        link = self._links.get((channel, user_id)) if user_id else None
        return link is not None and link.person == OWNER

    def owner_accounts(self, channel: str) -> list[str]:
        return [k.account for k in self._links.values() if k.channel == channel and k.person == OWNER]

    def links(self) -> list[dict[str, Any]]:
        owner = self.owner_name()
        return [k.to_dict(owner) for k in sorted(self._links.values(), key=lambda k: (k.person, k.channel, k.account))]

    # -- changes (the owner's, through the socket) ------------------------------------
    async def link(self, channel: str, account: str, person: str = "", *, owner: bool = False) -> dict[str, Any]:
        channel, account = _check(channel, account)
        if owner:
            stored = OWNER
        else:
            stored = display_name(person)
            if not stored:
                raise IdentityError("name the person (e.g. Ada), or link the account to yourself with --owner")
            if stored.startswith("@") or stored.casefold() == self.owner_name().casefold():
                raise IdentityError(f"{stored!r} is the owner's name or reserved; use --owner to link your own account")
        link = Link(channel, account, stored, time.time())
        first = (channel, account) not in self._links
        async with self._write:
            await asyncio.to_thread(self._store.put, link)
            self._links[(channel, account)] = link
        out = link.to_dict(self.owner_name())
        if first and self.renamed is not None:  # never on a re-link: Ada's memories must not become Bob's
            try:
                await self.renamed(f"{channel}:{account}", out["person"])
            except Exception as exc:  # the link stands; what was learned before stays under the account's name
                log.warning("carrying memory of %s:%s over to %s failed: %s", channel, account, out["person"], exc)
                out["note"] = f"memory about {channel}:{account} stays under that name ({exc})"
        return out

    async def unlink(self, channel: str, account: str) -> dict[str, Any]:
        channel, account = _check(channel, account)
        async with self._write:
            removed = await asyncio.to_thread(self._store.remove, channel, account)
            self._links.pop((channel, account), None)
        if not removed:
            raise IdentityError(f"{channel}:{account} is not linked (see `homeagent identity list`)")
        return {"channel": channel, "account": account, "removed": True}

    async def close(self) -> None:
        await asyncio.to_thread(self._store.close)

    # -- the socket's identity.* methods ------------------------------------------------
    def methods(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        async def list_(_: dict[str, Any]) -> Any:
            return {"owner": self.owner_name(), "links": self.links()}

        async def link(p: dict[str, Any]) -> Any:
            return await self.link(str(p.get("channel") or ""), str(p.get("account") or ""),
                                   str(p.get("person") or ""), owner=bool(p.get("owner", False)))

        async def unlink(p: dict[str, Any]) -> Any:
            return await self.unlink(str(p.get("channel") or ""), str(p.get("account") or ""))

        return {"identity.list": list_, "identity.link": link, "identity.unlink": unlink}
