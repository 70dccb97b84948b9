"""``plugin.json``: what a plugin says about itself, checked before anything runs.

Every problem in a manifest is collected and reported at once (a user fixing
a hand-written file should not have to iterate one error at a time). Unknown
fields are kept (``extra``) so a newer manifest still loads in an older host.
The ``entry`` decides how the plugin is loaded (see :func:`entry_kind`).

``env`` lists environment variables a subprocess plugin needs although they
look like credentials (``OPENAI_API_KEY``): every other credential is kept
from plugin processes (see :mod:`homeagent.childenv`). The owner sees the
list in ``homeagent plugin info`` and grants it by installing the plugin.
``HOMEAGENT_*`` variables are the daemon's own and cannot be asked for.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from homeagent.childenv import DAEMON_PREFIX, ENV_NAME
from homeagent.msg import Joined, Msg, message_of

__all__ = [
    "KNOWN_PLATFORMS",
    "MANIFEST_NAME",
    "NAME_RE",
    "Manifest",
    "ManifestError",
    "current_platform",
    "entry_kind",
    "version_tuple",
]

MANIFEST_NAME = "plugin.json"
MAX_MANIFEST_BYTES = 256 * 1024
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
KNOWN_PLATFORMS = ("linux", "darwin", "windows")
_MODULE_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_SKILL_ENTRIES = ("SKILL.md", "skill.md")

_REQUIRED = ("name", "version", "entry")
_STRINGS = ("description", "author", "license", "homepage", "repository", "min_version")
_LISTS = ("capabilities", "platforms", "tags", "env")


class ManifestError(ValueError):
    """A manifest that cannot be used; ``problems`` lists every reason."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(Msg("{source}: {problems}", source=source, problems=Joined("; ", problems)))


def current_platform() -> str:
    """This machine in the manifest's vocabulary (linux, darwin, windows)."""
    if sys.platform.startswith("win"):
        return "windows"
    if sys.platform == "darwin":
        return "darwin"
    return "linux" if sys.platform.startswith("linux") else sys.platform


def version_tuple(version: str) -> tuple[int, ...]:
    """``"1.2.3-beta"`` → ``(1, 2, 3)``; ValueError when there is no leading number."""
    parts = []
    for piece in version.strip().lstrip("vV").split("."):
        m = re.match(r"\d+", piece)
        if m is None:
            break
        parts.append(int(m.group()))
    if not parts:
        raise ValueError(Msg("{version!r} is not a version number like 1.2.3", version=version))
    return tuple(parts)


def entry_kind(entry: str) -> str:
    """How a plugin with this ``entry`` is loaded: lua, skill, python or process."""
    base = entry.rsplit("/", 1)[-1]
    if base in _SKILL_ENTRIES or base.lower() == "skill.md":
        return "skill"
    if base.endswith(".lua"):
        return "lua"
    if base.endswith(".py") or _MODULE_ENTRY.match(entry):
        return "python"
    return "process"


