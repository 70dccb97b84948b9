"""The core settings the daemon knows, with their defaults and descriptions.

These definitions are the single source for validation, the web UI's settings
page and docs/configuration.md. The keys follow the original HomeAgent, minus
its Docker-agent keys; where the original's defaults were unsafe or assumed a
particular vendor (a web UI on all interfaces, a DeepSeek source with no key)
the defaults here are safe and vendor-neutral. Settings marked ``owner_only``
(processes, code, folders, exposure, LLM endpoints and keys) are never
changed by the model's tools; see docs/security.md.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from homeagent.approvals.policy import DEFAULT_ASK
from homeagent.sdk.types import ConfigDef

LOG_LEVELS = ["debug", "info", "warn", "error"]
# Upper limits of settings: far above any real use, below where a number stops meaning anything (an overflow,
# a timer that never fires, a buffer larger than the machine)
DAY = 86_400
GIB = 1024**3
TIB = 1024**4

SOURCE_PREFIX = "core.llm.sources."

# Fields of one LLM source, `core.llm.sources.<name>.<field>`. Sources are not
# seeded: a source exists once one of its fields is set.
SOURCE_FIELDS: dict[str, ConfigDef] = {
    d.key: d
    for d in (
        ConfigDef("base_url", "", "string", "Base URL", "The provider's API root, e.g. https://api.example.com/v1.",
                  owner_only=True),
        ConfigDef("model", "", "string", "Model", "Model name sent to the provider."),
        ConfigDef("api_key", "", "password", "API key", "Key for the provider; stored locally, shown masked.",
                  secret=True, owner_only=True),
        ConfigDef("adapter", "", "string", "Adapter",
                  "Lua adapter that speaks the provider's wire format (e.g. openai, deepseek, anthropic).",
                  owner_only=True),
        ConfigDef("adapter_path", "", "string", "Adapter file",
                  "Path to a custom .lua adapter; relative paths are under the data directory.", owner_only=True),
        ConfigDef("max_concurrent", 8, "int", "Max concurrent requests",
                  "Requests in flight to this source at once.", min=1, max=1024),
        ConfigDef("priority", 0, "int", "Priority", "Fallback order: larger is tried first."),
        ConfigDef("context_window", 0, "int", "Context window",
                  "Tokens the model accepts; 0 = unknown.", min=0),
        ConfigDef("thinking_enabled", False, "bool", "Thinking",
                  "Ask the model for its reasoning where the provider supports it."),
        ConfigDef("vision", False, "bool", "Vision",
                  "The model can see images: attached images go to it as images. Off: they are described by "
                  "core.input_processing.image.fallback_provider, or reach it as their marker text only."),
    )
}


def source_field_def(source: str, field: str) -> ConfigDef | None:
    """The definition of `core.llm.sources.<source>.<field>`, or None if the field is unknown."""
    base = SOURCE_FIELDS.get(field)
    if base is None or not source or "." in source:
        return None
    return replace(
        base,
        key=f"{SOURCE_PREFIX}{source}.{field}",
        category="llm",
        display_name=f"{source}: {base.display_name}",
        options=list(base.options),
    )


def _def(key: str, default: object, type_: str, category: str, name: str, description: str,
         **kw: object) -> ConfigDef:
    return ConfigDef(key=key, default=default, type=type_, category=category, display_name=name,
                     description=description, **kw)  # type: ignore[arg-type]


#: Settings that name a place inside the data directory. Their defaults are relative
#: (resolved against the data directory at use, ``DataPaths.resolve``), so a data
#: directory that is moved, copied or restored from a backup uses its own files and
#: never the original's; a user may still set an absolute path, which stays absolute.
DATA_PATH_KEYS = (
    "core.plugin.dir",
    "core.memory.graph",
    "core.memory.text",
    "core.memory.documents",
    "core.knowledge.path",
    "core.log.path",
)


def core_defs(data_dir: Path) -> list[ConfigDef]:
    """Every core setting, its default computed for ``data_dir``.

    Only ``core.daemon.data_dir`` (informational; the daemon rewrites it at every
    start) holds the absolute directory; the paths under it are stored relative.
    """
    data = Path(data_dir)

    def p(*parts: str) -> str:
        return str(Path(*parts)) if parts else str(data)

    return [
        # ---- daemon
        _def("core.daemon.heartbeat_interval", "15s", "duration", "daemon", "Heartbeat interval",
             "How often the daemon records that it is alive.", min=1, max=DAY),
        _def("core.daemon.check_interval", "30s", "duration", "daemon", "Health-check interval",
             "How often LLM sources and plugins are health-checked.", min=1, max=DAY),
        _def("core.daemon.log_level", "info", "select", "daemon", "Log level",
             "Minimum level written to the log.", options=list(LOG_LEVELS)),
        _def("core.log.max_bytes", 10 * 1024 * 1024, "int", "daemon", "Log file size",
             "Bytes a log file may reach before it is rotated.", min=4096, max=TIB),
        _def("core.log.backups", 5, "int", "daemon", "Rotated logs kept",
             "How many rotated log files are kept.", min=0, max=1000),
        _def("core.defaults.llm_endpoints", "", "string", "daemon", "Health-probe endpoints",
             "Comma-separated URLs probed by the health check; empty = the sources' base URLs.",
             owner_only=True),
        _def("core.plugin.max_memory_mb", 1024, "int", "daemon", "Plugin memory limit",
             "Memory (MB of heap and private mappings, RLIMIT_DATA) each subprocess plugin may use; an "
             "allocation past it fails and the plugin is restarted. 0 = no limit. Applies at the next start.",
             min=0, max=65_536, owner_only=True),
        _def("core.plugin.max_cpu_seconds", 0, "int", "daemon", "Plugin CPU-time limit",
             "Seconds of CPU time a subprocess plugin process may use over its life (RLIMIT_CPU) before it is "
             "stopped and restarted. 0 = no limit. Applies at the next start.", min=0, max=365 * DAY,
             owner_only=True),
        _def("core.plugin.limits", "{}", "json", "daemon", "Per-plugin limits",
             'Overrides per plugin name, e.g. {"indexer": {"max_memory_mb": 4096, "max_cpu_seconds": 0}}.',
             owner_only=True),
        _def("core.plugin.log_rate", 50, "int", "daemon", "Plugin log rate",
             "Log lines per second a subprocess plugin may send (bursts of four times this); more are dropped, "
             "counted, and summed up in one line.", min=1, max=100_000, owner_only=True),
        _def("core.socket.max_inflight_rpcs", 32, "int", "daemon", "Socket RPCs in flight",
             "RPCs one local-socket connection may have unanswered; more are answered at once with a "
             "busy rpc_error.", min=1, max=10_000, owner_only=True),
        _def("core.socket.max_queued_turns", 8, "int", "daemon", "Socket queued turns",
             "Chat turns one local-socket connection may have queued or running; more are refused with a "
             "busy error and a failed response.", min=1, max=10_000, owner_only=True),
        _def("core.socket.max_unread_bytes", 8 * 1024 * 1024, "int", "daemon", "Socket unread output",
             "Bytes of replies a local-socket client may leave unread before it is disconnected with an "
             "error; the daemon stops reading its frames at an eighth of this.", min=64 * 1024, max=GIB,
             owner_only=True),
        # ---- paths
        _def("core.daemon.data_dir", p(), "string", "paths", "Data directory",
             "Where HomeAgent keeps its database, memory, plugins and logs (informational: the daemon "
             "writes it at every start; change it with --data-dir or HOMEAGENT_DATA_DIR).", owner_only=True),
        _def("core.plugin.dir", p("plugins"), "string", "paths", "Plugin directory",
             "Installed plugins. Relative paths (like all paths below) are under the data directory.",
             owner_only=True),
        _def("core.memory.graph", p("memory", "graph.db"), "string", "paths", "Knowledge graph",
             "SQLite file of the long-term memory graph (L3).", owner_only=True),
        _def("core.memory.text", p("memory", "text"), "string", "paths", "Text log",
             "Folder of the raw conversation text log.", owner_only=True),
        _def("core.memory.documents", p("memory", "documents"), "string", "paths", "Documents",
             "Folder of the document store (L2).", owner_only=True),
        _def("core.knowledge.path", p("knowledge"), "string", "paths", "Knowledge base",
             "Folder of the curated knowledge base.", owner_only=True),
        _def("core.log.path", p("log"), "string", "paths", "Log directory", "Where log files are written.",
             owner_only=True),
        # ---- llm
        _def("core.llm.provider", "", "string", "llm", "Provider",
             "Source to use first. Empty = automatic: environment variables, then configured sources "
             "(by priority), then the offline provider."),
        _def("core.llm.model", "", "string", "llm", "Model",
             "Model for the default source; empty = the source's own or the adapter's default."),
        _def("core.llm.base_url", "", "string", "llm", "Base URL", "API root of the default source.", owner_only=True),
        _def("core.llm.api_key", "", "password", "llm", "API key",
             "Key for the default source; empty = environment (HOMEAGENT_LLM_API_KEY, LLM_API_KEY, "
             "DEEPSEEK_API_KEY).", secret=True, owner_only=True),
        _def("core.llm.adapter", "", "string", "llm", "Adapter",
             "Lua adapter of the default source; empty = chosen from the base URL.", owner_only=True),
        _def("core.llm.temperature", 0.7, "float", "llm", "Temperature", "Sampling temperature.",
             min=0, max=2, step=0.1),
        _def("core.llm.max_tokens", 4096, "int", "llm", "Max output tokens",
             "Upper bound on tokens generated per reply.", min=1, max=10_000_000),
        _def("core.llm.thinking_enabled", False, "bool", "llm", "Thinking",
             "Ask the model for its reasoning where supported."),
        # ---- agent
        _def("core.agent.max_tool_turns", 10, "int", "agent", "Max tool turns",
             "LLM rounds with tool calls allowed for one message.", min=1, max=100),
        _def("core.agent.max_children", 3, "int", "agent", "Max sub-agents",
             "Sub-agents (spawn_child) running at once.", min=1, max=16),
        _def("core.agent.child_timeout", "10m", "duration", "agent", "Sub-agent time limit",
             "A sub-agent still running after this long is cancelled.", min=1, max=7 * DAY),
        _def("core.agent.max_context_size", 30, "int", "agent", "Context size",
             "Messages kept in the context window (the newest 10 always stay).", min=1, max=10_000),
        _def("core.agent.context_top_k", 30, "int", "agent", "Context top-k",
             "Events the relevance pruner keeps in the context (newest 10 + most similar).", min=1,
             max=10_000),
        _def("core.agent.stage_timeout", "10s", "duration", "agent", "Stage handler timeout",
             "Time one plugin stage handler may take before it is cancelled.", min=0.1, max=3600),
        _def("core.agent.proactive_channels", "cli,webui", "string", "agent", "Proactive replies go to",
             "Output channels (comma-separated) for a reply to an input that came from no output channel and "
             "names none, such as a timer set by a plugin: it goes to each of them that exists. A timer set in "
             "a chat answers in that chat.", owner_only=True),
        _def("core.agent.tool_timeout", "120s", "duration", "agent", "Tool timeout",
             "Time one tool call may take before it is cancelled.", min=0.1, max=DAY),
        _def("core.agent.workdir", "", "string", "agent", "Working directory",
             "Working directory for commands run by the agent; empty = the data directory.",
             owner_only=True),
        # owner-only: an injected instruction stored here would persist into every future turn
        _def("core.agent.system_prompt", "", "text", "agent", "System prompt",
             "Persona text; empty = the built-in text.", owner_only=True),
        _def("core.agent.language", "en", "select", "agent", "Language",
             "Language of the prompts HomeAgent writes to helper models (image description, OCR, audio "
             "transcription): en or zh. Replies follow the user's language.", options=["en", "zh"]),
        _def("core.agent.persona_file", "", "string", "agent", "Persona file",
             "File whose text replaces the persona part of the system prompt; empty = none.",
             owner_only=True),
        _def("core.defaults.openclaw_enabled", True, "bool", "agent", "OpenClaw skills",
             "Accept OpenClaw/ClawHub skill metadata (gating and aliases) in SKILL.md files."),
        # ---- memory
        _def("core.agent.distill_interval", "30m", "duration", "memory", "Distill interval",
             "How often the context is pruned into the document store (L1 to L2).", min=1, max=30 * DAY),
        _def("core.agent.archive_interval", "60m", "duration", "memory", "Archive interval",
             "How often cold documents are distilled into the knowledge graph (L2 to L3).", min=1,
             max=30 * DAY),
        _def("core.agent.review_interval", "120m", "duration", "memory", "Review interval",
             "How often graph relations are checked against their source sentences.", min=1, max=30 * DAY),
        _def("core.agent.merge_interval", "120m", "duration", "memory", "Merge interval",
             "How often duplicate entities are merged.", min=1, max=30 * DAY),
        _def("core.memory.owner_name", "", "string", "memory", "Your name in memory",
             "What memory calls you, the owner: the speaker of your turns and the person your own facts are "
             "about (CLI, web UI, and chat accounts you linked with `homeagent identity link CHANNEL ID --owner`). "
             "Empty: 'user'. Facts remembered under the old name keep it.", owner_only=True),
        _def("core.memory.session_gap", "30m", "duration", "memory", "Conversation gap",
             "Silence after which the next message starts a new conversation session in document memory "
             "(turns are recalled together with their neighbours in the same session).", min=1, max=30 * DAY),
        _def("core.memory.media.enabled", True, "bool", "memory", "Media memory",
             "Keep images and files the agent sees in the content-addressed media store (<data>/memory/media) "
             "and let memory tools attach them by digest; off = media is only text. Read at start."),
        _def("core.memory.media.max_bytes", 20 * 1024 * 1024, "int", "memory", "Largest media item",
             "Bytes one image or file may have; a larger one is refused before it is read.", min=1, max=TIB),
        _def("core.memory.media.cap", 1024 * 1024 * 1024, "int", "memory", "Media store size",
             "Bytes the media store may hold; above it, media nothing references is evicted, least recently "
             "used first (descriptions stay). 0 = no cap.", min=0, max=1024 * TIB),
        _def("core.memory.media.gc_min_age", "24h", "duration", "memory", "Media GC grace",
             "How long media must stay unreferenced, after a GC pass noticed it, before the next pass "
             "evicts its bytes.", min=0, max=365 * DAY),
        _def("core.memory.media.gc_interval", "6h", "duration", "memory", "Media GC interval",
             "How often the daemon runs a media GC pass (mark, sweep, repair, cap).", min=60, max=30 * DAY),
        _def("core.agent.embedding_model_path", "", "string", "memory", "Embedding models",
             "Comma list of word-vector / model2vec paths; empty = the built-in offline embedder.",
             owner_only=True),
        _def("core.agent.onnx_model_path", "", "string", "memory", "Parser model",
             "Dependency-parse ONNX model; empty = rules only.", owner_only=True),
        # ---- input processing
        _def("core.input_processing.image.fallback_provider", "", "string", "input", "Image provider",
             "Source used to describe images when the current model cannot see; empty = none."),
        _def("core.input_processing.image.fallback_model", "", "string", "input", "Image model",
             "Model used with the image provider."),
        _def("core.input_processing.image.describe_prompt", "", "text", "input",
             "Image description prompt",
             "Prompt used to turn an image into text; empty = the built-in one in core.agent.language."),
        _def("core.input_processing.image.ocr_enabled", True, "bool", "input", "Image OCR",
             "Also extract the text in images."),
        _def("core.input_processing.image.ocr_prompt", "", "text", "input",
             "OCR prompt", "Prompt used to read the text in an image; empty = the built-in one in core.agent.language."),
        _def("core.input_processing.audio.fallback_provider", "", "string", "input", "Audio provider",
             "Source used to transcribe audio; empty = none."),
        _def("core.input_processing.audio.fallback_model", "", "string", "input", "Audio model",
             "Model used with the audio provider."),
        _def("core.input_processing.audio.describe_prompt", "", "text", "input",
             "Audio prompt", "Prompt used to turn audio into text; empty = the built-in one in core.agent.language."),
        # ---- approvals (owner-only: the model must not loosen its own leash; docs/security.md)
        _def("core.approvals.ask", DEFAULT_ASK, "string", "approvals", "Tools that ask",
             "Comma-separated tool names or patterns (fnmatch) whose calls wait for your approval. Empty: "
             "nothing asks.", owner_only=True),
        _def("core.approvals.deny", "", "string", "approvals", "Tools refused",
             "Comma-separated tool names or patterns the model may never call.", owner_only=True),
        _def("core.approvals.rules", "[]", "json", "approvals", "Argument rules",
             'A list of {"tool", "match", "action"}: a call of tool whose command (cmd_run, terminals) or path '
             "(files tools) matches the fnmatch pattern is allowed, asked or denied; the first match wins, before "
             "your always rules and the ask list.", owner_only=True),
        _def("core.approvals.timeout", "120s", "duration", "approvals", "Approval timeout",
             "How long a tool call waits for your answer; no answer denies it.", min=1, max=DAY,
             owner_only=True),
        # ---- sandbox (owner-only: the model must not widen its own confinement; docs/security.md)
        _def("core.sandbox.mode", "auto", "select", "sandbox", "Sandbox",
             "How cmd_run, terminals and subprocess plugins are confined. auto: under bubblewrap when it works, "
             "else unconfined and said so (status, web UI); bwrap: bubblewrap required, nothing starts without "
             "it; off: unconfined (the weaker mode). Checked at start.", options=["auto", "bwrap", "off"],
             owner_only=True),
        _def("core.sandbox.network", False, "bool", "sandbox", "Network for commands",
             "Let commands and terminals in the sandbox use the network (off: a private loopback only). "
             "Subprocess plugins get it when their manifest declares the net capability.", owner_only=True),
        _def("core.sandbox.bwrap", "bwrap", "string", "sandbox", "bubblewrap program",
             "The bwrap program (a name looked up on PATH, or a path). Checked again when it changes.",
             owner_only=True),
        _def("core.sandbox.ro_paths", "", "string", "sandbox", "Extra read-only folders",
             "Comma-separated folders the sandbox shows read-only besides the system (e.g. /opt/tools); "
             "the data directory stays hidden even inside them.", owner_only=True),
        # ---- web UI
        _def("webui.listen_addr", "127.0.0.1:8780", "string", "webui", "Listen address",
             "host:port of the web UI and HTTP API. A non-loopback host also needs webui.allow_remote.",
             owner_only=True),
        _def("webui.allow_remote", False, "bool", "webui", "Allow remote access",
             "Permit webui.listen_addr to bind to a non-loopback address.", owner_only=True),
        _def("webui.allowed_hosts", "", "string", "webui", "Allowed host names",
             "Comma list of further names (name or name:port) the web UI answers to in the Host header, "
             "besides 127.0.0.1, localhost, [::1] and the listen address; others get 421 (DNS rebinding "
             "protection). On a non-loopback listen address the check applies once this is set; * turns it off.",
             owner_only=True),
    ]


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown_table(defs: list[ConfigDef], data_dir_placeholder: tuple[str, str] | None = None) -> str:
    """A Markdown table of ``defs`` (key, type, default, description) for the docs.

    ``data_dir_placeholder=(real_dir, "<data>")`` replaces a concrete data dir in defaults.
    """
    lines = ["| Key | Type | Default | Category | Description |", "|---|---|---|---|---|"]
    for d in defs:
        default: object = d.default
        if isinstance(default, bool):
            default = "true" if default else "false"
        if data_dir_placeholder and isinstance(default, str):
            default = default.replace(data_dir_placeholder[0], data_dir_placeholder[1])
        type_ = d.type
        if d.options:
            type_ += " (" + "/".join(d.options) + ")"
        if d.is_secret:
            type_ += ", secret"
        if d.owner_only:
            type_ += ", owner-only"
        limits = []
        unit = "s" if d.type == "duration" else ""
        if d.min is not None:
            limits.append(f"min {d.min:g}{unit}")
        if d.max is not None:
            limits.append(f"max {d.max:g}{unit}")
        desc = d.description + (f" ({', '.join(limits)})" if limits else "")
        shown = f"`{_cell(default)}`" if default not in ("", None) else '`""`'
        lines.append(f"| `{d.key}` | {_cell(type_)} | {shown} | {d.category} | {_cell(desc)} |")
    return "\n".join(lines) + "\n"
