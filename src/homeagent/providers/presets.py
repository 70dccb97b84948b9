"""What the first-run page offers for each shipped adapter: a label, the usual base URL and a model.

Only suggestions a user can overwrite; nothing here is used unless the user
saves it as a source. Kept beside the adapters so a new adapter gets its row
in the same change.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["PRESETS", "Preset", "preset_list"]


@dataclass(frozen=True)
class Preset:
    adapter: str
    label: str
    base_url: str
    model: str
    needs_key: bool = True
    key_hint: str = ""


PRESETS: tuple[Preset, ...] = (
    Preset("openai", "OpenAI", "https://api.openai.com/v1", "gpt-4o-mini", key_hint="sk-…"),
    Preset("deepseek", "DeepSeek", "https://api.deepseek.com", "deepseek-chat", key_hint="sk-…"),
    Preset("anthropic", "Anthropic (Claude)", "https://api.anthropic.com", "claude-3-5-haiku-latest",
           key_hint="sk-ant-…"),
    Preset("gemini", "Google Gemini", "https://generativelanguage.googleapis.com", "gemini-2.0-flash"),
    Preset("mistral", "Mistral", "https://api.mistral.ai", "mistral-small-latest"),
    Preset("groq", "Groq", "https://api.groq.com", "llama-3.3-70b-versatile", key_hint="gsk_…"),
    Preset("github", "GitHub Models", "https://models.github.ai/inference", "openai/gpt-4o-mini",
           key_hint="a token with the models scope"),
    Preset("kimi", "Kimi (Moonshot)", "https://api.moonshot.cn", "moonshot-v1-8k", key_hint="sk-…"),
    Preset("ollama", "Ollama (local)", "http://127.0.0.1:11434", "llama3.2", needs_key=False),
    Preset("server", "OpenAI-compatible server", "http://127.0.0.1:8000/v1", "", key_hint="the gateway's key"),
)


def preset_list(available: list[str]) -> list[dict[str, Any]]:
    """The presets whose adapter exists here, then any other adapter (a user's own) with empty fields."""
    known = {p.adapter for p in PRESETS}
    out = [asdict(p) for p in PRESETS if p.adapter in available]
    out += [asdict(Preset(name, name, "", "")) for name in available if name not in known]
    return out
