"""Subsystems keep to their own insides: what importing one module drags in, in a fresh interpreter.

A subprocess plugin imports ``homeagent.sdk`` on its own; if the SDK reached
into host modules, every plugin would load (and depend on) the daemon's
internals. ``io`` and ``agent`` used to import each other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
NEUTRAL = {"homeagent", "homeagent.text"}  # the version string and JSON/text helpers the wire format needs


def loaded_by(module: str) -> set[str]:
    code = f"import sys, json, {module}; print(json.dumps(sorted(m for m in sys.modules if m.startswith('homeagent'))))"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("module", ["homeagent.sdk", "homeagent.sdk.run", "homeagent.sdk.remote"])
def test_the_public_sdk_loads_no_host_module(module: str) -> None:
    host = {m for m in loaded_by(module) if not m.startswith("homeagent.sdk")} - NEUTRAL
    assert not host, f"{module} imports host modules: {sorted(host)}"


def test_io_does_not_import_the_agent() -> None:
    agent = {m for m in loaded_by("homeagent.io.channels") | loaded_by("homeagent.io.manager")
             if m.startswith("homeagent.agent")}
    assert not agent, sorted(agent)
