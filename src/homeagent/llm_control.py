"""LLM source management shared by the daemon, its tools and the CLI.

Builds the provider list from environment variables and config (the offline
provider always last), keeps it in sync with config changes, and implements
`llm sources / use / test` the same way for the socket RPC, the
``llm_*`` tools and the CLI's offline mode.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from homeagent.config import ConfigRegistry, coerce
from homeagent.config.defaults import SOURCE_FIELDS, SOURCE_PREFIX
from homeagent.msg import Msg, message_of
from homeagent.paths import DataPaths
from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import ChatRequest, Provider, ProviderError
from homeagent.providers.http import SharedSession
from homeagent.providers.manager import ProviderManager
from homeagent.providers.offline import OfflineProvider
from homeagent.providers.presets import PRESETS, preset_list
from homeagent.providers.sources import DEFAULT_OLLAMA_URL, OLLAMA_URL_ENV, build_sources, detect_local_ollama
from homeagent.sdk.api import LLMAPI

log = logging.getLogger("homeagent.llm")

BUILTIN_ADAPTERS = Path(__file__).parent / "providers" / "adapters"
SOURCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
RESERVED_NAMES = frozenset({"env", "offline"})
# what a source form may set; priority is the order's business (``reorder``)
EDITABLE_FIELDS = ("adapter", "base_url", "model", "api_key", "context_window", "thinking_enabled")


class LLMControl:
    def __init__(self, config: ConfigRegistry, paths: DataPaths, *, env: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.paths = paths
        self.env = env if env is not None else os.environ
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=10.0))
        self.adapters = AdapterLoader(BUILTIN_ADAPTERS, paths.adapters, http_client=self.http, recheck_seconds=1.0)
        self.llm_http = SharedSession()  # the providers' own client (aiohttp: see providers/http.py)
        self.offline = OfflineProvider()
        self.manager = ProviderManager(fallback=self.offline)
        self.notes: list[str] = []
        self.local: Provider | None = None  # a local Ollama found at start, used when nothing is configured
        self._local_note = ""
        self.rebuild()

    @classmethod
    def from_registry(cls, config: ConfigRegistry, paths: DataPaths) -> LLMControl:
        return cls(config, paths)

    async def start(self) -> None:
        """Load the providers' CA bundle off the event loop; look for a local Ollama (DESIGN: the source
        used when nothing is configured, before the offline provider)."""
        await self.llm_http.start()
        url = str(self.env.get(OLLAMA_URL_ENV, DEFAULT_OLLAMA_URL)).strip()
        if url and url.lower() != "off":
            self.local, self._local_note = await detect_local_ollama(self.llm_http, self.adapters, base_url=url)
            if self.local is not None or self._local_note:
                self.rebuild()

    def rebuild(self) -> None:
        providers, notes = build_sources(
            self.config.get,
            self.config.list,
            self.env,
            self.adapters,
            self.llm_http,
        )
        preferred = str(self.config.get("core.llm.provider") or "")
        known = {p.name for p in providers} | {self.offline.name}
        if preferred and preferred not in known:
            notes.append(f"core.llm.provider names an unknown source {preferred!r}; using the automatic order")
            preferred = ""
        configured = bool(providers)
        if not configured and self.local is not None:
            providers = [self.local]
        self.manager.set_sources(providers, preferred=preferred)
        self.notes = list(notes)
        if self._local_note and not configured:
            self.notes.append(self._local_note)
        if not providers:
            self.notes.append("no LLM is configured: replies come from the offline provider")

    async def reload(self) -> None:
        self.rebuild()
        log.info("LLM sources reloaded: %s", ", ".join(s["name"] for s in self.sources()["sources"]))

    def sources(self) -> dict[str, Any]:
        stored = set(self.config.sources())
        infos = [{**asdict(info), "configured": info.name in stored} for info in self.manager.list_sources()]
        return {"current": self.manager.current_source(), "sources": infos, "notes": self.notes}

    def use(self, params: dict[str, Any]) -> dict[str, Any]:
        name = str(params.get("name", ""))
        self.manager.set_source(name)  # ValueError names the known sources
        self.config.set("core.llm.provider", name)
        return {"current": self.manager.current_source()}

    async def test(self, params: dict[str, Any]) -> dict[str, Any]:
        name = str(params.get("name", ""))
        provider = self.manager.get(name)
        if provider is None:
            known = ", ".join(s["name"] for s in self.sources()["sources"])
            raise ValueError(Msg("unknown LLM source {name!r} (known: {known})", name=name, known=known))
        return await self._ping(name, provider)

    # ------------------------------------------------------------ sources from the UI
    def presets(self) -> dict[str, Any]:
        """The providers the first-run page offers (one per adapter), and whether any source is set up."""
        configured = [s for s in self.manager.list_sources() if not s.fallback]
        return {"presets": preset_list(self.adapters.names()), "configured": bool(configured)}

    def _spec(self, params: dict[str, Any], *, existing: bool) -> tuple[str, dict[str, Any]]:
        name = str(params.get("name", "")).strip()
        if not SOURCE_NAME.match(name):
            raise ValueError(Msg("a source name is 1-40 letters, digits, '-' or '_', starting with a letter or digit"))
        if name in RESERVED_NAMES:
            raise ValueError(Msg("the source name {name!r} is reserved; pick another", name=name))
        spec: dict[str, Any] = {}
        for field in EDITABLE_FIELDS:
            value = params.get(field)
            if value is None or (isinstance(value, str) and not value.strip() and field == "api_key"):
                continue  # an empty key field keeps the stored key
            spec[field] = value.strip() if isinstance(value, str) else value
        base_url = str(spec.get("base_url") or "")
        if base_url and not re.match(r"^https?://[^\s/]+", base_url):
            raise ValueError(Msg("base_url {url!r} must start with http:// or https:// and name a host", url=base_url[:80]))
        adapter = str(spec.get("adapter") or "")
        if adapter and not self.adapters.exists(adapter):
            raise ValueError(Msg("adapter {adapter!r} not found (available: {names})", adapter=adapter,
                                 names=", ".join(self.adapters.names())))
        if existing:
            stored = self.config.source(name)
            for field in EDITABLE_FIELDS:
                if field not in spec and stored.get(field) not in (None, ""):
                    spec[field] = stored[field]
        return name, spec

    async def test_spec(self, params: dict[str, Any]) -> dict[str, Any]:
        """``test`` for a source that is not saved yet (the form's values; a blank key uses the stored one).

        The provider is built by ``build_sources`` exactly as a saved source
        would be, so a form that passes here works once saved.
        """
        name, spec = self._spec(params, existing=True)
        keys = {f"{SOURCE_PREFIX}{name}.{field}": value for field, value in spec.items()}
        providers, notes = build_sources(lambda _key: None, lambda _prefix: keys, {}, self.adapters, self.llm_http)
        if not providers:
            problem = notes[0] if notes else "the source could not be built"
            return {"name": name, "ok": False, "latency_ms": 0.0, "error": problem}
        return await self._ping(name, providers[0])

    def save_source(self, params: dict[str, Any]) -> dict[str, Any]:
        """Write one source's fields (all checked before any is written); new sources go last in the order."""
        name, spec = self._spec(params, existing=False)
        is_new = name not in self.config.sources()
        preset = next((p for p in PRESETS if p.adapter == spec.get("adapter")), None)
        if is_new and preset is not None:  # `llm add ds --adapter deepseek --api-key …` needs nothing more
            spec.setdefault("base_url", preset.base_url)
            if preset.model:
                spec.setdefault("model", preset.model)
        if not spec.get("base_url") and is_new:
            raise ValueError(Msg("base_url is required"))
        if not spec.get("model") and is_new:
            raise ValueError(Msg("model is required"))
        writes: dict[str, Any] = {}
        for field, value in spec.items():
            key = f"{SOURCE_PREFIX}{name}.{field}"
            d = self.config.get_def(key)
            try:
                writes[key] = coerce(d, value) if d is not None else value
            except ValueError as exc:
                raise ValueError(Msg("{field}: {problem}", field=field, problem=message_of(exc))) from None
        if is_new:
            others = [s for s in self.manager.list_sources() if not s.fallback and s.name != name]
            writes[f"{SOURCE_PREFIX}{name}.priority"] = min((s.priority for s in others), default=1) - 1
        for key, value in writes.items():
            self.config.set(key, value)
        self.rebuild()
        log.info("LLM source %s saved (%s)", name, ", ".join(sorted(k.rsplit(".", 1)[1] for k in writes)))
        return {"name": name, "created": is_new, **self.sources()}

    def remove_source(self, params: dict[str, Any]) -> dict[str, Any]:
        name = str(params.get("name", "")).strip()
        if name not in self.config.sources():
            raise ValueError(Msg("no configured LLM source named {name!r} (sources from the environment are removed there)",
                                 name=name))
        for field in SOURCE_FIELDS:
            self.config.delete(f"{SOURCE_PREFIX}{name}.{field}")
        if self.config.get("core.llm.provider") == name:
            self.config.delete("core.llm.provider")
        self.rebuild()
        log.info("LLM source %s removed", name)
        return self.sources()

    def reorder(self, params: dict[str, Any]) -> dict[str, Any]:
        """Make the fallback order the given one: the first becomes preferred, priorities follow the list.

        Sources from the environment keep priority 0 (nothing stores theirs), so
        the configured ones around them get positive (before) or negative (after)
        priorities; the offline provider stays last whatever is sent.
        """
        names = params.get("names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(Msg('send {{"names": [source, ...]}} in the order to try them'))
        current = [s.name for s in self.manager.list_sources() if not s.fallback]
        if sorted(names) != sorted(current):
            raise ValueError(Msg("the order must name every source once: {names}", names=", ".join(current)))
        configured = set(self.config.sources())
        fixed = [i for i, n in enumerate(names) if n not in configured]
        anchor = fixed[0] if fixed else len(names)
        for i, name in enumerate(names):
            if name in configured:
                self.config.set(f"{SOURCE_PREFIX}{name}.priority", anchor - i)
        if names:
            self.config.set("core.llm.provider", names[0])
        self.rebuild()
        return self.sources()

    async def _ping(self, name: str, provider: Provider) -> dict[str, Any]:
        request = ChatRequest(messages=[{"role": "user", "content": "Reply with the single word: pong"}], max_tokens=16)
        started = time.perf_counter()
        try:
            response = await provider.chat(request)
        except ProviderError as exc:
            return {"name": name, "ok": False, "latency_ms": (time.perf_counter() - started) * 1000, "error": exc.describe()}
        except Exception as exc:
            return {
                "name": name,
                "ok": False,
                "latency_ms": (time.perf_counter() - started) * 1000,
                "error": f"{type(exc).__name__}: {exc}",
            }
        return {
            "name": name,
            "ok": True,
            "latency_ms": (time.perf_counter() - started) * 1000,
            "reply": response.content[:200],
            "model": response.model,
        }

    async def close(self) -> None:
        await self.http.aclose()
        await self.llm_http.aclose()


class LLMSources(LLMAPI):
    """The SDK's ``LLMAPI`` over :class:`LLMControl`: a plugin picks the source as ``llm.use`` does.

    ``set_source`` goes through :meth:`LLMControl.use`, so the choice is
    saved in ``core.llm.provider`` like the CLI's and the web UI's.
    """

    def __init__(self, control: LLMControl) -> None:
        self._control = control

    def list_sources(self) -> list[str]:
        return [info.name for info in self._control.manager.list_sources()]

    def set_source(self, name: str) -> None:
        self._control.use({"name": name})

    def current_source(self) -> str:
        return self._control.manager.current_source()

