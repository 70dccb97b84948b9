"""Which tool calls run, which wait for the owner, which are refused: the approval policy.

Why it is shaped this way:

* The decision for a call is a pure function of the tool's name, one argument
  (the call's *subject*: ``command`` for ``cmd_run`` and ``terminal_create``,
  ``input`` for ``terminal_write``, ``path`` for the files tools, else ``url``
  or ``name``) and rules the owner wrote. Matching uses ``fnmatch`` patterns,
  which people already know from shells. An *allow* rule never covers a
  command or terminal input with shell syntax in it (``;``, ``|``, ``$``, …):
  ``git *`` must not let ``git status; rm -rf ~`` through when the owner has
  turned shells on.
* Most calls are read-only tools with no rule at all. Their verdict is cached
  per tool name, so an auto-allowed call costs a dictionary lookup; the cache
  is dropped whenever a setting or an ``always`` rule changes.
* Installing, removing and enabling plugins (``OWNER_ACTIONS``) start or
  swap code that runs as the owner: they always ask, whatever the settings
  and rules say (only ``core.approvals.deny`` can refuse them outright), and
  the owner approves each call on its own.
* Order, first match wins: ``core.approvals.deny`` (tool names) → the
  argument rules of ``core.approvals.rules`` → the owner's ``always`` rules →
  ``core.approvals.ask`` (tool names) → allow.
"""

from __future__ import annotations

import glob
import json
import posixpath
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

__all__ = [
    "ALLOW",
    "ASK",
    "DEFAULT_ASK",
    "DENY",
    "OWNER_ACTIONS",
    "ApprovalPolicy",
    "PolicyConfig",
    "Rule",
    "Verdict",
    "safe_arguments",
    "subject_matches",
    "subject_of",
    "suggest_pattern",
]

ALLOW, ASK, DENY = "allow", "ask", "deny"
ACTIONS = (ALLOW, ASK, DENY)

#: Tools that always ask the owner, call by call; no setting or always rule lets them through.
OWNER_ACTIONS = frozenset({"plugin_install", "plugin_remove", "plugin_enable"})

#: What asks by default: programs, terminal input, file writes, plugin management (OWNER_ACTIONS ask anyway).
DEFAULT_ASK = "cmd_run, terminal_create, terminal_write, files_write, files_edit, plgreload, plugin_disable"

SUBJECT_KEYS = ("command", "input", "path", "url", "name")
TYPED = ("command", "input")  # read by a program or a shell: an allow rule never covers shell syntax in them
SHELL_SYNTAX = frozenset(";|&$<>`(){}\n\\")
MAX_SHOWN_CHARS = 500


def _names(raw: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in raw.replace("\n", ",").split(",") if n.strip())


def _subject_key(args: Mapping[str, Any]) -> str:
    for key in SUBJECT_KEYS:
        if isinstance(args.get(key), str):
            return key
    return ""


def subject_of(args: Mapping[str, Any]) -> str:
    """The argument patterns are matched against: commands with their whitespace collapsed, paths normalised.

    A path is normalised so that ``notes/../secret.md`` is matched as ``secret.md``, not by ``notes/*``.
    """
    key = _subject_key(args)
    if not key:
        return ""
    value = str(args[key])
    if key == "command":
        return " ".join(value.split())
    if key == "path" and value:
        return posixpath.normpath(value)
    return value


def shell_syntax(args: Mapping[str, Any]) -> bool:
    """Whether a command or terminal input holds shell syntax (``git status; rm -rf ~`` must not pass as git)."""
    key = _subject_key(args)
    return key in TYPED and not SHELL_SYNTAX.isdisjoint(str(args[key]))


def subject_matches(pattern: str, subject: str) -> bool:
    """``fnmatch`` (case-sensitive); ``prog *`` also matches ``prog`` on its own."""
    if pattern in ("", "*"):
        return True
    if fnmatchcase(subject, pattern):
        return True
    return pattern.endswith(" *") and subject == pattern[:-2]


def suggest_pattern(args: Mapping[str, Any]) -> str:
    """The pattern "Always for this pattern" grants: the program with any arguments, or the file's folder."""
    key = _subject_key(args)
    subject = subject_of(args)
    if not subject:
        return "*"
    if key in TYPED:
        program = subject.split()[0]
        return glob.escape(program) + (" *" if " " in subject else "")
    if key == "path":
        parent = posixpath.dirname(subject.rstrip("/"))
        return f"{glob.escape(parent)}/*" if parent not in ("", "/") else glob.escape(subject)
    return glob.escape(subject)


@dataclass(frozen=True)
class Rule:
    """``tool`` (a name pattern) with ``match`` (a subject pattern) gets ``action``."""

    tool: str
    match: str = "*"
    action: str = ALLOW
    id: int = 0  # the row of an ``always`` rule; 0 for rules from settings
    source: str = "settings"  # settings | always
    created: float = 0.0
    by: str = ""

    def applies(self, tool: str, subject: str) -> bool:
        return fnmatchcase(tool, self.tool) and subject_matches(self.match, subject)

    def describe(self) -> str:
        where = f"always rule #{self.id}" if self.source == "always" else "core.approvals.rules"
        return f"{where}: {self.action} {self.tool} {self.match!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tool": self.tool, "match": self.match, "action": self.action,
                "source": self.source, "created": self.created, "by": self.by}


