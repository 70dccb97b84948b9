"""A plugin's document memory through the daemon's own wiring: texts and objects in, found again, bad ones refused.

The plugin is an in-process Python plugin in the daemon's plugin folder; its
tool is driven by the offline provider (`/tool NAME {json}`) over the real
socket, so the SDK's ``doc_memory`` is exactly what the daemon hands plugins.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from homeagent.daemon import Daemon
from tests.conftest import offline_tool

PLUGIN = '''
from typing import Any


class DocProbe:
    name = "docprobe"

    async def start(self, sdk: Any) -> None:
        async def probe(args: dict[str, Any]) -> Any:
            docs = sdk.doc_memory
            try:
                doc_id = await docs.insert(args["doc"])
            except ValueError as exc:
                return {"refused": str(exc)}
            found = await docs.query(args["query"], 3)
            return {
                "id": doc_id,
                "found": [d.content for d in found],
                "speakers": [d.speaker for d in found],
                "documents": (await docs.stats())["documents"],
            }

        sdk.register_tool("docprobe", probe, description="Insert a document and query.",
                          parameters={"type": "object", "properties": {"doc": {}, "query": {"type": "string"}},
                                      "required": ["doc", "query"]})

    async def stop(self) -> None:
        pass


def create_plugin(name: str, config: dict[str, Any]) -> DocProbe:
    return DocProbe()
'''


async def _tool(daemon: Daemon, args: dict[str, Any]) -> Any:
    return await offline_tool(daemon, "docprobe", args)


async def test_plugin_documents_go_in_as_text_or_object_and_come_back(daemon: Daemon, tmp_path: Path) -> None:
    folder = daemon.paths.plugins / "docprobe"
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(json.dumps({
        "name": "docprobe", "version": "1.0.0", "description": "doc memory probe", "entry": "main.py",
        "capabilities": ["tools", "memory.write"],
    }))
    (folder / "main.py").write_text(textwrap.dedent(PLUGIN))
    await daemon.plugins.reload_all()

    as_text = await _tool(daemon, {"doc": "The boat is moored at pier 7 in Lisbon.", "query": "where is the boat"})
    assert "The boat is moored at pier 7 in Lisbon." in as_text["found"]
    as_object = await _tool(daemon, {
        "doc": {"content": "My dentist is Dr. Okafor.", "speaker": "Ada", "session": "visit", "tags": ["health"]},
        "query": "Ada dentist",
    })
    assert as_object["found"][0] == "My dentist is Dr. Okafor." and as_object["speakers"][0] == "Ada"
    assert as_object["documents"] == as_text["documents"] + 1

    for bad, why in [
        ({"text": "no content field"}, "unknown document field"),
        ({"content": "   "}, "non-empty content"),
        ({"content": "x", "tags": "not-a-list"}, "'tags' must be a list"),
        ({"content": "x", "ts": "yesterday"}, "'ts' must be a number"),
        (42, "a text or an object"),
    ]:
        refused = await _tool(daemon, {"doc": bad, "query": "x"})
        assert why in refused["refused"], (bad, refused)
    assert (await _tool(daemon, {"doc": "one more", "query": "x"}))["documents"] == as_object["documents"] + 1
