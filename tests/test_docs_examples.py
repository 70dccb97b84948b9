"""The documentation's code runs as written: the Python plugin example of docs/plugins.md, loaded by a daemon."""

from __future__ import annotations

import json
import re
from pathlib import Path

from homeagent.daemon import Daemon
from tests.conftest import offline_tool

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _first_python_block(doc: Path) -> str:
    match = re.search(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert match, f"no python block in {doc.name}"
    return match.group(1)


async def test_the_python_plugin_example_in_plugins_md_runs(daemon: Daemon) -> None:
    folder = daemon.paths.plugins / "pydemo"
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(json.dumps({"name": "pydemo", "version": "1.0.0", "entry": "main.py"}))
    (folder / "main.py").write_text(_first_python_block(DOCS / "plugins.md"), encoding="utf-8")
    await daemon.plugins.reload_all()
    info = daemon.plugins.info("pydemo")
    assert info["state"] == "running", info
    assert await offline_tool(daemon, "pydemo_add", {"a": 2, "b": 3}) == {"sum": 5}
    sent = await offline_tool(daemon, "output_send__pydemo", {"payload": "hello"})
    assert sent["status"] == "sent"
    result = await daemon.io.inject_sync("test", "test", "my name is Zed", timeout=30)
    assert result.text.endswith("(pydemo)"), result.text  # its before_output stage ran
