"""Finding plugins on disk: each folder's manifest (or skill), read without running anything.

Why a module of its own: the registry and the CLI without a daemon
(``homeagent plugin list``) both need it, and none of it loads code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from homeagent.plugins.manifest import MANIFEST_NAME, Manifest, ManifestError
from homeagent.plugins.package import INSTALL_RECORD
from homeagent.plugins.skills import find_skill_file, parse_skill

__all__ = ["Found", "discover", "inspect_folder", "scan_plugins_dir"]


@dataclass
class Found:
    """A plugin folder as found on disk: its manifest, or why it has none usable."""

    name: str
    folder: Path
    manifest: Manifest | None
    error: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.manifest.kind if self.manifest else "unknown"


def _skill_manifest(folder: Path, skill_file: Path) -> Manifest:
    return Manifest(name=folder.name, version="0.0.0", entry=skill_file.name)


def inspect_folder(folder: Path) -> Found:
    name = folder.name
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        skill_file = find_skill_file(folder)
        if skill_file is not None:
            return Found(name, folder, _skill_manifest(folder, skill_file))
        return Found(name, folder, None, f"no {MANIFEST_NAME} (and no SKILL.md) in {folder}")
    try:
        manifest = Manifest.load(manifest_path)
    except ManifestError as e:
        return Found(name, folder, None, str(e))
    warnings = []
    if manifest.name != name:
        warnings.append(f"plugin.json names it {manifest.name!r} but its folder is {name!r}; using {name!r}")
    if manifest.deprecated:
        warnings.append("the plugin is marked deprecated")
    return Found(name, folder, manifest, warnings=warnings)


def discover(plugins_dir: Path) -> list[Found]:
    if not plugins_dir.is_dir():
        return []
    found = []
    for folder in sorted(plugins_dir.iterdir()):
        if folder.name.startswith((".", "_")) or not folder.is_dir():
            continue
        found.append(inspect_folder(folder))
    return found


def scan_plugins_dir(
    plugins_dir: Path,
    *,
    disabled: frozenset[str] | set[str] = frozenset(),
    builtins: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """What is installed in ``plugins_dir``, without running anything (CLI without a daemon)."""
    out: list[dict[str, Any]] = []
    for name in sorted(set(builtins)):
        out.append(
            {
                "name": name,
                "kind": "builtin",
                "builtin": True,
                "version": "",
                "description": "built-in plugin",
                "state": "disabled" if name in disabled else "not running",
                "error": "",
                "path": "",
                "tools": [],
                "stages": [],
                "channels": [],
                "warnings": [],
            }
        )
    for f in discover(plugins_dir):
        m = f.manifest
        state = "disabled" if f.name in disabled else ("invalid" if f.error else "not running")
        item: dict[str, Any] = {
            "name": f.name,
            "kind": f.kind,
            "builtin": False,
            "version": m.version if m else "",
            "description": m.description if m else "",
            "entry": m.entry if m else "",
            "author": m.author if m else "",
            "license": m.license if m else "",
            "capabilities": list(m.capabilities) if m else [],
            "env": list(m.env) if m else [],
            "tags": list(m.tags) if m else [],
            "state": state,
            "error": f.error,
            "path": str(f.folder),
            "tools": [],
            "stages": [],
            "channels": [],
            "warnings": f.warnings,
        }
        if m is not None and m.kind == "skill":
            try:
                skill = parse_skill(f.folder)
                item["skill"] = skill.summary()
                item["description"] = item["description"] or skill.description
                item["warnings"] = [*f.warnings, *skill.warnings]
            except ValueError as e:
                item["state"], item["error"] = "invalid", str(e)
        record = f.folder / INSTALL_RECORD
        if record.is_file():
            try:
                item["install"] = json.loads(record.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass
        out.append(item)
    return out
