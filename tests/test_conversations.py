"""Web conversations through the HTTP API of a real daemon, with a fake OpenAI-compatible LLM over loopback.

What a conversation promises, checked where a user would notice: the prompt
of a turn in conversation A holds A's recent turns and never B's (read off
what the fake LLM was sent), both share the one long-term memory, the
transcript gives back what the chat showed (tool calls with arguments and
results, reasoning, an interrupt, the partial text of a stopped reply, a
proactive message as the agent's), regenerate and edit continue from a
message (the transcript and the model's recent past both drop what came
after), pages come by cursor, bad input gets a clear error and changes
nothing, and conversations.db survives a restart and a corrupt file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from homeagent.conversations import NewEntry
from homeagent.daemon import Daemon
from homeagent.paths import DataPaths
from tests.fakes.llm_openai import FakeOpenAI, Turn
from tests.fakes.webui_fixtures import Web, start_web


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        server.default_turn = Turn.text("OK.")
        yield server


@pytest.fixture
async def web(data_dir: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Web]:
    monkeypatch.setenv("HOMEAGENT_LLM_BASE_URL", fake.base_url)
    monkeypatch.setenv("HOMEAGENT_LLM_API_KEY", "sk-test-secret-0000")
    monkeypatch.setenv("HOMEAGENT_LLM_MODEL", "gpt-fake")
    daemon = Daemon(DataPaths(data_dir), web=False)
    await daemon.start()
    w = await start_web(daemon)
    try:
        yield w
    finally:
        await w.server.close()
        await daemon.stop()


async def new(c: httpx.AsyncClient, title: str = "") -> int:
    response = await c.post("/api/v1/conversations", json={"title": title} if title else None)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


async def say(c: httpx.AsyncClient, conversation: int, text: str) -> dict[str, Any]:
    response = await c.post("/api/v1/chat", json={"text": text, "conversation": conversation})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def frames(response: httpx.Response) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            out.append(json.loads(line[5:]))
            if out[-1].get("type") == "response":
                break
    return out


async def entries(c: httpx.AsyncClient, conversation: int, **params: Any) -> list[dict[str, Any]]:
    response = await c.get(f"/api/v1/conversations/{conversation}/entries", params=params)
    assert response.status_code == 200, response.text
    return list(response.json()["entries"])


def prompt_of(fake: FakeOpenAI, index: int = -1) -> str:
    """Everything but the system prompt of one request the fake LLM got, as text."""
    return json.dumps(fake.requests[index].body["messages"][1:], ensure_ascii=False)


async def test_conversations_keep_their_own_recent_turns_and_share_long_term_memory(web: Web, fake: FakeOpenAI) -> None:
    async with web.client() as c:
        a, b = await new(c), await new(c, "Teas")
        await say(c, a, "My name is Zed.")
        await say(c, b, "I like green tea.")
        await say(c, a, "what is my name?")
        assert "My name is Zed." in prompt_of(fake) and "green tea" not in prompt_of(fake)
        await say(c, b, "which tea do I like?")
        assert "green tea" in prompt_of(fake) and "Zed" not in prompt_of(fake)
        # a turn outside every conversation (the terminal's, or the API without "conversation") sees neither
        answer = await c.post("/api/v1/chat", json={"text": "outside"})
        assert answer.status_code == 200 and "Zed" not in prompt_of(fake) and "green tea" not in prompt_of(fake)
        # the long-term memory is one: a note the model kept in A is found in B
        fake.script(Turn.tool_calls([("doc_commit", {"content": "Zed keeps three beehives."})]), Turn.text("Kept."))
        await say(c, a, "remember that I keep three beehives")
        fake.script(Turn.tool_calls([("doc_query", {"query": "beehives"})]), Turn.text("You keep bees."))
        await say(c, b, "what do I keep?")
        assert "beehives" not in prompt_of(fake, -2)  # not from B's recent turns
        recalled = [m for m in fake.requests[-1].body["messages"] if m["role"] == "tool"]
        assert recalled and "Zed keeps three beehives." in recalled[0]["content"]
        # what B recalled joins B's recent past (as recalled memory), not A's
        await say(c, b, "and then?")
        assert "【recalled memory" in prompt_of(fake) and "three beehives" in prompt_of(fake)
        await say(c, a, "and in A?")
        assert "【recalled memory" not in prompt_of(fake)
        listed = (await c.get("/api/v1/conversations")).json()["conversations"]
        assert [x["id"] for x in listed] == [a, b]  # most recently used first
        assert listed[0]["title"] == "My name is Zed." and listed[0]["entries"] == 8  # titled by its first message
        assert listed[1]["title"] == "Teas" and listed[1]["entries"] == 8
    scopes = {e.meta.get("group_id", "") for e in web.daemon.context.timeline()}
    assert scopes == {f"conv:{a}", f"conv:{b}", ""}


async def test_rename_search_delete_and_export(web: Web, fake: FakeOpenAI) -> None:
    fake.script(Turn.tool_calls([("output_list_channels", {})]), Turn.text("Channels: webui, cli.", reasoning="Look."))
    async with web.client() as c:
        a, b = await new(c), await new(c)
        await say(c, a, "List the channels please")
        await say(c, b, "Something about Paris")
        renamed = await c.patch(f"/api/v1/conversations/{b}", json={"title": "  Trip   planning "})
        assert renamed.status_code == 200 and renamed.json()["title"] == "Trip planning"
        found = (await c.get("/api/v1/conversations", params={"q": "paris"})).json()["conversations"]
        assert [x["id"] for x in found] == [b] and "Paris" in found[0]["match"]["text"]
        assert [x["id"] for x in (await c.get("/api/v1/conversations", params={"q": "trip"})).json()[
            "conversations"]] == [b]
        assert (await c.get("/api/v1/conversations", params={"q": "100%_"})).json()["conversations"] == []

        md = await c.get(f"/api/v1/conversations/{a}/export")
        assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
        assert f'filename="conversation-{a}.md"' in md.headers["content-disposition"]
        text = md.text
        assert text.startswith("# List the channels please")
        assert "### You" in text and "### HomeAgent" in text and "<code>output_list_channels</code>" in text
        assert "Channels: webui, cli." in text and "<summary>Reasoning</summary>" in text
        doc = (await c.get(f"/api/v1/conversations/{a}/export", params={"format": "json"})).json()
        assert doc["format"] == "homeagent.conversation/1" and doc["conversation"]["id"] == a
        reply = doc["entries"][1]
        assert reply["kind"] == "assistant" and reply["tools"][0]["tool"] == "output_list_channels"
        assert reply["tools"][0]["status"] == "ok" and "webui" in reply["tools"][0]["result"]

        deleted = await c.delete(f"/api/v1/conversations/{a}")
        assert deleted.status_code == 200 and deleted.json() == {"deleted": a}
        assert (await c.get(f"/api/v1/conversations/{a}")).status_code == 404
        assert (await c.get(f"/api/v1/conversations/{a}/entries")).status_code == 404
        assert [x["id"] for x in (await c.get("/api/v1/conversations")).json()["conversations"]] == [b]


async def test_the_transcript_is_what_the_chat_showed(web: Web, fake: FakeOpenAI) -> None:
    daemon = web.daemon
    fake.script(
        Turn.tool_calls([("output_list_channels", {})], reasoning="I should check the channels."),
        Turn.slow("word " * 80, chunks=80, delay=0.05),
        Turn.text("Done, with the interrupt in mind."),
    )
    async with web.client() as c:
        conv = await new(c)
        other = await new(c)
        async with c.stream("POST", "/api/v1/chat/stream", json={"text": "go", "conversation": conv}) as response:
            seen: list[dict[str, Any]] = []
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                seen.append(json.loads(line[5:]))
                if seen[-1]["type"] == "content_delta" and sum(f["type"] == "content_delta" for f in seen) == 3:
                    async with web.client() as c2:  # an interrupt while the reply streams: the model answers again
                        assert (await c2.post("/api/v1/chat/interrupt",
                                              json={"text": "mind the tea", "conversation": conv})).status_code == 200
                if seen[-1]["type"] == "response":
                    break
        assert seen[0] == {"type": "accepted", "id": seen[0]["id"], "conversation": conv, "entry": 1, "reply_entry": 2}
        # a reply that is stopped keeps its partial text
        fake.script(Turn.slow("partial " * 100, chunks=100, delay=0.05))
        async with c.stream("POST", "/api/v1/chat/stream", json={"text": "long story", "conversation": conv}) as r:
            stopped: list[dict[str, Any]] = []
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                stopped.append(json.loads(line[5:]))
                if stopped[-1]["type"] == "content_delta" and sum(f["type"] == "content_delta" for f in stopped) == 4:
                    assert (await c.post("/api/v1/chat/cancel")).json() == {"cancelled": True}
                if stopped[-1]["type"] == "response":
                    break
        assert stopped[-1]["interrupted"] and stopped[-1]["text"] == ""
        partial = stopped[-1]["partial"]
        assert partial.startswith("partial partial") and not any(f.get("reset") for f in stopped)
        # proactive messages: one sent into this conversation, one with no conversation (goes to the last used)
        await daemon.channels.send("webui", "Tea time!", {"group_id": f"conv:{conv}", "reply_to": "t1"})
        await daemon.channels.send("webui", "A reminder from the terminal", {})
        shown = await entries(c, conv)
        assert await entries(c, other) == []  # nothing of this conversation went to the other one

    kinds = [e["kind"] for e in shown]
    assert kinds == ["user", "assistant", "interrupt", "user", "assistant", "proactive", "proactive"], kinds
    first = shown[1]
    assert first["reasoning"] == "I should check the channels."
    assert first["tools"] == [{"tool": "output_list_channels", "status": "ok", "arguments": {},
                               "result": first["tools"][0]["result"]}] and "webui" in first["tools"][0]["result"]
    assert first["text"] == "Done, with the interrupt in mind." and first["retried"] == 1 and first["source"] == "env"
    assert shown[2]["text"] == "mind the tea"  # below the reply it interrupted, where the page showed it
    assert shown[4]["stopped"] is True and shown[4]["text"] == partial and "error" not in shown[4]
    assert shown[5]["text"] == "Tea time!" and shown[5]["reply_to"] == "t1"
    assert shown[6]["text"] == "A reminder from the terminal"
    # the interrupt reached the model
    assert any("[打断消息]" in str(m.get("content")) and "mind the tea" in str(m.get("content"))
               for m in fake.requests[2].body["messages"])


async def test_a_reminder_set_in_a_conversation_answers_there(web: Web, fake: FakeOpenAI) -> None:
    fake.script(Turn.tool_calls([("timer_set", {"duration": "1s", "message": "stretch"})]), Turn.text("Set."))
    fake.default_turn = Turn.text("Time to stretch!")
    async with web.client() as c:
        first, second = await new(c), await new(c)
        await say(c, first, "remind me in a second to stretch")
        await say(c, second, "unrelated")  # the last used is now the other conversation
        for _ in range(100):
            shown = await entries(c, first)
            if shown[-1]["kind"] == "proactive":
                break
            await asyncio.sleep(0.1)
        assert shown[-1]["kind"] == "proactive" and shown[-1]["text"] == "Time to stretch!"
        assert [e["kind"] for e in await entries(c, second)] == ["user", "assistant"]


async def test_regenerate_and_edit_continue_from_the_message(web: Web, fake: FakeOpenAI) -> None:
    async with web.client() as c:
        conv = await new(c)
        fake.script(Turn.text("one"), Turn.text("two"), Turn.text("three"))
        for text in ("first question", "second question", "third question"):
            await say(c, conv, text)
        before = await entries(c, conv)
        assert [e["text"] for e in before] == ["first question", "one", "second question", "two", "third question",
                                               "three"]
        fake.script(Turn.text("three, again"))
        async with c.stream("POST", f"/api/v1/conversations/{conv}/regenerate") as response:
            regen = await frames(response)
        assert regen[0]["type"] == "accepted" and regen[0]["dropped"] == 2 and regen[0]["forgotten"] == 2
        assert regen[-1]["text"] == "three, again"
        sent = prompt_of(fake)
        assert "third question" in sent and sent.count("third question") == 1 and '"three"' not in sent
        after = await entries(c, conv)
        assert [e["text"] for e in after] == ["first question", "one", "second question", "two", "third question",
                                              "three, again"]
        assert after[:4] == before[:4]  # the earlier entries are the same rows

        fake.script(Turn.text("two, edited"))
        async with c.stream("POST", f"/api/v1/conversations/{conv}/edit",
                            json={"entry": before[2]["id"], "text": "second question, reworded"}) as response:
            edited = await frames(response)
        assert edited[0]["dropped"] == 4 and edited[-1]["text"] == "two, edited"
        sent = prompt_of(fake)
        assert "first question" in sent and "second question, reworded" in sent
        assert "third question" not in sent and '"second question"' not in sent
        assert [e["text"] for e in await entries(c, conv)] == ["first question", "one", "second question, reworded",
                                                                 "two, edited"]
        # the model's recent past of this conversation holds exactly the same turns
        await say(c, conv, "and now?")
        sent = prompt_of(fake)
        assert "first question" in sent and "reworded" in sent and "third" not in sent and "three" not in sent


async def test_pages_by_cursor(web: Web) -> None:
    daemon = web.daemon
    async with web.client() as c:
        conv = await new(c, "long")
        rows = [NewEntry("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(120)]
        await asyncio.to_thread(daemon.conversations.store.import_entries, conv, rows)
        got: list[str] = []
        before: int | None = None
        pages = []
        while True:
            params: dict[str, Any] = {"limit": 50}
            if before is not None:
                params["before"] = before
            page = (await c.get(f"/api/v1/conversations/{conv}/entries", params=params)).json()
            pages.append(len(page["entries"]))
            got[:0] = [e["text"] for e in page["entries"]]
            if not page["more"]:
                assert page["before"] is None
                break
            before = page["before"]
            assert before == page["entries"][0]["id"]
        assert pages == [50, 50, 20]
        assert got == [f"message {i}" for i in range(120)]
        assert (await c.get(f"/api/v1/conversations/{conv}/entries", params={"limit": 100000})).json()[
            "entries"].__len__() == 120  # capped at 500 a page
        bad = await c.get(f"/api/v1/conversations/{conv}/entries", params={"before": "abc"})
        assert bad.status_code == 400 and "before" in bad.json()["error"]


async def test_bad_input_gets_a_clear_error_and_changes_nothing(web: Web, fake: FakeOpenAI) -> None:
    async with web.client() as c:
        conv = await new(c)
        unknown = await c.post("/api/v1/chat/stream", json={"text": "hi", "conversation": 999})
        assert unknown.status_code == 404 and "no conversation 999" in unknown.json()["error"]
        assert (await c.post("/api/v1/chat", json={"text": "hi", "conversation": "x1"})).status_code == 400
        assert (await c.post("/api/v1/chat", json={"text": "hi", "conversation": True})).status_code == 400
        assert (await c.post("/api/v1/chat/interrupt", json={"text": "hi", "conversation": 999})).status_code == 404
        assert web.daemon.agent.turns == 0 and not fake.requests  # nothing ran

        too_long = await c.post("/api/v1/conversations", json={"title": "x" * 201})
        assert too_long.status_code == 400 and "at most 200 characters" in too_long.json()["error"]
        assert (await c.patch(f"/api/v1/conversations/{conv}", json={"title": "y" * 500})).status_code == 400
        assert (await c.patch(f"/api/v1/conversations/{conv}", json={})).status_code == 400
        assert (await c.patch("/api/v1/conversations/424242", json={"title": "t"})).status_code == 404
        assert (await c.delete("/api/v1/conversations/424242")).status_code == 404
        assert (await c.get("/api/v1/conversations/abc")).status_code == 400
        assert (await c.get("/api/v1/conversations/" + "9" * 30)).status_code == 400
        assert (await c.get(f"/api/v1/conversations/{conv}/export", params={"format": "pdf"})).status_code == 400
        nothing = await c.post(f"/api/v1/conversations/{conv}/regenerate")
        assert nothing.status_code == 409 and "nothing to regenerate" in nothing.json()["error"]

        await say(c, conv, "hello")
        shown = await entries(c, conv)
        reply = shown[1]
        not_yours = await c.post(f"/api/v1/conversations/{conv}/edit", json={"entry": reply["id"], "text": "x"})
        assert not_yours.status_code == 400 and "not a message of yours" in not_yours.json()["error"]
        missing = await c.post(f"/api/v1/conversations/{conv}/edit", json={"entry": 777, "text": "x"})
        assert missing.status_code == 404
        assert (await c.post(f"/api/v1/conversations/{conv}/edit", json={"entry": shown[0]["id"]})).status_code == 400
        assert (await c.post(f"/api/v1/conversations/{conv}/edit", json={"text": "x"})).status_code == 400
        assert await entries(c, conv) == shown  # every refusal left the transcript as it was
        assert [e["title"] for e in (await c.get("/api/v1/conversations")).json()["conversations"]] == ["hello"]

        # while a reply of the conversation runs, it cannot be regenerated or edited
        fake.script(Turn.slow("slow " * 40, chunks=40, delay=0.05))
        async with c.stream("POST", "/api/v1/chat/stream", json={"text": "long", "conversation": conv}) as r:
            async for line in r.aiter_lines():
                if '"content_delta"' in line:
                    break
            busy = await c.post(f"/api/v1/conversations/{conv}/regenerate")
            assert busy.status_code == 409 and "still running" in busy.json()["error"]
            busy = await c.post(f"/api/v1/conversations/{conv}/edit", json={"entry": shown[0]["id"], "text": "x"})
            assert busy.status_code == 409
            running = (await c.get(f"/api/v1/conversations/{conv}/entries")).json()
            assert running["running"] is True and running["entries"][-1]["pending"] is True
            await c.post("/api/v1/chat/cancel")


async def test_conversations_survive_a_restart_and_a_corrupt_file_is_set_aside(data_dir: Path) -> None:
    daemon = Daemon(DataPaths(data_dir), web=False)
    await daemon.start()
    try:
        web = await start_web(daemon)
        async with web.client() as c:
            conv = await new(c, "kept")
            await say(c, conv, "my name is Quill")
        await web.server.close()
        # a reply still pending when the daemon goes (as after kill -9): kept, marked stopped
        await asyncio.to_thread(daemon.conversations.store.add, conv,
                                [NewEntry("user", "half"), NewEntry("assistant", "half an ans", data={"pending": True})])
    finally:
        await daemon.stop()
    daemon = Daemon(DataPaths(data_dir), web=False)
    await daemon.start()
    try:
        web = await start_web(daemon, again=True)
        async with web.client() as c:
            shown = await entries(c, conv)
            assert [e["text"] for e in shown] == ["my name is Quill", shown[1]["text"], "half", "half an ans"]
            assert shown[3]["stopped"] is True and shown[3]["lost"] is True and "pending" not in shown[3]
            answer = await say(c, conv, "what is my name?")
            assert "Quill" in answer["text"]  # the offline provider answers from the conversation's recent turns
        await web.server.close()
    finally:
        await daemon.stop()

    def spoil() -> None:
        (data_dir / "conversations.db").write_bytes(b"this is not a database" * 100)
        for side in ("conversations.db-wal", "conversations.db-shm"):
            (data_dir / side).unlink(missing_ok=True)

    await asyncio.to_thread(spoil)
    daemon = Daemon(DataPaths(data_dir), web=False)
    await daemon.start()
    try:
        assert any("conversations" in n and "corrupt" in n and "set aside" in n for n in daemon.notes), daemon.notes
        assert await asyncio.to_thread(lambda: [p.name for p in data_dir.glob("conversations.db.corrupt-*")])
        web = await start_web(daemon, again=True)
        async with web.client() as c:
            # what the text log kept of the web chat comes back as one conversation (the final texts only)
            (recovered,) = (await c.get("/api/v1/conversations")).json()["conversations"]
            assert recovered["title"] == "Earlier web chat"
            assert "my name is Quill" in [e["text"] for e in await entries(c, recovered["id"])]
            fresh = await new(c)
            await say(c, fresh, "a new start")
            assert len(await entries(c, fresh)) == 2
        await web.server.close()
    finally:
        await daemon.stop()


@pytest.mark.xdist_group("processes")
async def test_kill_9_keeps_every_conversation(tmp_path: Path) -> None:
    from bench.campaign.daemon import DaemonProc, configure, free_port

    data = tmp_path / "d"
    port = free_port()
    await asyncio.to_thread(configure, data, {"webui.listen_addr": f"127.0.0.1:{port}"})
    daemon = DaemonProc(data, web=True)
    await daemon.start()
    try:
        assert daemon.token, daemon.tail()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=30,
                                     headers={"Authorization": f"Bearer {daemon.token}"}) as c:
            conv = await new(c, "survivor")
            await say(c, conv, "my name is Quill")
            other = await new(c)
            await say(c, other, "my name is Ink")
            before = await entries(c, conv)
            daemon.kill9()
            await daemon.start()
            for _ in range(200):  # the socket answers first; the web UI comes up right after
                try:
                    if (await c.get("/api/v1/status")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
            assert await entries(c, conv) == before
            assert [x["id"] for x in (await c.get("/api/v1/conversations")).json()["conversations"]] == [other, conv]
            # each conversation's recent turns came back too (the offline model answers from its prompt)
            assert "Quill" in (await say(c, conv, "what is my name?"))["text"]
            assert "Ink" in (await say(c, other, "what is my name?"))["text"]
    finally:
        await daemon.stop()


async def test_an_upload_with_a_message_belongs_to_its_conversation(web: Web, fake: FakeOpenAI) -> None:
    async with web.client() as c:
        conv = await new(c)
        files = {"file": ("notes.txt", b"tea list", "text/plain")}
        refused = await c.post("/api/v1/chat/file", files=files, data={"message": "look", "conversation": "999"})
        assert refused.status_code == 404 and "no conversation 999" in refused.json()["error"]
        assert not await asyncio.to_thread(lambda: list((web.daemon.paths.root / "uploads").glob("*")))
        done = await c.post("/api/v1/chat/file", files=files, data={"message": "look at this", "conversation": str(conv)})
        assert done.status_code == 200, done.text
        shown = await entries(c, conv)
    assert [e["kind"] for e in shown] == ["user", "assistant"]
    assert shown[0]["text"].startswith("look at this\n\n[file uploaded in the web UI: notes.txt (8 B)")
    assert "notes.txt" in prompt_of(fake)


def test_the_store_refuses_a_newer_schema_and_keeps_it(tmp_path: Path) -> None:
    import sqlite3

    from homeagent.conversations import ConversationError, ConversationStore
    from homeagent.conversations.store import SCHEMA_VERSION

    store = ConversationStore(tmp_path / "conversations.db")
    assert store.schema_version() == SCHEMA_VERSION
    conv = store.create("kept")
    store.add(conv.id, [NewEntry("user", "hello")])
    store.close()
    db = sqlite3.connect(tmp_path / "conversations.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(ConversationError, match="newer than this HomeAgent understands"):
        ConversationStore(tmp_path / "conversations.db")
    db = sqlite3.connect(tmp_path / "conversations.db")
    assert db.execute("SELECT text FROM entries").fetchall() == [("hello",)]  # untouched
    db.close()


async def test_the_web_chat_of_before_conversations_is_brought_over_once(data_dir: Path) -> None:
    """An upgrade: the text log has the old web chat; it becomes one conversation, and a deleted one stays gone."""
    daemon = Daemon(DataPaths(data_dir), web=False)
    await daemon.start()
    try:
        assert (await daemon.io.inject_sync("webui", "webui", "the boiler is serviced in October")).ok
        assert (await daemon.io.inject_sync("cli", "cli", "a terminal question")).ok
        await daemon.textlog.flush()
    finally:
        await daemon.stop()
    # as before conversations existed
    await asyncio.to_thread(lambda: [p.unlink() for p in data_dir.glob("conversations.db*")])

    for round_ in range(2):
        daemon = Daemon(DataPaths(data_dir), web=False)
        await daemon.start()
        web = await start_web(daemon, again=round_ == 1)
        try:
            async with web.client() as c:
                listed = (await c.get("/api/v1/conversations")).json()["conversations"]
                if round_ == 1:
                    assert listed == [], "deleted by the owner: not brought back"
                    break
                (earlier,) = listed
                assert earlier["title"] == "Earlier web chat" and earlier["entries"] == 2
                shown = await entries(c, earlier["id"])
                assert [(e["kind"], e["text"][:30]) for e in shown] == [
                    ("user", "the boiler is serviced in Octo"), ("assistant", "[offline] I received: the boil")]
                assert shown[0]["ts"] <= shown[1]["ts"] < earlier["created"] + 60
                assert (await c.delete(f"/api/v1/conversations/{earlier['id']}")).status_code in (200, 204)
        finally:
            await web.server.close()
            await daemon.stop()
