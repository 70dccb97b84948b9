"""The web UI in a real browser: Playwright driving Debian's chromium (one browser for the module).

Set HOMEAGENT_SCREENSHOTS=<folder> (e.g. docs/screenshots) to save screenshots of the main pages.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from homeagent.webui import start_webui
from tests.conftest import LLM_ENV
from tests.fakes.browser import ARGS, CHROMIUM, MISSING, shot
from tests.fakes.webui_fixtures import Web, add_sleep_tool, start_web

if not CHROMIUM.exists():
    pytest.skip(MISSING, allow_module_level=True)

from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("webui-browser")]

TRIPLES = [
    ("Alice", "lives_in", "Paris"),
    ("Alice", "likes", "green tea"),
    ("Alice", "works_at", "Acme"),
    ("Acme", "located_in", "Paris"),
    ("Bob", "friend_of", "Alice"),
]


@dataclass
class Stack:
    web: Web
    browser: Browser
    context: BrowserContext  # signed in once; tests open pages in it

    async def new_context(self) -> BrowserContext:
        context = await self.browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
        await context.add_init_script(
            "localStorage.getItem('ha-lang') || localStorage.setItem('ha-lang', 'en');"
            "localStorage.getItem('ha-theme') || localStorage.setItem('ha-theme', 'light');"
        )
        return context

    page: Page | None = None  # one page for the module: views change by their #/hash, as a user would

    async def show(self, view: str = "chat") -> Page:
        if self.page is None:
            self.page = await self.context.new_page()
            self.page.set_default_timeout(15_000)
            errors: list[str] = []
            self.page.on("pageerror", lambda exc: errors.append(str(exc)))
            self.page.errors = errors  # type: ignore[attr-defined]
            await self.page.goto(self.web.url + f"#/{view}")
        else:
            await self.page.evaluate("(view) => { location.hash = '#/' + view; }", view)
        name = view.split("/")[0]
        await self.page.wait_for_selector(f"#view[data-view='{name}'] > :not(p.muted)")
        return self.page



async def fill_pages(daemon: Daemon, data: Path) -> None:
    """Fill the daemon's own subsystems with what the pages show; the daemon wires every one of them itself."""
    from homeagent.memory.context import ContextEvent
    from homeagent.plugins.package import pack_plugin

    await daemon.graph.commit([{"subject": s, "relation": r, "object": o} for s, r, o in TRIPLES])
    daemon.context.append(ContextEvent(kind="user", input="Alice moved to Paris last spring.", channel="webui"))
    daemon.context.append(ContextEvent(kind="agent", response="Noted: Alice lives in Paris now.", channel="webui"))
    await daemon.docs.acommit("Alice works at Acme; Acme is in Paris.", summary="Alice's work")
    await daemon.knowledge.add("recipes", "# Tomato and egg\n\n1. Scramble the eggs.\n2. Add the **tomatoes**.\n")
    package, _, _ = await asyncio.to_thread(
        pack_plugin, Path(__file__).parent / "fixtures" / "plugins" / "luademo", data / "luademo.hmap"
    )
    await daemon.plugins.install(str(package))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    with pytest.MonkeyPatch.context() as mp:
        for name in LLM_ENV:
            mp.delenv(name, raising=False)
        data = tmp_path_factory.mktemp("web") / "d"
        data.mkdir()
        daemon = Daemon(DataPaths(data), web=False)
        await daemon.start()
        await fill_pages(daemon, data)
        web = await start_web(daemon)
        playwright = await async_playwright().start()
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        stack = Stack(web, browser, None)  # type: ignore[arg-type]
        stack.context = await stack.new_context()
        signed_in = await stack.context.request.post(web.url + "api/v1/login", data={"token": web.token})
        assert signed_in.ok
        try:
            yield stack
        finally:
            await browser.close()
            await playwright.stop()
            await web.server.close()
            await daemon.stop()


async def send(page: Page, text: str) -> None:
    await page.fill("#chat-input", text)
    await page.press("#chat-input", "Enter")


