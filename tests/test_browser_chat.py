"""The chat's conversations in headless chromium (Debian's), against a fake OpenAI-compatible LLM on loopback.

One daemon and one browser for the module. What is checked is what a user
sees: after a reload the chat shows exactly what it showed live (the
interrupt, the tool call with its arguments and result, the reasoning
folded, the partial text of a stopped reply, a proactive message as the
agent's); the list makes, finds, renames, exports and deletes chats; a long
chat opens on its last page and loads older ones on scroll; regenerate and
edit continue from a message; at phone width the list is a drawer and the
Chinese page dates in Chinese.

HOMEAGENT_SCREENSHOTS=<folder> saves screenshots (chat-conversations, phone-conversations).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from homeagent.conversations import NewEntry
from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from tests.conftest import LLM_ENV
from tests.fakes.browser import ARGS, CHROMIUM, MISSING, shot
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.webui_fixtures import Web, start_web

if not CHROMIUM.exists():
    pytest.skip(MISSING, allow_module_level=True)

from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("webui-browser")]

# what one bubble shows: its kind, its label, its text, its notices, its tool cards
SHOWN = """() => [...document.querySelectorAll('#messages .msg')].map(el => ({
  cls: [...el.classList].filter(c => ['user', 'assistant', 'interrupt', 'proactive', 'interrupted', 'failed']
                                     .includes(c)).join(' '),
  who: el.querySelector('.who').textContent,
  text: (el.querySelector('.content') || {textContent: ''}).textContent.trim(),
  notices: [...el.querySelectorAll('.notice:not([hidden])')].map(n => n.textContent),
  reasoning: el.querySelector('.reasoning:not([hidden]) pre')?.textContent || '',
  tools: [...el.querySelectorAll('.tool-call')].map(t => [t.dataset.tool, t.querySelector('.badge').textContent,
          t.querySelector('.tool-args')?.textContent || '', t.querySelector('.tool-result')?.textContent || '']),
}))"""



@dataclass
class Chat:
    web: Web
    browser: Browser
    fake: FakeOpenAI

    @property
    def daemon(self) -> Daemon:
        return self.web.daemon

    async def page(self, *, width: int = 1280, height: int = 800, lang: str = "en",
                   locale: str = "en-US") -> tuple[BrowserContext, Page]:
        context = await self.browser.new_context(viewport={"width": width, "height": height}, locale=locale)
        await context.add_init_script(f"localStorage.getItem('ha-lang') || localStorage.setItem('ha-lang', '{lang}');"
                                      "localStorage.getItem('ha-theme') || localStorage.setItem('ha-theme', 'light');")
        assert (await context.request.post(self.web.url + "api/v1/login", data={"token": self.web.token})).ok
        page = await context.new_page()
        page.set_default_timeout(15_000)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.errors = errors  # type: ignore[attr-defined]
        return context, page

    async def conversation(self, title: str = "") -> int:
        return (await self.daemon.conversations.create(title)).id


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chat(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chat]:
    async with FakeOpenAI() as fake:
        fake.default_turn = Turn.text("OK.")
        with pytest.MonkeyPatch.context() as mp:
            for name in LLM_ENV:
                mp.delenv(name, raising=False)
            mp.setenv("HOMEAGENT_LLM_BASE_URL", fake.base_url)
            mp.setenv("HOMEAGENT_LLM_API_KEY", "sk-test-browser-chat")
            mp.setenv("HOMEAGENT_LLM_MODEL", "gpt-fake")
            data = tmp_path_factory.mktemp("chat") / "d"
            data.mkdir()
            daemon = Daemon(DataPaths(data), web=False)
            await daemon.start()
        web = await start_web(daemon)
        playwright = await async_playwright().start()
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            yield Chat(web, browser, fake)
        finally:
            await browser.close()
            await playwright.stop()
            await web.server.close()
            await daemon.stop()


async def send(page: Page, text: str) -> None:
    await page.fill("#chat-input", text)
    await page.press("#chat-input", "Enter")


async def test_a_reload_shows_what_was_shown_live(chat: Chat) -> None:
    chat.fake.script(
        Turn.tool_calls([("output_list_channels", {})], reasoning="Checking the channels first."),
        Turn.slow("word " * 60, chunks=60, delay=0.05),
        Turn.text("Answered after the interrupt."),
        Turn.slow("partial " * 100, chunks=100, delay=0.05),
    )
    conv = await chat.conversation()
    context, page = await chat.page()
    try:
        await page.goto(chat.web.url + f"#/chat/{conv}")
        await send(page, "go")
        reply = page.locator(".msg.assistant").last
        await expect(reply.locator(".content")).to_contain_text("word word")
        await send(page, "mind the tea")  # a reply streams: this interrupts it
        await expect(reply).to_have_class(re.compile(r"\bdone\b"))
        await expect(reply.locator(".content")).to_have_text("Answered after the interrupt.")
        await send(page, "tell a long story")
        stopped = page.locator(".msg.assistant").last
        await expect(stopped.locator(".content")).to_contain_text("partial partial")
        await page.click("#chat-stop")
        await expect(stopped).to_have_class(re.compile(r"\binterrupted\b"))
        await chat.daemon.channels.send("webui", "Tea is **ready**!", {"group_id": f"conv:{conv}"})
        await expect(page.locator(".msg.proactive.done strong")).to_have_text("ready")
        await expect(page.locator("#chat-stop")).to_be_hidden()
        live = await page.evaluate(SHOWN)

        await page.reload()
        await expect(page.locator(".msg.proactive.done")).to_have_count(1)
        again = await page.evaluate(SHOWN)
        assert again == live
        kinds = [m["cls"] for m in again]
        assert kinds == ["user", "assistant", "user interrupt", "user", "assistant interrupted", "assistant proactive"]
        first = again[1]
        assert first["reasoning"] == "Checking the channels first."
        assert first["tools"][0][:2] == ["output_list_channels", "ok"] and "webui" in first["tools"][0][3]
        assert first["notices"] == ["Interrupted — the model is answering again"]
        assert again[2]["who"] == "You · Interrupt" and again[2]["text"] == "mind the tea"
        assert again[4]["notices"] == ["Stopped."] and again[4]["text"].startswith("partial partial")
        assert again[5]["who"] == "HomeAgent · sent to this page"  # the agent's, never "You"
        assert await page.locator(".reasoning[open]").count() == 0  # reasoning is folded once the reply is done
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await context.close()


async def test_the_list_makes_finds_renames_exports_and_deletes_chats(chat: Chat) -> None:
    context, page = await chat.page()
    try:
        await page.goto(chat.web.url + "#/chat")
        await page.click("#conv-new")
        await send(page, "alpha: plans for Paris")
        await expect(page.locator(".msg.assistant.done")).to_have_count(1)
        await expect(page.locator("#conv-title")).to_have_text("alpha: plans for Paris")
        await page.click("#conv-new")
        await expect(page.locator(".msg")).to_have_count(0)
        await send(page, "beta: which tea")
        await expect(page.locator(".msg.assistant.done")).to_have_count(1)
        items = page.locator("#conv-list li[data-conv]")
        await expect(items.first).to_contain_text("beta: which tea")  # the most recently used first
        await expect(items.nth(1)).to_contain_text("alpha: plans for Paris")
        await shot(page, "chat-conversations")

        await page.fill("#conv-search", "paris")
        await expect(items).to_have_count(1)
        await expect(items.first.locator(".conv-match")).to_contain_text("Paris")
        await page.fill("#conv-search", "")
        await expect(items.nth(1)).to_be_visible()

        await page.click("#conv-rename")
        await page.fill("#conv-rename-input", "Tea chat")
        await page.press("#conv-rename-input", "Enter")
        await expect(page.locator("#conv-title")).to_have_text("Tea chat")
        await expect(items.first.locator(".conv-title")).to_have_text("Tea chat")
        href = await page.locator("#conv-export-md").get_attribute("href")
        assert href is not None
        exported = await context.request.get(chat.web.url + href.lstrip("/"))
        assert exported.ok and (await exported.text()).startswith("# Tea chat")
        as_json = await context.request.get(chat.web.url + (await page.locator("#conv-export-json").get_attribute(
            "href") or "").lstrip("/"))
        assert [e["text"] for e in json.loads(await as_json.text())["entries"]] == ["beta: which tea", "OK."]

        # the older chat is one click away, with its own messages
        await items.nth(1).locator("a").click()
        await expect(page.locator("#conv-title")).to_have_text("alpha: plans for Paris")
        await expect(page.locator(".msg.user")).to_have_text(re.compile("alpha: plans for Paris"))
        listed = await items.count()
        page.once("dialog", lambda d: d.accept())
        await page.click("#conv-delete")
        await expect(items).to_have_count(listed - 1)
        await expect(page.locator("#conv-title")).not_to_have_text("alpha: plans for Paris")
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await context.close()


async def test_a_long_chat_opens_on_its_last_page_and_regenerate_and_edit_continue(chat: Chat) -> None:
    long = await chat.conversation("five thousand")
    rows = [NewEntry("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(5000)]
    await asyncio.to_thread(chat.daemon.conversations.store.import_entries, long, rows)
    context, page = await chat.page()
    try:
        await page.goto(chat.web.url + f"#/chat/{long}")
        messages = page.locator("#messages .msg")
        await expect(messages).to_have_count(50)
        await expect(messages.last).to_contain_text("message 4999")
        await page.evaluate("document.getElementById('messages').scrollTop = 0;"
                            "document.getElementById('messages').dispatchEvent(new Event('scroll'))")
        await expect(messages).to_have_count(100)
        await expect(messages.first).to_contain_text("message 4900")

        conv = await chat.conversation()
        await page.evaluate(f"location.hash = '#/chat/{conv}'")
        chat.fake.script(Turn.text("one"), Turn.text("two"), Turn.text("two, again"))
        await send(page, "first question")
        await expect(page.locator(".msg.assistant.done")).to_have_count(1)
        await send(page, "second question")
        await expect(page.locator(".msg.assistant.done")).to_have_count(2)
        await page.locator(".msg.assistant .regenerate").click()
        await expect(page.locator(".msg.assistant.done").last.locator(".content")).to_have_text("two, again")
        await expect(page.locator(".msg.user")).to_have_count(2)
        assert await page.locator(".regenerate").count() == 1  # on the last reply only

        chat.fake.script(Turn.text("edited answer"))
        await page.locator(".msg.user").first.locator(".edit").click()
        await page.fill(".edit-text", "first question, reworded")
        await page.click(".edit-save")
        await expect(page.locator(".msg.assistant.done .content")).to_have_text(["edited answer"])
        await expect(page.locator(".msg.user .content")).to_have_text(["first question, reworded"])
        sent = json.dumps(chat.fake.requests[-1].body["messages"][1:])
        assert "second question" not in sent and "two" not in sent
        await page.reload()
        await expect(page.locator(".msg .content")).to_have_text(["first question, reworded", "edited answer"])
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await context.close()


async def test_at_phone_width_the_list_is_a_drawer_and_chinese_dates_are_chinese(chat: Chat) -> None:
    conv = await chat.conversation("茶")
    await chat.daemon.conversations.proactive(conv, "该喝茶了。", {})
    context, page = await chat.page(width=375, height=740, lang="zh", locale="zh-CN")
    try:
        await page.goto(chat.web.url + f"#/chat/{conv}")
        await expect(page.locator(".msg.proactive .who")).to_have_text("HomeAgent · 发送到本页面")
        panel = page.locator("#conv-panel")
        box = await panel.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 0, "the list is out of the way until asked for"
        await page.click("#conv-toggle")
        await expect(panel).to_have_class(re.compile(r"\bopen\b"))
        await page.wait_for_timeout(250)  # the drawer slides in
        box = await panel.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375
        await expect(page.locator("#conv-new")).to_have_text("+ 新对话")
        await expect(page.locator("#conv-search")).to_have_attribute("placeholder", "搜索对话…")
        # a chat from last year is dated in Chinese: 2025年3月7日
        old = (await asyncio.to_thread(chat.daemon.conversations.store.create, "去年的对话", now=1741327200)).id
        await page.fill("#conv-search", "去年")
        await expect(page.locator(f"#conv-list li[data-conv='{old}'] .conv-when")).to_have_text(
            re.compile(r"^2025年3月7日$"))
        await page.fill("#conv-search", "")
        await expect(page.locator("#conv-list li[data-conv]")).not_to_have_count(1)
        await shot(page, "phone-conversations")
        await page.locator(f"#conv-list li[data-conv='{conv}'] a").click()
        await expect(panel).not_to_have_class(re.compile(r"\bopen\b"))
        await page.wait_for_timeout(250)  # the drawer slides out
        await shot(page, "phone-chat-zh")
        assert await page.evaluate("document.documentElement.scrollWidth") <= 375
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await context.close()
