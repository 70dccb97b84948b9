"""An MCP server over stdio with one tool, ``env_names``: the names of the variables it was started with."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("homeagent-env")


@server.tool(description="The names of this server's environment variables.")
def env_names() -> str:
    return " ".join(sorted(os.environ))


if __name__ == "__main__":
    server.run("stdio")
