"""The built-in plugins by name, as factories the plugin registry starts like any other plugin.

daemon.py registers each entry with ``PluginRegistry.register_factory``.
Add a built-in by adding one line to the dict.
"""

from __future__ import annotations

import functools

from homeagent.builtin import agentcli, cfgmgr, cmd, files, healthcheck, mcp, timer
from homeagent.builtin.healthcheck import HealthSources
from homeagent.confine import Confinement
from homeagent.sdk.api import PluginFactory

__all__ = ["HealthSources", "builtin_factories"]


def builtin_factories(
    *, health: HealthSources | None = None, sandbox: Confinement | None = None
) -> dict[str, PluginFactory]:
    """Every built-in plugin's factory by plugin name.

    ``health`` is what healthcheck needs from the daemon; ``sandbox`` confines what cmd and agentcli start
    (None: the weaker mode, as in tests of the bare plugins).
    """
    return {
        "timer": timer.create_plugin,
        "cmd": functools.partial(cmd.create_plugin, sandbox=sandbox),
        "files": files.create_plugin,
        "cfgmgr": cfgmgr.create_plugin,
        "healthcheck": functools.partial(healthcheck.create_plugin, sources=health),
        "agentcli": functools.partial(agentcli.create_plugin, sandbox=sandbox),
        "mcp": mcp.create_plugin,
    }
