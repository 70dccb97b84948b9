"""SKILL.md skills: folders of instructions the model reads when a task calls for them.

Format (AgentSkills, as used by Claude and OpenClaw): ``SKILL.md`` (or
``skill.md``) starting with YAML frontmatter — ``name``, ``description``,
optional ``license``, ``compatibility``, ``metadata``, ``allowed-tools`` — then
a Markdown body; other files in the folder are bundled resources.

Design choices:

* Lenient where authors differ, strict where the file is unusable. A long
  description, a name that differs from its folder or breaks the naming rule,
  a missing description: warnings. No frontmatter, invalid YAML, frontmatter
  that is not a mapping, binary or oversized content: the skill is rejected
  with a message saying which.
* OpenClaw's ``metadata.openclaw`` (and its older names ``clawdbot`` and
  ``clawdis``) gate a skill on this machine: ``os``, ``requires.bins``,
  ``requires.anyBins``, ``requires.env``, ``requires.config``; ``always: true``
  skips the gate. A gated-out skill stays installed but is not offered.
* Only a compact index goes into the system prompt (name, description,
  location) under a character budget; bodies and bundled files are read on
  demand through ``skill_read`` / ``skill_file``, confined to the skill folder.
* Bundled scripts are never run by this module. They run only through the
  confined command tool (``cmd_run``) when that plugin is installed; the
  skill_read result says so.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import logging
import os
import re
import shutil
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from homeagent.memory.lexical import Analyzer, LexicalIndex
from homeagent.sdk.types import ToolDef

if TYPE_CHECKING:
    from homeagent.agent.prompt import PromptBuilder, PromptInputs
    from homeagent.agent.tools import ToolRegistry
    from homeagent.sdk.api import PluginSDK

__all__ = [
    "SKILL_FILES",
    "Skill",
    "SkillCatalog",
    "SkillError",
    "SkillPlugin",
    "find_skill_file",
    "is_skill_file",
    "parse_skill",
    "parse_skill_text",
    "skill_name_of",
]

log = logging.getLogger("homeagent.plugins.skills")

SKILL_FILES = ("SKILL.md", "skill.md")
RANK_TIMEOUT = 1.5  # seconds the prompt waits for the relevance ranking before listing by name
PLUGIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_SKILL_BYTES = 512 * 1024
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
SPEC_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
GATE_KEYS = ("openclaw", "clawdbot", "clawdis")
OWNER = "skills"  # plugin name that owns skill_read / skill_file
DEFAULT_BUDGET = 12_000
MAX_LISTED_DESCRIPTION = 200
MIN_LISTED_DESCRIPTION = 40
MAX_BODY_CHARS = 64_000
MAX_FILE_CHARS = 128_000
MAX_LISTED_FILES = 200
SCRIPT_NOTE = (
    "Bundled scripts are not run by skill_read/skill_file. Run them only through the confined command tool "
    "(cmd_run) when it is available, with the skill folder as working directory; otherwise tell the user."
)
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SkillError(ValueError):
    """A SKILL.md that cannot be used."""


@dataclass
class Skill:
    """One parsed skill; ``missing`` lists unmet requirements (empty = eligible)."""

    name: str
    description: str
    folder: Path
    file: Path
    license: str = ""
    compatibility: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    allowed_tools: list[str] = field(default_factory=list)
    gate: dict[str, Any] = field(default_factory=dict)
    model_invocable: bool = True
    warnings: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def eligible(self) -> bool:
        return not self.missing

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "location": str(self.file),
            "license": self.license,
            "compatibility": self.compatibility,
            "allowed_tools": self.allowed_tools,
            "eligible": self.eligible,
            "missing": self.missing,
            "warnings": self.warnings,
        }


def is_skill_file(name: str) -> bool:
    """``SKILL.md`` in any letter case (``Skill.md``, ``skill.MD``): authors and zip tools differ."""
    return name.lower() == "skill.md"


def find_skill_file(folder: Path) -> Path | None:
    for name in SKILL_FILES:
        path = folder / name
        if path.is_file():
            return path
    try:
        found = sorted(p for p in folder.iterdir() if is_skill_file(p.name) and p.is_file())
    except OSError:
        return None
    return found[0] if found else None


def skill_name_of(raw: bytes, fallback: str) -> str:
    """The frontmatter ``name`` of SKILL.md bytes when it can name a plugin, else ``fallback``.

    Used to name a SKILL.md-only folder or zip when it is packed or installed
    (it has no plugin.json); a file that does not parse keeps the fallback and
    is reported when the skill loads.
    """
    try:
        data, _ = split_frontmatter(raw.decode("utf-8", "replace"), fallback)
    except SkillError:
        return fallback
    name = data.get("name")
    return name.strip() if isinstance(name, str) and PLUGIN_NAME.match(name.strip()) else fallback


_PLAIN_KEY = re.compile(r"^(name|description|license|compatibility)(\s*):\s+(.*\S)\s*$")


def _repair_colons(raw: str) -> Any:
    """Frontmatter whose only fault is ``description: Use when: …`` (common in the wild), quoted and parsed again."""
    fixed = []
    changed = False
    for line in raw.split("\n"):
        m = _PLAIN_KEY.match(line)
        if m and ": " in m.group(3) and not m.group(3).startswith(("'", '"', "[", "{", "|", ">")):
            line = f"{m.group(1)}: {json.dumps(m.group(3), ensure_ascii=False)}"
            changed = True
        fixed.append(line)
    if not changed:
        return None
    try:
        return yaml.load("\n".join(fixed), Loader=_YAML_LOADER)
    except yaml.YAMLError:
        return None


def split_frontmatter(text: str, source: str, warnings: list[str] | None = None) -> tuple[dict[str, Any], str]:
    """(frontmatter mapping, body) of a SKILL.md text; SkillError when there is none or it is broken."""
    text = text.lstrip("\ufeff")
    stripped = text.lstrip()
    if not stripped.startswith("---"):
        raise SkillError(f"{source}: no YAML frontmatter (the file must start with a '---' line)")
    lines = stripped.split("\n")
    if lines[0].strip() != "---":
        raise SkillError(f"{source}: the first line must be exactly '---' to open the frontmatter")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
    if end is None:
        raise SkillError(f"{source}: the frontmatter is not closed by a '---' line")
    raw = "\n".join(lines[1:end])
    try:
        data = yaml.load(raw, Loader=_YAML_LOADER)  # CSafeLoader/SafeLoader
    except yaml.YAMLError as e:
        data = _repair_colons(raw)
        if data is None:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 2}" if mark is not None else ""
            problem = getattr(e, "problem", None) or str(e).split("\n", 1)[0]
            raise SkillError(f"{source}: invalid YAML frontmatter{where}: {problem}") from None
        if warnings is not None:
            warnings.append("the frontmatter has an unquoted ': ' in a value (invalid YAML); read it as plain text")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SkillError(f"{source}: the frontmatter must be a mapping of keys to values, got {type(data).__name__}")
    return data, "\n".join(lines[end + 1 :]).lstrip("\n")


def _str_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in re.split(r"[\s,]+", value) if v]
    if isinstance(value, list):
        return [str(v) for v in value if v is not None and str(v)]
    return [str(value)]


def _gate_of(metadata: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    for key in GATE_KEYS:
        gate = metadata.get(key)
        if gate is None:
            continue
        if isinstance(gate, str):
            try:
                gate = json.loads(gate)
            except ValueError:
                warnings.append(f"metadata.{key} is not a mapping; ignored")
                return {}
        if not isinstance(gate, dict):
            warnings.append(f"metadata.{key} is not a mapping; ignored")
            return {}
        return gate
    return {}


def check_requirements(
    gate: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    config_get: Callable[[str], Any] | None = None,
    platform: str | None = None,
) -> list[str]:
    """What this machine lacks for ``gate`` (OpenClaw's metadata.openclaw); empty = eligible."""
    if gate.get("always") is True:
        return []
    env = os.environ if env is None else env
    platform = platform or sys.platform
    missing: list[str] = []
    allowed_os = _str_list(gate.get("os"))
    if allowed_os and platform not in allowed_os and not any(platform.startswith(o) for o in allowed_os):
        missing.append(f"os: {'/'.join(allowed_os)} only (this is {platform})")
    requires = gate.get("requires") or {}
    if not isinstance(requires, dict):
        return missing
    for binary in _str_list(requires.get("bins")):
        if which(binary) is None:
            missing.append(f"bin: {binary}")
    any_bins = _str_list(requires.get("anyBins") or requires.get("any_bins"))
    if any_bins and not any(which(b) for b in any_bins):
        missing.append(f"any bin of: {', '.join(any_bins)}")
    for var in _str_list(requires.get("env")):
        if not env.get(var):
            missing.append(f"env: {var}")
    for key in _str_list(requires.get("config")):
        value = None
        if config_get is not None:
            try:
                value = config_get(key)
            except Exception:
                value = None
        if not value:
            missing.append(f"config: {key}")
    return missing


def parse_skill_text(
    raw: bytes,
    folder: Path,
    file: Path,
    *,
    env: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    config_get: Callable[[str], Any] | None = None,
) -> Skill:
    """Parse SKILL.md bytes; see the module docstring for what is a warning and what is an error."""
    source = f"{folder.name}/{file.name}"
    if len(raw) > MAX_SKILL_BYTES:
        raise SkillError(f"{source}: {len(raw) // 1024} KB is more than the {MAX_SKILL_BYTES // 1024} KB limit")
    if b"\x00" in raw:
        raise SkillError(f"{source}: binary content (NUL bytes); a SKILL.md must be UTF-8 text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SkillError(f"{source}: not UTF-8 text (invalid byte at offset {e.start})") from None
    warnings: list[str] = []
    data, _body = split_frontmatter(text, source, warnings)

    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        warnings.append(f"no 'name' in the frontmatter; using the folder name {folder.name!r}")
        name = folder.name
    name = name.strip()
    if name != folder.name:
        warnings.append(f"name {name!r} differs from its folder {folder.name!r}")
    if len(name) > 64 or not SPEC_NAME.match(name):
        warnings.append(f"name {name!r} should be at most 64 lower-case letters, digits and single hyphens")
    if re.search(r"[\n<>]", name):
        raise SkillError(f"{source}: name {name!r} must be one line without '<' or '>'")

    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        warnings.append("no 'description' in the frontmatter; the model cannot tell when to use this skill")
        description = ""
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION:
        warnings.append(
            f"description is {len(description)} characters; more than {MAX_DESCRIPTION} is shortened in the prompt"
        )

    compatibility = data.get("compatibility")
    compatibility = "" if compatibility is None else str(compatibility).strip()
    if len(compatibility) > MAX_COMPATIBILITY:
        warnings.append(f"compatibility is longer than {MAX_COMPATIBILITY} characters")

    metadata = data.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = None
    if not isinstance(metadata, dict):
        warnings.append("metadata is not a mapping; ignored")
        metadata = {}
    gate = _gate_of(metadata, warnings)
    missing = check_requirements(gate, env=env, which=which, config_get=config_get)

    license_ = data.get("license")
    return Skill(
        name=name,
        description=description,
        folder=folder,
        file=file,
        license="" if license_ is None else str(license_).strip(),
        compatibility=compatibility,
        metadata=metadata,
        allowed_tools=_str_list(data.get("allowed-tools", data.get("allowed_tools"))),
        gate=gate,
        model_invocable=data.get("disable-model-invocation") is not True,
        warnings=warnings,
        missing=missing,
    )


def parse_skill(
    folder: Path,
    *,
    env: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    config_get: Callable[[str], Any] | None = None,
) -> Skill:
    """Read ``folder/SKILL.md`` (or ``skill.md``); SkillError when there is none or it is unusable."""
    file = find_skill_file(folder)
    if file is None:
        raise SkillError(f"{folder}: no SKILL.md")
    try:
        raw = file.read_bytes()
    except OSError as e:
        raise SkillError(f"{file}: cannot be read ({e.strerror or e})") from None
    return parse_skill_text(raw, folder, file, env=env, which=which, config_get=config_get)


# ---------------------------------------------------------------- catalog


class SkillCatalog:
    """The loaded skills: one prompt section and the two reading tools, present while any skill is."""

    def __init__(
        self,
        tools: ToolRegistry,
        prompt: PromptBuilder,
        *,
        base_dir: Path | None = None,
        budget: Callable[[], int] | int = DEFAULT_BUDGET,
    ) -> None:
        self._tools = tools
        self._prompt = prompt
        self._base = base_dir.resolve() if base_dir is not None else None
        self._budget = budget
        self._skills: dict[str, Skill] = {}
        self._locations: dict[Path, str] = {}
        self._undo: list[Callable[[], None]] = []
        self._cache: tuple[int, int, str, bool] | None = None
        self._generation = 0
        # relevance ranking when not every skill fits the budget: memory's BM25 over names and descriptions
        self._analyzer: Analyzer | None = None
        self._index: tuple[int, LexicalIndex] | None = None

    # -- membership -------------------------------------------------------------

    def add(self, skill: Skill) -> None:
        existing = self._skills.get(skill.name)
        if existing is not None and existing.folder != skill.folder:
            raise ValueError(f"skill name {skill.name!r} is already used by the skill in {existing.folder}")
        self._locations.pop(skill.file, None)
        self._location(skill)
        self._skills[skill.name] = skill
        self._generation += 1
        if not self._undo:
            self._install()

    def remove(self, name: str) -> None:
        if self._skills.pop(name, None) is not None:
            self._generation += 1
        if not self._skills:
            self.close()

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name)

    def skills(self) -> list[Skill]:
        return sorted(self._skills.values(), key=lambda s: s.name)

    def close(self) -> None:
        undo, self._undo = self._undo, []
        for fn in reversed(undo):
            try:
                fn()
            except Exception:
                log.exception("removing the skill tools failed")

    def _install(self) -> None:
        try:
            self._undo.append(self._prompt.add_section("skills", self._section, order=70))
            self._undo.append(
                self._tools.register(
                    ToolDef(
                        name="skill_read",
                        description="Read a skill's instructions (SKILL.md body) and list its bundled files.",
                        parameters={
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "description": "skill name from the skills list"}
                            },
                            "required": ["name"],
                        },
                        plugin=OWNER,
                    ),
                    self.read_tool,
                )
            )
            self._undo.append(
                self._tools.register(
                    ToolDef(
                        name="skill_file",
                        description="Read a file bundled with a skill (path relative to the skill folder; "
                        "empty path lists the files).",
                        parameters={
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "description": "skill name"},
                                "path": {"type": "string", "description": "file path inside the skill folder"},
                            },
                            "required": ["name"],
                        },
                        plugin=OWNER,
                    ),
                    self.file_tool,
                )
            )
        except Exception:
            self.close()
            raise

    # -- prompt -----------------------------------------------------------------

    def _budget_now(self) -> int:
        value = self._budget() if callable(self._budget) else self._budget
        return max(500, int(value))

    def _location(self, skill: Skill) -> str:
        """The skill file relative to the data folder when it is inside it (computed once per skill)."""
        cached = self._locations.get(skill.file)
        if cached is not None:
            return cached
        location = str(skill.file)
        if self._base is not None:
            try:
                location = skill.file.resolve().relative_to(self._base).as_posix()
            except (ValueError, OSError):
                pass
        self._locations[skill.file] = location
        return location

    def _section(self, inputs: PromptInputs) -> str | Awaitable[str]:
        text, complete = self._full_block()
        if complete or not inputs.user_text.strip():
            return text
        return self._relevant_section(inputs.user_text, text)

    async def _relevant_section(self, user_text: str, fallback: str) -> str:
        """More skills than the budget holds: list the ones closest to this message (tokenising runs off the loop)."""
        listed = self._offered()  # taken here: the loop may add or remove skills while the thread ranks
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self.relevant_block, user_text, listed, self._generation), RANK_TIMEOUT
            )
        except TimeoutError:  # the word segmenter's first load; this turn gets the alphabetical list
            return fallback
        except Exception:
            log.exception("ranking the skills failed; listing them by name")
            return fallback

    def prompt_block(self) -> str:
        """The skills index for the system prompt, at most the budget in characters."""
        return self._full_block()[0]

    def _full_block(self) -> tuple[str, bool]:
        budget = self._budget_now()
        if self._cache and self._cache[0] == self._generation and self._cache[1] == budget:
            return self._cache[2], self._cache[3]
        text, shown, total = self._render(budget)
        self._cache = (self._generation, budget, text, shown == total)
        return text, shown == total

    def _offered(self) -> list[Skill]:
        return [s for s in self.skills() if s.eligible and s.model_invocable]

    def relevant_block(self, user_text: str, listed: list[Skill] | None = None, generation: int | None = None) -> str:
        """The index with the skills ranked by BM25 against ``user_text`` (then by name); blocking."""
        if listed is None:
            listed, generation = self._offered(), self._generation
        if self._analyzer is None:
            self._analyzer = Analyzer()
        analyzer = self._analyzer
        cached = self._index
        if cached is None or cached[0] != generation:
            index = LexicalIndex()
            index.add_many(
                (s.name, analyzer.tokens(f"{re.sub(r'[-_]+', ' ', s.name)} {s.name} {s.description}")) for s in listed
            )
            cached = self._index = (generation if generation is not None else -1, index)
        scores = cached[1].score_array(analyzer.tokens(user_text), [s.name for s in listed])
        ranked = [s for _, _, s in sorted(zip((-float(x) for x in scores), range(len(listed)), listed, strict=True))]
        return self._render(self._budget_now(), ranked, by_relevance=True)[0]

    def _render(
        self, budget: int, ranked: list[Skill] | None = None, *, by_relevance: bool = False
    ) -> tuple[str, int, int]:
        """(text, skills listed, skills offered): as many as fit, in ``ranked`` order (else by name)."""
        listed = ranked if ranked is not None else self._offered()
        if not listed:
            return "", 0, 0
        # Most skills live at <plugins>/<name>/SKILL.md: say that once, show only the exceptions.
        parents = Counter(str(Path(self._location(s)).parent.parent) for s in listed)
        common = parents.most_common(1)[0][0]
        header = (
            "【技能 Skills】\n"
            "Skills are folders of instructions for specialised tasks. When a request matches a skill, call "
            "skill_read(name) first and follow it; skill_file(name, path) reads its bundled files. "
            f"Each skill is at {common}/<name>/SKILL.md unless another location is shown."
        )

        def location(skill: Skill) -> str:
            loc = self._location(skill)
            return "" if loc == f"{common}/{skill.name}/SKILL.md" else f" ({loc})"

        fixed = [(s.name, location(s)) for s in listed]

        def line(name: str, desc: str, loc: str, cap: int) -> str:
            if len(desc) > cap:
                desc = desc[: cap - 1].rstrip() + "…"
            return f"- {name}: {desc}{loc}" if desc else f"- {name}{loc}"

        picked = "the ones closest to this message" if by_relevance else "the first by name"

        def render(cap: int, count: int) -> str:
            lines = [
                line(n, s.description, loc, cap) for s, (n, loc) in zip(listed[:count], fixed[:count], strict=True)
            ]
            more = len(listed) - count
            tail = (
                [f"(+{more} more skills not listed here, {picked} are shown; skill_read(name) works for them too)"]
                if more
                else []
            )
            return "\n".join([header, *lines, *tail])

        total = len(listed)
        text = render(MAX_LISTED_DESCRIPTION, total)
        if len(text) <= budget:
            return text, total, total
        # shorten every description evenly
        overhead = len(header) + sum(len(n) + len(loc) + 5 for n, loc in fixed)
        cap = (budget - overhead) // total
        if cap >= MIN_LISTED_DESCRIPTION:
            text = render(cap, total)
            if len(text) <= budget:
                return text, total, total
        # then list as many as fit with short descriptions
        count = total
        while count > 0:
            text = render(MIN_LISTED_DESCRIPTION, count)
            if len(text) <= budget:
                return text, count, total
            count = max(0, count - max(1, (len(text) - budget) // 60))
        return render(MIN_LISTED_DESCRIPTION, 0)[:budget], 0, total

    # -- tools (sync: the registry runs them on a worker thread) ------------------

    def _lookup(self, name: str) -> Skill | dict[str, Any]:
        skill = self._skills.get(name)
        if skill is None:
            close = difflib.get_close_matches(name, list(self._skills), n=3, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else f" {len(self._skills)} skills are installed."
            return {"isError": True, "content": f"unknown skill {name!r}.{hint}"}
        if not skill.eligible:
            return {
                "isError": True,
                "content": f"skill {name!r} is not available on this machine (missing {'; '.join(skill.missing)})",
            }
        return skill

    def read_tool(self, args: dict[str, Any]) -> Any:
        found = self._lookup(str(args.get("name", "")))
        if isinstance(found, dict):
            return found
        skill = found
        try:
            raw = skill.file.read_bytes()
            _, body = split_frontmatter(raw.decode("utf-8"), skill.file.name)
        except (OSError, UnicodeDecodeError, SkillError) as e:
            return {"isError": True, "content": f"skill {skill.name!r} cannot be read now: {e}"}
        body = body.replace("{baseDir}", str(skill.folder))
        truncated = len(body) > MAX_BODY_CHARS
        files = _list_files(skill.folder, limit=50)
        result: dict[str, Any] = {
            "name": skill.name,
            "description": skill.description,
            "location": str(skill.file),
            "folder": str(skill.folder),
            "body": body[:MAX_BODY_CHARS],
            "files": files,
            "note": SCRIPT_NOTE,
        }
        if truncated:
            result["truncated"] = True
        if skill.allowed_tools:
            result["allowed_tools"] = skill.allowed_tools
        return result

    def file_tool(self, args: dict[str, Any]) -> Any:
        found = self._lookup(str(args.get("name", "")))
        if isinstance(found, dict):
            return found
        skill = found
        rel = str(args.get("path") or "").strip()
        if rel in ("", ".", "./"):
            return {"name": skill.name, "files": _list_files(skill.folder, limit=MAX_LISTED_FILES)}
        problem = _confine(skill.folder, rel)
        if isinstance(problem, str):
            return {"isError": True, "content": problem}
        path = problem
        if path.is_dir():
            return {
                "name": skill.name,
                "path": rel,
                "files": _list_files(path, limit=MAX_LISTED_FILES, root=skill.folder),
            }
        if not path.is_file():
            return {"isError": True, "content": f"skill {skill.name!r} has no file {rel!r}"}
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(MAX_FILE_CHARS * 4 + 1)
        if b"\x00" in head[:8192]:
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if size < 50 * 2**20 else ""
            return {"name": skill.name, "path": rel, "size": size, "binary": True, "sha256": digest}
        text = head.decode("utf-8", errors="replace")
        result: dict[str, Any] = {"name": skill.name, "path": rel, "size": size, "content": text[:MAX_FILE_CHARS]}
        if len(text) > MAX_FILE_CHARS or size > len(head):
            result["truncated"] = True
        if os.access(path, os.X_OK) or path.suffix in (".sh", ".py", ".js", ".ts", ".rb", ".pl", ".ps1"):
            result["note"] = SCRIPT_NOTE
        return result


def _confine(folder: Path, rel: str) -> Path | str:
    """The file ``rel`` inside ``folder``, or why it is refused."""
    if rel.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", rel):
        return f"path {rel!r} must be relative to the skill folder"
    if any(part == ".." for part in re.split(r"[/\\]", rel)):
        return f"path {rel!r} must not contain '..'"
    root = folder.resolve()
    target = (root / rel).resolve()
    if not target.is_relative_to(root):
        return f"path {rel!r} leads outside the skill folder"
    return target


def _list_files(folder: Path, *, limit: int, root: Path | None = None) -> list[str]:
    root = root or folder
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for fname in sorted(filenames):
            if fname.startswith("."):
                continue
            out.append((Path(dirpath) / fname).relative_to(root).as_posix())
            if len(out) >= limit:
                out.append("…")
                return out
    return out


class SkillPlugin:
    """A skill as a plugin: start adds it to the catalog, stop removes it."""

    kind = "skill"

    def __init__(self, name: str, skill: Skill, catalog: SkillCatalog) -> None:
        self.name = name
        self.skill = skill
        self._catalog = catalog

    @property
    def ineligible_reason(self) -> str:
        return "; ".join(self.skill.missing)

    @property
    def warnings(self) -> list[str]:
        return list(self.skill.warnings)

    def start(self, sdk: PluginSDK) -> None:
        self._catalog.add(self.skill)

    def stop(self) -> None:
        if self._catalog.get(self.skill.name) is self.skill:
            self._catalog.remove(self.skill.name)
