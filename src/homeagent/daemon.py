"""The daemon: the one place that knows every subsystem and wires them together.

Start order: data-dir lock → logging → config → events/io/tools/stages →
providers → memory → agent → local socket (→ web UI, plugins). Stop runs the
reverse, so nothing is closed while something that uses it still runs, and
every store is flushed before the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import logging.handlers
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from homeagent import __version__
from homeagent.agent.agent import Agent
from homeagent.agent.media_input import MediaTurnPath
from homeagent.agent.memory_port import RecentTurns, TurnMemory
from homeagent.agent.process import LLMSlot, TurnRunner, TurnSettings
from homeagent.agent.prompt import PromptBuilder
from homeagent.agent.stages import StageHost
from homeagent.agent.subagents import SubAgents
from homeagent.agent.tools import ToolRegistry
from homeagent.approvals import DEFAULT_ASK, ApprovalBroker, ApprovalPolicy, ApprovalStore, PolicyConfig
from homeagent.approvals.chat import ChatApprovals
from homeagent.approvals.desk import socket_methods as approval_methods
from homeagent.builtin.catalog import HealthSources, builtin_factories
from homeagent.config import ConfigError, ConfigRegistry, core_defs
from homeagent.config.defaults import DATA_PATH_KEYS
from homeagent.confine import Sandbox, SandboxSettings
from homeagent.console import ConsoleLogHandler, say
from homeagent.control import ConfigControl
from homeagent.conversations import ConversationStore, TranscriptHistory
from homeagent.datalock import AlreadyRunning, DataDirLock
from homeagent.events import EventBus
from homeagent.io.channels import OutputChannels
from homeagent.io.manager import IOManager
from homeagent.io.socket_server import RPCError, SocketLimits, SocketServer
from homeagent.knowledge.api import KnowledgeService
from homeagent.knowledge.base import KnowledgeBase
from homeagent.knowledge.tools import knowledge_tools
from homeagent.llm_control import LLMControl
from homeagent.memory.cleaners import CleanerChain
from homeagent.memory.context import ContextTurnMemory, RelevanceContext
from homeagent.memory.distill import SELF, RuleDistiller
from homeagent.memory.doc_api import DocMemoryService
from homeagent.memory.documents import DocumentStore, render_injection
from homeagent.memory.embedder import build_embedder
from homeagent.memory.graph import GraphDB
from homeagent.memory.graph_api import GraphMemoryService
from homeagent.memory.graph_tools import graph_tools
from homeagent.memory.identity import Identities
from homeagent.memory.indexer import MemoryIndexer
from homeagent.memory.lexical import Analyzer
from homeagent.memory.loops import MemoryLoops
from homeagent.memory.media import MediaAPI, MediaError, MediaGCLoop, MediaStore
from homeagent.memory.media.api import OFF as MEDIA_OFF
from homeagent.memory.media.owners import MediaOwners
from homeagent.memory.media.repair import DocumentMarkers, MarkerSource, SentenceMarkers, WindowMarkers, repair
from homeagent.memory.social import Social
from homeagent.memory.storecheck import check_store, is_corruption, set_aside
from homeagent.memory.textlog import TextLog, TextMemoryService
from homeagent.memory.tools import doc_tools
from homeagent.paths import DataPaths
from homeagent.plugins.proc.limits import ResourceLimits
from homeagent.plugins.proc.plugin import ProcOptions, make_loader
from homeagent.plugins.proc.supervisor import Supervisor
from homeagent.plugins.registry import PluginRegistry
from homeagent.plugins.rpc import register_rpc
from homeagent.plugins.services import PluginServices
from homeagent.plugins.shipped import BUNDLED_DIR
from homeagent.providers.base import ChatRequest
from homeagent.providers.describe import (
    DescribeSettings,
    FallbackDescriber,
    FallbackTranscriber,
    TranscribeSettings,
    builtin_prompt,
)
from homeagent.sdk.types import OutputCap, Stage, StageContext, ToolDef
from homeagent.startup import AGENT, APPROVALS, MEMORY, PLUGINS, WEB, Startup, StillStarting
from homeagent.threads import run_detached

if TYPE_CHECKING:  # the web UI's modules load only when it starts (starlette and uvicorn take a while to import)
    from homeagent.webui.host import WebHost
    from homeagent.webui.server import WebUIServer

log = logging.getLogger("homeagent.daemon")
_S = TypeVar("_S")
"""A store :meth:`Daemon._open_store` opens."""

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


class Daemon:
    def __init__(
        self, paths: DataPaths, *, web: bool = True, log_level: str | None = None, lock: DataDirLock | None = None
    ) -> None:
        self.paths = paths
        self.web_enabled = web
        self.log_level = log_level
        self.started_at = time.time()
        self.lock = lock or DataDirLock(paths.lock)
        self.stopped = asyncio.Event()
        self.notes: list[str] = []
        self.web_url: str | None = None
        self.web: WebUIServer | None = None  # while the web UI runs
        self._undo: list[Callable[[], None]] = []
        self._log_handler: logging.Handler | None = None
        self._llm_reload: asyncio.TimerHandle | None = None
        self.startup = Startup([APPROVALS, MEMORY, PLUGINS, AGENT, *([WEB] if web else [])])

    # ------------------------------------------------------------------ start
    async def start(self) -> None:
        self.paths.ensure()
        self.lock.acquire()
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        self.config = ConfigRegistry(self.paths.config_db)
        for definition in core_defs(self.paths.root):
            self.config.register_def(definition)
        if self.config.get("core.daemon.data_dir") != str(self.paths.root):  # moved, copied or restored here
            self.config.set("core.daemon.data_dir", str(self.paths.root))
        self._setup_logging()
        cfg = self.config

        self.events = EventBus()
        self.io = IOManager()
        self.tools = ToolRegistry()
        self.stages = StageHost(default_timeout=cfg.get_duration("core.agent.stage_timeout", 10.0))
        self.channels = OutputChannels(self.tools)
        self.textlog = TextLog(
            self.paths.resolve(cfg.get_str("core.memory.text", ""), self.paths.memory / "text"),
            max_bytes=cfg.get_int("core.log.max_bytes", 10 * 1024 * 1024),
            backups=cfg.get_int("core.log.backups", 5),
        )
        self.textlog.start()

        self.llm = LLMControl(cfg, self.paths)
        await self.llm.start()
        for note in self.llm.notes:
            log.info("%s", note)
        self._undo.append(cfg.on_change(self._on_config_change))

        self.prompt = PromptBuilder(
            identity=lambda: cfg.get_str("core.agent.system_prompt", ""),
            persona_file=lambda: cfg.get_str("core.agent.persona_file", ""),
        )
        # The socket comes up first (status works, messages queue) while memory and plugins load.
        self.socket = SocketServer(
            self.paths.socket, self.io, cancel_turn=self._cancel_turn, limits=self._socket_limits, gate=self._gate
        )
        self._register_rpc()
        await self.socket.start()
        await self._start_approvals()
        self.startup.done(APPROVALS)
        await self._start_memory()
        await self._start_conversations()
        self.startup.done(MEMORY)

        settings = TurnSettings(
            max_tool_turns=lambda: cfg.get_int("core.agent.max_tool_turns", 10),
            tool_timeout=lambda: cfg.get_duration("core.agent.tool_timeout", 120.0),
            temperature=lambda: cfg.get_float("core.llm.temperature", 0.7),
            max_tokens=lambda: cfg.get_int("core.llm.max_tokens", 4096),
            proactive_channels=lambda: [
                c.strip() for c in cfg.get_str("core.agent.proactive_channels", "cli,webui").split(",") if c.strip()
            ],
        )
        self.runner = TurnRunner(
            stages=self.stages,
            tools=self.tools,
            run_llm=self.llm.manager.run,
            prompt=self.prompt,
            memory=self.memory,
            events=self.events,
            channels=self.channels,
            textlog=self.textlog,
            settings=settings,
            gate=self.approvals,
            media=self._media_turn_path(),
            speakers=self.identities,
        )
        self.agent = Agent(self.io, self.runner)
        # approval requests from a chat go to the owner's linked account there; the owner answers in that chat
        self.chat_approvals = ChatApprovals(self.approvals, self.identities, self.channels)
        self.approvals.chats = self.chat_approvals
        self._undo.append(self.io.add_intake(self.chat_approvals.intake))

        def make_child_runner(tool_filter: Callable[[ToolDef], bool]) -> TurnRunner:
            # own context and own LLM slot: interrupts meant for the parent never cancel a child's call
            return TurnRunner(
                stages=self.stages,
                tools=self.tools,
                run_llm=self.llm.manager.run,
                prompt=self.prompt,
                memory=RecentTurns(),
                events=self.events,
                channels=self.channels,
                settings=settings,
                tool_filter=tool_filter,
                slot=LLMSlot(),
                gate=self.approvals,  # the parent's policy; a child's requests go to the owner too
            )

        self.subagents = SubAgents(
            make_child_runner,
            events=self.events,
            max_children=lambda: cfg.get_int("core.agent.max_children", 3),
            child_timeout=lambda: cfg.get_duration("core.agent.child_timeout", 600.0),
        )
        self.subagents.start()
        for child_tool, child_handler in self.subagents.tools():
            self._undo.append(self.tools.register(child_tool, child_handler))
        self._register_core_tools()

        self._undo.append(
            self.channels.register(
                "cli",
                self._cli_output,
                caps=OutputCap.TEXT,
                description="Terminal clients attached with `homeagent chat`.",
                plugin="cli",
            )
        )
        self.plugins = PluginRegistry(
            self.plugin_services(),
            self.paths.resolve(cfg.get_str("core.plugin.dir", ""), self.paths.plugins),
            shipped=BUNDLED_DIR,
        )
        # What cmd_run, terminals and subprocess plugins run under; checked once now (a few ms).
        self.sandbox = Sandbox(self._sandbox_settings, hidden=self._private_paths)
        await self.sandbox.probe()
        health = HealthSources(started_at=self.started_at, agent_status=self.agent.status, sandbox=self.sandbox.status)
        for name, factory in builtin_factories(health=health, sandbox=self.sandbox).items():
            self.plugins.register_factory(name, factory)
        self.supervisor = Supervisor()
        self.plugins.register_kind(
            "process",
            make_loader(
                self.supervisor,
                options=ProcOptions(
                    call_timeout=cfg.get_duration("core.agent.tool_timeout", 120.0),
                    log_rate=float(cfg.get_int("core.plugin.log_rate", 50)),
                    log_burst=4.0 * cfg.get_int("core.plugin.log_rate", 50),
                    limits=self._plugin_limits,
                    sandbox=self.sandbox,
                ),
                plugins=self.plugins,
            ),
        )
        register_rpc(self.socket, self.plugins)
        summary = await self.plugins.load_all()
        log.info("plugins: %s", summary.get("states", summary))
        self.startup.done(PLUGINS)
        self.agent.start()
        self.startup.done(AGENT)
        if self.web_enabled:
            await self._start_web()
        self.startup.finish()  # the web UI is up, or failed and says so in the notes
        log.info("HomeAgent %s ready; data dir %s; socket %s", __version__, self.paths.root, self.paths.socket)

    def plugin_services(self) -> PluginServices:
        """The daemon's subsystems as plugins reach them: each memory layer behind the SDK Protocol it implements.

        The one place plugin wiring is built; tests that run built-ins on bare
        daemon subsystems call it too, so a wiring mistake here fails them.
        """
        cfg = self.config
        return PluginServices(
            tools=self.tools,
            stages=self.stages,
            io=self.io,
            config=self.config,
            events=self.events,
            channels=self.channels,
            prompt=self.prompt,
            llm=self.llm,
            data_dir=self.paths.root,
            cleaners=self.cleaners,
            docs=DocMemoryService(self.docs, media=self.media,
                                  max_bytes=lambda: cfg.get_int("core.memory.media.max_bytes", 20 * 1024 * 1024)),
            memory=GraphMemoryService(self.graph),
            knowledge=KnowledgeService(self.knowledge),
            text_memory=TextMemoryService(self.textlog),
            context=self.context,
            social=self.social,
        )

    async def _start_approvals(self) -> None:
        """The approval policy, its store and the broker tool calls wait in; answered over the socket and web."""
        cfg = self.config

        def read_policy() -> PolicyConfig:
            try:
                timeout = cfg.get_duration("core.approvals.timeout", 120.0)
            except ConfigError:
                timeout = 120.0
            try:
                return PolicyConfig.parse(
                    cfg.get_str("core.approvals.ask", DEFAULT_ASK), cfg.get_str("core.approvals.deny", ""),
                    cfg.get("core.approvals.rules", []), timeout,
                )
            except (ConfigError, ValueError) as exc:  # fail closed: a broken policy asks about everything
                log.error("approval settings are invalid (%s): every tool call asks until they are fixed", exc)
                return PolicyConfig(ask=("*",), timeout=timeout)

        store = await asyncio.to_thread(ApprovalStore, self.paths.root / "approvals.db")
        policy = ApprovalPolicy(read_policy, store.rules)
        self.approvals = ApprovalBroker(policy, store, self.events, notify=self.socket.broadcast)
        for name, fn in approval_methods(self.approvals).items():
            self.socket.add_method(name, self._rpc_guard(fn))

    @staticmethod
    def _rpc_guard(fn: Callable[[dict[str, Any]], Awaitable[Any]]) -> Callable[[dict[str, Any]], Awaitable[Any]]:
        async def call(params: dict[str, Any]) -> Any:
            try:
                return await fn(params)
            except ValueError as exc:
                raise RPCError(str(exc)) from exc

        return call

    async def _start_memory(self) -> None:
        """Build the three memory tiers around one shared embedder; heavy loading runs off the loop."""
        cfg = self.config
        mem = self.paths.memory
        analyzer = Analyzer(log=log)
        self.embedder = build_embedder(cfg.get_str("core.agent.embedding_model_path", ""), log=log, analyzer=analyzer)
        self.cleaners = CleanerChain(tool_lookup=self.tools.get, log=log)
        docs_path = mem / "documents.db"

        async def open_docs() -> DocumentStore:
            docs = await asyncio.to_thread(
                DocumentStore,
                docs_path, self.embedder, cleaners=self.cleaners, analyzer=analyzer, log=log,
                session_gap=cfg.get_duration("core.memory.session_gap", "30m"),
            )
            try:
                await docs.astart()
            except BaseException:
                await asyncio.to_thread(docs.close)
                raise
            return docs

        self.docs = await self._open_store(
            docs_path, "document store", open_docs, kept="the graph, the conversation window and the text log are"
        )
        self.context = await asyncio.to_thread(
            RelevanceContext,
            mem / "context.json",
            self.embedder,
            self.docs,
            self.cleaners,
            top_k=cfg.get_int("core.agent.context_top_k", 30),
            analyzer=analyzer,
            log=log,
        )
        graph_path = self.paths.resolve(cfg.get_str("core.memory.graph", ""), mem / "graph.db")
        self.graph = await self._open_store(
            graph_path, "memory graph", lambda: GraphDB.open(graph_path),
            kept="documents, the conversation window and the text log are",
        )
        await self._start_media()
        self.context.attach_media(self.media)
        self.memory: TurnMemory = ContextTurnMemory(self.context, media=self.media)
        self.indexer = MemoryIndexer(self.graph, self.embedder, analyzer=analyzer)  # one jieba dictionary, not two
        await self.indexer.start()
        self.social = Social(self.graph)
        ids_path = mem / "identities.db"
        self.identities = await self._open_store(
            ids_path, "identity links",
            lambda: Identities.open(ids_path, lambda: cfg.get_str("core.memory.owner_name", "")),
            kept="memory is",
        )
        self.identities.renamed = self._carry_over
        for name, fn in self.identities.methods().items():
            self.socket.add_method(name, self._rpc_guard(fn))
        # facts a person states are about that person (ctx.speaker): two people in one group never share a "user"
        self.distiller = RuleDistiller(self.graph, subject_of=lambda speaker: speaker or SELF)
        self.knowledge = KnowledgeBase(
            self.paths.resolve(cfg.get_str("core.knowledge.path", ""), self.paths.knowledge), self.embedder
        )
        for definition, handler in (
            *doc_tools(self.context, self.docs, media=self.media),
            *graph_tools(self.graph, self.indexer, self.social, media=self.media),
            *knowledge_tools(self.knowledge),
        ):
            definition.plugin = definition.plugin or "memory"
            self._undo.append(self.tools.register(definition, handler))

        async def recalled_documents(inputs: Any) -> str | None:
            recalled = await self.docs.arecall(inputs.user_text, 3)
            return render_injection(recalled) if recalled else None

        self._undo += [
            self.prompt.add_section("memory_index", lambda i: self.indexer.prompt_section(i.user_text), order=30),
            self.prompt.add_section("documents", recalled_documents, order=40),
            self.prompt.add_section("memory_tools", lambda i: self.indexer.tool_guide(), order=90),
        ]
        self._last_input = ""

        async def remember_raw(ctx: StageContext) -> None:
            # ctx.no_memory here is the turn's final decision (injected flag, a handler's, or a
            # no_memory tool called in the turn): the turn runner sets it before after_output.
            if ctx.raw_message and not ctx.no_memory:
                self._last_input = ctx.raw_message
                await self.distiller.record(ctx.raw_message, session=ctx.channel, speaker=ctx.speaker)

        self._undo.append(self.stages.register(Stage.AFTER_OUTPUT, remember_raw, plugin="core", name="rule-distiller"))

        async def memory_llm(prompt: str) -> str:
            # The loops' decisions (merge, review, archive) are calls of their own, not agent turns: their
            # prompts need no persona, tools, history or plugin stages, and they must not queue behind chats.
            # Each is published as a memory_llm event so the owner sees them in the event stream.
            request = ChatRequest(messages=[{"role": "user", "content": prompt}], temperature=0.0)
            started = time.perf_counter()
            ok = False
            source = ""
            try:
                response = await self.llm.manager.run(request, stream=False)
                ok, source = True, response.source
                return response.content
            finally:
                self.events.publish("memory_llm", {
                    "ok": ok, "source": source, "prompt_chars": len(prompt),
                    "ms": round((time.perf_counter() - started) * 1000, 1),
                })

        def interval(name: str, default: str) -> Any:
            return lambda: cfg.get_duration(f"core.agent.{name}_interval", default)

        self.memory_loops = MemoryLoops(
            self.graph,
            distiller=self.distiller,
            docs=self.docs,
            distill_context=lambda: self.context.prune(self._last_input),
            llm=memory_llm,
            llm_available=lambda: self.llm.manager.current_source() not in ("", "offline"),
            intervals={
                "rules": lambda: 600.0,
                "distill": interval("distill", "30m"),
                "archive": interval("archive", "60m"),
                "merge": interval("merge", "120m"),
                "review": interval("review", "120m"),
            },
        )
        self.memory_loops.start()
        # Loading models and dictionaries takes seconds: do it in the background so the socket is up at once.
        self._warmup = asyncio.get_running_loop().create_task(self._warm_memory(analyzer), name="memory-warmup")

    async def _start_conversations(self) -> None:
        """The web chat's conversations (``conversations.db``); each is a chat scope of the context window."""
        path = self.paths.root / "conversations.db"
        store = await self._open_store(
            path, "conversations", lambda: asyncio.to_thread(ConversationStore, path),
            kept="memory (the context window, documents, graph) and the text log are",
        )
        self.conversations = await TranscriptHistory.open(store, self.context)
        await self.conversations.import_earlier(self.textlog)

    async def _start_media(self) -> None:
        """The media store when ``core.memory.media.enabled`` (read once, at start); else None and media is text."""
        cfg = self.config
        self.media: MediaStore | None = None
        self.media_gc: MediaGCLoop | None = None
        if not cfg.get_bool("core.memory.media.enabled", True):
            log.info("media store off (core.memory.media.enabled); media stays text")
            return
        root = self.paths.memory / "media"

        async def open_media() -> MediaStore:
            return await asyncio.to_thread(
                MediaStore,
                root,
                max_bytes=lambda: cfg.get_int("core.memory.media.max_bytes", 20 * 1024 * 1024),
                cap=lambda: cfg.get_int("core.memory.media.cap", 1024 * 1024 * 1024),
                min_age=lambda: cfg.get_duration("core.memory.media.gc_min_age", "24h"),
            )

        try:
            self.media = await self._open_store(
                root / "media.db", "media store", open_media,
                kept="the media files (adopted and referenced again from memory's markers) and every other memory are",
            )
        except (OSError, sqlite3.Error) as exc:  # unwritable, locked, a file where the folder should be
            note = f"media store at {root} not available ({type(exc).__name__}: {exc}); media stays text"
            log.error("%s", note)
            self.notes.append(note)
            return
        self.media_gc = MediaGCLoop(
            self.media, lambda: cfg.get_duration("core.memory.media.gc_interval", "6h"), owners=self._media_owners()
        )
        self.media_gc.start()
        self.media_repair: asyncio.Task[None] | None = None
        if await asyncio.to_thread(self.media.lost_metadata):
            self.media_repair = asyncio.get_running_loop().create_task(self._repair_media(self.media),
                                                                        name="media-repair")

    def _media_turn_path(self) -> MediaTurnPath:
        """The media turn path: images to a model that sees, else described by the image fallback source."""
        cfg = self.config
        manager = self.llm.manager

        def prompt(key: str, kind: str) -> Callable[[], str]:
            """The setting, or while it is empty the built-in prompt in ``core.agent.language`` (read each time)."""
            return lambda: cfg.get_str(key, "").strip() or builtin_prompt(kind, cfg.get_str("core.agent.language", "en"))

        describer = FallbackDescriber(manager, DescribeSettings(
            source=lambda: cfg.get_str("core.input_processing.image.fallback_provider", ""),
            model=lambda: cfg.get_str("core.input_processing.image.fallback_model", ""),
            describe_prompt=prompt("core.input_processing.image.describe_prompt", "image.describe"),
            ocr_enabled=lambda: cfg.get_bool("core.input_processing.image.ocr_enabled", True),
            ocr_prompt=prompt("core.input_processing.image.ocr_prompt", "image.ocr"),
        ))
        transcriber = FallbackTranscriber(manager, TranscribeSettings(
            source=lambda: cfg.get_str("core.input_processing.audio.fallback_provider", ""),
            model=lambda: cfg.get_str("core.input_processing.audio.fallback_model", ""),
            prompt=prompt("core.input_processing.audio.describe_prompt", "audio.describe"),
        ))
        return MediaTurnPath(self.media, manager.sees_images, describer, transcriber)

    def _media_sources(self) -> list[MarkerSource]:
        """Where media markers live, for ``repair``: the window, the documents, the graph's sentences."""
        return [WindowMarkers(self.context), DocumentMarkers(self.docs), SentenceMarkers(self.graph)]

    async def _repair_media(self, store: MediaStore) -> None:
        """A fresh ``media.db`` next to blobs already on disk (it was missing, or set aside as corrupt):
        adopt them and reference them again from the markers in memory before GC could take them for strays."""
        try:
            report = await repair(store, self._media_sources())
        except Exception:
            log.exception("media: rebuilding the references after media.db was lost failed; "
                          "run `homeagent memory media repair`")
            return
        log.warning("media: media.db was new next to %d stored files; %d references rebuilt from %d owners "
                    "(%d descriptions restored, %d markers name bytes that are gone) in %.2fs",
                    report.adopted, report.references_added, report.owners, report.described,
                    len(report.unresolved), report.seconds)

    def _media_owners(self) -> MediaOwners:
        return MediaOwners(documents=self.docs, window=self.context, graph=self.graph)

    async def _open_store(self, path: Path, label: str, opener: Callable[[], Awaitable[_S]], *, kept: str) -> _S:
        """Open a SQLite store; a corrupt file is set aside (never deleted) and a fresh one opened.

        Checked before the open (quick_check) and again by the open itself: an error
        that says the file is damaged sets it aside and retries once, so the daemon
        starts and the user reads one note instead of a traceback. Any other error
        (locked, permissions, a newer schema) still stops the start: moving the file
        would not help and might hide the user's data.
        """
        note = await asyncio.to_thread(check_store, path, label, kept=kept)
        if note:
            self.notes.append(note)
        try:
            return await opener()
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise
            self.notes.append(await asyncio.to_thread(set_aside, path, label, str(exc), kept=kept))
        return await opener()

    async def _warm_memory(self, analyzer: Analyzer) -> None:
        started = time.perf_counter()
        try:
            await asyncio.gather(
                run_detached(analyzer.warmup, name="warmup-analyzer"),
                run_detached(self.embedder.warmup, name="warmup-embedder"),
                self.docs.abackfill(),
            )
        except Exception:
            log.exception("warming up memory failed; retrieval falls back to what is loaded")
            return
        log.info("memory ready in %.1fs (embedder %s)", time.perf_counter() - started, self.embedder.name)

    async def _carry_over(self, account: str, person: str) -> None:
        """A chat account was linked to a person: what the graph knows about ``qq:10001`` becomes the person's."""
        if await self.graph.entity(account) is None:
            return
        if await self.graph.entity(person) is None:
            await self.graph.add_alias(account, person)  # the person is that entity from now on
        else:
            await self.graph.merge_entities(account, person)

    async def _stop_memory(self) -> None:
        if getattr(self, "_warmup", None) is not None:
            self._warmup.cancel()
            await asyncio.gather(self._warmup, return_exceptions=True)
        for name in ("memory_loops",):
            if hasattr(self, name):
                await getattr(self, name).stop()
        if hasattr(self, "context"):
            await self.context.close()
        if hasattr(self, "indexer"):
            await self.indexer.close()
        media_gc: MediaGCLoop | None = getattr(self, "media_gc", None)
        if media_gc is not None:
            await media_gc.stop()
        media_repair: asyncio.Task[None] | None = getattr(self, "media_repair", None)
        if media_repair is not None:
            media_repair.cancel()
            await asyncio.gather(media_repair, return_exceptions=True)
        media: MediaStore | None = getattr(self, "media", None)
        if media is not None:
            await media.aclose()
        if hasattr(self, "graph"):
            await self.graph.close()
        if hasattr(self, "identities"):
            await self.identities.close()
        if hasattr(self, "docs"):
            await self.docs.aclose()

    async def _start_web(self) -> None:
        from homeagent.webui import WebUIError, start_webui

        try:
            self.web = await start_webui(self.web_host())  # reads webui.listen_addr / webui.allow_remote
            self.web_url = self.web.url
        except WebUIError as exc:  # port taken, remote address refused: run on without the web UI
            log.error("web UI not started: %s", exc)
            self.notes.append(f"web UI not started: {exc}")

    def web_host(self) -> WebHost:
        """What the web UI may use of this daemon, each part typed by the Protocol it implements (after start)."""
        from homeagent.webui.host import WebHost

        return WebHost(
            config=self.config,
            paths=self.paths,
            events=self.events,
            status=self.status,
            io=self.io,
            agent=self.agent,
            tools=self.tools,
            channels=self.channels,
            socket=self.socket,
            llm=self.llm,
            adapters=self.llm.adapters,
            approvals=self.approvals,
            textlog=self.textlog,
            conversations=self.conversations,
            plugins=self.plugins,
            context=self.context,
            documents=self.docs,
            graph=self.graph,
            knowledge=self.knowledge,
            media=self.media,
        )

    def _setup_logging(self) -> None:
        level_name = self.log_level or str(self.config.get("core.daemon.log_level") or "info")
        root = logging.getLogger("homeagent")
        root.setLevel(LOG_LEVELS.get(level_name, logging.INFO))
        log_dir = self.paths.resolve(self.config.get_str("core.log.path", ""), self.paths.log)
        log_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            log_dir / "homeagent.log", maxBytes=5 * 1024 * 1024, backupCount=3, encoding="utf-8"
        )
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        self._log_handler = handler

    # ------------------------------------------------------------------ tools
    def _register_core_tools(self) -> None:
        async def list_sources(_: dict[str, Any]) -> Any:
            return self.llm.sources()

        async def set_source(args: dict[str, Any]) -> Any:
            try:
                return self.llm.use({"name": args["name"]})
            except ValueError as exc:
                return {"isError": True, "content": str(exc)}

        self._undo.append(
            self.tools.register(
                ToolDef(
                    name="llm_list_sources",
                    description="List the LLM sources in fallback order, with their state.",
                    plugin="core",
                    no_memory=True,
                ),
                list_sources,
            )
        )
        self._undo.append(
            self.tools.register(
                ToolDef(
                    name="llm_set_source",
                    description="Make an LLM source the preferred one.",
                    parameters={
                        "type": "object",
                        "properties": {"name": {"type": "string", "description": "source name"}},
                        "required": ["name"],
                    },
                    plugin="core",
                    no_memory=True,
                    serial=True,
                    parallel_safe=False,
                ),
                set_source,
            )
        )
        definition, handler = self.channels.list_tool()
        definition.plugin = "core"
        self._undo.append(self.tools.register(definition, handler))

    async def _cli_output(self, payload: str, meta: dict[str, Any], type_: str) -> Any:
        count = await self.socket.broadcast({"type": "output", "text": payload, "meta": meta, "kind": type_})
        if count == 0:
            return {"status": "queued", "note": "no terminal client is attached; shown in the log"}
        return {"status": "sent", "clients": count}

    # -------------------------------------------------------------------- rpc
    def _register_rpc(self) -> None:
        control = ConfigControl(self.config)

        def guarded(fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
            def call(params: dict[str, Any]) -> Any:
                try:
                    return fn(params)
                except (ConfigError, ValueError) as exc:
                    raise RPCError(str(exc)) from exc

            return call

        methods: dict[str, Callable[[dict[str, Any]], Any]] = {
            "status": lambda _: self.status(),
            "shutdown": self._rpc_shutdown,
            "config.get": guarded(control.get),
            "config.set": guarded(control.set),
            "config.list": guarded(control.list),
            "llm.sources": lambda _: self.llm.sources(),
            "llm.use": guarded(self.llm.use),
            "llm.test": self.llm.test,
            "llm.add": guarded(self.llm.save_source),
            "llm.remove": guarded(self.llm.remove_source),
            "llm.order": guarded(self.llm.reorder),
            "agent.cancel": lambda _: {"cancelled": self._cancel_turn()},
            "memory.loops": lambda _: self.memory_loops.stats(),
            "memory.run_loop": lambda p: self.memory_loops.run_now(str(p.get("name", ""))),
            "memory.graph": lambda _: self.graph.introspect(),
            "memory.search": self._rpc_memory_search,
            "knowledge.list": lambda _: self.knowledge.names(),
            "knowledge.search": lambda p: self._rpc_knowledge_search(p),
            "tools.list": lambda _: [
                {"name": t.name, "plugin": t.plugin, "description": t.description} for t in self.tools.tools()
            ],
        }
        for name, fn in methods.items():
            self.socket.add_method(name, fn)
        for name in ("media.list", "media.show", "media.gc", "media.add", "media.repair"):
            self.socket.add_method(name, functools.partial(self._rpc_media, name))

    async def _rpc_media(self, method: str, params: dict[str, Any]) -> Any:
        media = getattr(self, "media", None)
        if media is None:
            raise RPCError(
                f"{MEDIA_OFF} (core.memory.media.enabled is false, or memory is still starting); "
                "turn it on with `homeagent config set core.memory.media.enabled true` and restart"
            )
        try:
            return await MediaAPI(media, self._media_owners(), self._media_sources()).methods()[method](params)
        except (MediaError, ValueError) as exc:
            raise RPCError(str(exc)) from exc

    async def _rpc_memory_search(self, params: dict[str, Any]) -> Any:
        query = str(params.get("query", ""))
        docs = await self.docs.aquery(query, int(params.get("k", 5)), touch=False)
        recall, _ = await self.indexer.recall(query)  # seeded like the prompt block: names, relation words, facts
        return {"documents": [d.to_dict() for d in docs], "graph": recall.to_dict()}

    async def _rpc_knowledge_search(self, params: dict[str, Any]) -> Any:
        hits = await self.knowledge.search(str(params.get("query", "")), int(params.get("k", 5)))
        return [h.to_dict() for h in hits]

    async def _gate(self, method: str) -> None:
        try:
            await self.startup.gate(method)
        except StillStarting as exc:
            raise RPCError(str(exc)) from exc

    def _plugin_limits(self, name: str) -> ResourceLimits:
        """A subprocess plugin's memory and CPU-time limits: the defaults, or its entry in core.plugin.limits."""
        cfg = self.config
        memory = cfg.get_int("core.plugin.max_memory_mb", 1024)
        cpu = cfg.get_int("core.plugin.max_cpu_seconds", 0)
        overrides = cfg.get("core.plugin.limits", {})
        if isinstance(overrides, str):
            try:
                overrides = json.loads(overrides or "{}")
            except ValueError:
                overrides = {}
        own = overrides.get(name) if isinstance(overrides, dict) else None
        if isinstance(own, dict):
            for key, value in own.items():
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    log.warning("core.plugin.limits: %s.%s = %r is not a whole number >= 0; ignored", name, key, value)
                elif key == "max_memory_mb":
                    memory = value
                elif key == "max_cpu_seconds":
                    cpu = value
                else:
                    log.warning("core.plugin.limits: %s.%s is not a limit (max_memory_mb, max_cpu_seconds)", name, key)
        return ResourceLimits(max_memory_mb=memory, max_cpu_seconds=cpu)

    def _sandbox_settings(self) -> SandboxSettings:
        """The owner's core.sandbox.* settings, read at each launch (a bad value falls back to the safe default)."""
        cfg = self.config
        mode = cfg.get_str("core.sandbox.mode", "auto").strip().lower()
        extra = cfg.get_str("core.sandbox.ro_paths", "")
        return SandboxSettings(
            mode=mode if mode in ("auto", "bwrap", "off") else "auto",
            network=bool(cfg.get("core.sandbox.network", False)),
            binary=cfg.get_str("core.sandbox.bwrap", "bwrap").strip() or "bwrap",
            ro_paths=tuple(p.strip() for p in extra.split(",") if p.strip()),
        )

    def _private_paths(self) -> list[Path]:
        """What a sandboxed program must never see: the data dir, the socket, and data folders moved elsewhere."""
        out = [self.paths.root, self.paths.socket]
        for key in DATA_PATH_KEYS:
            configured = self.config.get_str(key, "")
            if configured:
                out.append(self.paths.resolve(configured, self.paths.root))
        return out

    def _socket_limits(self) -> SocketLimits:
        """Per-connection limits of the local socket, read for each new connection."""
        cfg = self.config
        unread = cfg.get_int("core.socket.max_unread_bytes", 8 * 1024 * 1024)
        return SocketLimits(
            max_inflight_rpcs=cfg.get_int("core.socket.max_inflight_rpcs", 32),
            max_queued_turns=cfg.get_int("core.socket.max_queued_turns", 8),
            max_unread_bytes=unread,
            pause_reading_bytes=unread // 8,
        )

    def _cancel_turn(self) -> bool:
        return self.agent.cancel_turn() if hasattr(self, "agent") else False

    def _rpc_shutdown(self, _: dict[str, Any]) -> dict[str, Any]:
        asyncio.get_running_loop().call_later(0.05, self.stopped.set)
        return {"stopping": True}

    def status(self) -> dict[str, Any]:
        return {
            "version": __version__,
            "pid": os.getpid(),
            "uptime_s": time.time() - self.started_at,
            "data_dir": str(self.paths.root),
            "socket": str(self.paths.socket),
            "socket_clients": self.socket.stats(),
            "web": self.web_url,
            "agent": self.agent.status() if hasattr(self, "agent") else {"busy": False, "starting": True},
            "llm_source": self.llm.manager.current_source(),
            "tools": len(self.tools.tools()),
            "plugins": len(self.plugins.running()) if hasattr(self, "plugins") else 0,
            "approvals_pending": len(self.approvals.pending()) if hasattr(self, "approvals") else 0,
            "sandbox": self.sandbox.status() if hasattr(self, "sandbox") else {"state": "checking"},
            "events": self.events.stats(),
            "ready": self.startup.ready,
            "starting": self.startup.starting,
        }

    # ----------------------------------------------------------------- config
    def _on_config_change(self, key: str, value: Any) -> None:
        if key == "core.sandbox.bwrap" and hasattr(self, "sandbox"):
            self.sandbox.reprobe()
        if key.startswith("core.approvals.") and hasattr(self, "approvals"):
            self.approvals.policy.invalidate()
        if key.startswith("core.llm."):
            # several keys often change together: rebuild once, shortly after the last one
            if self._llm_reload is not None:
                self._llm_reload.cancel()
            loop = asyncio.get_running_loop()
            self._llm_reload = loop.call_later(0.2, lambda: loop.create_task(self.llm.reload()))

    # ------------------------------------------------------------------- stop
    async def stop(self) -> None:
        if self.web is not None:
            try:
                await asyncio.wait_for(self.web.close(), 10)
            except Exception:
                log.exception("stopping the web UI failed")
            self.web = None
        for name, closer in (
            ("socket", lambda: self.socket.close()),
            ("agent", lambda: self.agent.stop()),
            ("subagents", lambda: self.subagents.close()),
            ("chat approvals", lambda: self.chat_approvals.close()),
            ("approvals", lambda: self.approvals.close()),
            ("plugins", lambda: self.plugins.stop_all()),
            ("plugin processes", lambda: self.supervisor.close()),
            ("sandbox", lambda: self.sandbox.close()),
            ("conversations", lambda: self.conversations.close()),
            ("memory", lambda: self._stop_memory()),
            ("text log", lambda: self.textlog.close()),
            ("llm", lambda: self.llm.close()),
            ("events", lambda: self.events.close()),
        ):
            if not self._has(name):
                continue
            started = time.perf_counter()
            try:
                await asyncio.wait_for(closer(), 10)
            except Exception:
                log.exception("stopping %s failed", name)
            log.debug("stopped %s in %.0f ms", name, (time.perf_counter() - started) * 1000)
        for undo in reversed(self._undo):
            with contextlib.suppress(Exception):
                undo()
        self._undo.clear()
        if hasattr(self, "config"):
            self.config.close()
        if self._log_handler is not None:
            logging.getLogger("homeagent").removeHandler(self._log_handler)
            self._log_handler.close()
        self.lock.release()

    def _has(self, name: str) -> bool:
        attr = {"socket": "socket", "agent": "agent", "plugins": "plugins", "subagents": "subagents", "approvals": "approvals", "chat approvals": "chat_approvals", "plugin processes": "supervisor", "sandbox": "sandbox", "conversations": "conversations", "memory": "cleaners", "text log": "textlog", "llm": "llm", "events": "events"}[name]
        return hasattr(self, attr)


def run_daemon(
    paths: DataPaths, *, log_level: str | None = None, web: bool = True, lock: DataDirLock | None = None
) -> int:
    """Run in the foreground until SIGINT/SIGTERM or `homeagent stop`.

    ``lock``, already held, is the data directory's lock taken before this module was imported
    (seconds of imports): a CLI command in that window sees a daemon starting, and waits for it.
    """
    console = ConsoleLogHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    logging.getLogger("homeagent").addHandler(console)

    async def main() -> int:
        daemon = Daemon(paths, web=web, log_level=log_level, lock=lock)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):  # before start: a signal during start-up stops cleanly too
            loop.add_signal_handler(sig, daemon.stopped.set)
        try:
            await daemon.start()
        except AlreadyRunning as exc:
            say(f"homeagent: {exc}", sys.stderr)
            return 1
        except ConfigError as exc:
            say(f"homeagent: cannot start: {exc}", sys.stderr)
            return 1
        try:
            say(f"HomeAgent {__version__} running (pid {os.getpid()})")
            say(f"  data dir: {paths.root}")
            say(f"  socket:   {paths.socket}")
            if daemon.web_url:
                say(f"  web UI:   {daemon.web_url}")
            message = daemon.web.new_token_message() if daemon.web else None
            if message:
                say(message)
            say(f"  LLM:      {daemon.llm.manager.current_source()}")
            for note in [*daemon.llm.notes, *daemon.notes]:
                say(f"  note: {note}")
            if daemon.web_url and not [s for s in daemon.llm.manager.list_sources() if not s.fallback]:
                say(f"  set up a language model: {daemon.web_url}#/setup")
            await daemon.stopped.wait()
            say("stopping…")
        finally:  # whatever happened above, every subsystem is stopped in order
            await daemon.stop()
        return 0

    try:
        return asyncio.run(main())
    finally:
        logging.getLogger("homeagent").removeHandler(console)
