"""Plugins that ship with HomeAgent but are installed like anyone else's.

A shipped plugin (``plugins/bundled/<name>/``, e.g. ``qq``) is an ordinary
plugin folder written against the public SDK. It is off until the user turns
it on: ``homeagent plugin enable NAME`` links the folder into the plugins
directory, from where it loads, reloads, is disabled and removed exactly like
an installed package. A link rather than a copy, so that upgrading HomeAgent
upgrades the plugin with it; ``plugin remove`` deletes only the link.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from homeagent.msg import Msg
from homeagent.plugins.manifest import MANIFEST_NAME, Manifest, ManifestError
from homeagent.plugins.package import PackageError

__all__ = ["BUNDLED_DIR", "available_entries", "link_shipped", "shipped_plugins"]

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"


def shipped_plugins(root: Path | None = BUNDLED_DIR) -> dict[str, Path]:
    """Shipped plugin folders by name (empty when ``root`` is None or missing)."""
    if root is None or not root.is_dir():
        return {}
    return {
        folder.name: folder
        for folder in sorted(root.iterdir())
        if folder.is_dir() and not folder.name.startswith((".", "_")) and (folder / MANIFEST_NAME).is_file()
    }


def link_shipped(plugins_dir: Path, name: str, root: Path | None = BUNDLED_DIR) -> Path | None:
    """Link shipped plugin ``name`` into ``plugins_dir``; None if no plugin of that name ships.

    An existing folder of that name (installed, or a copy the user edits) wins
    and is left alone.
    """
    source = shipped_plugins(root).get(name)
    if source is None:
        return None
    target = plugins_dir / name
    if target.exists() or target.is_symlink():
        if target.is_symlink() and not target.exists():  # a link left by an older HomeAgent that moved
            target.unlink()
        else:
            return target
    plugins_dir.mkdir(parents=True, exist_ok=True)
    try:
        os.symlink(source, target, target_is_directory=True)
    except OSError as e:
        raise PackageError(Msg("cannot link the shipped plugin {name!r} into {folder}: {reason}", name=name,
                               folder=plugins_dir, reason=e.strerror or e)) from None
    return target


def available_entries(installed: set[str], root: Path | None = BUNDLED_DIR) -> list[dict[str, Any]]:
    """``plugin list`` rows for shipped plugins that are not installed yet (state ``available``)."""
    out: list[dict[str, Any]] = []
    for name, folder in shipped_plugins(root).items():
        if name in installed:
            continue
        try:
            m: Manifest | None = Manifest.load(folder / MANIFEST_NAME)
        except ManifestError:
            m = None
        out.append(
            {
                "name": name,
                "kind": m.kind if m else "unknown",
                "builtin": False,
                "shipped": True,
                "version": m.version if m else "",
                "description": m.description if m else "",
                "entry": m.entry if m else "",
                "capabilities": list(m.capabilities) if m else [],
                "tags": list(m.tags) if m else [],
                "state": "available",
                "enabled": False,
                "error": "",
                "note": f"ships with HomeAgent; `homeagent plugin enable {name}` turns it on",
                "path": str(folder),
                "tools": [],
                "stages": [],
                "channels": [],
                "warnings": [],
            }
        )
    return out
