"""Importing an in-process Python plugin's code: a private module name per load, dropped on unload.

Why a module of its own: it is the one place that touches ``sys.modules`` for
plugin code; the registry only asks for a factory and later for the module
names to forget.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from homeagent.plugins.errors import PluginError
from homeagent.sdk.api import PluginFactory

__all__ = ["drop_modules", "import_entry", "resolve_ref"]


def resolve_ref(ref: str) -> Any:
    module_name, _, attr = ref.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr or "create_plugin")
    except AttributeError:
        raise PluginError(f"{module_name} has no {attr or 'create_plugin'}") from None


def _synthetic(name: str, generation: int) -> str:
    return f"_homeagent_plugin_{re.sub(r'[^A-Za-z0-9_]', '_', name)}_{generation}"


def _exec_module(modname: str, path: Path, package_dir: Path | None) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        modname, path, submodule_search_locations=[str(package_dir)] if package_dir else None
    )
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module


def import_entry(folder: Path, entry: str, name: str, generation: int) -> tuple[PluginFactory, list[str]]:
    """The factory named by ``entry`` and the module names created for it (removed on unload).

    Modules from the plugin folder get a private name per load, so a reload
    runs the new code and two plugins' ``main.py`` never collide. Inside a
    package entry, use relative imports.
    """
    base = _synthetic(name, generation)
    if entry.endswith(".py"):
        path = (folder / entry).resolve()
        if not path.is_relative_to(folder.resolve()) or not path.is_file():
            raise PluginError(f"entry {entry!r} is not a file in {folder}")
        module = _exec_module(base, path, None)
        attr = "create_plugin"
    else:
        module_path, _, attr = entry.partition(":")
        parts = module_path.split(".")
        top = folder / parts[0]
        if (top / "__init__.py").is_file():
            _exec_module(base, top / "__init__.py", top)
            full = ".".join([base, *parts[1:]])
            module = importlib.import_module(full) if len(parts) > 1 else sys.modules[base]
        elif len(parts) == 1 and (folder / f"{parts[0]}.py").is_file():
            module = _exec_module(base, folder / f"{parts[0]}.py", None)
        else:
            module = importlib.import_module(module_path)
            base = ""
    modules = [m for m in list(sys.modules) if base and (m == base or m.startswith(base + "."))]
    factory = getattr(module, attr, None)
    if not callable(factory):
        drop_modules(modules)
        where = entry if entry.endswith(".py") else module_path
        raise PluginError(f"{where} defines no {attr}(name, config) factory")
    return factory, modules


def drop_modules(modules: list[str]) -> None:
    for m in modules:
        sys.modules.pop(m, None)