async def test_login_page_refuses_a_wrong_token_then_signs_in(stack: Stack) -> None:
    context = await stack.new_context()
    page = await context.new_page()
    page.errors = []  # type: ignore[attr-defined]
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))  # type: ignore[attr-defined]
    try:
        await page.goto(stack.web.url + "#/settings")
        await expect(page).to_have_url(stack.web.url + "login?next=/#/settings")
        await shot(page, "login")
        await page.fill("#token", "not-the-token")
        await page.click("#login-submit")
        await expect(page.locator("#login-error")).to_have_text("Wrong token.")
        await page.fill("#token", stack.web.token)
        await page.click("#login-submit")
        await expect(page.locator("#settings-save")).to_be_visible()  # back where it was going
        cookies = {c["name"]: c for c in await context.cookies()}
        assert cookies["homeagent_session"]["httpOnly"] is True
        assert cookies["homeagent_session"]["sameSite"] == "Strict"
        assert await page.evaluate("document.cookie.includes('homeagent_session')") is False
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await context.close()


async def test_streamed_chat_shows_the_tool_call(stack: Stack) -> None:
    page = await stack.show("chat")
    await send(page, "/tool output_list_channels {}")
    reply = page.locator(".msg.assistant").last
    card = reply.locator(".tool-call[data-tool='output_list_channels']")
    await expect(card).to_be_visible()
    await expect(card.locator(".badge")).to_have_text("ok")
    await expect(reply).to_have_class(re.compile(r"\bdone\b"))
    await expect(reply.locator(".content")).to_contain_text("The tool returned")
    await card.locator("summary").click()
    await expect(card.locator(".tool-result")).to_contain_text('"name": "webui"')
    await shot(page, "chat")
    assert not page.errors  # type: ignore[attr-defined]


async def test_model_output_cannot_inject_script(stack: Stack) -> None:
    page = await stack.show("chat")
    payload = (
        '**bold** <img src=x onerror="window.__xss=1"> <script>window.__xss=2</script> '
        '[click](javascript:window.__xss=3) <svg onload="window.__xss=4"></svg>'
    )
    await send(page, payload)
    reply = page.locator(".msg.assistant").last
    await expect(reply).to_have_class(re.compile(r"\bdone\b"))
    await expect(reply.locator(".content strong")).to_have_text("bold")  # Markdown was rendered
    await stack.web.daemon.channels.send("webui", 'proactive <img src=y onerror="window.__xss=5"> *hi*', {})
    await expect(page.locator(".msg.proactive.done em")).to_have_text("hi")
    assert await page.evaluate("window.__xss") is None
    messages = page.locator("#messages")
    assert await messages.locator(".content [onerror], .content [onload], .content script").count() == 0
    assert await messages.locator(".content a[href^='javascript']").count() == 0


async def test_interrupt_and_stop(stack: Stack) -> None:
    started = add_sleep_tool(stack.web.daemon, seconds=30)
    try:
        page = await stack.show("chat")
        await send(page, "/tool webtest_sleep {}")
        await asyncio.wait_for(started.wait(), 10)
        await expect(page.locator("#chat-stop")).to_be_visible()
        await expect(page.locator("#chat-send")).to_have_text("Interrupt")
        await send(page, "xyzzy plover")
        await expect(page.locator(".msg.user.interrupt").last).to_contain_text("xyzzy plover")
        await page.click("#chat-stop")
        stopped = page.locator(".msg.assistant.interrupted").last
        await expect(stopped.locator(".notice")).to_have_text("Stopped.")
        await expect(page.locator("#chat-stop")).to_be_hidden()
        # the interrupt text was not lost: it became the next input, and its reply comes to this page
        await expect(page.locator(".msg.proactive").last).to_contain_text("xyzzy plover")
    finally:
        stack.web.daemon.tools.unregister("webtest_sleep")


async def test_changing_a_setting(stack: Stack) -> None:
    page = await stack.show("settings")
    field = page.locator("[data-key='core.agent.max_tool_turns'].setting-input")
    await field.fill("1000")
    await page.click("#settings-save")
    row = page.locator(".setting[data-key='core.agent.max_tool_turns']")
    await expect(row.locator(".field-error")).to_contain_text("maximum")
    assert stack.web.daemon.config.get("core.agent.max_tool_turns") == 10
    await field.fill("17")
    await page.click("#settings-save")
    await expect(page.locator("#settings-status")).to_have_text("Saved 1 setting(s).")
    assert stack.web.daemon.config.get("core.agent.max_tool_turns") == 17
    await expect(page.locator("[data-key='core.agent.max_tool_turns'].setting-input")).to_have_value("17")
    secret = page.locator("[data-key='core.llm.api_key'].setting-input")
    assert await secret.get_attribute("type") == "password"
    await shot(page, "settings")


