"""The memory browser's media tab in a real browser: thumbnails of kept images, evicted items with their description."""

from __future__ import annotations

import contextlib
import hashlib
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from homeagent.daemon import Daemon
from tests.fakes.browser import ARGS, CHROMIUM, MISSING
from tests.fakes.webui_fixtures import Web, start_web

if not CHROMIUM.exists():
    pytest.skip(MISSING, allow_module_level=True)

from playwright.async_api import Locator, Page, async_playwright

pytestmark = pytest.mark.xdist_group("webui-browser")


@contextlib.asynccontextmanager
async def signed_in_page(web: Web) -> AsyncIterator[tuple[Page, list[str]]]:
    """A headless chromium page signed in to ``web``, with the page errors it collects."""
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            await context.add_init_script("localStorage.setItem('ha-lang', 'en');")
            assert (await context.request.post(web.url + "api/v1/login", data={"token": web.token})).ok
            page = await context.new_page()
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield page, errors
        finally:
            await browser.close()


async def shown_at_width(page: Page, img: Locator, width: int) -> None:
    """Wait until the image has loaded with the expected width (a broken or wrong image never gets there)."""
    await img.wait_for()
    await page.wait_for_function(f"img => img.complete && img.naturalWidth === {width}", arg=await img.element_handle())


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


async def test_media_tab_shows_thumbnails_states_and_references(daemon: Daemon) -> None:
    assert daemon.media is not None
    kept = (await daemon.media.aput_bytes(png(120, 60, (120, 40, 200)), description="purple flag")).info
    gone = (await daemon.media.aput_bytes(png(30, 30, (200, 30, 30)), description="red square")).info
    await daemon.media.aadd_refs("document", "doc-7", [kept.digest])
    assert (await daemon.media.agc(0.0)).swept == 1
    web = await start_web(daemon)
    try:
        async with signed_in_page(web) as (page, errors):
            await page.goto(web.url + "#/memory/media")
            card = page.locator(f".media-card[data-digest='{kept.digest}']")
            await card.locator("img.media-thumb").wait_for()
            assert await card.locator("img.media-thumb").evaluate("img => img.naturalWidth") == 120
            await card.locator("button").click()
            await card.locator(".media-refs li").wait_for()
            assert await card.locator(".media-refs").inner_text() == "document doc-7"
            evicted = page.locator(f".media-card[data-digest='{gone.digest}']")
            assert await evicted.locator("img").count() == 0
            text = await evicted.inner_text()
            assert "red square" in text and "bytes evicted; the description is kept" in text
            assert not errors
    finally:
        await web.server.close()


async def test_an_image_attached_in_the_chat_reaches_the_model_as_an_image(daemon: Daemon, tmp_path: Path) -> None:
    from tests.fakes.llm_openai import FakeOpenAI, Turn

    picture = png(40, 20, (10, 200, 30))
    (tmp_path / "green.png").write_bytes(picture)
    async with FakeOpenAI() as eyes:
        for key, value in {"base_url": eyes.base_url, "model": "m", "api_key": "sk-eyes-0123456789",
                           "vision": True}.items():
            daemon.config.set(f"core.llm.sources.eyes.{key}", value)
        await daemon.llm.reload()
        eyes.script(Turn.text("a green rectangle"))
        web = await start_web(daemon)
        try:
            async with signed_in_page(web) as (page, errors):
                await page.goto(web.url + "#/chat")
                await page.locator("#chat-file").set_input_files(str(tmp_path / "green.png"))
                await page.locator("#chat-input").fill("what colour is this?")
                await page.locator("#chat-send").click()
                reply = page.locator(".msg.assistant .content").last
                await reply.filter(has_text="a green rectangle").wait_for()
                assert not errors
        finally:
            await web.server.close()
        (request,) = eyes.requests
        assert eyes.images(request.body) == [("image/png", picture)]
        text = request.body["messages"][-1]["content"][0]["text"]
        assert text.startswith("what colour is this?\n\n[file uploaded in the web UI: green.png (")
        assert text.endswith(f"[image/png {hashlib.sha256(picture).hexdigest()[:12]}] green.png")


