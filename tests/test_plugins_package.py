""".hmap packages: pack, install (file and http), upgrade, remove, and every way a package can be bad."""

from __future__ import annotations

import json
import os
import stat
import struct
import zipfile
from pathlib import Path

import pytest
from aiohttp import web

from homeagent.plugins.package import (
    INSTALL_RECORD,
    MAX_ENTRIES,
    PackageError,
    download_package,
    extract_package,
    inspect_package,
    pack_plugin,
    remove_plugin_dir,
    sha256_file,
)
from tests.fakes.plugins_host import FIXTURES, http_server

MANIFEST: dict[str, object] = {"name": "demo", "version": "1.0.0", "entry": "main.lua"}


def make_zip(path: Path, files: dict[str, bytes | str], *, manifest: dict[str, object] | None = MANIFEST) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        if manifest is not None:
            zf.writestr("plugin.json", json.dumps(manifest))
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def test_pack_then_install_round_trip(tmp_path: Path) -> None:
    out, manifest, digest = pack_plugin(FIXTURES / "luademo", tmp_path / "luademo.hmap")
    assert manifest.name == "luademo" and digest == sha256_file(out)
    _, _, digest2 = pack_plugin(FIXTURES / "luademo", tmp_path / "again.hmap")
    assert digest2 == digest, "packing the same folder twice gives the same bytes"
    info = inspect_package(out)
    assert info.manifest.kind == "lua" and info.sha256 == digest and set(info.files) == {"plugin.json", "main.lua"}
    target = extract_package(info, tmp_path / "plugins", source=str(out))
    assert (target / "main.lua").read_bytes() == (FIXTURES / "luademo" / "main.lua").read_bytes()
    record = json.loads((target / INSTALL_RECORD).read_text())
    assert record["sha256"] == digest and record["version"] == "1.0.0"
    assert [p.name for p in (tmp_path / "plugins").iterdir()] == ["luademo"], "no temporary folders are left"


def test_pack_keeps_executable_bits_and_skips_caches(tmp_path: Path) -> None:
    out, _, _ = pack_plugin(FIXTURES / "unit-convert", tmp_path / "uc.hmap")
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
    assert "scripts/convert.sh" in names and not any("__pycache__" in n for n in names)
    target = extract_package(inspect_package(out), tmp_path / "plugins")
    assert os.access(target / "scripts" / "convert.sh", os.X_OK)
    assert not os.access(target / "SKILL.md", os.X_OK)


def test_pack_refuses_a_folder_whose_entry_is_missing(tmp_path: Path) -> None:
    src = tmp_path / "broken"
    src.mkdir()
    (src / "plugin.json").write_text(json.dumps(MANIFEST))
    with pytest.raises(PackageError, match=r"entry 'main.lua' named in plugin.json is not in"):
        pack_plugin(src, tmp_path / "x.hmap")


def test_no_overwrite_without_upgrade_then_upgrade_replaces(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    v1 = inspect_package(make_zip(tmp_path / "v1.hmap", {"main.lua": "-- v1"}))
    extract_package(v1, plugins)
    v2 = inspect_package(make_zip(tmp_path / "v2.hmap", {"main.lua": "-- v2"}, manifest={**MANIFEST, "version": "2.0"}))
    with pytest.raises(PackageError, match=r"already installed .* use --upgrade"):
        extract_package(v2, plugins)
    assert (plugins / "demo" / "main.lua").read_text() == "-- v1", "a refused install changes nothing"
    extract_package(v2, plugins, upgrade=True)
    assert (plugins / "demo" / "main.lua").read_text() == "-- v2"
    assert sorted(p.name for p in plugins.iterdir()) == ["demo"]


def test_plugin_in_a_top_folder_inside_the_zip(tmp_path: Path) -> None:
    path = tmp_path / "nested.hmap"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("demo/plugin.json", json.dumps(MANIFEST))
        zf.writestr("demo/main.lua", "return {}")
    target = extract_package(inspect_package(path), tmp_path / "plugins")
    assert (target / "main.lua").exists() and (target / "plugin.json").exists()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("../evil.lua", "contains '..'"),
        ("lib/../../evil.lua", "contains '..'"),
        ("/etc/cron.d/evil", "is an absolute path"),
        ("C:/Windows/evil.dll", "drive letter"),
        ("lib\\..\\evil", "backslash"),
    ],
)
def test_unsafe_entry_names_are_rejected(tmp_path: Path, name: str, expected: str) -> None:
    path = make_zip(tmp_path / "bad.hmap", {"main.lua": "", name: "boom"})
    with pytest.raises(PackageError, match=expected):
        inspect_package(path)
    assert not (tmp_path / "evil.lua").exists()


def test_symlink_entries_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "link.hmap"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("plugin.json", json.dumps(MANIFEST))
        zf.writestr("main.lua", "")
        link = zipfile.ZipInfo("secrets")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/home/user/.ssh/id_ed25519")
    with pytest.raises(PackageError, match=r"symbolic links are not allowed"):
        inspect_package(path)