async def test_graph_view_renders_nodes(stack: Stack) -> None:
    page = await stack.show("memory/graph")
    names = {t[0] for t in TRIPLES} | {t[2] for t in TRIPLES}
    await expect(page.locator("#memory-graph")).to_have_attribute("data-nodes", str(len(names)))
    assert await page.evaluate("window.__haGraph.edges().length") == len(TRIPLES)
    assert set(await page.evaluate("window.__haGraph.nodes().map(n => n.id())")) == names
    await page.select_option("#memory-depth", "1")
    await page.fill("#memory-search", "Bob")
    await page.press("#memory-search", "Enter")
    await expect(page.locator("#memory-graph")).to_have_attribute("data-nodes", "2")
    await page.fill("#memory-search", "")
    await page.press("#memory-search", "Enter")
    await expect(page.locator("#memory-graph")).to_have_attribute("data-nodes", str(len(names)))
    await shot(page, "memory-graph")


async def test_theme_language_and_other_pages(stack: Stack) -> None:
    page = await stack.show("chat")
    assert await page.evaluate("document.documentElement.dataset.theme") == "light"
    await page.click("#theme-toggle")
    assert await page.evaluate("document.documentElement.dataset.theme") == "dark"
    await page.click("#lang-toggle")
    await expect(page.locator(".sidebar a[data-view='chat']")).to_have_text("对话")
    await expect(page.locator("#chat-send")).to_have_text("发送")
    await shot(page, "chat-zh-dark")
    await page.click("#lang-toggle")
    await page.click("#theme-toggle")
    page = await stack.show("overview")
    await expect(page.locator("#event-log .event").first).to_be_visible()
    sandbox = stack.web.daemon.sandbox.status()  # the Sandbox tile says what the daemon says, orange when unconfined
    await expect(page.locator("#overview-sandbox .stat-value")).to_have_text(sandbox["summary"])
    assert await page.locator("#overview-sandbox.warn").count() == (0 if sandbox["confined"] else 1)
    await shot(page, "overview")
    page = await stack.show("plugins")
    row = page.locator("tr[data-plugin='luademo']")
    await expect(row.locator(".badge")).to_have_text("running")
    await shot(page, "plugins")
    page = await stack.show("knowledge")
    await page.click("#knowledge-list a:text('recipes')")
    await expect(page.locator("#knowledge-preview h1")).to_have_text("Tomato and egg")
    await expect(page.locator("#knowledge-preview strong")).to_have_text("tomatoes")
    await shot(page, "knowledge")
    page = await stack.show("memory/timeline")
    await expect(page.locator(".event-card", has_text="Alice lives in Paris").first).to_be_visible()
    page = await stack.show("adapters")
    await page.click("#adapter-list [data-adapter='openai'] a")
    await expect(page.locator("#adapter-code")).to_have_value(re.compile("transform_request"))
    await shot(page, "adapters")
    assert not page.errors  # type: ignore[attr-defined]


async def test_a_message_sent_while_history_loads_stays_last(stack: Stack) -> None:
    context = await stack.new_context()
    page = await context.new_page()
    page.set_default_timeout(15_000)
    history_asked = asyncio.Event()
    release = asyncio.Event()

    async def slow_history(route: Any) -> None:
        history_asked.set()
        await release.wait()
        await route.continue_()

    try:
        assert (await context.request.post(stack.web.url + "api/v1/login", data={"token": stack.web.token})).ok
        async with stack.web.client() as c:  # a conversation that has a message already
            conv = (await c.post("/api/v1/conversations", json={"title": "earlier"})).json()["id"]
            assert (await c.post("/api/v1/chat", json={"text": "an earlier message", "conversation": conv})).is_success
        await page.route("**/api/v1/conversations/*/entries*", slow_history)
        await page.goto(stack.web.url + f"#/chat/{conv}")
        await asyncio.wait_for(history_asked.wait(), 15)
        await send(page, "sent before the history came")
        await expect(page.locator(".msg.user").last).to_contain_text("sent before the history came")
        release.set()
        reply = page.locator(".msg.assistant").last
        await expect(reply).to_have_class(re.compile(r"\bdone\b"))
        await expect(reply).to_contain_text("sent before the history came")
        # the history came in above the new message, not after it
        await expect(page.locator(".msg.user", has_text="an earlier message")).not_to_have_count(0)
        await expect(page.locator(".msg.user").last).to_contain_text("sent before the history came")
        assert await page.locator(".msg.assistant").count() >= 2
    finally:
        release.set()
        await context.close()