async def test_with_the_media_store_off_the_media_tab_says_so_and_the_others_work(data_dir: Path) -> None:
    from homeagent.config import ConfigRegistry, core_defs
    from homeagent.paths import DataPaths

    config = ConfigRegistry(data_dir / "config.db")
    for definition in core_defs(data_dir):
        config.register_def(definition)
    config.set("core.memory.media.enabled", False)
    config.close()
    daemon = Daemon(DataPaths(data_dir), web=False)
    await daemon.start()
    try:
        await daemon.docs.acommit("The garden has tomatoes and basil.", summary="garden")
        web = await start_web(daemon)
        try:
            async with signed_in_page(web) as (page, errors):
                await page.goto(web.url + "#/memory/media")
                notice = page.locator("#view p.notice")
                await notice.wait_for()
                assert "does not have" in await notice.inner_text() and "media" in await notice.inner_text()
                assert await page.locator("#view p.error").count() == 0  # a 501 is a notice, not a failure
                await page.locator("button[data-tab='documents']").click()
                await page.get_by_text("The garden has tomatoes and basil.").wait_for()
                assert not errors
        finally:
            await web.server.close()
    finally:
        await daemon.stop()


async def test_images_show_in_the_bubbles_live_and_after_a_reload(daemon: Daemon, tmp_path: Path) -> None:
    """The user's upload, an image a tool handed over and an image the agent sent: thumbnails in their bubbles."""
    from homeagent.agent.media_input import TOOL_BLOCKS
    from homeagent.sdk.types import MediaBlock, ToolDef

    upload, screen, chart = png(40, 20, (10, 200, 30)), png(64, 32, (0, 0, 250)), png(50, 50, (250, 120, 0))
    (tmp_path / "green.png").write_bytes(upload)

    async def screenshot(_: dict[str, object]) -> str:
        sink = TOOL_BLOCKS.get()  # what set_tool_blocks fills (an MCP tool's image content goes the same way)
        assert sink is not None
        sink.append(MediaBlock(mime="image/png", data=screen, description="the login screen"))
        return "screenshot taken"

    daemon.tools.register(ToolDef(name="webtest_screenshot", description="takes a screenshot", plugin="test"),
                          screenshot)
    folder = daemon.paths.plugin_data("files")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "chart.png").write_bytes(chart)
    web = await start_web(daemon)
    try:
        async with signed_in_page(web) as (page, errors):
            await page.goto(web.url + "#/chat")
            await page.locator("#chat-file").set_input_files(str(tmp_path / "green.png"))
            await page.locator("#chat-input").fill("here is a picture")
            await page.locator("#chat-send").click()
            mine = page.locator(".msg.user").last.locator(".attachment.image img")
            await mine.wait_for()
            await shown_at_width(page, mine, 40)

            await page.locator("#chat-input").fill("/tool webtest_screenshot {}")
            await page.locator("#chat-send").click()
            handed = page.locator(".msg.assistant").last.locator(".tool-media[data-tool='webtest_screenshot'] img")
            await handed.wait_for()
            await shown_at_width(page, handed, 64)
            assert await handed.get_attribute("alt") == "the login screen"

            sent = await daemon.channels.send("webui", str(folder / "chart.png"), {}, "image")
            assert sent["status"] == "sent", sent
            proactive = page.locator(".msg.proactive .attachment.image img").last
            await proactive.wait_for()
            await shown_at_width(page, proactive, 50)

            # after a reload all three are drawn again, from the conversation's transcript
            await page.reload()
            await shown_at_width(page, page.locator(".msg.user .attachment.image img").first, 40)
            await shown_at_width(page, page.locator(".tool-media[data-tool='webtest_screenshot'] img").first, 64)
            await shown_at_width(page, page.locator(".msg.proactive .attachment.image img").last, 50)
            assert not errors
    finally:
        await web.server.close()
