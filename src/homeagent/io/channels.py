"""Output channels: where the agent can send things proactively.

Registering a channel creates two tools, ``output_send__<name>`` and
``output_send__<name>_help``. The reply to an input does not need a tool call:
the agent hands it to the channel the input came from (``deliver``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from homeagent.io.origin import current_origin
from homeagent.sdk.types import OutputCap, ToolDef, ToolHandler

log = logging.getLogger("homeagent.channels")

ChannelHandler = Callable[[str, dict[str, Any], str], Awaitable[Any] | Any]
"""handler(payload, meta, type) -> result returned to the model."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


@dataclass
class OutputChannel:
    name: str
    caps: OutputCap
    description: str
    handler: ChannelHandler
    plugin: str = ""
    meta_help: str = ""
    types: list[str] = field(default_factory=lambda: ["text"])

    def cap_names(self) -> list[str]:
        return [c.name.lower() for c in OutputCap if c in self.caps and c.name]

    def help(self) -> dict[str, Any]:
        return {
            "channel": self.name,
            "description": self.description,
            "caps": self.cap_names(),
            "types": self.types,
            "meta": self.meta_help or "no routing metadata needed",
        }


class ToolSink(Protocol):
    """Where a channel's ``output_send__*`` tools go (the daemon's ``agent.tools.ToolRegistry``).

    A Protocol rather than the registry's class so that ``io`` does not import
    ``agent``, which imports ``io`` for its input queue.
    """

    def register(self, tool: ToolDef, handler: ToolHandler) -> Callable[[], None]: ...

    def unregister(self, name: str) -> bool: ...


class OutputChannels:
    def __init__(self, tools: ToolSink) -> None:
        self._tools = tools
        self._channels: dict[str, OutputChannel] = {}

    def register(
        self,
        name: str,
        handler: ChannelHandler,
        *,
        caps: OutputCap | int = OutputCap.TEXT,
        description: str = "",
        plugin: str = "",
        meta_help: str = "",
        types: list[str] | None = None,
    ) -> Callable[[], None]:
        if not _NAME.match(name):
            raise ValueError(f"invalid output channel name {name!r}: use letters, digits, _ or -")
        if name in self._channels:
            raise ValueError(f"output channel {name!r} is already registered by {self._channels[name].plugin or 'core'}")
        channel = OutputChannel(
            name, OutputCap(caps), description, handler, plugin, meta_help, types or ["text"]
        )

        async def send(args: dict[str, Any]) -> Any:
            meta = args.get("meta") or {}
            if isinstance(meta, str):
                try:
                    meta = json.loads(meta) if meta.strip() else {}
                except ValueError:
                    return {"isError": True, "content": "meta must be a JSON object"}
            if not isinstance(meta, dict):
                return {"isError": True, "content": "meta must be a JSON object"}
            return await self.send(name, str(args.get("payload", "")), _here(name, meta), str(args.get("type") or "text"))

        async def help_tool(_: dict[str, Any]) -> Any:
            return channel.help()

        undo_send = self._tools.register(
            ToolDef(
                name=f"output_send__{name}",
                description=f"Send to output channel '{name}' ({', '.join(channel.cap_names())}). {description}".strip(),
                parameters={
                    "type": "object",
                    "properties": {
                        "payload": {"type": "string", "description": "the message text or file path"},
                        "meta": {
                            "type": ["object", "string"],
                            "description": "routing metadata as a JSON object; see the _help tool",
                        },
                        "type": {"type": "string", "enum": channel.types},
                    },
                    "required": ["payload"],
                },
                plugin=plugin,
                no_memory=False,
                serial=True,
                parallel_safe=False,
            ),
            send,
        )
        try:
            undo_help = self._tools.register(
                ToolDef(
                    name=f"output_send__{name}_help",
                    description=f"How to address output channel '{name}': meta format and types.",
                    plugin=plugin,
                    no_memory=True,
                ),
                help_tool,
            )
        except Exception:
            undo_send()
            raise
        self._channels[name] = channel

        def undo() -> None:
            if self._channels.get(name) is channel:
                del self._channels[name]
            undo_send()
            undo_help()

        return undo

    def unregister_plugin(self, plugin: str) -> list[str]:
        names = [n for n, c in self._channels.items() if c.plugin == plugin]
        for name in names:
            del self._channels[name]
            self._tools.unregister(f"output_send__{name}")
            self._tools.unregister(f"output_send__{name}_help")
        return names

    def get(self, name: str) -> OutputChannel | None:
        return self._channels.get(name)

    def list(self) -> list[dict[str, Any]]:
        return [
            {"name": c.name, "caps": c.cap_names(), "description": c.description, "plugin": c.plugin}
            for c in self._channels.values()
        ]

    async def send(self, name: str, payload: str, meta: dict[str, Any], type_: str = "text") -> Any:
        channel = self._channels.get(name)
        if channel is None:
            known = ", ".join(sorted(self._channels)) or "none"
            return {"isError": True, "content": f"unknown output channel {name!r} (known: {known})"}
        try:
            result = channel.handler(payload, meta, type_)
            if asyncio.iscoroutine(result):
                result = await result
        except Exception as exc:
            log.exception("output channel %s failed", name)
            return {"isError": True, "content": f"channel {name} failed: {type(exc).__name__}: {exc}"}
        return result if result is not None else {"status": "sent", "channel": name}

    def list_tool(self) -> tuple[ToolDef, Callable[[dict[str, Any]], Awaitable[Any]]]:
        async def handler(_: dict[str, Any]) -> Any:
            out: dict[str, Any] = {"channels": self.list()}
            origin = current_origin()
            if origin is not None:
                here = {k: v for k, v in (("channel", origin.channel), ("user_id", origin.user_id),
                                          ("group_id", origin.group_id)) if v}
                out["this_chat"] = here
                out["note"] = (f"Your reply goes back to this chat by itself, and so do reminders set here. "
                               f"output_send__{origin.channel} without meta sends one more message to this chat; "
                               "call it once per message to send several.")
            return out

        return (
            ToolDef(
                name="output_list_channels",
                description="List the output channels the agent can send to proactively.",
                no_memory=True,
            ),
            handler,
        )


def _here(channel: str, meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` for a send to ``channel``: with none, the chat of the running turn when it came from that channel.

    So the model can send several messages to the person it is talking to
    (an acknowledgement, then the result) without copying ids out of the
    input; the channel still checks who may be written to.
    """
    if meta:
        return meta
    origin = current_origin()
    if origin is None or origin.channel != channel:
        return meta
    return {k: v for k, v in (("user_id", origin.user_id), ("group_id", origin.group_id)) if v}
