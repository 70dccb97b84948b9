"""plugin.json: every problem reported at once, kinds from the entry, compatibility checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homeagent.plugins.manifest import Manifest, ManifestError, current_platform, entry_kind

GOOD = {"name": "weather", "version": "1.2.0", "entry": "main.lua", "description": "d", "tags": ["a"]}


def test_a_good_manifest_keeps_unknown_fields() -> None:
    m = Manifest.from_dict({**GOOD, "x-future": {"k": 1}})
    assert (m.name, m.version, m.kind, m.tags) == ("weather", "1.2.0", "lua", ("a",))
    assert m.extra == {"x-future": {"k": 1}}
    assert m.to_dict()["x-future"] == {"k": 1}


def test_missing_fields_are_all_named() -> None:
    with pytest.raises(ManifestError) as info:
        Manifest.from_dict({"description": "no name"})
    text = str(info.value)
    for field in ("'name' is missing", "'version' is missing", "'entry' is missing"):
        assert field in text
    assert len(info.value.problems) == 3


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"name": 7}, "'name' must be a string, got number"),
        ({"version": ["1"]}, "'version' must be a string, got array"),
        ({"entry": None}, "'entry' is missing"),
        ({"tags": "weather"}, "'tags' must be a list of strings, got string"),
        ({"capabilities": [1, 2]}, "'capabilities' must be a list of strings"),
        ({"description": {"en": "x"}}, "'description' must be a string, got object"),
        ({"deprecated": "yes"}, "'deprecated' must be true or false"),
        ({"name": "../evil"}, "name '../evil' must be 1-64 characters"),
        ({"name": "a.b"}, "must be 1-64 characters"),
        ({"version": "latest"}, "not a version number"),
        ({"entry": "../outside.lua"}, "must not contain '..'"),
        ({"entry": "/usr/bin/python"}, "not an absolute path"),
        ({"platforms": ["amiga"]}, "unknown platform 'amiga'"),
    ],
)
def test_wrong_types_and_values_are_rejected(patch: dict[str, object], expected: str) -> None:
    with pytest.raises(ManifestError, match=expected.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        Manifest.from_dict({**GOOD, **patch})


def test_not_json_and_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "plugin.json"
    path.write_text("{name: 1}", encoding="utf-8")
    with pytest.raises(ManifestError, match=r"not valid JSON .* line 1 column 2"):
        Manifest.load(path)
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ManifestError, match=r"must be a JSON object, got array"):
        Manifest.load(path)
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ManifestError):
        Manifest.load(path)
    with pytest.raises(ManifestError, match=r"cannot be read"):
        Manifest.load(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        ("main.lua", "lua"),
        ("SKILL.md", "skill"),
        ("skill.md", "skill"),
        ("main.py", "python"),
        ("my_pkg.plugin:create_plugin", "python"),
        ("plugin.bin", "process"),
        ("run.sh", "process"),
    ],
)
def test_entry_decides_the_kind(entry: str, kind: str) -> None:
    assert entry_kind(entry) == kind


def test_compatibility_names_platform_and_version() -> None:
    other = "windows" if current_platform() != "windows" else "linux"
    m = Manifest.from_dict({**GOOD, "platforms": [other], "min_version": "99.0"})
    problems = m.compatibility_problems("0.1.0")
    assert any("supports " + other in p for p in problems)
    assert any("needs HomeAgent 99.0 or newer (this is 0.1.0)" in p for p in problems)
    ok = Manifest.from_dict({**GOOD, "platforms": [current_platform()], "min_version": "0.1"})
    assert ok.compatibility_problems("0.1.0") == []


def test_fixture_manifests_are_valid() -> None:
    root = Path(__file__).parent / "fixtures" / "plugins"
    kinds = {p.name: Manifest.load(p / "plugin.json").kind for p in root.iterdir() if (p / "plugin.json").exists()}
    assert kinds == {"luademo": "lua", "pydemo": "python", "unit-convert": "skill"}
    json.loads((root / "luademo" / "plugin.json").read_text())
