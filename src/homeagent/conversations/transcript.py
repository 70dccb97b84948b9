"""What the chat showed, recorded as it happens, so a reload shows the same.

:class:`TranscriptHistory` is the daemon's one object for conversations: the
web routes and the OpenAI-compatible endpoint ask it for conversations and
their entries, and hand it each turn they start. For a turn it records the
owner's message and, at once, the reply's entry as *pending*: the reply's
place is where its bubble appeared, above an interrupt typed while it
streamed, exactly as the page showed it. A :class:`TurnRecorder` sits in the
turn's frame sink (before the browser's stream, so the record does not
depend on anyone reading) and collects what the page draws from the frames:
reasoning, tool calls with arguments and results, the text (reset when an
interrupt made the model answer again), the fallback note, and on a stop
the partial text. When the ``response`` frame comes the pending entry is
filled in, before the frame goes on to the browser: a page that saw the
reply finish and reloads finds it stored.

Everything blocking runs in a worker thread; every method here is async.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Collection
from typing import Any, Protocol

from homeagent.conversations.store import Conversation, ConversationError, ConversationStore, Entry, NewEntry
from homeagent.io.manager import FrameSink, InputMessage, TurnResult

log = logging.getLogger("homeagent.conversations")

MAX_TOOL_RESULT = 2000


class ScopeWindow(Protocol):
    """The context window, as far as conversations use it: an edit takes the later turns back out."""

    async def aforget_inputs(self, input_ids: Collection[str]) -> int: ...


def media_data(message: InputMessage) -> builtins.list[dict[str, str]]:
    """The message's stored media (digests), kept with its entry so a regenerate or an edit sends them again."""
    return [{"digest": b.digest, "mime": b.mime, "description": b.description} for b in message.media if b.digest]


class ChatLog(Protocol):
    """The text log (``memory.textlog.TextLog``): the web chat's history from before conversations existed."""

    def read_recent(self, limit: int = 50) -> builtins.list[dict[str, Any]]: ...


EARLIER_KEY = "textlog-webui"
EARLIER_TITLE = "Earlier web chat"
EARLIER_SCAN = 20_000  # text log lines read (every channel's); the web chat's last EARLIER_KEEP of them are kept
EARLIER_KEEP = 2_000


def earlier_entries(records: Collection[dict[str, Any]]) -> builtins.list[NewEntry]:
    """The web chat's text-log records as conversation entries, as the page showed them before conversations."""
    out: builtins.list[NewEntry] = []
    for r in records:
        if r.get("channel") != "webui" or not isinstance(r.get("content"), str):
            continue
        ts = float(r["ts"]) if isinstance(r.get("ts"), int | float) else 0.0
        input_id = str(r.get("id") or "")
        if r.get("role") == "user":
            out.append(NewEntry("user", r["content"], input_id, {}, ts))
        elif r.get("role") == "assistant":
            data: dict[str, Any] = {}
            error = str(r.get("error") or "")
            if error == "turn interrupted":
                data["stopped"] = True
            elif error:
                data["error"] = error
            tools = [{"tool": str(t)} for t in r.get("tools") or [] if isinstance(t, str)]
            if tools:
                data["tools"] = tools
            out.append(NewEntry("assistant", r["content"], input_id, data, ts))
    return out[-EARLIER_KEEP:]


