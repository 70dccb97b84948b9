"""The media turn path end to end: an image with an input reaches each provider in its own wire format.

A real daemon, real Lua adapters, loopback fakes that speak each provider's
API and refuse image blocks the real one would refuse (tests/fakes/llm_*.py).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from homeagent.config.values import ConfigError
from homeagent.daemon import Daemon
from homeagent.memory.media import gc_pass
from homeagent.paths import DataPaths
from homeagent.providers.base import IMAGE_NOT_SEEN
from homeagent.sdk.types import MediaBlock
from tests.conftest import run_cli
from tests.fakes.llm_anthropic import FakeAnthropic
from tests.fakes.llm_gemini import FakeGemini
from tests.fakes.llm_ollama import FakeOllama
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.webui_fixtures import start_web

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(100))
B64 = base64.b64encode(PNG).decode()
FLAG = MediaBlock(mime="image/gif", data=PNG, description="flag.gif")  # the claimed type lies: the bytes are PNG

FAKES: dict[str, Any] = {"openai": FakeOpenAI, "anthropic": FakeAnthropic, "gemini": FakeGemini,
                         "ollama": FakeOllama}


@pytest.fixture
async def daemon(data_dir: Path) -> AsyncIterator[Daemon]:
    d = Daemon(DataPaths(data_dir), web=False)
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


async def add_source(d: Daemon, name: str, server: Any, adapter: str, *, vision: bool, priority: int = 0) -> None:
    values = {"base_url": server.base_url, "adapter": adapter, "model": "m", "api_key": f"sk-{name}-0123456789",
              "vision": vision, "priority": priority}
    for key, value in values.items():
        d.config.set(f"core.llm.sources.{name}.{key}", value)
    await d.llm.reload()


def _digest() -> str:
    return hashlib.sha256(PNG).hexdigest()


def user_events(d: Daemon) -> list[Any]:
    return [e for e in d.context.timeline() if e.kind == "user"]


@pytest.mark.parametrize("adapter", sorted(FAKES))
async def test_an_image_reaches_each_provider_in_its_own_wire_format(daemon: Daemon, adapter: str) -> None:
    async with FAKES[adapter]() as fake:
        await add_source(daemon, "eyes", fake, adapter, vision=True)
        fake.script(Turn.text("a striped flag"))
        result = await daemon.io.inject_sync("test", "test", "what is on this flag?", media=[FLAG])
        assert result.ok and result.text == "a striped flag", result.error
        body = fake.requests[0].body
        assert fake.images(body) == [("image/png", PNG)]  # the type read from the bytes, not the claimed gif
        short = _digest()[:12]
        text = f"what is on this flag?\n[image/png {short}] flag.gif"
        if adapter == "openai":
            assert body["messages"][-1] == {"role": "user", "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}}]}
        elif adapter == "anthropic":
            assert body["messages"][-1] == {"role": "user", "content": [
                {"type": "text", "text": text},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}}]}
        elif adapter == "gemini":
            assert body["contents"][-1] == {"role": "user", "parts": [
                {"text": text}, {"inlineData": {"mimeType": "image/png", "data": B64}}]}
        else:
            assert body["messages"][-1] == {"role": "user", "content": text, "images": [B64]}
        # memory keeps the marker, never the bytes
        assert user_events(daemon)[-1].input == text


async def test_a_model_without_vision_gets_the_fallback_sources_description(daemon: Daemon) -> None:
    async with FakeOpenAI() as blind, FakeOpenAI() as eyes:
        await add_source(daemon, "blind", blind, "openai", vision=False, priority=10)
        await add_source(daemon, "eyes", eyes, "openai", vision=True)
        daemon.config.set("core.input_processing.image.fallback_provider", "eyes")
        daemon.config.set("core.input_processing.image.fallback_model", "vision-model")
        daemon.config.set("core.input_processing.image.describe_prompt", "Describe the image.")
        daemon.config.set("core.input_processing.image.ocr_enabled", False)
        eyes.script(Turn.text("A purple, blue and red striped flag."))
        blind.script(Turn.text("That is the parade flag."))
        result = await daemon.io.inject_sync("test", "test", "what is this?", media=[FLAG])
        assert result.ok and result.source == "blind", result.error
        (asked,) = eyes.requests
        assert asked.body["model"] == "vision-model" and not asked.body.get("stream")
        assert asked.body["messages"] == [{"role": "user", "content": [
            {"type": "text", "text": "Describe the image."},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}}]}]
        (sent,) = blind.requests
        assert blind.images(sent.body) == []  # no image part reached the model that cannot see
        marker = f"[image/png {_digest()[:12]}] A purple, blue and red striped flag."
        assert sent.body["messages"][-1] == {"role": "user", "content": f"what is this?\n{marker}"}
        assert daemon.media is not None
        assert (await daemon.media.ainfo(_digest())).description == "A purple, blue and red striped flag."
        assert user_events(daemon)[-1].input == f"what is this?\n{marker}"

        # the describer failing is said in the turn, which still runs
        eyes.script(Turn.error(500), Turn.error(500), Turn.error(500))
        blind.script(Turn.text("I cannot tell."))
        other = MediaBlock(data=PNG + b"2", description="other.png")
        again = await daemon.io.inject_sync("test", "test", "and this?", media=[other])
        assert again.ok
        last = blind.requests[-1].body["messages"][-1]["content"]
        assert "other.png (the image could not be described:" in last


async def test_no_describer_and_the_offline_provider_still_answer(daemon: Daemon) -> None:
    result = await daemon.io.inject_sync("test", "test", "look", media=[FLAG])
    assert result.ok and result.source == "offline" and result.text
    (event,) = user_events(daemon)
    assert event.input == f"look\n[image/png {_digest()[:12]}] flag.gif"  # no note about vision in memory


async def test_fallback_to_a_source_without_vision_drops_the_image_parts(daemon: Daemon) -> None:
    async with FakeOpenAI() as eyes, FakeAnthropic() as blind:
        await add_source(daemon, "eyes", eyes, "openai", vision=True, priority=10)
        await add_source(daemon, "blind", blind, "anthropic", vision=False)
        eyes.script(Turn.error(503))
        blind.script(Turn.text("answered blind"))
        result = await daemon.io.inject_sync("test", "test", "see?", media=[FLAG])
        assert result.ok and result.source == "blind"
        assert eyes.images(eyes.requests[0].body) == [("image/png", PNG)]
        content = blind.requests[0].body["messages"][-1]["content"]
        assert blind.images(blind.requests[0].body) == []
        assert content == [{"type": "text", "text": f"see?\n[image/png {_digest()[:12]}] flag.gif\n{IMAGE_NOT_SEEN}"}]


async def test_context_references_keep_the_bytes_until_the_event_leaves_the_window(daemon: Daemon) -> None:
    store = daemon.media
    assert store is not None
    await daemon.io.inject_sync("test", "test", "keep this picture", media=[FLAG])
    (event,) = user_events(daemon)
    assert event.meta["media"] == [_digest()]
    refs = await store.arefs_of(_digest())
    assert [(r["owner_kind"], r["owner_id"]) for r in refs] == [("context", event.id)]
    report = await gc_pass(store, daemon._media_owners(), 0.0)
    assert report.swept == 0 and (await store.ainfo(_digest())).state == "present"  # in the live context

    daemon.context.top_k, daemon.context.keep_recent = 1, 1  # compaction: the event sinks into the documents
    await daemon.io.inject_sync("test", "test", "something else entirely")
    assert all(e.id != event.id for e in daemon.context.timeline())
    doc_id = f"ctx-{event.id}"
    doc = daemon.docs.get(doc_id)
    assert doc is not None and f"[image/png {_digest()[:12]}] flag.gif" in doc.content  # the marker moved too
    report = await gc_pass(store, daemon._media_owners(), 0.0)
    assert report.refs_dropped == 1 and report.swept == 0  # the context's reference went, the document's holds
    assert [(r["owner_kind"], r["owner_id"]) for r in await store.arefs_of(_digest())] == [("document", doc_id)]
    assert await store.aget(_digest()) == PNG

    assert await asyncio.to_thread(daemon.docs.remove, doc_id)  # the user deletes the document
    report = await gc_pass(store, daemon._media_owners(), 3600.0)
    assert report.refs_dropped == 0 and report.swept == 0  # a reference younger than gc_min_age is left alone
    assert (await store.ainfo(_digest())).state == "present"
    report = await gc_pass(store, daemon._media_owners(), 0.0)
    assert report.refs_dropped == 1 and report.swept == 1
    info = await store.ainfo(_digest())
    assert info.state == "evicted" and info.description == "flag.gif"  # the description outlives the bytes


async def test_web_upload_and_ask_image_send_the_image(daemon: Daemon, data_dir: Path, tmp_path: Path) -> None:
    async with FakeOpenAI() as eyes:
        await add_source(daemon, "eyes", eyes, "openai", vision=True)
        web = await start_web(daemon)
        try:
            async with web.client() as c:
                up = await c.post("/api/v1/chat/file", data={"inject": "false"},
                                  files=[("file", ("flag.gif", PNG, "image/gif"))])
                digest = up.json()["files"][0]["media"]["digest"]
                eyes.script(Turn.text("seen from the web"))
                sent = await c.post("/api/v1/chat", json={"text": "look at my upload", "media": [digest]})
                assert sent.status_code == 200 and sent.json()["text"] == "seen from the web", sent.text
                assert eyes.images(eyes.requests[-1].body) == [("image/png", PNG)]
                bad = await c.post("/api/v1/chat", json={"text": "x", "media": ["0" * 64]})
                assert bad.status_code == 400 and "media" in bad.json()["error"]
                assert len(eyes.requests) == 1  # nothing was sent for the refused message
                worse = await c.post("/api/v1/chat", json={"text": "x", "media": "abc"})
                assert worse.status_code == 400
        finally:
            await web.server.close()
        image = tmp_path / "photo.jpg"
        image.write_bytes(b"\xff\xd8\xff\xe0" + bytes(200))
        eyes.script(Turn.text("a photo"))
        asked = await run_cli(data_dir, "ask", "--image", str(image), "what is this photo?")
        assert asked.code == 0 and "a photo" in asked.out, asked.err
        assert eyes.images(eyes.requests[-1].body) == [("image/jpeg", image.read_bytes())]


async def test_an_interrupt_with_media_reaches_the_running_turns_next_call(daemon: Daemon) -> None:
    async with FakeOpenAI() as eyes:
        await add_source(daemon, "eyes", eyes, "openai", vision=True)
        eyes.script(Turn.slow("thinking about it " * 10, chunks=40, delay=0.05), Turn.text("now I see the door"))
        turn = asyncio.ensure_future(daemon.io.inject_sync("test", "test", "watch the door"))
        for _ in range(200):
            if eyes.requests:
                break
            await asyncio.sleep(0.02)
        daemon.io.inject_interrupt_text("camera", "camera", "someone is there", media=[FLAG])
        result = await asyncio.wait_for(turn, 30)
        assert result.ok and result.text == "now I see the door", result.error
        first, second = eyes.requests
        assert eyes.images(first.body) == []
        last = second.body["messages"][-1]
        assert last["role"] == "user" and last["content"][0]["text"].startswith("[打断消息] (camera) someone is there\n")
        assert eyes.images(second.body) == [("image/png", PNG)]


async def test_an_image_from_an_mcp_tool_reaches_the_model_after_the_result(daemon: Daemon) -> None:
    server = str(Path(__file__).parent / "fakes" / "mcp_stdio_server.py")
    async with FakeOpenAI() as eyes:
        await add_source(daemon, "eyes", eyes, "openai", vision=True)
        daemon.config.set("plugin.mcp.servers", json.dumps([{"name": "calc", "command": sys.executable,
                                                               "args": [server]}]))
        await daemon.plugins.reload_one("mcp")
        for _ in range(600):
            if daemon.tools.get("calc_picture") is not None:
                break
            await asyncio.sleep(0.05)
        eyes.script(Turn.tool_calls([("calc_picture", {})]), Turn.text("a tiny picture"))
        result = await daemon.io.inject_sync("test", "test", "take a picture", timeout=60)
        assert result.ok and result.text == "a tiny picture", result.error
        picture = b"\x89PNG\r\n\x1a\n" + b"mcp picture" + bytes(32)
        messages = eyes.requests[1].body["messages"]
        tool_at = next(i for i, m in enumerate(messages) if m["role"] == "tool")
        assert messages[tool_at]["content"] == f"[image image/png, {len(picture)} bytes: shown to you after this result]"
        assert eyes.images(eyes.requests[1].body) == [("image/png", picture)]
        store = daemon.media
        assert store is not None  # kept in the store like any other media
        digest = hashlib.sha256(picture).hexdigest()
        assert (await store.ainfo(digest)).source == "tool:calc_picture"

    # after the turn: the agent event holds the marker and the reference, like an input's event
    (agent,) = [e for e in daemon.context.timeline() if e.kind == "agent"]
    assert agent.meta["media"] == [digest]
    marker_line = f"[image/png {digest[:12]}]"
    assert "[media from the tool calc_picture]" in agent.meta["media_text"] and marker_line in agent.meta["media_text"]
    assert [(r["owner_kind"], r["owner_id"]) for r in await store.arefs_of(digest)] == [("context", agent.id)]
    report = await gc_pass(store, daemon._media_owners(), 0.0)
    assert report.swept == 0 and await store.aget(digest) == picture

    daemon.context.top_k, daemon.context.keep_recent = 1, 1  # pruned: the document cites the tool's image
    await daemon.io.inject_sync("test", "test", "something else entirely")
    await daemon.context.prune("and now for something completely different")
    assert all(e.id != agent.id for e in daemon.context.timeline())
    doc = daemon.docs.get(f"ctx-{agent.id}")
    assert doc is not None and doc.content.startswith("a tiny picture") and marker_line in doc.content
    report = await gc_pass(store, daemon._media_owners(), 0.0)
    assert report.swept == 0 and await store.aget(digest) == picture
    assert [r["owner_kind"] for r in await store.arefs_of(digest)] == ["document"]


async def test_ocr_asks_the_fallback_source_twice_and_joins_the_answers(daemon: Daemon) -> None:
    async with FakeOpenAI() as blind, FakeOpenAI() as eyes:
        await add_source(daemon, "blind", blind, "openai", vision=False, priority=10)
        await add_source(daemon, "eyes", eyes, "openai", vision=True)
        daemon.config.set("core.input_processing.image.fallback_provider", "eyes")
        daemon.config.set("core.input_processing.image.describe_prompt", "Describe the image.")
        daemon.config.set("core.input_processing.image.ocr_prompt", "Read the text in the image.")
        eyes.script(Turn.text("STOP"), Turn.text("STOP"))  # the two run at once: either may arrive first
        blind.script(Turn.text("It says stop."))
        result = await daemon.io.inject_sync("test", "test", "what does the sign say?", media=[FLAG])
        assert result.ok, result.error
        prompts = {r.body["messages"][0]["content"][0]["text"] for r in eyes.requests}
        assert prompts == {"Describe the image.", "Read the text in the image."}
        said = blind.requests[0].body["messages"][-1]["content"]
        assert said.endswith(f"[image/png {_digest()[:12]}] STOP — text in the image: STOP")


async def test_the_built_in_prompts_follow_core_agent_language(daemon: Daemon) -> None:
    """English by default, the original's Chinese for zh, and a prompt someone wrote wins over both."""
    wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(40)
    async with FakeOpenAI() as blind, FakeOpenAI() as eyes:
        await add_source(daemon, "blind", blind, "openai", vision=False, priority=10)
        await add_source(daemon, "eyes", eyes, "openai", vision=True)
        daemon.config.set("core.input_processing.image.fallback_provider", "eyes")
        daemon.config.set("core.input_processing.audio.fallback_provider", "eyes")

        async def prompts_asked() -> set[str]:
            eyes.requests.clear()
            eyes.script(*[Turn.text("seen")] * 3)
            blind.script(Turn.text("ok"))
            result = await daemon.io.inject_sync("test", "test", "look and listen",
                                                 media=[FLAG, MediaBlock(mime="audio/wav", data=wav)])
            assert result.ok, result.error
            return {r.body["messages"][0]["content"][0]["text"] for r in eyes.requests}

        english = await prompts_asked()
        assert "Transcribe this audio." in english and len(english) == 3
        assert all(p.isascii() for p in english), english  # no Chinese prompt in an English setup
        daemon.config.set("core.agent.language", "zh")
        assert await prompts_asked() == {
            "请详细描述这张图片的内容，包括主要对象、场景、文字和值得注意的细节。",
            "请识别这张图片中的所有文字内容，按原有顺序输出；没有文字时回答“无文字”。",
            "请转写这段音频的内容。",
        }
        daemon.config.set("core.input_processing.image.ocr_prompt", "Read it.")
        assert "Read it." in await prompts_asked()
    with pytest.raises(ConfigError, match="not one of en, zh"):
        daemon.config.set("core.agent.language", "klingon")


