"""The environment a child process gets: the daemon's, minus its credentials.

The daemon is often started with LLM keys and tokens in its environment
(``HOMEAGENT_LLM_API_KEY``, ``OPENAI_API_KEY``, a ``GITHUB_TOKEN`` left in the
shell). A child inherits the environment by default, so one ``env`` through
``cmd_run``, a terminal or a plugin would hand them to the model or to a
plugin's author. Every place that starts a child (``cmd_run``, PTY terminals,
subprocess plugins) builds its environment here, so the rule is one rule:
variables whose names look like credentials and every ``HOMEAGENT_*`` variable
(the daemon's own configuration) are left out, unless the caller names a
variable it is entitled to (a plugin's manifest ``env``, chosen by the owner
who installed it). MCP server children get even less: the MCP library passes
only ``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM`` and ``USER`` plus the
``env`` the owner configured for that server.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

__all__ = ["CREDENTIAL_NAME", "ENV_NAME", "is_credential", "scrubbed_env"]

CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|COOKIE|SESSION|AUTH", re.IGNORECASE)
"""Parts of a variable name that mark it as a credential (API_KEY, GH_TOKEN, DB_PASSWORD, AWS_SESSION_…)."""

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A portable environment variable name."""

DAEMON_PREFIX = "HOMEAGENT_"


def is_credential(name: str) -> bool:
    """True for a variable a child never sees unless it is named explicitly."""
    return name.startswith(DAEMON_PREFIX) or bool(CREDENTIAL_NAME.search(name))


def scrubbed_env(
    env: Mapping[str, str] | None = None, *, keep: Iterable[str] = (), keep_prefixes: Iterable[str] = ()
) -> dict[str, str]:
    """``env`` (default: the daemon's) without credentials and ``HOMEAGENT_*`` variables.

    ``keep`` names variables passed anyway (a plugin manifest's ``env``);
    ``keep_prefixes`` passes non-credential variables with those prefixes
    (``HOMEAGENT_PLUGIN_`` options such as the plugin log level).
    """
    source = os.environ if env is None else env
    kept = set(keep)
    prefixes = tuple(keep_prefixes)
    out: dict[str, str] = {}
    for name, value in source.items():
        if name in kept:
            out[name] = value
        elif not is_credential(name):
            out[name] = value
        elif prefixes and name.startswith(prefixes) and not CREDENTIAL_NAME.search(name):
            out[name] = value
    return out
