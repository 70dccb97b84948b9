"""Builds the LLM sources from the environment and the config registry.

Reads through two callables only (``config_get``, ``list_keys``) so it does
not depend on how the registry is implemented. A source that cannot work is
skipped with exactly one human-readable note; nothing here raises for bad
configuration, and API keys never appear in notes or logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from homeagent.providers.adapter import Adapter, AdapterError
from homeagent.providers.adapter_loader import AdapterLoader
from homeagent.providers.base import Provider
from homeagent.providers.http import TRANSPORT_ERRORS, SharedSession
from homeagent.providers.lua_provider import LuaAdaptedProvider

__all__ = ["DEEPSEEK_BASE_URL", "DEEPSEEK_MODEL", "build_sources", "detect_local_ollama"]

log = logging.getLogger("homeagent.providers.sources")

DEEPSEEK_BASE_URL = "https://api.deepseek.com"
DEEPSEEK_MODEL = "deepseek-chat"
SOURCE_PREFIX = "core.llm.sources."
FIELDS = ("base_url", "model", "api_key", "adapter", "adapter_path", "max_concurrent", "priority",
          "context_window", "thinking_enabled", "vision")


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _int(value: Any, default: int, notes: list[str], where: str) -> int:
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    try:
        return int(str(value).strip()) if not isinstance(value, int | float) else int(value)
    except ValueError:
        notes.append(f"LLM source {where}: {value!r} is not a number, using {default}")
        return default


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return _text(value).lower() in ("1", "true", "yes", "on")


def _config_sources(list_keys: Callable[[str], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    try:
        raw = list_keys(SOURCE_PREFIX) or {}
    except Exception as exc:  # the registry is someone else's; never let it break startup
        log.error("reading %s* failed: %s", SOURCE_PREFIX, exc)
        return {}
    out: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        rel = key[len(SOURCE_PREFIX):] if key.startswith(SOURCE_PREFIX) else key
        name, _, field = rel.rpartition(".")
        if not name or field not in FIELDS:
            continue
        out.setdefault(name, {})[field] = value
    return out


def build_sources(
    config_get: Callable[[str], Any],
    list_keys: Callable[[str], dict[str, Any]],
    env: Mapping[str, str],
    adapters: AdapterLoader,
    http_client: aiohttp.ClientSession | SharedSession | None,
) -> tuple[list[Provider], list[str]]:
    """Return (providers in registration order, notes).

    Order: the ``env`` source (``HOMEAGENT_LLM_*``), a DeepSeek source from
    ``LLM_API_KEY``/``DEEPSEEK_API_KEY`` when no configured source is named
    ``deepseek``, then every ``core.llm.sources.<name>.*`` in name order. The
    preferred one (``core.llm.provider``) is the manager's business:
    ``manager.set_sources(providers, preferred=config_get("core.llm.provider"))``.
    """
    notes: list[str] = []
    providers: list[Provider] = []

    def get(key: str) -> Any:
        try:
            return config_get(key)
        except Exception:
            return None

    def make(name: str, spec: dict[str, Any], hint: Callable[[str], str]) -> None:
        base_url = _text(spec.get("base_url"))
        model = _text(spec.get("model"))
        api_key = _text(spec.get("api_key"))
        adapter_name = _text(spec.get("adapter")) or "openai"
        adapter_path = _text(spec.get("adapter_path"))
        if not base_url:
            notes.append(f"LLM source '{name}' skipped: no base_url (set {hint('base_url')})")
            return
        if not model:
            notes.append(f"LLM source '{name}' skipped: no model (set {hint('model')})")
            return
        resolver, problem = _adapter_resolver(adapters, adapter_name, adapter_path)
        if resolver is None:
            notes.append(f"LLM source '{name}' skipped: {problem}")
            return
        needs_key = True
        try:
            needs_key = resolver().needs_api_key
        except AdapterError as exc:
            notes.append(f"LLM source '{name}': adapter does not load yet ({exc}); it is retried when the file changes")
        if needs_key and not api_key:
            notes.append(f"LLM source '{name}' skipped: no api_key (set {hint('api_key')})")
            return
        providers.append(
            LuaAdaptedProvider(
                name,
                base_url,
                api_key,
                model,
                resolver,
                http_client=http_client,
                adapter_name=adapter_name,
                max_concurrent=_int(spec.get("max_concurrent"), 8, notes, f"'{name}' max_concurrent"),
                priority=_int(spec.get("priority"), 0, notes, f"'{name}' priority"),
                context_window=_int(spec.get("context_window"), 0, notes, f"'{name}' context_window"),
                thinking_enabled=_bool(spec.get("thinking_enabled")),
                vision=_bool(spec.get("vision")),
            )
        )

    # 1. HOMEAGENT_LLM_* environment variables
    env_url = _text(env.get("HOMEAGENT_LLM_BASE_URL"))
    env_key = _text(env.get("HOMEAGENT_LLM_API_KEY"))
    env_model = _text(env.get("HOMEAGENT_LLM_MODEL"))
    if env_url or env_key or env_model:
        make(
            "env",
            {"base_url": env_url, "api_key": env_key, "model": env_model,
             "adapter": _text(env.get("HOMEAGENT_LLM_ADAPTER")) or "openai",
             "vision": _text(env.get("HOMEAGENT_LLM_VISION"))},
            lambda field: f"HOMEAGENT_LLM_{field.upper()}",
        )

    # 2. config sources (+ the original's key fallbacks for "deepseek")
    configured = _config_sources(list_keys)
    legacy_key = _text(env.get("LLM_API_KEY")) or _text(env.get("DEEPSEEK_API_KEY"))
    global_key = _text(get("core.llm.api_key"))
    if "deepseek" in configured:
        spec = configured["deepseek"]
        if not _text(spec.get("api_key")):
            spec["api_key"] = global_key or legacy_key
    elif legacy_key:
        configured = {"deepseek": {"base_url": DEEPSEEK_BASE_URL, "model": DEEPSEEK_MODEL, "api_key": legacy_key,
                                   "adapter": "deepseek"}, **configured}
    for name in sorted(configured, key=lambda n: (n != "deepseek", n)):
        if name == "env":
            notes.append("LLM source 'env' in the config is ignored: the name is reserved for HOMEAGENT_LLM_*")
            continue
        make(name, configured[name], lambda field, n=name: f"{SOURCE_PREFIX}{n}.{field}")  # type: ignore[misc]
    for note in notes:
        log.info("%s", note)
    return providers, notes


def _adapter_resolver(
    adapters: AdapterLoader, name: str, path: str
) -> tuple[Callable[[], Adapter] | None, str]:
    """A callable returning the current adapter (reloaded on change), or why there is none."""
    if path:
        p = Path(path).expanduser()
        if p.is_absolute():
            if not p.is_file():
                return None, f"adapter_path {p} does not exist"
            return (lambda: adapters.load_path(p)), ""
        if adapters.exists(p.stem):
            name = p.stem  # the original's "adapters/<name>.lua" names an adapter
        elif adapters.user_dir is not None and (adapters.user_dir.parent / p).is_file():
            full = adapters.user_dir.parent / p
            return (lambda: adapters.load_path(full)), ""
        else:
            return None, f"adapter_path {path} not found"
    if not adapters.exists(name):
        return None, f"adapter '{name}' not found (available: {', '.join(adapters.names())})"
    return (lambda: adapters.get(name)), ""


_PROBE_ERRORS: tuple[type[BaseException], ...] = (*TRANSPORT_ERRORS, ValueError, AttributeError)


OLLAMA_URL_ENV = "HOMEAGENT_OLLAMA_URL"
"""Where to look for a local Ollama at start; ``off`` skips the look."""
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"


async def detect_local_ollama(
    http_client: aiohttp.ClientSession | SharedSession,
    adapters: AdapterLoader,
    *,
    base_url: str = DEFAULT_OLLAMA_URL,
    timeout: float = 0.5,
) -> tuple[Provider | None, str]:
    """A source for a local Ollama if one answers on loopback (uses its first model)."""
    session = http_client.get() if isinstance(http_client, SharedSession) else http_client
    base_url = base_url.rstrip("/")
    try:
        async with session.get(f"{base_url}/api/tags", timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            models = (await resp.json(content_type=None)).get("models") or [] if resp.status == 200 else []
    except _PROBE_ERRORS:
        return None, ""
    if not models:
        return None, f"local Ollama at {base_url} has no models; `ollama pull <model>` to use it"
    model = str(models[0].get("name") or models[0].get("model") or "")
    if not model or not adapters.exists("ollama"):
        return None, ""
    provider = LuaAdaptedProvider("ollama-local", base_url, "", model, lambda: adapters.get("ollama"),
                                  http_client=http_client, adapter_name="ollama", priority=-1)
    return provider, f"LLM source 'ollama-local': found a local Ollama at {base_url}, using model {model}"