def test_zip_bomb_by_compression_ratio(tmp_path: Path) -> None:
    path = make_zip(tmp_path / "bomb.hmap", {"main.lua": "", "zeros.bin": b"\0" * (8 * 1024 * 1024)})
    assert path.stat().st_size < 100_000
    with pytest.raises(PackageError, match=r"expands .*x .*possible zip bomb"):
        inspect_package(path)


def test_zip_bomb_by_total_declared_size(tmp_path: Path) -> None:
    """Entries that each look plausible but claim 300 MB apiece: refused before extraction."""
    path = make_zip(
        tmp_path / "big.hmap", {"main.lua": "", "a.bin": os.urandom(4_000_000), "b.bin": os.urandom(4_000_000)}
    )
    data = bytearray(path.read_bytes())
    pos = 0
    while (pos := data.find(b"PK\x01\x02", pos)) != -1:  # central directory: uncompressed size at +24
        name_len = struct.unpack_from("<H", data, pos + 28)[0]
        if bytes(data[pos + 46 : pos + 46 + name_len]).endswith(b".bin"):
            struct.pack_into("<I", data, pos + 24, 300 * 1024 * 1024)
        pos += 4
    path.write_bytes(bytes(data))
    with pytest.raises(PackageError, match=r"more than 500 MB .*possible zip bomb"):
        inspect_package(path)


def test_size_cap_and_not_a_zip(tmp_path: Path) -> None:
    huge = tmp_path / "huge.hmap"
    with huge.open("wb") as f:  # sparse: costs no disk
        f.truncate(101 * 1024 * 1024)
    with pytest.raises(PackageError, match=r"the limit is 100 MB"):
        inspect_package(huge)
    text = tmp_path / "text.hmap"
    text.write_text("hello")
    with pytest.raises(PackageError, match=r"not a zip archive"):
        inspect_package(text)
    with pytest.raises(PackageError, match=r"cannot read package"):
        inspect_package(tmp_path / "missing.hmap")


def test_too_many_entries(tmp_path: Path) -> None:
    path = make_zip(tmp_path / "many.hmap", {"main.lua": "", **{f"f/{i}": b"" for i in range(MAX_ENTRIES + 1)}})
    with pytest.raises(PackageError, match=f"the limit is {MAX_ENTRIES}"):
        inspect_package(path)


def test_manifest_problems_are_package_errors(tmp_path: Path) -> None:
    with pytest.raises(PackageError, match=r"no plugin.json"):
        inspect_package(make_zip(tmp_path / "a.hmap", {"main.lua": ""}, manifest=None))
    with pytest.raises(PackageError, match=r"'version' is missing"):
        inspect_package(make_zip(tmp_path / "b.hmap", {"main.lua": ""}, manifest={"name": "x", "entry": "main.lua"}))
    with pytest.raises(PackageError, match=r"entry 'main.lua' named in plugin.json is not in the package"):
        inspect_package(make_zip(tmp_path / "c.hmap", {}))
    with pytest.raises(PackageError, match=r"needs HomeAgent 999"):
        inspect_package(make_zip(tmp_path / "d.hmap", {"main.lua": ""}, manifest={**MANIFEST, "min_version": "999"}))


def test_remove(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    extract_package(inspect_package(make_zip(tmp_path / "p.hmap", {"main.lua": ""})), plugins)
    remove_plugin_dir(plugins, "demo")
    assert list(plugins.iterdir()) == []
    with pytest.raises(PackageError, match=r"not installed"):
        remove_plugin_dir(plugins, "demo")
    with pytest.raises(PackageError, match=r"invalid plugin name"):
        remove_plugin_dir(plugins, "../plugins")


async def test_download_over_http(tmp_path: Path) -> None:
    package = make_zip(tmp_path / "p.hmap", {"main.lua": "return {}"})

    async def serve(_: web.Request) -> web.StreamResponse:
        return web.Response(body=package.read_bytes(), content_type="application/zip")

    async def missing(_: web.Request) -> web.StreamResponse:
        return web.Response(status=404)

    async with http_server({"/p.hmap": serve, "/missing.hmap": missing}) as base:
        path = await download_package(f"{base}/p.hmap", tmp_path / "dl")
        assert sha256_file(path) == sha256_file(package)
        with pytest.raises(PackageError, match=r"HTTP 404"):
            await download_package(f"{base}/missing.hmap", tmp_path / "dl")
    with pytest.raises(PackageError, match=r"only http:// and https://"):
        await download_package("file:///etc/passwd", tmp_path / "dl")
    with pytest.raises(PackageError, match=r"download of .* failed"):
        await download_package("http://127.0.0.1:9/p.hmap", tmp_path / "dl")
    assert [p.name for p in (tmp_path / "dl").iterdir()] == [path.name], "failed downloads leave no files"