async def test_ui_degrades_without_node_modules(stack: Stack) -> None:
    bare = await start_webui(stack.web.daemon.web_host(), listen="127.0.0.1:0", vendor={})
    context = await stack.new_context()  # its own cookie jar: the session belongs to this server
    try:
        assert (await context.request.post(bare.url + "api/v1/login", data={"token": stack.web.token})).ok
        page = await context.new_page()
        await page.goto(bare.url + "#/chat")
        await send(page, "**still works**")
        reply = page.locator(".msg.assistant").last
        await expect(reply).to_have_class(re.compile(r"\bdone\b"))
        await expect(reply.locator(".content.plain")).to_contain_text("**still works**")
        await page.evaluate("location.hash = '#/memory/graph'")
        await expect(page.locator(".graph-list li").first).to_contain_text("—")
    finally:
        await context.close()
        await bare.close()


async def test_reasoning_is_visible_while_it_streams(stack: Stack) -> None:
    """Last in the module: it points the daemon at a fake LLM for one turn, then takes it away again."""
    from tests.fakes.llm_openai import FakeOpenAI, Turn

    config = stack.web.daemon.config
    keys = {"base_url": "", "model": "gpt-fake", "api_key": "sk-test-0000", "adapter": "openai"}
    async with FakeOpenAI() as fake:
        keys["base_url"] = fake.base_url
        fake.script(Turn.slow("The answer is **42**.", chunks=6, delay=0.15, reasoning="First, think it over."))
        try:
            for field, value in keys.items():
                config.set(f"core.llm.sources.fake.{field}", value)
            await stack.web.daemon.llm.reload()
            page = await stack.show("chat")
            await send(page, "what is the answer?")
            reply = page.locator(".msg.assistant").last
            reasoning = reply.locator(".reasoning")
            await expect(reasoning).to_be_visible()
            await expect(reasoning.locator("pre")).to_have_text("First, think it over.")
            await expect(reply).to_have_class(re.compile(r"\bstreaming\b"))  # seen while the answer streams
            await expect(reply).to_have_class(re.compile(r"\bdone\b"))
            await expect(reply.locator(".content strong")).to_have_text("42")
        finally:
            for field in keys:
                config.delete(f"core.llm.sources.fake.{field}")
            await stack.web.daemon.llm.reload()


async def test_a_waiting_tool_call_is_allowed_from_the_chat_and_logged(stack: Stack) -> None:
    page = await stack.show("chat")
    await send(page, '/tool cmd_run {"command": "touch approved-in-browser"}')
    card = page.locator(".approval").last
    await expect(card.locator("code").first).to_have_text("cmd_run")
    await expect(card.locator("pre")).to_contain_text("touch approved-in-browser")
    await expect(card.locator("[data-answer='always']")).to_have_text("Always for touch *")
    await shot(page, "approval")
    await card.locator("[data-answer='once']").click()
    await expect(card.locator(".badge")).to_have_text("allowed")
    tool = page.locator(".msg.assistant").last.locator(".tool-call[data-tool='cmd_run']")
    await expect(tool.locator(".badge")).to_have_text("ok")
    page = await stack.show("approvals")
    await expect(page.locator("#approvals-log")).to_contain_text("touch approved-in-browser")
    await expect(page.locator("#approvals-log .badge").first).to_have_text("allowed")
    # a plugin install is the owner's to allow one call at a time: no "Always" button
    page = await stack.show("chat")
    await send(page, '/tool plugin_install {"source": "/nowhere/plugin.hmap"}')
    card = page.locator(".approval").last
    await expect(card.locator("code").first).to_have_text("plugin_install")
    await expect(card.locator("[data-answer='once']")).to_be_visible()
    await expect(card.locator("[data-answer='always']")).to_have_count(0)
    await card.locator("[data-answer='deny']").click()
    await expect(card.locator(".badge")).to_have_text("denied")
    assert not page.errors  # type: ignore[attr-defined]
