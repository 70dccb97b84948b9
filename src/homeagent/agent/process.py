"""One turn of the agent: the stage pipeline around the tool loop.

    on_input → history → pre_action → [drain interrupts → LLM → post_action
    → (before_toolcall → tool → after_toolcall)* ]* → before_output → deliver
    → after_output

Cancellation rules (written down because they are easy to get wrong):

* An *interrupt* cancels only the LLM call in flight (``LLMSlot.cancel``).
  The turn notices that the cancellation was not aimed at itself
  (``Task.cancelling() == 0``), tells the client to discard the streamed text
  (``content_delta`` with ``reset``), drains the interrupt text into the
  history as ``[打断消息] …`` and calls the LLM again. Consolidation turns do
  not retry; they give up.
* *Cancelling the turn* (the user pressed stop, the daemon shuts down)
  cancels the turn task itself: LLM stream, tool calls and stage handlers are
  all cancelled; tool calls that were cut off get synthetic ``interrupted``
  results so the history stays valid, and the turn ends with an
  ``interrupted`` result instead of raising.
* Interrupts arriving while tools run do not cancel the tools; their text
  reaches the model before its next call.

Privacy (``no_memory``) is decided per turn, once, by the host: a turn is
``no_memory`` when its input was injected so, when an ``on_input`` or
``pre_action`` handler set ``ctx.no_memory``, or when the model called a tool
declared ``no_memory`` (even one that was denied or cut off: what the model
wanted from it is private). The host sets ``ctx.no_memory`` itself as soon as
that is known, so later stages (``after_output`` feeds the rule distiller)
see it although their handlers may not write it; the turn record then goes
to the context window marked ``no_memory`` (never embedded, never archived)
and nothing of the turn is written to the text log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from homeagent.agent.gate import ToolGate
from homeagent.agent.media_input import TOOL_BLOCKS, MediaInput, UnseenImage
from homeagent.agent.memory_port import Speakers, ToolOutput, TurnMemory, TurnRecord
from homeagent.agent.prompt import PromptBuilder, PromptInputs
from homeagent.agent.stages import StageHost
from homeagent.agent.tools import ToolRegistry, result_text
from homeagent.events import EventBus
from homeagent.io.channels import OutputChannels
from homeagent.io.manager import InputMessage, TurnResult
from homeagent.io.origin import TURN_ORIGIN
from homeagent.memory.media import MediaError
from homeagent.memory.textlog import TextLog
from homeagent.providers.base import ChatRequest, ChatResponse, ProviderError, StreamChunk
from homeagent.sdk.types import MediaBlock, Origin, Stage, StageContext, ToolCall, ToolDef, ToolResult

log = logging.getLogger("homeagent.agent")

INTERRUPT_PREFIX = "[打断消息]"
LIMIT_NOTE = (
    "The tool-call limit for this turn ({n} rounds) is reached. Answer now with what you have; no more tools."
)

ProviderRun = Callable[..., Coroutine[Any, Any, ChatResponse]]


@dataclass
class TurnSettings:
    """Live settings, read at the start of every turn (a change applies from the next turn)."""

    max_tool_turns: Callable[[], int] = lambda: 10
    tool_timeout: Callable[[], float] = lambda: 120.0
    temperature: Callable[[], float | None] = lambda: None
    max_tokens: Callable[[], int | None] = lambda: None
    proactive_channels: Callable[[], list[str]] = lambda: []

    def read(self) -> TurnValues:
        return TurnValues(max(1, int(self.max_tool_turns())), float(self.tool_timeout()), self.temperature(),
                          self.max_tokens())


@dataclass(frozen=True)
class TurnValues:
    """The settings one turn runs with."""

    max_tool_turns: int = 10
    tool_timeout: float = 120.0
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass
class LLMSlot:
    """The LLM call in flight, and the interrupts waiting for the next one."""

    task: asyncio.Task[ChatResponse] | None = None
    pending: list[InputMessage] = field(default_factory=list)
    interrupted: int = 0

    def interrupt(self, message: InputMessage) -> bool:
        """Queue an interrupt; cancel the LLM call in flight. True if one was cancelled."""
        self.pending.append(message)
        if self.task is not None and not self.task.done():
            self.interrupted += 1
            self.task.cancel()
            return True
        return False

    def drain(self) -> list[InputMessage]:
        items, self.pending = self.pending, []
        return items


@dataclass
class _Turn:
    message: InputMessage
    started: float = field(default_factory=time.perf_counter)
    reasoning: list[str] = field(default_factory=list)
    tool_log: list[dict[str, Any]] = field(default_factory=list)
    tool_log_ids: list[str] = field(default_factory=list)  # the call id of each tool_log entry, to order a batch
    tool_outputs: list[ToolOutput] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    source: str = ""
    fallback_from: str = ""
    rounds: int = 0
    values: TurnValues = field(default_factory=TurnValues)
    no_memory_tool: bool = False  # a no_memory tool was called: the whole turn is kept out of memory
    media_digests: list[str] = field(default_factory=list)  # the input's stored media (context references)
    tool_blocks: list[tuple[str, list[MediaBlock]]] = field(default_factory=list)  # set_tool_blocks, not yet sent
    tool_media_digests: list[str] = field(default_factory=list)  # stored media of tools (the agent event's refs)
    tool_media_lines: list[str] = field(default_factory=list)  # their marker lines, as memory keeps them
    unseen: list[UnseenImage] = field(default_factory=list)  # the input's images the model got as text (media_look)
    partial: list[str] = field(default_factory=list)  # reply text streamed since the last interrupt: kept on a stop
    refused_rounds: int = 0  # rounds whose every call the approval gate refused

    async def frame(self, frame: dict[str, Any]) -> None:
        sink = self.message.sink
        if sink is None:
            return
        try:
            result = sink(frame)
            if asyncio.iscoroutine(result):
                await result
        except Exception:  # a client that went away must not break the turn
            log.debug("frame sink for %s failed", self.message.id, exc_info=True)


class TurnRunner:
    def __init__(
        self,
        *,
        stages: StageHost,
        tools: ToolRegistry,
        run_llm: ProviderRun,
        prompt: PromptBuilder,
        memory: TurnMemory,
        events: EventBus,
        channels: OutputChannels | None = None,
        textlog: TextLog | None = None,
        settings: TurnSettings | None = None,
        tool_filter: Callable[[ToolDef], bool] | None = None,
        slot: LLMSlot | None = None,
        gate: ToolGate | None = None,
        media: MediaInput | None = None,
        speakers: Speakers | None = None,
    ) -> None:
        self.stages = stages
        self.media = media
        self.tools = tools
        self.run_llm = run_llm
        self.prompt = prompt
        self.memory = memory
        self.events = events
        self.channels = channels
        self.textlog = textlog
        self.settings = settings or TurnSettings()
        self.tool_filter = tool_filter
        self.slot = slot or LLMSlot()
        self.gate = gate
        self.speakers = speakers
        self._tools_cache: tuple[int, list[ToolDef], list[dict[str, Any]]] | None = None

    # ------------------------------------------------------------------
    async def run(self, message: InputMessage) -> TurnResult:
        turn = _Turn(message)
        options = message.options
        # a timer's input runs on channel "timer" for the person who set it in their chat: resolve in that chat
        speaker = "" if self.speakers is None else self.speakers.speaker(
            options.deliver_to or message.channel, options.user_id, options.user_name
        )
        ctx = StageContext(
            raw_message=message.text,
            user_id=options.user_id,
            group_id=options.group_id,
            channel=message.channel,
            source=message.source,
            speaker=speaker,
            no_memory=options.no_memory,
            extra={"input_id": message.id, **options.meta},
        )
        self.events.publish(
            "raw_input", {"id": message.id, "text": message.text, "channel": message.channel, "source": message.source}
        )
        # tools that arrange a later reply (timers) keep this, so it reaches the same chat
        origin = TURN_ORIGIN.set(Origin(options.deliver_to or message.channel, options.user_id, options.group_id))
        try:
            return await self._run(ctx, turn)
        finally:
            TURN_ORIGIN.reset(origin)

    async def _run(self, ctx: StageContext, turn: _Turn) -> TurnResult:
        message = turn.message
        try:
            final = await self._pipeline(ctx, turn)
        except asyncio.CancelledError:
            if asyncio.current_task() is not None:
                asyncio.current_task().uncancel()  # type: ignore[union-attr]
            # no reset frame: the text streamed so far stays on the client's screen, marked stopped, and the
            # response frame carries it as "partial" (the reply itself is empty: memory keeps no half answer)
            return await self._end(ctx, turn, "", interrupted=True, error="turn interrupted")
        except ProviderError as exc:
            log.warning("turn %s: %s", message.id, exc.describe())
            return await self._end(ctx, turn, "", error=exc.describe())
        except Exception as exc:
            log.exception("turn %s failed", message.id)
            return await self._end(ctx, turn, "", error=f"internal error: {type(exc).__name__}: {exc}")
        return await self._end(ctx, turn, final)

    async def _pipeline(self, ctx: StageContext, turn: _Turn) -> str:
        turn.values = self.settings.read()
        if await self.stages.run(Stage.ON_INPUT, ctx):
            return ctx.response or ""
        user_content: str | list[dict[str, Any]] = ctx.raw_message
        if turn.message.media:  # the media turn path: images go to the model with this input
            user_content = await self._media_content(ctx, turn)
        user_text = ctx.raw_message
        history = await self.memory.history(user_text, ctx.channel, group_id=ctx.group_id, speaker=ctx.speaker)
        ctx.context_msgs = list(history)
        if await self.stages.run(Stage.PRE_ACTION, ctx):
            return ctx.response or ""
        tool_defs, openai_tools = self._tool_lists()
        if turn.unseen and self.media is not None and self.media.can_look():
            # the fifth tool source: offered only while this turn has images the model could not see
            look = media_look_def()
            tool_defs, openai_tools = [*tool_defs, look], [*openai_tools, look.to_openai()]
        # who writes from a chat account; the owner's own CLI/web turns need no introduction. Only the linked
        # name or the account id goes into the system prompt: a nickname is anyone's text (it is in the header)
        speaker = ctx.speaker if ctx.user_id else ""
        system = await self.prompt.build(PromptInputs(user_text, ctx.channel, tool_defs, speaker=speaker))
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            *ctx.context_msgs,
            {"role": "user", "content": user_content},
        ]
        return await self._tool_loop(ctx, turn, messages, openai_tools)

    async def _media_content(self, ctx: StageContext, turn: _Turn) -> str | list[dict[str, Any]]:
        """The user message's content with the input's media; ``ctx.raw_message`` becomes the text memory keeps."""
        message = turn.message
        if self.media is None:  # a runner without the media path (a sub-agent's): the media are named only
            names = [f"[{'image' if b.mime.startswith('image/') else 'file'}: {b.description or b.digest[:12] or b.mime}]"
                     for b in message.media]
            ctx.raw_message = "\n".join([ctx.raw_message.rstrip(), *names]).strip()
            return ctx.raw_message
        prepared = await self.media.prepare(ctx.raw_message, message.media, source=message.source or message.channel)
        ctx.raw_message = prepared.text
        turn.media_digests = prepared.digests
        turn.unseen = prepared.unseen
        ctx.extra["media"] = {"digests": prepared.digests, "images": prepared.images, "described": prepared.described}
        return prepared.content

    def _tool_lists(self) -> tuple[list[ToolDef], list[dict[str, Any]]]:
        """The tools this runner offers, and their wire form, rebuilt only when the registry changes.

        Both lists are shared between turns (the prompt builder and the provider
        cache their own renderings by identity), so nothing may mutate them.
        """
        generation = self.tools.generation
        cached = self._tools_cache
        if cached is None or cached[0] != generation:
            defs = [t for t in self.tools.tools() if self.tool_filter is None or self.tool_filter(t)]
            cached = self._tools_cache = (generation, defs, [t.to_openai() for t in defs])
        return cached[1], cached[2]

    async def _tool_loop(
        self, ctx: StageContext, turn: _Turn, messages: list[dict[str, Any]], openai_tools: list[dict[str, Any]]
    ) -> str:
        limit = turn.values.max_tool_turns
        for round_no in range(limit + 1):
            last_round = round_no == limit
            if last_round:
                messages.append({"role": "system", "content": LIMIT_NOTE.format(n=limit)})
            response = await self._call_llm(ctx, turn, messages, [] if last_round else openai_tools)
            turn.rounds += 1
            ctx.llm_text = response.content
            ctx.reasoning_content = response.reasoning
            ctx.token_usage = response.usage.to_dict()
            ctx.tool_calls = [
                ToolCall(
                    id=c.id,
                    name=c.name,
                    arguments=c.arguments,
                    plugin=self.tools.plugin_of(c.name),
                    raw_arguments=c.raw_arguments if c.parse_error else "",
                )
                for c in response.tool_calls
            ]
            self.events.publish(
                "agent_llm_chain",
                {
                    "input_id": turn.message.id,
                    "round": round_no,
                    "text": response.content,
                    "reasoning": response.reasoning,
                    "tool_calls": [
                        {"id": c.id, "name": c.name, "arguments": c.arguments or c.raw_arguments}
                        for c in response.tool_calls
                    ],
                    "usage": ctx.token_usage,
                    "source": response.source,
                    "finish_reason": response.finish_reason,
                },
            )
            if await self.stages.run(Stage.POST_ACTION, ctx):
                return ctx.response or ""
            calls = list(ctx.tool_calls)
            if not calls or last_round:
                return ctx.llm_text
            messages.append(_assistant_message(ctx.llm_text, calls))
            results = await self._run_tools(ctx, turn, calls, messages)
            if ctx.response is not None:
                return ctx.response
            if all(r.status == "denied" for r in results):
                if not turn.refused_rounds and all(_by_approval(r) for r in results):
                    turn.refused_rounds += 1
                    continue  # the owner's "no" (or no answer): one more step for the model to tell the user
                return ctx.llm_text or "; ".join(str(r.result.get("content", "")) for r in results if isinstance(r.result, dict))
        return ctx.llm_text

    async def _call_llm(
        self, ctx: StageContext, turn: _Turn, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ChatResponse:
        while True:
            for item in self.slot.drain():
                note = f"{INTERRUPT_PREFIX} ({item.source or item.channel}) {item.text}"
                if item.media and self.media is not None:  # an interrupt with media: its images reach this call
                    prepared = await self.media.prepare(note, item.media, source=item.source or item.channel)
                    messages.append({"role": "user", "content": prepared.content})
                else:
                    messages.append({"role": "system", "content": note})
            request = ChatRequest(
                messages=messages,
                tools=tools,
                temperature=turn.values.temperature,
                max_tokens=turn.values.max_tokens,
            )

            async def on_chunk(chunk: StreamChunk) -> None:
                if chunk.reasoning:
                    turn.reasoning.append(chunk.reasoning)
                    await turn.frame({"type": "reasoning_delta", "text": chunk.reasoning})
                if chunk.content:
                    turn.partial.append(chunk.content)
                    await turn.frame({"type": "content_delta", "text": chunk.content})

            task: asyncio.Task[ChatResponse] = asyncio.get_running_loop().create_task(self.run_llm(request, on_chunk))
            self.slot.task = task
            try:
                response = await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    task.cancel()
                    raise
                log.info("turn %s: LLM call interrupted; retrying with the interrupt text", turn.message.id)
                turn.partial.clear()
                await turn.frame({"type": "content_delta", "text": "", "reset": True})
                continue
            finally:
                self.slot.task = None
            turn.source = response.source or turn.source
            turn.fallback_from = response.fallback_from if response.source else turn.fallback_from
            for key, value in response.usage.to_dict().items():
                turn.usage[key] = turn.usage.get(key, 0) + value
            return response

    async def _run_tools(
        self, ctx: StageContext, turn: _Turn, calls: list[ToolCall], messages: list[dict[str, Any]]
    ) -> list[ToolResult]:
        done: dict[str, ToolResult] = {}
        if any(self._no_memory_tool(c.name) for c in calls):
            self._mark_no_memory(ctx, turn)  # before the tools run: their stages and a cut-off turn see it

        async def run_one(call: ToolCall) -> ToolResult:
            result = await self._run_one(ctx, turn, call)
            done[call.id] = result
            return result

        log_start = len(turn.tool_log)
        try:
            results = await self.tools.run_batch(calls, run_one)
        except asyncio.CancelledError:
            for call in calls:
                if call.id not in done:
                    result = ToolResult(
                        call_id=call.id,
                        name=call.name,
                        plugin=call.plugin,
                        success=False,
                        status="interrupted",
                        result={"isError": True, "content": "interrupted before it finished"},
                    )
                    done[call.id] = result
                    turn.tool_log.append({"tool": call.name, "status": "interrupted", "result": ""})
                    turn.tool_log_ids.append(call.id)
                    await turn.frame({"type": "tool_call", "tool": call.name, "status": "interrupted", "result": ""})
            self._order_batch_log(turn, calls, log_start)
            for call in calls:
                messages.append(_tool_message(call, result_text(done[call.id])))
            raise
        self._order_batch_log(turn, calls, log_start)
        for call, result in zip(calls, results, strict=True):
            messages.append(_tool_message(call, result_text(result)))
        await self._tool_media(turn, messages)
        return results

    @staticmethod
    def _order_batch_log(turn: _Turn, calls: list[ToolCall], start: int) -> None:
        """A batch's calls run concurrently and log as they finish; the turn's result lists them as the model
        asked for them, so a reader matches each result to its call whatever the timing was."""
        rank = {call.id: i for i, call in enumerate(calls)}
        tail = sorted(zip(turn.tool_log_ids[start:], turn.tool_log[start:], strict=True),
                      key=lambda pair: rank.get(pair[0], len(rank)))
        turn.tool_log_ids[start:] = [cid for cid, _ in tail]
        turn.tool_log[start:] = [entry for _, entry in tail]

    async def _tool_media(self, turn: _Turn, messages: list[dict[str, Any]]) -> None:
        """Media a tool handed over (``set_tool_blocks``) reach the model after the tool results, as a user message:
        no provider takes images inside a tool result of every kind, all take them in a user turn."""
        pending, turn.tool_blocks = turn.tool_blocks, []
        for name, blocks in pending:
            note = f"[media from the tool {name}]"
            if self.media is None:
                messages.append({"role": "user", "content": note})
                continue
            prepared = await self.media.prepare(note, blocks, source=f"tool:{name}")
            messages.append({"role": "user", "content": prepared.content})
            turn.tool_media_digests.extend(d for d in prepared.digests if d not in turn.tool_media_digests)
            turn.tool_media_lines.append(prepared.text)
            # the chat shows what the model got: one marker line per item (the web UI links /files/<digest>)
            await turn.frame({"type": "tool_media", "tool": name, "text": prepared.text})

    async def _admit(self, ctx: StageContext, turn: _Turn, call: ToolCall) -> bool:
        """Ask the gate (policy, maybe the owner) before the call runs; a refusal marks it denied."""
        if self.gate is None or call.denied or call.name not in self.tools or not self._offered(call.name):
            return False  # unknown and unoffered tools get the registry's or the filter's error instead
        reason = await self.gate.admit(call, ctx, turn.frame if turn.message.sink is not None else None)
        if reason is None:
            return False
        call.denied, call.deny_reason = True, reason
        return True

    async def _run_one(self, ctx: StageContext, turn: _Turn, call: ToolCall) -> ToolResult:
        call_ctx = dataclasses.replace(ctx, tool_call=call, tool_result=None)
        gated = await self._admit(ctx, turn, call)  # before the stage: handlers see the refusal as a denial
        refusal = call.deny_reason
        admitted = dict(call.arguments) if self.gate is not None else None
        if await self.stages.run(Stage.BEFORE_TOOLCALL, call_ctx):
            ctx.response = call_ctx.response
        if gated:  # a handler cannot lift the policy's or the owner's refusal
            call.denied, call.deny_reason = True, refusal
        elif admitted is not None and not call.denied and call.arguments != admitted:
            gated = await self._admit(ctx, turn, call)  # a handler changed the arguments: check what will run
        if call.denied:
            content: dict[str, Any] = {"isError": True,
                                       "content": f"tool call denied: {call.deny_reason or 'by a stage handler'}"}
            if gated:
                content["approval"] = "denied"
            result = ToolResult(
                call_id=call.id,
                name=call.name,
                plugin=call.plugin,
                success=False,
                status="denied",
                result=content,
            )
        elif call.name == MEDIA_LOOK and turn.unseen:
            result = await self._media_look(call, turn)
        elif not self._offered(call.name):
            # the filter must hold for calls too: a model can name a tool it was not offered
            result = ToolResult(
                call_id=call.id,
                name=call.name,
                plugin=call.plugin,
                success=False,
                status="error",
                result={"isError": True, "content": f"tool {call.name!r} is not available to this agent (sub-agents "
                        "cannot change settings, manage plugins or start sub-agents)"},
            )
        else:
            blocks: list[MediaBlock] = []
            token = TOOL_BLOCKS.set(blocks)  # the handler's set_tool_blocks lands here
            try:
                result = await self.tools.execute(call, timeout=turn.values.tool_timeout)
            finally:
                TOOL_BLOCKS.reset(token)
            if blocks:
                turn.tool_blocks.append((call.name, blocks))
        call_ctx.tool_result = result
        if await self.stages.run(Stage.AFTER_TOOLCALL, call_ctx):
            ctx.response = call_ctx.response
        result = call_ctx.tool_result or result
        async with ctx.lock:
            ctx.tool_results.append(result)
        text = result_text(result)
        memory_text = self.tools.memory_text(result)
        if memory_text is None:
            self._mark_no_memory(ctx, turn)
        turn.tool_outputs.append(ToolOutput(call.name, text, memory_text))
        shown = text if len(text) <= 2000 else text[:2000] + "…"
        turn.tool_log.append({"tool": call.name, "status": result.status, "arguments": call.arguments, "result": shown})
        turn.tool_log_ids.append(call.id)
        await turn.frame(
            {"type": "tool_call", "tool": call.name, "status": result.status, "arguments": call.arguments, "result": shown}
        )
        self.events.publish(
            "tool_call",
            {
                "input_id": turn.message.id,
                "tool": call.name,
                "plugin": call.plugin,
                "status": result.status,
                "arguments": call.arguments,
                "result": shown,
                "duration_ms": result.duration_ms,
            },
        )
        return result

    async def _media_look(self, call: ToolCall, turn: _Turn) -> ToolResult:
        """``media_look``: a question about one of this turn's images, answered by the image describer."""
        assert self.media is not None
        question = str(call.arguments.get("question", "")).strip()
        wanted = str(call.arguments.get("image", "") or "").strip().lower()
        image = next((i for i in turn.unseen if not wanted or (i.label and i.label.startswith(wanted[:12]))), None)
        started = time.perf_counter()
        if not question or image is None:
            labels = ", ".join(i.label for i in turn.unseen if i.label) or "(no digests: the media store is off)"
            why = "a non-empty 'question'" if not question else f"'image' to be one of {labels}"
            content: Any = {"isError": True, "content": f"media_look needs {why}"}
        else:
            try:
                content = await self.media.look(image, question)
            except (ProviderError, MediaError, TimeoutError) as exc:
                content = {"isError": True, "content": f"the image describer failed: {exc}"}
        ok = not (isinstance(content, dict) and content.get("isError"))
        return ToolResult(call_id=call.id, name=call.name, plugin="media", success=ok, status="ok" if ok else "error",
                          result=content, duration_ms=(time.perf_counter() - started) * 1000)

    def _offered(self, name: str) -> bool:
        """Whether this runner offers tool ``name`` (an unknown name is left to the registry's error)."""
        if self.tool_filter is None:
            return True
        tdef = self.tools.get(name)
        return tdef is None or self.tool_filter(tdef)

    def _no_memory_tool(self, name: str) -> bool:
        tdef = self.tools.get(name)
        return tdef is not None and tdef.no_memory

    @staticmethod
    def _mark_no_memory(ctx: StageContext, turn: _Turn) -> None:
        """The host's own write of ``ctx.no_memory`` (handlers of later stages may not write it)."""
        turn.no_memory_tool = True
        ctx.no_memory = True

    @staticmethod
    def _effective_no_memory(ctx: StageContext, turn: _Turn) -> bool:
        """The turn's one privacy decision: any of the three sources; a handler cannot clear the injected flag."""
        return turn.message.no_memory or ctx.no_memory or turn.no_memory_tool

    async def _end(
        self, ctx: StageContext, turn: _Turn, final: str, *, interrupted: bool = False, error: str = ""
    ) -> TurnResult:
        message = turn.message
        no_memory = ctx.no_memory = self._effective_no_memory(ctx, turn)
        if ctx.response is not None:  # a stage short-circuited: straight to delivery and after_output
            final = ctx.final_text = ctx.response
        elif not error and not interrupted:
            ctx.final_text = final
            await self.stages.run(Stage.BEFORE_OUTPUT, ctx)
            final = ctx.response if ctx.response is not None else ctx.final_text
        result = TurnResult(
            ok=not error,
            text=final,
            error=error,
            reasoning="".join(turn.reasoning),
            tool_calls=turn.tool_log,
            usage=turn.usage,
            source=turn.source,
            interrupted=interrupted,
            input_id=message.id,
            fallback_from=turn.fallback_from,
            partial="".join(turn.partial) if interrupted else "",
        )
        try:  # durable before the reply is delivered: an acknowledged turn survives kill -9
            await self.memory.record(
                TurnRecord(
                    user_text=ctx.raw_message,
                    reply=final,
                    channel=message.channel,
                    source=message.source,
                    user_id=ctx.user_id,
                    group_id=ctx.group_id,
                    speaker=ctx.speaker,
                    no_memory=no_memory,
                    tool_outputs=turn.tool_outputs,
                    ts=message.ts,
                    input_id=message.id,
                    media_digests=turn.media_digests,
                    tool_media_digests=turn.tool_media_digests,
                    tool_media_text="\n".join(turn.tool_media_lines),
                )
            )
        except Exception:
            log.exception("recording turn %s in memory failed", message.id)
        await self._deliver(turn, result)
        if not error:
            await self.stages.run(Stage.AFTER_OUTPUT, ctx)
        if self.textlog is not None and not no_memory:  # a no_memory turn is not logged at all
            self.textlog.append("user", ctx.raw_message, channel=message.channel, id=message.id, source=message.source)
            self.textlog.append(
                "assistant",
                final,
                channel=message.channel,
                id=message.id,
                error=error or None,
                tools=[t["tool"] for t in turn.tool_log],
                ms=round((time.perf_counter() - turn.started) * 1000, 1),
            )
        self.events.publish(
            "agent_output",
            {
                "input_id": message.id,
                "channel": message.channel,
                "text": final,
                "error": error,
                "interrupted": interrupted,
                "kind": "reply",
            },
        )
        if message.reply is not None and not message.reply.done():
            message.reply.set_result(result)
        return result

    async def _deliver(self, turn: _Turn, result: TurnResult) -> None:
        message = turn.message
        if message.sink is not None:
            if result.error and not result.interrupted:
                await turn.frame({"type": "error", "message": result.error, "id": message.id})
            await turn.frame(
                {
                    "type": "response",
                    "text": result.text,
                    "ok": result.ok,
                    "interrupted": result.interrupted,
                    "id": message.id,
                    "usage": result.usage,
                    "source": result.source,
                    "fallback_from": result.fallback_from,
                    **({"partial": result.partial} if result.partial else {}),
                }
            )
            return
        if message.reply is not None or not result.text:
            return
        await self._send_to_channel(message, result.text)

    async def _send_to_channel(self, message: InputMessage, text: str) -> None:
        """A reply nobody waits for (a plugin's input, a timer's turn) goes to an output channel.

        To the channel the input asked for (``deliver_to``: where a timer was
        set), else its own; when that is no output channel (an input on
        ``timer``), to every channel of ``core.agent.proactive_channels`` that
        exists; else only the text log and the event stream keep it, and the
        log says so.
        """
        if self.channels is None:
            return
        options = message.options
        wanted = options.deliver_to or message.channel
        targets = [wanted] if self.channels.get(wanted) is not None else [
            name for name in dict.fromkeys(self.settings.proactive_channels()) if self.channels.get(name) is not None
        ]
        for target in targets:
            meta = {"reply_to": message.id, "user_id": options.user_id, "group_id": options.group_id,
                    "proactive": target != message.channel, "source": message.source}
            await self.channels.send(target, text, meta)
        if not targets:
            log.info("reply to input %s on channel %r reached no output channel (see core.agent.proactive_channels)",
                     message.id, wanted)


MEDIA_LOOK = "media_look"


def media_look_def() -> ToolDef:
    """The media tool's definition (a fresh one: tool definitions are mutable objects)."""
    return ToolDef(
        name=MEDIA_LOOK,
        description=(
            "Ask a model that can see a question about an image attached to this message (you got only its "
            "description). 'image': the 12-hex digest from its marker (default: the first image)."
        ),
        parameters={
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "what to look for or read in the image"},
                "image": {"type": "string", "description": "digest from the image's marker, e.g. a1b2c3d4e5f6"},
            },
            "required": ["question"],
        },
        plugin="media",
    )


def _by_approval(result: ToolResult) -> bool:
    """A denial by the approval gate: the model gets one more round to tell the user."""
    return isinstance(result.result, dict) and "approval" in result.result


def _assistant_message(text: str, calls: list[ToolCall]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": c.raw_arguments or json.dumps(c.arguments, ensure_ascii=False),
                },
            }
            for c in calls
        ],
    }


def _tool_message(call: ToolCall, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text}
