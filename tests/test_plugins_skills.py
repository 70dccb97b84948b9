"""SKILL.md skills: lenient parsing, OpenClaw gating, the prompt budget and confined file reading."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest

from homeagent.agent.prompt import PromptInputs
from homeagent.plugins.skills import SkillError, check_requirements, parse_skill
from homeagent.sdk.types import ToolCall, ToolResult
from tests.conftest import run_cli
from tests.fakes.plugins_host import FIXTURES, Host, copy_fixture, plugin_host


def write_skill(root: Path, folder: str, text: str | bytes, *, filename: str = "SKILL.md") -> Path:
    path = root / folder
    path.mkdir(parents=True, exist_ok=True)
    target = path / filename
    if isinstance(text, bytes):
        target.write_bytes(text)
    else:
        target.write_text(text, encoding="utf-8")
    return path


def skill_text(name: str, description: str, extra: str = "", body: str = "Do the thing.") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n\n{body}\n"


async def call(host: Host, name: str, args: dict[str, object]) -> ToolResult:
    return await host.services.tools.execute(ToolCall("c", name, args))


def test_the_fixture_skill_parses_cleanly() -> None:
    skill = parse_skill(FIXTURES / "unit-convert")
    assert skill.name == "unit-convert" and skill.warnings == []
    assert skill.allowed_tools == ["cmd_run", "skill_file"]
    assert skill.gate == {"emoji": "📏", "requires": {"bins": ["sh"]}}
    assert skill.eligible and skill.license == "Apache-2.0"


def test_lenient_about_style(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "my-skill", skill_text("Other_Name", "x" * 1500))
    skill = parse_skill(folder)
    assert skill.name == "Other_Name"
    text = " | ".join(skill.warnings)
    assert "differs from its folder 'my-skill'" in text
    assert "should be at most 64 lower-case letters" in text
    assert "description is 1500 characters" in text
    nameless = parse_skill(write_skill(tmp_path, "nameless", "---\ndescription: helps\n---\nbody"))
    assert nameless.name == "nameless" and "using the folder name" in nameless.warnings[0]
    lower = parse_skill(write_skill(tmp_path, "lower", skill_text("lower", "lower-case file"), filename="skill.md"))
    assert lower.file.name == "skill.md" and lower.warnings == []


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("# Just markdown\n\nNo frontmatter here.", "no YAML frontmatter"),
        ("---\nname: a\ndescription: b\n", "not closed"),
        ("---\nname: [unclosed\ndescription: b\n---\nbody", "invalid YAML frontmatter at line"),
        ("---\nname: a\n  bad indent: : :\n---\n", "invalid YAML frontmatter"),
        ("---\n- a list\n- not a mapping\n---\n", "must be a mapping"),
        (b"---\nname: a\n---\n\x00\x01\x02binary", "binary content"),
        (b"---\nname: \xff\xfe\n---\n", "not UTF-8"),
        ('---\nname: "<script>"\ndescription: b\n---\n', "without '<' or '>'"),
    ],
)
def test_unusable_files_are_rejected_clearly(tmp_path: Path, content: str | bytes, expected: str) -> None:
    with pytest.raises(SkillError, match=expected):
        parse_skill(write_skill(tmp_path, "bad", content))


def test_openclaw_gating_and_legacy_aliases(tmp_path: Path) -> None:
    gate = 'metadata: {"openclaw": {"requires": {"bins": ["definitely-not-a-binary-xyz"], "env": ["HA_TEST_TOKEN"]}}}\n'
    skill = parse_skill(write_skill(tmp_path, "gated", skill_text("gated", "d", gate)))
    assert not skill.eligible
    assert skill.missing == ["bin: definitely-not-a-binary-xyz", "env: HA_TEST_TOKEN"]
    legacy = 'metadata:\n  clawdbot:\n    os: ["plan9"]\n'
    assert "os: plan9 only" in parse_skill(write_skill(tmp_path, "old", skill_text("old", "d", legacy))).missing[0]
    clawdis = 'metadata: {"clawdis": {"requires": {"anyBins": ["nope-1", "sh"]}}}\n'
    assert parse_skill(write_skill(tmp_path, "anyb", skill_text("anyb", "d", clawdis))).eligible
    always = 'metadata: {"openclaw": {"always": true, "requires": {"bins": ["nope"]}}}\n'
    assert parse_skill(write_skill(tmp_path, "always", skill_text("always", "d", always))).eligible


def test_an_unquoted_colon_in_a_value_is_repaired_with_a_warning(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "colon", "---\nname: colon\ndescription: Use when: the user asks\n---\nbody")
    skill = parse_skill(folder)
    assert skill.description == "Use when: the user asks"
    assert "unquoted ': '" in skill.warnings[0]


def test_requirement_checks() -> None:
    gate = {"requires": {"env": ["A"], "config": ["core.x"]}, "os": ["darwin", "linux"]}
    assert check_requirements(gate, env={"A": "1"}, config_get=lambda k: True, platform="linux") == []
    missing = check_requirements(gate, env={}, config_get=lambda k: None, platform="win32")
    assert missing == ["os: darwin/linux only (this is win32)", "env: A", "config: core.x"]


async def test_skills_in_prompt_and_tools(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        copy_fixture("unit-convert", host.plugins_dir)
        gate = 'metadata: {"openclaw": {"requires": {"bins": ["definitely-not-a-binary-xyz"]}}}\n'
        write_skill(host.plugins_dir, "gated", skill_text("gated", "needs a missing tool", gate))
        write_skill(host.plugins_dir, "broken", "no frontmatter")
        summary = await host.registry.load_all()
        assert summary["states"] == {"running": 1, "ineligible": 1, "failed": 1}
        assert "no YAML frontmatter" in summary["failed"]["broken"]
        assert "definitely-not-a-binary-xyz" in host.registry.info("gated")["error"]

        prompt = await host.services.prompt.build(PromptInputs("convert 5 km"))
        assert "- unit-convert: Convert between metric and imperial units" in prompt
        assert "Each skill is at plugins/<name>/SKILL.md" in prompt
        assert "gated" not in prompt

        read = await call(host, "skill_read", {"name": "unit-convert"})
        assert read.status == "ok" and "# Unit conversion" in read.result["body"]
        assert "{baseDir}" not in read.result["body"] and str(host.plugins_dir / "unit-convert") in read.result["body"]
        assert "scripts/convert.sh" in read.result["files"] and "cmd_run" in read.result["note"]
        ref = await call(host, "skill_file", {"name": "unit-convert", "path": "reference.md"})
        assert "| km   | mi | 0.621371    |" in ref.result["content"]
        script = await call(host, "skill_file", {"name": "unit-convert", "path": "scripts/convert.sh"})
        assert "awk" in script.result["content"] and "cmd_run" in script.result["note"]
        listing = await call(host, "skill_file", {"name": "unit-convert", "path": ""})
        assert "reference.md" in listing.result["files"]
        gated = await call(host, "skill_read", {"name": "gated"})
        assert gated.status == "error" and "not available on this machine" in gated.result["content"]
        typo = await call(host, "skill_read", {"name": "unit-conver"})
        assert "Did you mean: unit-convert" in typo.result["content"]


async def test_skill_files_stay_inside_the_folder(data_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    async with plugin_host(data_dir) as host:
        folder = copy_fixture("unit-convert", host.plugins_dir)
        os.symlink(secret, folder / "escape.txt")
        (folder / "blob.bin").write_bytes(b"\x00\x01" * 100)
        await host.registry.load_all()
        for path, expected in [
            ("../../secret.txt", "must not contain '..'"),
            ("/etc/passwd", "must be relative"),
            ("escape.txt", "leads outside the skill folder"),
            ("nope.md", "has no file"),
        ]:
            result = await call(host, "skill_file", {"name": "unit-convert", "path": path})
            assert result.status == "error" and expected in result.result["content"], (path, result.result)
        blob = await call(host, "skill_file", {"name": "unit-convert", "path": "blob.bin"})
        assert blob.result["binary"] is True and len(blob.result["sha256"]) == 64


async def test_skills_block_respects_the_budget_at_200_skills(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        for i in range(200):
            desc = f"Skill number {i} does a specialised task with a fairly long description " + "detail " * 20
            write_skill(host.plugins_dir, f"skill-{i:03d}", skill_text(f"skill-{i:03d}", desc))
        summary = await host.registry.load_all()
        assert summary["states"] == {"running": 200}
        block = host.registry.skills.prompt_block()
        assert len(block) <= 12_000 and block.count("\n- skill-") == 200, "all 200 fit, descriptions shortened"
        assert "- skill-000: Skill number 0 does a specialised task" in block
        host.services.config.set_plugin("skills", "prompt_budget", 4000)
        small = host.registry.skills.prompt_block()
        assert len(small) <= 4000 and "more skills not listed here" in small
        host.services.config.set_plugin("skills", "prompt_budget", 200_000)
        full = host.registry.skills.prompt_block()
        assert full.count("\n- skill-") == 200


async def test_unloading_the_last_skill_removes_the_tools(data_dir: Path) -> None:
    async with plugin_host(data_dir) as host:
        copy_fixture("unit-convert", host.plugins_dir)
        await host.registry.load_all()
        assert "skill_read" in host.services.tools
        await host.registry.disable("unit-convert")
        assert "skill_read" not in host.services.tools
        assert "Skills" not in await host.services.prompt.build(PromptInputs("x"))
        await host.registry.enable("unit-convert")
        assert "skill_read" in host.services.tools


async def test_more_skills_than_the_budget_are_picked_by_relevance(data_dir: Path) -> None:
    """Not the alphabetical first N: the skills that match the message are listed, and the rest are counted."""
    async with plugin_host(data_dir) as host:
        for i in range(60):
            write_skill(host.plugins_dir, f"aaa-{i:02d}", skill_text(f"aaa-{i:02d}", f"Generic helper number {i} "
                                                                     "for everyday chores and small tasks."))
        write_skill(host.plugins_dir, "zz-pdf-tools", skill_text("zz-pdf-tools", "Extract text and tables from PDF "
                                                                 "files, merge and split PDF documents."))
        write_skill(host.plugins_dir, "zz-tea", skill_text("zz-tea", "泡茶：绿茶和乌龙茶的水温与时间。"))
        await host.registry.load_all()
        host.services.config.set_plugin("skills", "prompt_budget", 1500)
        by_name = host.registry.skills.prompt_block()
        assert "zz-pdf-tools" not in by_name and "- aaa-00" in by_name, "without a message: the first by name"

        prompt = await host.services.prompt.build(PromptInputs(user_text="please merge these two PDF documents"))
        listed = [line for line in prompt.splitlines() if line.startswith("- ")]
        assert listed[0].startswith("- zz-pdf-tools:"), listed[:3]
        more = re.search(r"\(\+(\d+) more skills not listed here, the ones closest to this message", prompt)
        assert more is not None and int(more.group(1)) == 62 - len(listed)

        # the daemon's memory loads the word segmenter at start; the first turn before that lists by name
        from homeagent.memory.lexical import Analyzer

        await asyncio.to_thread(Analyzer().warmup)
        chinese = await host.services.prompt.build(PromptInputs(user_text="绿茶用多少度的水泡？"))
        assert next(line for line in chinese.splitlines() if line.startswith("- ")).startswith("- zz-tea:")


async def test_a_skill_md_only_folder_packs_and_installs_in_any_case(data_dir: Path, tmp_path: Path) -> None:
    """`plugin pack` and `plugin install <folder|zip>` for a folder with only a Skill.md (no plugin.json)."""
    work = tmp_path / "work"
    folder = write_skill(work, "weather", skill_text("weather-check", "Look up the weather for a city."),
                         filename="Skill.md")
    (folder / "cities.txt").write_text("Paris\nBerlin\n")
    packed = await run_cli(data_dir, "plugin", "pack", str(folder), "-o", str(tmp_path / "weather.zip"))
    assert packed.code == 0 and "packed weather-check 0.0.0 (skill)" in packed.out, packed.err
    empty = work / "empty"
    empty.mkdir()
    refused = await run_cli(data_dir, "plugin", "pack", str(empty))
    assert refused.code == 1 and "no plugin.json and no SKILL.md" in refused.err

    async with plugin_host(data_dir) as host:
        installed = await host.registry.install(str(folder))
        assert installed["name"] == "weather-check" and installed["kind"] == "skill"
        assert installed["state"] == "running", installed
        assert "- weather-check: Look up the weather" in host.registry.skills.prompt_block()
        read = await call(host, "skill_file", {"name": "weather-check", "path": "cities.txt"})
        assert "Berlin" in json.dumps(read.result)
        await host.registry.remove("weather-check")
        from_zip = await host.registry.install(str(tmp_path / "weather.zip"))
        assert from_zip["state"] == "running" and (host.plugins_dir / "weather-check" / "Skill.md").is_file()

        await host.registry.disable("weather-check")
        assert "weather-check" not in host.registry.skills.prompt_block()
        await host.registry.enable("weather-check")
        assert "- weather-check:" in host.registry.skills.prompt_block()