class TurnRecorder:
    """One turn of a conversation: collects its frames, fills in its reply entry when it ends."""

    def __init__(self, history: TranscriptHistory, conversation: int, entry: int, reply_entry: int,
                 forward: FrameSink | None):
        self.history = history
        self.conversation = conversation
        self.entry = entry  # the owner's message
        self.reply_entry = reply_entry
        self.forward = forward
        self.text: builtins.list[str] = []
        self.reasoning: builtins.list[str] = []
        self.tools: builtins.list[dict[str, Any]] = []
        self.retried = 0
        self.error = ""
        self.done = False

    async def sink(self, frame: dict[str, Any]) -> None:
        """The turn's frame sink: note the frame, record the reply on ``response``, then pass the frame on."""
        kind = frame.get("type")
        if kind == "content_delta":
            if frame.get("reset"):
                self.text.clear()
                self.retried += 1
            elif frame.get("text"):
                self.text.append(str(frame["text"]))
        elif kind == "reasoning_delta" and frame.get("text"):
            self.reasoning.append(str(frame["text"]))
        elif kind == "tool_call":
            self.tools.append({k: frame.get(k) for k in ("tool", "status", "arguments", "result") if k in frame})
        elif kind == "tool_media":  # shown among the tool calls, as the page drew it
            self.tools.append({"tool": frame.get("tool"), "media": str(frame.get("text") or "")})
        elif kind == "error":
            self.error = str(frame.get("message", ""))
        elif kind == "response":
            await self._finish(
                text=str(frame.get("text") or ""), partial=str(frame.get("partial") or ""),
                stopped=bool(frame.get("interrupted")), ok=bool(frame.get("ok", True)),
                source=str(frame.get("source") or ""), fallback=str(frame.get("fallback_from") or ""),
                usage=dict(frame.get("usage") or {}),
            )
        if self.forward is not None:
            result = self.forward(frame)
            if asyncio.iscoroutine(result):
                await result

    def settle(self, future: asyncio.Future[TurnResult]) -> None:
        """The turn's reply future is set: a turn that sent no ``response`` frame (it never started) ends here."""
        if self.done:
            return
        if future.cancelled() or future.exception() is not None:
            result = TurnResult(ok=False, interrupted=True, error="turn interrupted")
        else:
            result = future.result()
        self.history.spawn(self._finish(
            text=result.text, partial=result.partial, stopped=result.interrupted, ok=result.ok,
            source=result.source, fallback=result.fallback_from, usage=result.usage, error=result.error,
            tools=[{k: t.get(k) for k in ("tool", "status", "arguments", "result") if k in t} for t in result.tool_calls],
            reasoning=result.reasoning,
        ))

    async def _finish(
        self, *, text: str, partial: str, stopped: bool, ok: bool, source: str, fallback: str,
        usage: dict[str, Any], error: str = "", tools: builtins.list[dict[str, Any]] | None = None, reasoning: str = "",
    ) -> None:
        if self.done:
            return
        self.done = True
        data: dict[str, Any] = {}
        reasoning = "".join(self.reasoning) or reasoning
        if reasoning:
            data["reasoning"] = reasoning
        shown_tools = self.tools or tools or []
        if shown_tools:
            data["tools"] = [_bounded(t) for t in shown_tools]
        if stopped:
            data["stopped"] = True
            text = text or partial or "".join(self.text)
        elif not ok:
            data["error"] = self.error or error or "the turn failed"
        if self.retried:
            data["retried"] = self.retried
        if source:
            data["source"] = source
        if fallback:
            data["fallback_from"] = fallback
        if usage:
            data["usage"] = usage
        try:
            await self.history.fill(self.reply_entry, text, data)
        except Exception:  # the record must never break the turn or the browser's stream
            log.exception("conversation %d: recording a reply failed", self.conversation)
        finally:
            self.history.ended(self.conversation)


def _bounded(tool: dict[str, Any]) -> dict[str, Any]:
    result = tool.get("result")
    if isinstance(result, str) and len(result) > MAX_TOOL_RESULT:
        tool = {**tool, "result": result[:MAX_TOOL_RESULT] + "…"}
    return tool


