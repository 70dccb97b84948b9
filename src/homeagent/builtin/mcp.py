"""Built-in ``mcp``: tools from Model Context Protocol servers, offered to the model as ours.

The setting ``servers`` is a JSON list of ``{name, command, args[], env{}, url}``:
``command`` starts a server over stdio, ``url`` connects over Streamable
HTTP. Each server's tools are registered as ``<server>_<tool>`` with the
server's input schema and the description ``[MCP/<server>] …``.

One task per server owns its connection (the SDK's client must be entered
and left in one task). It lists the tools, registers them, then polls the
server (tools/list); when the server dies or stops answering, its tools are removed and
the task reconnects with exponential backoff (1 s … ``max_backoff``). A tool
whose schema our registry rejects is skipped with a log line; a server that
cannot be reached only logs. Nothing a server does can stop the daemon.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from homeagent.config.values import parse_duration
from homeagent.msg import Msg
from homeagent.sdk.api import PluginSDK
from homeagent.sdk.types import ConfigDef, MediaBlock, ToolDef

__all__ = ["MCPPlugin", "ServerSpec", "create_plugin", "parse_servers"]

log = logging.getLogger("homeagent.plugin.mcp")

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_RESULT_CHARS = 100_000


@dataclass
class ServerSpec:
    name: str
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""


def from_claude_desktop(raw: Mapping[str, Any]) -> list[Any]:
    """Claude Desktop's ``{"mcpServers": {name: {command, args, env} | {url}}}`` (or the inner object) as our list.

    The block people copy from a server's README works as pasted; entries keep
    anything we do not know so ``parse_servers`` reports them one by one.
    """
    inner = raw.get("mcpServers", raw)
    if not isinstance(inner, Mapping):
        return [inner]
    out: list[Any] = []
    for name, spec in inner.items():
        out.append({**spec, "name": name} if isinstance(spec, Mapping) else spec)
    return out


def parse_servers(raw: Any) -> tuple[list[ServerSpec], list[str]]:
    """The valid server entries of the ``servers`` setting, and one problem line per bad entry.

    Our list form and Claude Desktop's ``mcpServers`` object are both read.
    """
    problems: list[str] = []
    if raw in (None, ""):
        return [], problems
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as e:
            return [], [Msg("servers is not JSON: {reason}", reason=str(e))]
    if isinstance(raw, Mapping):
        raw = from_claude_desktop(raw)
    if not isinstance(raw, list):
        return [], [Msg('servers must be a JSON list of {{name, command, args, env, url}} or {{"mcpServers": {{...}}}}')]
    out: list[ServerSpec] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            problems.append(Msg("servers[{i}] is not an object", i=i))
            continue
        name = str(item.get("name") or "").strip()
        if not _NAME.fullmatch(name) or len(name) > 40:
            problems.append(Msg("servers[{i}]: name {name!r} must be 1-40 characters of a-z, 0-9, '_' or '-'", i=i,
                                name=name))
            continue
        if name in seen:
            problems.append(Msg("servers[{i}]: duplicate name {name!r}", i=i, name=name))
            continue
        command, url = str(item.get("command") or "").strip(), str(item.get("url") or "").strip()
        if bool(command) == bool(url):
            problems.append(Msg("server {name!r}: give exactly one of command (stdio) or url (HTTP)", name=name))
            continue
        args, env = item.get("args") or [], item.get("env") or {}
        if not isinstance(args, list) or not isinstance(env, dict):
            problems.append(Msg("server {name!r}: args must be a list and env an object", name=name))
            continue
        seen.add(name)
        out.append(ServerSpec(name, command, [str(a) for a in args], {str(k): str(v) for k, v in env.items()}, url))
    return out, problems


def _result_value(result: Any, media: Callable[[list[MediaBlock]], None] | None = None) -> Any:
    """A CallToolResult as what our tools return: text, or ``{"isError", "content"}``.

    Images go to ``media`` (the SDK's ``set_tool_blocks``: the model sees them
    after the tool result, and they are kept in the media store); the text
    says so. Without it, or for audio, the text names the item only.
    """
    parts: list[str] = []
    blocks: list[MediaBlock] = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(str(getattr(item, "text", "")))
        elif kind == "image" and media is not None and len(blocks) < 10:
            mime = str(getattr(item, "mime_type", "") or "")
            try:
                data = base64.b64decode(str(getattr(item, "data", "") or ""), validate=True)
            except (binascii.Error, ValueError):
                parts.append(f"[image {mime}: not valid base64, dropped]")
                continue
            blocks.append(MediaBlock(mime=mime, data=data, description=f"image from {mime or 'the tool'}"))
            parts.append(f"[image {mime}, {len(data)} bytes: shown to you after this result]")
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {getattr(item, 'mime_type', '')}, {len(getattr(item, 'data', '') or '')} base64 chars]")
        else:
            dump = item.model_dump(mode="json", exclude_none=True) if hasattr(item, "model_dump") else str(item)
            parts.append(json.dumps(dump, ensure_ascii=False))
    if blocks and media is not None:
        try:
            media(blocks)
        except (ValueError, RuntimeError) as exc:  # too large, or not in a turn (a direct call): the text stays
            parts.append(f"(the images could not be shown: {exc})")
    text = "\n".join(parts)
    structured = getattr(result, "structured_content", None)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + "… [truncated]"
    if getattr(result, "is_error", False):
        return {"isError": True, "content": text or "the MCP tool reported an error"}
    if structured is not None and not text:
        return structured
    if structured is not None and not _same(structured, text):
        return {"content": text, "structured": structured}
    return text


def _same(structured: Any, text: str) -> bool:
    """Whether the structured result only repeats the text (servers often send both)."""
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = text
    return structured in (parsed, {"result": parsed}, {"result": text})


class _Server:
    """One server's connection task and the tools it registered."""

    def __init__(self, plugin: MCPPlugin, spec: ServerSpec) -> None:
        self.plugin = plugin
        self.spec = spec
        self.client: Any = None
        self.tools: dict[str, Callable[[], None]] = {}  # our tool name → unregister
        self.state = "starting"
        self.error = ""
        self.broken = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.stopping = False

    def _connect_target(self) -> Any:
        if self.spec.url:
            return self.spec.url
        from mcp.client.stdio import StdioServerParameters

        return StdioServerParameters(command=self.spec.command, args=self.spec.args, env=self.spec.env or None)

    async def run(self) -> None:
        from mcp import Client

        backoff = 1.0
        while True:
            self.broken.clear()
            try:
                async with asyncio.timeout(self.plugin.connect_timeout()):
                    client = Client(self._connect_target(), read_timeout_seconds=self.plugin.call_timeout())
                    await client.__aenter__()
                try:
                    self.client = client
                    await self._register()
                    self.state, self.error = "connected", ""
                    backoff = 1.0
                    await self._watch()
                finally:
                    self.client = None
                    self._unregister()
                    with contextlib.suppress(BaseException):
                        async with asyncio.timeout(5):
                            await client.__aexit__(None, None, None)
            except asyncio.CancelledError:
                if self.stopping:
                    raise
                # not ours: a cancel scope inside the SDK gave up on a dead connection
                task = asyncio.current_task()
                if task is not None:
                    while task.cancelling():
                        task.uncancel()
                self.error = "the connection was torn down"
                log.warning("mcp %s: %s; retrying in %.0fs", self.spec.name, self.error, backoff)
            except BaseException as e:  # ExceptionGroups from the SDK's task groups included
                if isinstance(e, KeyboardInterrupt | SystemExit):
                    raise
                self.error = _describe(e)
                log.warning("mcp %s: %s; retrying in %.0fs", self.spec.name, self.error, backoff)
            self.state = "reconnecting"
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.plugin.max_backoff())

    async def _register(self) -> None:
        assert self.client is not None
        sdk = self.plugin.sdk
        listed: list[Any] = []
        cursor: str | None = None
        for _ in range(100):
            page = await self.client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        for tool in listed:
            remote = str(getattr(tool, "name", ""))
            name = f"{self.spec.name}_{remote}"
            if not _NAME.fullmatch(name):
                log.warning("mcp %s: tool %r skipped: %r is not a valid tool name", self.spec.name, remote, name)
                continue
            schema = getattr(tool, "input_schema", None)
            if not isinstance(schema, dict) or schema.get("type", "object") != "object":
                log.warning("mcp %s: tool %r skipped: its input schema is not an object schema", self.spec.name, remote)
                continue
            description = f"[MCP/{self.spec.name}] {getattr(tool, 'description', None) or getattr(tool, 'title', None) or remote}"
            try:
                undo = sdk.register_tool(ToolDef(name=name, description=description[:2000], parameters=schema),
                                         self._handler(remote))
            except (ValueError, TypeError) as e:
                log.warning("mcp %s: tool %r skipped: %s", self.spec.name, remote, e)
                continue
            self.tools[name] = undo
        log.info("mcp %s: connected, %d tools", self.spec.name, len(self.tools))

    def _unregister(self) -> None:
        tools, self.tools = self.tools, {}
        for undo in tools.values():
            with contextlib.suppress(Exception):
                undo()

    async def _watch(self) -> None:
        interval = self.plugin.ping_interval()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self.broken.wait()
            if self.broken.is_set():
                raise ConnectionError("the connection broke during a tool call")
            try:
                async with asyncio.timeout(max(interval, 5.0)):
                    # tools/list, not ping: ping is gone from the 2026-07-28 protocol
                    await self.client.list_tools(cache_mode="bypass")
            except TimeoutError:
                raise ConnectionError("the server stopped answering") from None

    def _handler(self, remote: str) -> Callable[[dict[str, Any]], Any]:
        async def call(args: dict[str, Any]) -> Any:
            client = self.client
            if client is None:
                return {"isError": True, "content": f"MCP server {self.spec.name!r} is not connected ({self.error})"}
            try:
                async with asyncio.timeout(self.plugin.call_timeout()):
                    result = await client.call_tool(remote, args)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                return {"isError": True, "content": f"MCP server {self.spec.name!r} did not answer in time"}
            except BaseException as e:
                if isinstance(e, KeyboardInterrupt | SystemExit):
                    raise
                if _is_protocol_error(e):  # the server answered with an error: the connection is fine
                    return {"isError": True, "content": f"MCP {self.spec.name}/{remote}: {_describe(e)}"}
                self.broken.set()
                return {"isError": True, "content": f"MCP server {self.spec.name!r} failed: {_describe(e)}"}
            return _result_value(result, self.plugin.sdk.set_tool_blocks)

        return call


