"""The error plugin-management operations raise, shared by the registry, its loaders and its RPC methods."""

from __future__ import annotations

__all__ = ["PluginError"]


class PluginError(Exception):
    """An operation on the registry that cannot be done (unknown plugin, built-in removal, …)."""