@dataclass(frozen=True)
class Verdict:
    action: str
    reason: str = ""
    rule: Rule | None = None


@dataclass(frozen=True)
class PolicyConfig:
    """The owner's settings, parsed once per change."""

    ask: tuple[str, ...] = field(default_factory=lambda: _names(DEFAULT_ASK))
    deny: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = ()
    timeout: float = 120.0

    @staticmethod
    def parse(ask: str, deny: str, rules: Any, timeout: float) -> PolicyConfig:
        return PolicyConfig(_names(ask), _names(deny), parse_rules(rules), float(timeout))


def parse_rules(raw: Any) -> tuple[Rule, ...]:
    """``core.approvals.rules``: a list of ``{"tool", "match", "action"}``; anything else is refused."""
    if isinstance(raw, str):
        raw = json.loads(raw) if raw.strip() else []
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError("core.approvals.rules must be a JSON list of {tool, match, action}")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("tool"), str) or not item["tool"].strip():
            raise ValueError(f"core.approvals.rules[{i}] needs a 'tool' (a tool name or pattern)")
        action = str(item.get("action", ASK)).strip().lower()
        if action not in ACTIONS:
            raise ValueError(f"core.approvals.rules[{i}]: action must be one of {', '.join(ACTIONS)}")
        out.append(Rule(item["tool"].strip(), str(item.get("match") or "*"), action))
    return tuple(out)


class ApprovalPolicy:
    """Decides allow / ask / deny for one call; cheap for tools no rule names."""

    def __init__(self, read_config: Callable[[], PolicyConfig], always: Callable[[], Iterable[Rule]]) -> None:
        self._read_config = read_config
        self._always = always
        self._config: PolicyConfig | None = None
        self._plans: dict[str, tuple[Verdict | None, tuple[Rule, ...], tuple[Rule, ...]]] = {}

    def invalidate(self) -> None:
        """A setting or an always rule changed: parse again on the next call."""
        self._config = None
        self._plans = {}

    @property
    def config(self) -> PolicyConfig:
        config = self._config
        if config is None:
            config = self._config = self._read_config()
        return config

    def decide(self, tool: str, args: Mapping[str, Any]) -> Verdict:
        plan = self._plans.get(tool)
        if plan is None:
            plan = self._plan(tool)
        fixed, rules, always = plan
        if fixed is not None:
            return fixed
        subject = subject_of(args)
        shell = shell_syntax(args)
        for rule in rules:
            if subject_matches(rule.match, subject) and not (shell and rule.action == ALLOW):
                return Verdict(rule.action, rule.describe(), rule)
        if not shell:
            for rule in always:
                if subject_matches(rule.match, subject):
                    return Verdict(ALLOW, rule.describe(), rule)
        return self._fallback(tool)

    def _fallback(self, tool: str) -> Verdict:
        if any(fnmatchcase(tool, p) for p in self.config.ask):
            return Verdict(ASK, "core.approvals.ask lists it")
        return _ALLOWED

    def _plan(self, tool: str) -> tuple[Verdict | None, tuple[Rule, ...], tuple[Rule, ...]]:
        config = self.config
        fixed: Verdict | None = None
        rules: tuple[Rule, ...] = ()
        always: tuple[Rule, ...] = ()
        if any(fnmatchcase(tool, p) for p in config.deny):
            fixed = Verdict(DENY, "core.approvals.deny lists it")
        elif tool in OWNER_ACTIONS:
            fixed = Verdict(ASK, "installing, removing and enabling plugins always need the owner's approval")
        else:
            rules = tuple(r for r in config.rules if fnmatchcase(tool, r.tool))
            always = tuple(r for r in self._always() if r.action == ALLOW and fnmatchcase(tool, r.tool))
            if not rules and not always:
                fixed = self._fallback(tool)
        plan = (fixed, rules, always)
        self._plans[tool] = plan
        return plan


_ALLOWED = Verdict(ALLOW)


def _visible(text: str) -> str:
    """Control and format characters (ANSI escapes, bidi overrides, zero-width) shown as \\uXXXX."""
    out = []
    for ch in text:
        if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Co", "Cs"):
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


def safe_arguments(value: Any, _depth: int = 0) -> Any:
    """Arguments as the owner is shown them: long strings cut, invisible characters made visible."""
    if isinstance(value, str):
        shown = _visible(value[:MAX_SHOWN_CHARS])
        return shown + (f"… ({len(value) - MAX_SHOWN_CHARS} more characters)" if len(value) > MAX_SHOWN_CHARS else "")
    if _depth > 8:
        return "…"
    if isinstance(value, Mapping):
        return {_visible(str(k)): safe_arguments(v, _depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, list | tuple):
        return [safe_arguments(v, _depth + 1) for v in value[:50]]
    if value is None or isinstance(value, bool | int | float):
        return value
    return _visible(str(value)[:MAX_SHOWN_CHARS])
