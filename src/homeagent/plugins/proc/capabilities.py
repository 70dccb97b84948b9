"""What a subprocess plugin may call, decided by its manifest and enforced at the RPC boundary.

A process can open files and sockets by itself; what the host can and does
control is what the plugin reaches *through the host*: memory, other
plugins' settings, the agent's input queue, the LLM sources. Each such
method needs a capability named in ``plugin.json``'s ``capabilities``; a call
without it is refused with an error naming the capability to add, so a
plugin author learns the fix from the first failure. Registering tools,
output channels and its own settings needs nothing.

External plugins get the narrowed surface of the original: events can be
subscribed to but not published, the social graph is read-only, and the
host's internals (selftest, supervisor, adapters, raw config, indexer) have
no method at all. ``net`` and ``files`` are about the process itself: where
bubblewrap works (:mod:`homeagent.confine`), a plugin without ``net`` has no
network, and one without ``files`` sees only its own folder, its state folder
and the system; where it does not, they are declarations only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from homeagent.sdk.protocol import ErrorCode, RPCError

__all__ = [
    "CAPABILITIES",
    "METHOD_CAPABILITY",
    "UNSUPPORTED",
    "Capabilities",
]

CAPABILITIES: Mapping[str, str] = MappingProxyType(
    {
        "stages": "hook into the message pipeline (stage.register): sees every message",
        "memory.read": "read the knowledge graph, documents, knowledge base and social graph",
        "memory.write": "write to the knowledge graph, documents, knowledge base and text log",
        "io.inject": "send inputs and interrupts to the agent",
        "settings.core": "read and write core settings and other plugins' settings",
        "events": "subscribe to daemon events (agent_llm_chain, tool_call, …)",
        "llm": "list and switch LLM sources",
        "plugins": "reload other plugins and list what is loaded",
        "net": "uses the network (without it, a sandboxed plugin has none)",
        "files": "reads the owner's files, read-only and never the data dir (without it, a sandboxed plugin sees "
                 "only its own folders)",
    }
)
"""Capabilities a manifest may declare, with what each allows."""

_IMPLICIT = frozenset({"tools", "output", "input", "settings", "cleaners", "lifecycle"})
_ALIASES: Mapping[str, tuple[str, ...]] = MappingProxyType({"memory": ("memory.read", "memory.write")})

_BY_CAPABILITY: dict[str, tuple[str, ...]] = {
    "stages": ("stage.register", "stage.unregister"),
    "io.inject": ("io.injectText", "io.injectInterrupt", "io.injectTextNoMem", "io.injectInputSync",
                  "io.injectMedia", "io.injectMediaSync", "io.injectInterruptMedia"),
    "memory.read": (
        "memory.recall",
        "memory.introspect",
        "doc.query",
        "doc.stats",
        "knowledge.search",
        "knowledge.list",
        "social.getPerson",
        "social.getNetwork",
        "social.getTrait",
        "social.getRelations",
        "social.listPersons",
    ),
    "memory.write": (
        "memory.commit",
        "memory.merge",
        "memory.purge",
        "doc.insert",
        "doc.remove",
        "doc.insertWithMedia",
        "knowledge.add",
        "textmemory.append",
    ),
    "settings.core": (
        "settings.getCore",
        "settings.setCore",
        "settings.listCore",
        "settings.getPlugin",
        "settings.setPlugin",
        "settings.listPlugin",
        "settings.dump",
        "settings.plugins",
    ),
    "events": ("events.subscribe", "events.unsubscribe"),
    "llm": ("llm.listSources", "llm.setSource", "llm.currentSource"),
    "plugins": ("plugin.reloadOne", "plugin.listLoaded", "plugin.isDisabled"),
}

_FREE = (
    "tool.register",
    "tool.unregister",
    "output.register",
    "output.unregister",
    "input.register",
    "cleaner.register",
    "cleaner.unregister",
    "lifecycle.autoRestart",
    "lifecycle.status",
    "io.setToolBlocks",  # media for a running call of the plugin's own tool
    "settings.get",
    "settings.set",
    "settings.delete",
    "settings.list",
    "settings.registerDef",
    "settings.defs",
    "settings.dataDir",
    "log",
    "ping",
)

METHOD_CAPABILITY: Mapping[str, str | None] = MappingProxyType(
    {**{m: None for m in _FREE}, **{m: cap for cap, methods in _BY_CAPABILITY.items() for m in methods}}
)
"""Every plugin → host method of protocol v1 and the capability it needs (None: none)."""

UNSUPPORTED: Mapping[str, str] = MappingProxyType(
    {
        "events.publish": "external plugins may subscribe to events but not publish them",
        "stage.lock": "not needed: stage.invoke returns field changes that the host applies under the context lock",
        "stage.unlock": "not needed: stage.invoke returns field changes that the host applies under the context lock",
        "arena.alloc": "there is no shared-memory arena: large payloads are ordinary frames",
        "arena.free": "there is no shared-memory arena: large payloads are ordinary frames",
        "api.register": "this host has no plugin HTTP API routes",
    }
)
"""Methods of the original protocol this host answers with an explanation instead of 'not found'."""


@dataclass(frozen=True)
class Capabilities:
    """The capabilities one plugin declared (aliases expanded)."""

    granted: frozenset[str]

    @classmethod
    def from_manifest(cls, declared: Iterable[str]) -> tuple[Capabilities, list[str]]:
        """The capability set and a warning for each name this host does not know."""
        granted: set[str] = set()
        warnings: list[str] = []
        for name in declared:
            if name in CAPABILITIES:
                granted.add(name)
            elif name in _ALIASES:
                granted.update(_ALIASES[name])
            elif name not in _IMPLICIT:
                known = ", ".join(sorted(CAPABILITIES))
                warnings.append(f"unknown capability {name!r} ignored (known: {known})")
        return cls(frozenset(granted)), warnings

    def check(self, method: str) -> None:
        """Raise the RPCError a plugin gets for calling ``method`` without the right to."""
        if method in METHOD_CAPABILITY:
            needed = METHOD_CAPABILITY[method]
            if needed is not None and needed not in self.granted:
                raise RPCError(
                    ErrorCode.CAPABILITY_DENIED,
                    f"{method} needs the {needed!r} capability; add it to \"capabilities\" in plugin.json",
                    {"capability": needed, "method": method},
                )
            return
        if method in UNSUPPORTED:
            raise RPCError(ErrorCode.METHOD_NOT_FOUND, f"{method}: {UNSUPPORTED[method]}", {"method": method})
        if method.startswith("social."):
            raise RPCError(
                ErrorCode.METHOD_NOT_FOUND,
                f"{method}: external plugins have read-only access to the social graph",
                {"method": method},
            )
        raise RPCError(ErrorCode.METHOD_NOT_FOUND, f"unknown method {method!r}", {"method": method})

    def to_list(self) -> list[str]:
        return sorted(self.granted)
