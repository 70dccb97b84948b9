"""LLM source management shared by the daemon, its tools and the CLI.

Builds the provider list from environment variables and config (the offline
provider always last), keeps it in sync with config changes, and implements
`llm sources / use / test` the same way for the socket RPC, the
``llm_*`` tools and the CLI's offline mode.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from homeagent.config import ConfigRegistry
from homeagent.paths import DataPaths
from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import ChatRequest, Provider, ProviderError
from homeagent.providers.http import SharedSession
from homeagent.providers.manager import ProviderManager
from homeagent.providers.offline import OfflineProvider
from homeagent.providers.sources import DEFAULT_OLLAMA_URL, OLLAMA_URL_ENV, build_sources, detect_local_ollama
from homeagent.sdk.api import LLMAPI

log = logging.getLogger("homeagent.llm")

BUILTIN_ADAPTERS = Path(__file__).parent / "providers" / "adapters"


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
        infos = [asdict(info) for info in self.manager.list_sources()]
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
            raise ValueError(f"unknown LLM source {name!r} (known: {known})")
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

