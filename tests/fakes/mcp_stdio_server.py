"""An MCP server over stdio for the mcp plugin's tests, built on the SDK's own server API.

Each start appends a line to $MCP_START_LOG, so a test can see reconnects.
``liar`` advertises an input schema that is not valid JSON Schema; ``die``
kills the process mid-call, as a crashing server would.
"""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import Image, MCPServer

server = MCPServer("homeagent-test")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Echo text back, shouted.")
def shout(text: str) -> str:
    return text.upper() + "!"


@server.tool(description="Always fails.")
def fail() -> str:
    raise ValueError("this tool always fails")


@server.tool(description="Has a schema that lies.")
def liar(x: int) -> int:
    return x


@server.tool(description="A tiny PNG, as a screenshot tool would return.")
def picture() -> Image:
    return Image(data=b"\x89PNG\r\n\x1a\n" + b"mcp picture" + bytes(32), format="png")


@server.tool(description="Crashes the server.")
def die() -> str:
    os._exit(3)


server._tool_manager.get_tool("liar").parameters = {  # type: ignore[union-attr]
    "type": "object", "properties": {"x": {"type": "no-such-type"}},
}

if __name__ == "__main__":
    log = os.environ.get("MCP_START_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
    print("test server starting", file=sys.stderr)
    server.run("stdio")