def _is_protocol_error(e: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError

    return isinstance(e, MCPError)


def _describe(e: BaseException) -> str:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}" if text != type(e).__name__ else text


class MCPPlugin:
    def __init__(self, name: str) -> None:
        self.name = name
        self._sdk: PluginSDK | None = None
        self.servers: dict[str, _Server] = {}
        self.problems: list[str] = []

    @property
    def sdk(self) -> PluginSDK:
        assert self._sdk is not None
        return self._sdk

    def _seconds(self, key: str, default: float) -> float:
        value = self.sdk.settings.get(key, default)
        try:
            return float(value) if isinstance(value, int | float) else parse_duration(str(value))
        except ValueError:
            return default

    def connect_timeout(self) -> float:
        return self._seconds("connect_timeout", 30.0)

    def call_timeout(self) -> float:
        return self._seconds("call_timeout", 120.0)

    def ping_interval(self) -> float:
        return self._seconds("ping_interval", 15.0)

    def max_backoff(self) -> float:
        return self._seconds("max_backoff", 60.0)

    async def start(self, sdk: PluginSDK) -> None:
        self._sdk = sdk
        s = sdk.settings
        s.register_def(ConfigDef(key="servers", default="[]", type="json", category="mcp", display_name="MCP servers",
                                 description='JSON list: [{"name": "fs", "command": "npx", "args": [...], "env": {}}, '
                                             '{"name": "web", "url": "http://host/mcp"}], or Claude Desktop\'s '
                                             '{"mcpServers": {"fs": {"command": ...}}} as pasted.', owner_only=True))
        s.register_def(ConfigDef(key="connect_timeout", default="30s", type="duration", category="mcp",
                                 display_name="Connect timeout", description="Time allowed to start and list tools."))
        s.register_def(ConfigDef(key="call_timeout", default="2m", type="duration", category="mcp",
                                 display_name="Tool call timeout", description="Time allowed for one MCP tool call."))
        s.register_def(ConfigDef(key="ping_interval", default="15s", type="duration", category="mcp",
                                 display_name="Ping interval", description="How often a connected server is pinged."))
        s.register_def(ConfigDef(key="max_backoff", default="60s", type="duration", category="mcp",
                                 display_name="Longest reconnect wait",
                                 description="Reconnect delays double from 1s up to this."))
        specs, problems = parse_servers(s.get("servers", "[]"))
        self.problems = problems
        for problem in problems:
            log.warning("mcp: %s", problem)
        loop = asyncio.get_running_loop()
        for spec in specs:
            server = _Server(self, spec)
            server.task = loop.create_task(server.run(), name=f"mcp-{spec.name}")
            self.servers[spec.name] = server

    async def stop(self) -> None:
        servers, self.servers = list(self.servers.values()), {}
        for server in servers:
            server.stopping = True
            if server.task is not None:
                server.task.cancel()
        for server in servers:
            if server.task is not None:
                with contextlib.suppress(BaseException):
                    await server.task
            server._unregister()

    def status(self) -> dict[str, Any]:
        return {n: {"state": s.state, "tools": sorted(s.tools), "error": s.error} for n, s in self.servers.items()}

    def health(self) -> dict[str, Any]:
        """Per-server state for `plugin info mcp`, `homeagent status` and the web UI's MCP page.

        Names, counts and error texts only: a server's env (API keys) never
        leaves its process spec.
        """
        servers = {
            n: {"state": s.state, "tools": len(s.tools), "tool_names": sorted(s.tools), "error": s.error,
                "transport": "http" if s.spec.url else "stdio"}
            for n, s in self.servers.items()
        }
        return {"servers": servers, "problems": list(self.problems)}


def create_plugin(name: str, config: Mapping[str, Any]) -> MCPPlugin:
    return MCPPlugin(name)