class TranscriptHistory:
    """Conversations and their transcripts (``conversations.db``), and the recording of their turns."""

    def __init__(self, store: ConversationStore, window: ScopeWindow) -> None:
        self.store = store
        self.window = window
        self._running: dict[int, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @classmethod
    async def open(cls, store: ConversationStore, window: ScopeWindow) -> TranscriptHistory:
        """The history on an opened store; replies left pending by the last run are marked stopped."""
        lost = await asyncio.to_thread(store.abandon_pending)
        if lost:
            log.warning("conversations: %d replies were still running when the daemon last stopped; "
                        "kept as stopped", lost)
        return cls(store, window)

    async def import_earlier(self, textlog: ChatLog) -> Conversation | None:
        """Once per data dir: the web chat of before conversations (the text log's) becomes a conversation of
        its own, so an upgrade keeps what the chat page showed. Deleting it later does not bring it back."""
        if await asyncio.to_thread(self.store.imported, EARLIER_KEY):
            return None
        records = await asyncio.to_thread(textlog.read_recent, EARLIER_SCAN)
        made = await asyncio.to_thread(self.store.import_once, EARLIER_KEY, EARLIER_TITLE, earlier_entries(records))
        if made is not None:
            log.info("conversations: the earlier web chat (%d messages from the text log) is the conversation "
                     "%r", made.entries, made.title)
        return made

    def spawn(self, coro: Any) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Wait for recordings in flight (briefly), then close the store."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        await asyncio.to_thread(self.store.close)

    # ------------------------------------------------------------ conversations
    async def create(self, title: str = "") -> Conversation:
        return await asyncio.to_thread(self.store.create, title)

    async def get(self, conversation: int) -> Conversation | None:
        return await asyncio.to_thread(self.store.get, conversation)

    async def for_external(self, key: str, title: str) -> tuple[Conversation, bool]:
        return await asyncio.to_thread(self.store.for_external, key, title)

    async def list(self, query: str = "", limit: int = 100) -> builtins.list[Conversation]:
        return await asyncio.to_thread(self.store.list, query, limit=limit)

    async def rename(self, conversation: int, title: str) -> Conversation | None:
        return await asyncio.to_thread(self.store.rename, conversation, title)

    async def delete(self, conversation: int) -> bool:
        """Delete a conversation and its transcript. What its turns taught long-term memory stays there."""
        return await asyncio.to_thread(self.store.delete, conversation) is not None

    async def page(self, conversation: int, *, before: int | None = None, limit: int = 50) -> tuple[builtins.list[Entry], bool]:
        return await asyncio.to_thread(self.store.page, conversation, before=before, limit=limit)

    async def entries(self, conversation: int) -> builtins.list[Entry]:
        return await asyncio.to_thread(self.store.entries, conversation)

    async def entry(self, conversation: int, entry_id: int) -> Entry | None:
        return await asyncio.to_thread(self.store.entry, conversation, entry_id)

    async def last_of(self, conversation: int, kind: str) -> Entry | None:
        return await asyncio.to_thread(self.store.last_of, conversation, kind)

    def running(self, conversation: int) -> bool:
        """Whether a turn of this conversation has not ended yet."""
        return self._running.get(conversation, 0) > 0

    # ------------------------------------------------------------ recording
    async def begin(self, conversation: int, message: InputMessage) -> TurnRecorder:
        """Record ``message`` and its pending reply; the turn's frames then go through the recorder.

        Call before the message is queued. A ConversationError when the conversation is gone.
        """
        data: dict[str, Any] = {}
        media = media_data(message)
        if media:
            data["media"] = media
        added = await asyncio.to_thread(self.store.add, conversation, [
            NewEntry("user", message.text, message.id, data, message.ts),
            NewEntry("assistant", "", message.id, {"pending": True}),
        ])
        recorder = TurnRecorder(self, conversation, added[0].id, added[1].id, message.sink)
        message.sink = recorder.sink
        if message.reply is not None:
            message.reply.add_done_callback(recorder.settle)
        self._running[conversation] = self._running.get(conversation, 0) + 1
        return recorder

    def ended(self, conversation: int) -> None:
        left = self._running.get(conversation, 1) - 1
        if left > 0:
            self._running[conversation] = left
        else:
            self._running.pop(conversation, None)

    async def fill(self, entry_id: int, text: str, data: dict[str, Any]) -> bool:
        return await asyncio.to_thread(self.store.update, entry_id, text, data)

    async def interrupt(self, conversation: int, text: str, input_id: str) -> Entry:
        """An interrupt typed in the conversation while a reply ran (it shows as the owner's, marked)."""
        return (await asyncio.to_thread(self.store.add, conversation, [NewEntry("interrupt", text, input_id)]))[0]

    async def proactive(self, conversation: int | None, text: str, data: dict[str, Any]) -> Entry:
        """A message the agent sent to the web chat by itself: a reminder, a plugin's input, the answer to an
        interrupt that arrived after its turn. Without a conversation (a reminder set in the terminal) it goes
        to the web conversation used last, or a new one."""
        def add() -> Entry:
            target = conversation
            if target is None or self.store.get(target) is None:
                latest = self.store.latest()
                target = latest.id if latest is not None else self.store.create().id
            try:
                return self.store.add(target, [NewEntry("proactive", text, "", data)])[0]
            except ConversationError:  # deleted between the two calls
                return self.store.add(self.store.create().id, [NewEntry("proactive", text, "", data)])[0]

        return await asyncio.to_thread(add)

    async def truncate(self, conversation: int, from_entry: int) -> tuple[builtins.list[Entry], int]:
        """Drop ``from_entry`` and everything after it from the transcript, and those turns from the model's
        recent past in this conversation's scope; (the dropped entries, how many window events left)."""
        gone = await asyncio.to_thread(self.store.truncate, conversation, from_entry)
        inputs = {e.input_id for e in gone if e.input_id} | {str(e.data["reply_to"]) for e in gone
                                                               if e.data.get("reply_to")}
        forgotten = await self.window.aforget_inputs(inputs) if inputs else 0
        return gone, forgotten

