"""The SDK's media methods from a real subprocess plugin, over the RPC protocol, into a real daemon.

``pymedia`` (tests/fixtures/proc_plugins/pymedia) injects inputs with media,
writes a document with attachments and hands a screenshot to the model from
inside a tool call; the LLM is a loopback fake that checks the image blocks.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from homeagent.sdk.types import ToolCall
from tests.fakes.llm_openai import FakeOpenAI, Turn

FIXTURES = Path(__file__).parent / "fixtures" / "proc_plugins"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(60))
SHOT = b"\x89PNG\r\n\x1a\n" + b"screenshot" + bytes(40)
_ids = itertools.count()


def wire(data: bytes, description: str = "", mime: str = "image/png") -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode(), "description": description, "mime": mime}


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def daemon(data_dir: Path, fake: FakeOpenAI) -> AsyncIterator[Daemon]:
    shutil.copytree(FIXTURES / "pymedia", data_dir / "plugins" / "pymedia")
    nocap = data_dir / "plugins" / "pynocap"  # the same code without capabilities
    shutil.copytree(FIXTURES / "pymedia", nocap)
    manifest = json.loads((nocap / "plugin.json").read_text())
    (nocap / "plugin.json").write_text(json.dumps({**manifest, "name": "pynocap", "capabilities": []}))
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        for key, value in {"base_url": fake.base_url, "model": "m", "api_key": "sk-eyes-0123456789",
                           "vision": True}.items():
            d.config.set(f"core.llm.sources.eyes.{key}", value)
        await d.llm.reload()
        for _ in range(400):  # the plugin process starts beside the daemon
            if "pymedia_outside" in d.tools and "pynocap_outside" in d.tools:
                break
            await asyncio.sleep(0.025)
        assert "pymedia_outside" in d.tools
        yield d
    finally:
        await d.stop()


async def tool(d: Daemon, name: str, **args: Any) -> Any:
    result = await d.tools.execute(ToolCall(id=f"t{next(_ids)}", name=name, arguments=args))
    assert result.status == "ok", result.result
    return result.result


async def test_a_plugin_injects_media_and_the_model_sees_it(daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(Turn.text("a red square"))
    result = await tool(daemon, "pymedia_inject", text="what does the camera see?", sync=True,
                        media=[wire(PNG, "front door camera")])
    assert result["ok"] and result["text"] == "a red square", result
    assert fake.images(fake.requests[0].body) == [("image/png", PNG)]
    digest = hashlib.sha256(PNG).hexdigest()
    assert fake.requests[0].body["messages"][-1]["content"][0]["text"] == (
        f"what does the camera see?\n[image/png {digest[:12]}] front door camera")
    assert daemon.media is not None
    info = await daemon.media.ainfo(digest)
    assert info.source == "camera" and info.description == "front door camera"
    refs = await daemon.media.arefs_of(digest)
    assert [r["owner_kind"] for r in refs] == ["context"]

    # bad input is refused before anything is queued or stored
    too_many = await tool(daemon, "pymedia_inject", text="x", media=[wire(PNG)] * 11)
    assert "at most 10 media blocks" in too_many["error"]
    daemon.config.set("core.memory.media.max_bytes", 50)
    too_big = await tool(daemon, "pymedia_inject", text="x", media=[wire(PNG)])
    assert "the limit is 50" in too_big["error"]
    daemon.config.set("core.memory.media.max_bytes", 20 * 1024 * 1024)
    empty = await tool(daemon, "pymedia_inject", text="x", media=[{"b64": ""}])
    assert "needs 'data' (a data URL) or 'digest'" in empty["error"]
    assert daemon.io.pending_inputs() == 0 and len(fake.requests) == 1


async def test_a_plugin_interrupt_with_media_becomes_a_turn_when_idle(daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(Turn.text("seen"))
    sent = await tool(daemon, "pymedia_inject", text="doorbell!", interrupt=True, media=[wire(PNG, "visitor")])
    assert sent["id"]
    for _ in range(200):
        if fake.requests:
            break
        await asyncio.sleep(0.05)
    assert fake.images(fake.requests[0].body) == [("image/png", PNG)]


async def test_insert_with_media_references_the_document(daemon: Daemon) -> None:
    result = await tool(daemon, "pymedia_document", text="The delivery left a parcel",
                        media=[wire(PNG, "parcel at the door")])
    digest = hashlib.sha256(PNG).hexdigest()
    assert daemon.media is not None
    refs = await daemon.media.arefs_of(digest)
    assert [r["owner_kind"] for r in refs] == ["document"] and refs[0]["owner_id"] in result["doc"]
    found = await daemon.docs.aquery("parcel at the door", 3, touch=False)
    assert found and found[0].content == f"The delivery left a parcel\n[image/png {digest[:12]}] parcel at the door"
    unknown = await tool(daemon, "pymedia_document", text="x", media=[{"digest": "ab" * 32}])
    assert "no media" in unknown["error"].lower() or "unknown" in unknown["error"].lower(), unknown


async def test_set_tool_blocks_reach_the_next_llm_call(daemon: Daemon, fake: FakeOpenAI) -> None:
    fake.script(Turn.tool_calls([("pymedia_screenshot", {"media": [wire(SHOT, "the screen")]})]),
                Turn.text("the screen shows a login page"))
    result = await daemon.io.inject_sync("test", "test", "take a screenshot and tell me what is on it")
    assert result.ok and result.text == "the screen shows a login page", result.error
    first, second = fake.requests
    assert fake.images(first.body) == []
    messages = second.body["messages"]
    tool_at = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    assert messages[tool_at]["content"] == "screenshot taken"
    after = messages[tool_at + 1]
    assert after["role"] == "user" and after["content"][0]["text"].startswith("[media from the tool pymedia_screenshot]")
    assert fake.images(second.body) == [("image/png", SHOT)]
    outside = await tool(daemon, "pymedia_outside")
    assert "only inside a tool handler" in outside["outside"]


async def test_media_methods_need_their_capabilities(daemon: Daemon, fake: FakeOpenAI) -> None:
    injected = await tool(daemon, "pynocap_inject", text="x", media=[wire(PNG)])
    assert "io.injectMedia needs the 'io.inject' capability" in injected["error"]
    doc = await tool(daemon, "pynocap_document", text="x", media=[wire(PNG)])
    assert "doc.insertWithMedia needs the 'memory.write' capability" in doc["error"]
    assert daemon.io.pending_inputs() == 0 and not fake.requests
    assert daemon.media is not None and (await daemon.media.astats())["states"] == {}  # nothing was stored