def test_media_blocks_on_the_wire_refuse_what_is_not_a_data_url() -> None:
    block = MediaBlock.from_json({"data": f"data:image/png;base64,{B64}", "description": "flag"})
    assert block == MediaBlock(mime="image/png", data=PNG, description="flag")
    assert MediaBlock.from_json(block.to_json()) == block
    for bad, error in (({"data": "https://example.org/a.png"}, "must be a data URL"),
                       ({"data": "data:image/png;base64,@@@"}, "base64 is not valid"),
                       ({"digest": "  "}, "needs 'data'"),
                       ({"data": "data:,x", "extra": 1}, "unknown media block field"),
                       ("data:image/png;base64,AAAA", "is an object")):
        with pytest.raises(ValueError, match=error):
            MediaBlock.from_json(bad)


async def test_media_look_is_offered_only_while_the_turn_has_an_unseen_image(daemon: Daemon) -> None:
    def tool_names(body: dict[str, Any]) -> set[str]:
        return {t["function"]["name"] for t in body.get("tools") or []}

    async with FakeOpenAI() as blind, FakeOpenAI() as eyes:
        await add_source(daemon, "blind", blind, "openai", vision=False, priority=10)
        await add_source(daemon, "eyes", eyes, "openai", vision=True)
        daemon.config.set("core.input_processing.image.fallback_provider", "eyes")
        daemon.config.set("core.input_processing.image.ocr_enabled", False)
        eyes.script(Turn.text("A car in front of a house."), Turn.text("AB-123"))
        blind.script(Turn.tool_calls([("media_look", {"question": "What is the number plate?"})]),
                     Turn.text("The plate reads AB-123."))
        result = await daemon.io.inject_sync("test", "test", "whose car is this?", media=[FLAG])
        assert result.ok and result.text == "The plate reads AB-123.", result.error
        assert "media_look" in tool_names(blind.requests[0].body)
        asked = eyes.requests[1].body["messages"][0]["content"]
        assert asked[0] == {"type": "text", "text": "What is the number plate?"} and eyes.images(eyes.requests[1].body)
        answer = next(m for m in blind.requests[1].body["messages"] if m["role"] == "tool")
        assert answer["content"] == "AB-123"

        blind.script(Turn.text("hello"))
        await daemon.io.inject_sync("test", "test", "just text")
        assert "media_look" not in tool_names(blind.requests[-1].body)


