"""Sandboxed Lua (lupa, Lua 5.4) shared by provider adapters and Lua plugins."""

from homeagent.lua.runtime import (
    HttpPolicy,
    LuaBudgetExceeded,
    LuaError,
    LuaJSONError,
    LuaMemoryExceeded,
    LuaSandbox,
    LuaSyntaxError,
)

__all__ = [
    "HttpPolicy",
    "LuaBudgetExceeded",
    "LuaError",
    "LuaJSONError",
    "LuaMemoryExceeded",
    "LuaSandbox",
    "LuaSyntaxError",
]
