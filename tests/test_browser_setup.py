"""The setup, MCP and skills pages, the phone layout and Chinese labels in headless chromium.

A daemon with no LLM configured: the first page is the setup page; a provider
is tested and saved against a fake OpenAI server on loopback; a second source
is added and put first, and a chat answered by the fallback says so.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from tests.conftest import LLM_ENV
from tests.fakes.browser import ARGS, CHROMIUM, MISSING, shot
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.webui_fixtures import Web, start_web

MCP_SERVER = str(Path(__file__).parent / "fakes" / "mcp_stdio_server.py")

if not CHROMIUM.exists():
    pytest.skip(MISSING, allow_module_level=True)

from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect  # noqa: E402

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("webui-browser")]



@dataclass
class Setup:
    web: Web
    browser: Browser
    fake: FakeOpenAI
    fake2: FakeOpenAI

    async def page(self, *, width: int = 1280, height: int = 800, lang: str = "en", locale: str = "en-US",
                   stored_lang: bool = True) -> tuple[BrowserContext, Page]:
        context = await self.browser.new_context(viewport={"width": width, "height": height}, locale=locale)
        script = "localStorage.getItem('ha-theme') || localStorage.setItem('ha-theme', 'light');"
        if stored_lang:
            script += f"localStorage.getItem('ha-lang') || localStorage.setItem('ha-lang', '{lang}');"
        await context.add_init_script(script)
        signed_in = await context.request.post(self.web.url + "api/v1/login", data={"token": self.web.token})
        assert signed_in.ok
        page = await context.new_page()
        page.set_default_timeout(15_000)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.errors = errors  # type: ignore[attr-defined]
        return context, page


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def setup(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Setup]:
    with pytest.MonkeyPatch.context() as mp:
        for name in LLM_ENV:
            mp.delenv(name, raising=False)
        data = tmp_path_factory.mktemp("setup") / "d"
        data.mkdir()
        daemon = Daemon(DataPaths(data), web=False)
        await daemon.start()
        web = await start_web(daemon)
        async with FakeOpenAI() as fake, FakeOpenAI() as fake2:
            playwright = await async_playwright().start()
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
            try:
                yield Setup(web, browser, fake, fake2)
            finally:
                await browser.close()
                await playwright.stop()
                await web.server.close()
                await daemon.stop()


async def test_first_run_setup_test_save_reorder_and_the_fallback_note(setup: Setup) -> None:
    context, page = await setup.page()
    try:
        await page.goto(setup.web.url)
        await expect(page).to_have_url(setup.web.url + "#/setup")  # no LLM yet: the setup page comes first
        await expect(page.locator("#setup-first-run")).to_be_visible()
        await shot(page, "setup-first-run")
        options = await page.locator("#setup-provider option").all_inner_texts()
        assert len(options) >= 10 and "Anthropic (Claude)" in options
        await page.select_option("#setup-provider", "deepseek")
        await expect(page.locator("#setup-base-url")).to_have_value("https://api.deepseek.com")
        await page.select_option("#setup-provider", "openai")
        await page.fill("#setup-name", "main")
        await page.fill("#setup-base-url", setup.fake.base_url)
        await page.fill("#setup-model", "gpt-fake")
        # a wrong key: the test says why and nothing is saved
        setup.fake.script(Turn.error(401))
        await page.fill("#setup-key", "sk-wrong")
        await page.click("#setup-test")
        await expect(page.locator("#setup-result")).to_contain_text("Test failed")
        await expect(page.locator("#setup-result")).to_contain_text("401")
        setup.fake.script(Turn.text("pong"))
        await page.fill("#setup-key", "sk-right-key")
        await page.click("#setup-test")
        await expect(page.locator("#setup-result")).to_contain_text("It works")
        await expect(page.locator("#setup-result")).to_contain_text("pong")
        await page.click("#setup-save")
        await expect(page.locator("#setup-sources tr[data-source='main']")).to_be_visible()
        await expect(page.locator("#setup-first-run")).to_be_hidden()
        assert setup.web.daemon.config.get("core.llm.sources.main.api_key") == "sk-right-key"

        # a second source, put first with the arrow
        await page.fill("#setup-name", "backup")
        await page.fill("#setup-base-url", setup.fake2.base_url)
        await page.fill("#setup-model", "gpt-fake")
        await page.fill("#setup-key", "sk-second")
        await page.click("#setup-save")
        rows = page.locator("#setup-sources tr[data-source]")
        await expect(rows).to_have_count(2)
        await page.locator("#setup-sources tr[data-source='backup'] button[aria-label='Try earlier']").click()
        await expect(rows.first).to_have_attribute("data-source", "backup")
        assert [s["name"] for s in setup.web.daemon.llm.sources()["sources"]][:2] == ["backup", "main"]
        await shot(page, "setup-sources")

        # backup fails: main answers, and the chat says a fallback answered
        setup.fake2.script(Turn.error(500), Turn.error(500), Turn.error(500))
        setup.fake.script(Turn.text("main answered"))
        await page.evaluate("location.hash = '#/chat'")
        await page.fill("#chat-input", "hello?")
        await page.press("#chat-input", "Enter")
        reply = page.locator(".msg.assistant").last
        await expect(reply.locator(".content")).to_contain_text("main answered")
        await expect(reply.locator(".fallback-note")).to_have_text("Answered by main: backup did not answer.")
        await shot(page, "chat-fallback")
        await page.reload()  # the note is part of the chat's history
        reply = page.locator(".msg.assistant").last
        await expect(reply.locator(".fallback-note")).to_have_text("Answered by main: backup did not answer.")
        await expect(reply.locator(".content")).to_have_text("main answered")

        # remove one
        await page.evaluate("location.hash = '#/setup'")
        page.once("dialog", lambda d: d.accept())
        await page.locator("#setup-sources tr[data-source='backup'] button.danger").click()
        await expect(page.locator("#setup-sources tr[data-source]")).to_have_count(1)
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await context.close()


async def test_mcp_import_of_a_claude_desktop_block_shows_each_server(setup: Setup) -> None:
    context, page = await setup.page()
    try:
        await page.goto(setup.web.url + "#/mcp")
        block = {"mcpServers": {
            "calc": {"command": sys.executable, "args": [MCP_SERVER], "env": {"API_TOKEN": "tok-123"}},
            "ghost": {"command": "/no/such/mcp-server"},
        }}
        await page.fill("#mcp-import", json.dumps(block))
        await page.click("#mcp-import-button")
        await expect(page.locator("#mcp-import-result")).to_contain_text("Imported 2 server(s): calc, ghost")
        calc = page.locator("#mcp-servers tr[data-server='calc']")
        await expect(calc.locator(".badge")).to_have_text("connected", timeout=30_000)
        registered = [t.name for t in setup.web.daemon.tools.tools() if t.name.startswith("calc_")]
        await expect(calc.locator("td").nth(3)).to_have_text(str(len(registered)))
        assert len(registered) >= 4
        await expect(calc).not_to_contain_text("tok-123")  # env names only
        ghost = page.locator("#mcp-servers tr[data-server='ghost']")
        await expect(ghost.locator(".mcp-error")).to_contain_text("mcp-server", timeout=30_000)
        await shot(page, "mcp")
        page.once("dialog", lambda d: d.accept())
        await ghost.locator("button.danger").click()
        await expect(page.locator("#mcp-servers tr[data-server='ghost']")).to_have_count(0)
        servers: Any = setup.web.daemon.config.get("plugin.mcp.servers")
        stored = json.loads(servers) if isinstance(servers, str) else servers
        assert [s["name"] for s in stored] == ["calc"]
        assert stored[0]["env"] == {"API_TOKEN": "tok-123"}, "the page saved the masked value back as it was"

        # the add form: a command line with a quoted argument, and env lines
        await page.fill("#mcp-name", "notes")
        await page.fill("#mcp-target", '/no/such/notes-server --root "/home/me/My Notes"')
        await page.fill("#mcp-env", "NOTES_KEY=abc=def")
        await page.click("#mcp-add")
        await expect(page.locator("#mcp-servers tr[data-server='notes']")).to_be_visible()
        servers = setup.web.daemon.config.get("plugin.mcp.servers")
        added = next(s for s in (json.loads(servers) if isinstance(servers, str) else servers) if s["name"] == "notes")
        assert added == {"name": "notes", "command": "/no/such/notes-server", "args": ["--root", "/home/me/My Notes"],
                         "env": {"NOTES_KEY": "abc=def"}}
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await context.close()


async def test_skills_install_from_a_folder_and_switch_off(setup: Setup, tmp_path: Path) -> None:
    folder = tmp_path / "tea"
    folder.mkdir()
    (folder / "skill.md").write_text("---\nname: tea-brewing\ndescription: Brew green and oolong tea.\n---\nHeat.\n")
    context, page = await setup.page()
    try:
        await page.goto(setup.web.url + "#/skills")
        await page.fill("#skill-path", str(folder))
        await page.click("#skill-install-path")
        await expect(page.locator("#skill-result")).to_contain_text("Installed tea-brewing: on")
        row = page.locator("#skills-list tr[data-skill='tea-brewing']")
        await expect(row.locator(".badge")).to_have_text("on")
        await shot(page, "skills")
        await row.locator("button", has_text="Disable").click()
        await expect(row.locator(".badge")).to_have_text("off")
        assert "tea-brewing" not in setup.web.daemon.plugins.skills.prompt_block()
        await page.fill("#skill-path", "relative/path")
        await page.click("#skill-install-path")
        await expect(page.locator("#skill-result")).to_contain_text("full path")
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await context.close()


async def test_phone_width_layout(setup: Setup) -> None:
    config = setup.web.daemon.config
    if not config.get("core.llm.sources.main.base_url"):  # run apart from the first test (another xdist worker)
        for key, value in (("adapter", "openai"), ("base_url", setup.fake.base_url), ("model", "gpt-fake"),
                           ("api_key", "sk-right-key")):
            config.set(f"core.llm.sources.main.{key}", value)
        await setup.web.daemon.llm.reload()
    context, page = await setup.page(width=375, height=740)
    try:
        await page.goto(setup.web.url + "#/plugins")
        await page.wait_for_selector(".plugins-table")
        assert await page.evaluate("document.documentElement.scrollWidth") <= 375, "the page itself never scrolls sideways"
        wrap = page.locator(".table-wrap").first
        assert await wrap.evaluate("el => el.scrollWidth > el.clientWidth"), "the table scrolls inside its box"
        await shot(page, "phone-plugins")
        await page.goto(setup.web.url + "#/settings")
        await page.fill("#settings-filter", "zzz-no-such-setting")
        await expect(page.locator(".settings-group:visible")).to_have_count(0)
        await expect(page.locator("#settings-empty")).to_be_visible()
        await page.fill("#settings-filter", "temperature")
        await expect(page.locator(".settings-group:visible")).to_have_count(1)
        await shot(page, "phone-settings")
        await page.goto(setup.web.url + "#/setup")
        await expect(page.locator("#setup-test")).to_be_visible()
        assert await page.evaluate("document.documentElement.scrollWidth") <= 375
        await shot(page, "phone-setup")
        await page.goto(setup.web.url + "#/chat")
        # The memory loops may call the LLM in the background between tests (and take a scripted
        # turn, or put the source in cooldown on an unscripted one): every call gets this reply.
        setup.fake.default_turn = Turn.text("see https://example.com/" + "a-very-long-path-segment" * 12 + " ok")
        llm = setup.web.daemon.llm
        if "main" not in llm.config.sources():  # this test may run alone
            llm.save_source({"name": "main", "base_url": setup.fake.base_url, "model": "gpt-fake", "api_key": "sk-x"})
        llm.manager.reset()
        await page.fill("#chat-input", "a long link please")
        await page.press("#chat-input", "Enter")
        bubble = page.locator(".msg.assistant").last
        await expect(bubble.locator(".content")).to_contain_text("ok")
        box = await bubble.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 375
        await shot(page, "phone-chat")
        assert await page.evaluate("document.documentElement.scrollWidth") <= 375
        assert not page.errors  # type: ignore[attr-defined]
        setup.fake.default_turn = None
    finally:
        await context.close()


async def test_plugin_actions_visible_at_1280(setup: Setup) -> None:
    context, page = await setup.page()
    try:
        await page.goto(setup.web.url + "#/plugins")
        button = page.locator(".plugins-table td.actions button").first
        await expect(button).to_be_visible()
        box = await button.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1280
    finally:
        await context.close()


async def test_language_follows_the_browser_then_the_choice(setup: Setup) -> None:
    context, page = await setup.page(locale="zh-CN", stored_lang=False)
    try:
        await page.goto(setup.web.url + "#/setup")
        await expect(page.locator(".sidebar a[data-view='setup']")).to_have_text("模型源")
        await expect(page.locator("#setup-test")).to_have_text("测试")
        await page.goto(setup.web.url + "#/settings")
        temperature = page.locator(".setting[data-key='core.llm.temperature'] .setting-name")
        await expect(temperature).to_have_text("温度")
        await shot(page, "settings-zh")
        assert await page.evaluate("localStorage.getItem('ha-lang')") is None, "following the browser stores nothing"
        await page.goto(setup.web.url + "#/plugins")
        await expect(page.locator("tr[data-plugin='timer'] .badge")).to_have_text("运行中")
        await page.click("#lang-toggle")
        await expect(page.locator(".sidebar a[data-view='setup']")).to_have_text("LLM sources")
        await page.reload()
        await expect(page.locator(".sidebar a[data-view='setup']")).to_have_text("LLM sources")
        assert await page.evaluate("localStorage.getItem('ha-lang')") == "en", "the user's choice is kept"
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await context.close()


async def test_a_bad_setting_is_refused_in_chinese(setup: Setup) -> None:
    context, page = await setup.page(lang="zh")
    try:
        await page.goto(setup.web.url + "#/settings")
        await page.locator("[data-key='core.agent.max_tool_turns'].setting-input").fill("1000")
        await page.click("#settings-save")
        row = page.locator(".setting[data-key='core.agent.max_tool_turns']")
        await expect(row.locator(".field-error")).to_have_text("1000 高于最大值 100")
        await expect(page.locator("#settings-status")).to_contain_text("无效")
        assert setup.web.daemon.config.get("core.agent.max_tool_turns") != 1000
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await context.close()