async def test_an_evicted_or_unknown_digest_still_runs_the_turn_and_says_why(daemon: Daemon) -> None:
    store = daemon.media
    assert store is not None
    kept = (await store.aput_bytes(PNG, description="old flag")).info
    assert (await store.agc(0.0)).swept == 1  # unreferenced: its bytes go, its description stays
    async with FakeOpenAI() as eyes:
        await add_source(daemon, "eyes", eyes, "openai", vision=True)
        eyes.script(Turn.text("I only have the description"))
        result = await daemon.io.inject_sync("test", "test", "remember this?",
                                             media=[MediaBlock(digest=kept.digest), MediaBlock(digest="f" * 64)])
        assert result.ok, result.error
        said = eyes.requests[0].body["messages"][-1]["content"]
        assert isinstance(said, str) and eyes.images(eyes.requests[0].body) == []
        first, second = said.split("\n")[1:]
        assert first.startswith(f"[image/png {kept.short}] old flag (the bytes could not be read: ")
        assert "evicted" in first
        assert second.startswith("[file: ffffffffffff] (the bytes could not be read: ")


async def test_a_socket_chat_frame_with_bad_media_is_refused(daemon: Daemon) -> None:
    from homeagent.cli.client import Client

    client = await Client.connect(daemon.paths.socket)
    try:
        await client.send({"type": "chat", "text": "x", "media": "not a list"})
        frame = await asyncio.wait_for(client.frames.get(), 5)
        while frame.get("type") != "error":
            frame = await asyncio.wait_for(client.frames.get(), 5)
        assert "'media' must be a list of at most 10 digests" in frame["message"]
        assert daemon.io.pending_inputs() == 0 and daemon.agent.turns == 0
    finally:
        await client.close()