@dataclass(frozen=True)
class Manifest:
    """A checked ``plugin.json``."""

    name: str
    version: str
    entry: str
    description: str = ""
    author: str = ""
    license: str = ""
    homepage: str = ""
    repository: str = ""
    min_version: str = ""
    capabilities: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    deprecated: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        if self.extra.get("runtime") == "process":
            return "process"
        return entry_kind(self.entry)

    @classmethod
    def from_dict(cls, data: Any, *, source: str = MANIFEST_NAME) -> Manifest:
        """Check ``data`` (parsed JSON); ManifestError lists every problem found."""
        if not isinstance(data, dict):
            raise ManifestError(source, [Msg("must be a JSON object, got {kind}", kind=_type(data))])
        problems: list[str] = []
        values: dict[str, Any] = {}
        for key in _REQUIRED:
            value = data.get(key)
            if key not in data or value is None:
                problems.append(Msg("field {key!r} is missing", key=key))
            elif not isinstance(value, str):
                problems.append(Msg("field {key!r} must be a string, got {kind}", key=key, kind=_type(value)))
            elif not value.strip():
                problems.append(Msg("field {key!r} must not be empty", key=key))
            else:
                values[key] = value.strip()
        for key in _STRINGS:
            value = data.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                problems.append(Msg("field {key!r} must be a string, got {kind}", key=key, kind=_type(value)))
            else:
                values[key] = value.strip()
        for key in _LISTS:
            value = data.get(key)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                problems.append(Msg("field {key!r} must be a list of strings, got {kind}", key=key, kind=_type(value)))
            else:
                values[key] = tuple(v.strip() for v in value if v.strip())
        deprecated = data.get("deprecated", False)
        if not isinstance(deprecated, bool):
            problems.append(Msg("field 'deprecated' must be true or false, got {kind}", kind=_type(deprecated)))
        else:
            values["deprecated"] = deprecated

        name = values.get("name")
        if name is not None and not NAME_RE.match(name):
            problems.append(Msg(
                "name {name!r} must be 1-64 characters of letters, digits, '_' or '-', starting with a letter or digit",
                name=name,
            ))
        version = values.get("version")
        if version is not None:
            try:
                version_tuple(version)
            except ValueError as e:
                problems.append(Msg("version: {problem}", problem=message_of(e)))
        min_version = values.get("min_version")
        if min_version:
            try:
                version_tuple(min_version)
            except ValueError as e:
                problems.append(Msg("min_version: {problem}", problem=message_of(e)))
        entry = values.get("entry")
        if entry is not None:
            problems.extend(_entry_problems(entry))
        for var in values.get("env", ()):
            if not ENV_NAME.match(var):
                problems.append(Msg("env: {var!r} is not an environment variable name (letters, digits, '_')", var=var))
            elif var.startswith(DAEMON_PREFIX):
                problems.append(Msg("env: {var!r} is the daemon's own setting and is never passed to plugins", var=var))
        for platform in values.get("platforms", ()):
            if platform not in KNOWN_PLATFORMS:
                problems.append(Msg("platforms: unknown platform {platform!r} (known: {known})", platform=platform,
                                    known=", ".join(KNOWN_PLATFORMS)))
        if problems:
            raise ManifestError(source, problems)
        known = set(_REQUIRED) | set(_STRINGS) | set(_LISTS) | {"deprecated"}
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**values, extra=extra)

    @classmethod
    def parse(cls, text: str | bytes, *, source: str = MANIFEST_NAME) -> Manifest:
        if len(text) > MAX_MANIFEST_BYTES:
            raise ManifestError(source, [Msg("is larger than {kb} KB", kb=MAX_MANIFEST_BYTES // 1024)])
        try:
            data = json.loads(text)
        except UnicodeDecodeError:
            raise ManifestError(source, [Msg("is not UTF-8 text")]) from None
        except json.JSONDecodeError as e:
            raise ManifestError(source, [Msg("is not valid JSON ({reason} at line {line} column {column})", reason=e.msg,
                                              line=e.lineno, column=e.colno)]) from None
        return cls.from_dict(data, source=source)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        """Read and check a ``plugin.json`` file."""
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise ManifestError(str(path), [Msg("cannot be read ({reason})", reason=e.strerror or e)]) from None
        return cls.parse(raw, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(
            name=self.name,
            version=self.version,
            entry=self.entry,
            description=self.description,
            author=self.author,
            license=self.license,
            min_version=self.min_version,
            capabilities=list(self.capabilities),
            platforms=list(self.platforms),
            tags=list(self.tags),
        )
        if self.homepage:
            out["homepage"] = self.homepage
        if self.repository:
            out["repository"] = self.repository
        if self.deprecated:
            out["deprecated"] = True
        if self.env:
            out["env"] = list(self.env)
        return out

    def compatibility_problems(self, host_version: str) -> list[str]:
        """Why this plugin cannot run here (platform, host version); empty when it can."""
        problems: list[str] = []
        if self.platforms and current_platform() not in self.platforms:
            problems.append(Msg("plugin {name!r} supports {platforms}, not this machine ({here})", name=self.name,
                                platforms=", ".join(self.platforms), here=current_platform()))
        if self.min_version:
            try:
                if version_tuple(host_version) < version_tuple(self.min_version):
                    problems.append(Msg("plugin {name!r} needs HomeAgent {version} or newer (this is {host})",
                                        name=self.name, version=self.min_version, host=host_version))
            except ValueError:
                pass
        return problems


def _entry_problems(entry: str) -> list[str]:
    if entry.startswith("/") or entry.startswith("\\") or re.match(r"^[A-Za-z]:", entry):
        return [Msg("entry {entry!r} must be a path inside the plugin folder, not an absolute path", entry=entry)]
    if any(part == ".." for part in re.split(r"[/\\]", entry)):
        return [Msg("entry {entry!r} must not contain '..'", entry=entry)]
    return []


def _type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )
