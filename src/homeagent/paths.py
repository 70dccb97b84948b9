"""Where HomeAgent keeps its files.

The data directory comes from ``--data-dir``, then ``HOMEAGENT_DATA_DIR``,
then the platform's user data directory. The socket path can be overridden
with ``HOMEAGENT_SOCKET``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs


def resolve_data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser().resolve()
    env = os.environ.get("HOMEAGENT_DATA_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return Path(platformdirs.user_data_dir("homeagent", appauthor=False))


@dataclass(frozen=True)
class DataPaths:
    root: Path

    @property
    def config_db(self) -> Path:
        return self.root / "config.db"

    @property
    def socket(self) -> Path:
        env = os.environ.get("HOMEAGENT_SOCKET")
        return Path(env).expanduser() if env else self.root / "cli.sock"

    @property
    def lock(self) -> Path:
        return self.root / "daemon.lock"

    @property
    def memory(self) -> Path:
        return self.root / "memory"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def plugins(self) -> Path:
        return self.root / "plugins"

    @property
    def adapters(self) -> Path:
        return self.root / "adapters"

    @property
    def knowledge(self) -> Path:
        return self.root / "knowledge"

    def plugin_data(self, plugin: str) -> Path:
        """Where plugin ``plugin`` keeps its own files (not its code)."""
        return self.root / "plugin_data" / plugin

    def resolve(self, configured: str, default: Path) -> Path:
        """A path setting as the daemon uses it: empty -> ``default``; relative -> under the data directory.

        Path settings are stored relative to the data directory, so the directory
        can be moved, copied or restored elsewhere and still uses its own files; an
        absolute path (or ``~/...``) that a user set stays where it points.
        """
        text = configured.strip()
        if not text:
            return default
        path = Path(text).expanduser()
        return path if path.is_absolute() else self.root / path

    def ensure(self) -> None:
        for path in (self.root, self.memory, self.log, self.plugins, self.adapters, self.knowledge):
            path.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