async def test_the_openai_compatible_endpoint_passes_data_url_images_on(daemon: Daemon) -> None:
    import openai

    async with FakeOpenAI() as eyes:
        await add_source(daemon, "eyes", eyes, "openai", vision=True)
        web = await start_web(daemon)
        try:
            async with openai.AsyncOpenAI(base_url=web.url + "v1", api_key=web.token, max_retries=0) as oa:
                eyes.script(Turn.text("a flag"))
                reply = await oa.chat.completions.create(model="homeagent", messages=[{"role": "user", "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}}]}])
                assert reply.choices[0].message.content == "a flag"
                assert eyes.images(eyes.requests[0].body) == [("image/png", PNG)]
                with pytest.raises(openai.BadRequestError, match="does not fetch images by URL"):
                    await oa.chat.completions.create(model="homeagent", messages=[{"role": "user", "content": [
                        {"type": "text", "text": "and this?"},
                        {"type": "image_url", "image_url": {"url": "http://192.168.1.1/cam.jpg"}}]}])
                assert len(eyes.requests) == 1
        finally:
            await web.server.close()


WAV = b"RIFF" + (36).to_bytes(4, "little") + b"WAVEfmt " + bytes(40)


@pytest.mark.parametrize("adapter", ["openai", "gemini"])
async def test_audio_is_transcribed_by_the_audio_fallback_source(daemon: Daemon, adapter: str) -> None:
    async with FakeOpenAI() as main, FAKES[adapter]() as ears:
        await add_source(daemon, "main", main, "openai", vision=True, priority=10)
        await add_source(daemon, "ears", ears, adapter, vision=False)
        daemon.config.set("core.input_processing.audio.fallback_provider", "ears")
        daemon.config.set("core.input_processing.audio.describe_prompt", "Transcribe this.")
        ears.script(Turn.text("Please buy milk on the way home."))
        main.script(Turn.text("I will remind you."))
        voice = MediaBlock(mime="audio/x-wav", data=WAV, description="voice-note.wav")
        result = await daemon.io.inject_sync("test", "test", "", media=[voice])
        assert result.ok and result.text == "I will remind you.", result.error
        body = ears.requests[0].body
        if adapter == "openai":
            assert body["messages"] == [{"role": "user", "content": [
                {"type": "text", "text": "Transcribe this."},
                {"type": "input_audio", "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"}}]}]
        else:
            assert body["contents"] == [{"role": "user", "parts": [
                {"text": "Transcribe this."},
                {"inlineData": {"mimeType": "audio/wav", "data": base64.b64encode(WAV).decode()}}]}]
        digest = hashlib.sha256(WAV).hexdigest()
        marker = f"[audio/wav {digest[:12]}] Please buy milk on the way home."
        assert main.requests[0].body["messages"][-1] == {"role": "user", "content": marker}
        assert user_events(daemon)[-1].input == marker
        assert daemon.media is not None and (await daemon.media.ainfo(digest)).description == (
            "Please buy milk on the way home.")


async def test_audio_without_a_transcriber_is_said_to_the_model(daemon: Daemon) -> None:
    async with FakeOpenAI() as main:
        await add_source(daemon, "main", main, "openai", vision=True)
        main.script(Turn.text("ok"))
        await daemon.io.inject_sync("test", "test", "listen", media=[MediaBlock(data=WAV, description="memo.wav")])
        said = main.requests[0].body["messages"][-1]["content"]
        assert said == (f"listen\n[audio/wav {hashlib.sha256(WAV).hexdigest()[:12]}] memo.wav "
                        "(the model cannot hear audio and no transcriber is configured)")
