"""Images described by a source that can see, for a model that cannot (``core.input_processing.image.*``).

The original sent an image the current model cannot see to a configured
fallback source with a describe prompt (and, with OCR on, a second prompt for
the text in the image), and put the answer into the turn instead. The
fallback is an ordinary LLM source of the manager, asked directly (no
fallback chain: a description from some other model that cannot see either
would be invented), with its model optionally replaced.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import dataclass

from homeagent.providers.base import ChatRequest, ProviderError
from homeagent.providers.manager import ProviderManager

__all__ = [
    "AUDIO_FORMATS",
    "BUILTIN_PROMPTS",
    "DescribeSettings",
    "FallbackDescriber",
    "FallbackTranscriber",
    "TranscribeSettings",
    "builtin_prompt",
]

AUDIO_FORMATS = {"audio/wav": "wav", "audio/mpeg": "mp3"}
"""Audio the transcriber can send: OpenAI's ``input_audio`` takes wav and mp3 (Gemini takes them too)."""

BUILTIN_PROMPTS: dict[str, dict[str, str]] = {
    "en": {
        "image.describe": "Describe this image in detail: the main subjects, the setting, any text, and notable "
                          "details.",
        "image.ocr": "Read all the text in this image and write it out in its original order; if there is no text, "
                     "answer \"no text\".",
        "audio.describe": "Transcribe this audio.",
    },
    "zh": {  # the original's prompts
        "image.describe": "请详细描述这张图片的内容，包括主要对象、场景、文字和值得注意的细节。",
        "image.ocr": "请识别这张图片中的所有文字内容，按原有顺序输出；没有文字时回答“无文字”。",
        "audio.describe": "请转写这段音频的内容。",
    },
}
"""The prompts used while the setting is empty, by ``core.agent.language``: the description comes back in the
prompt's language and becomes durable memory, so a Chinese prompt in an English setup would leave Chinese
descriptions in an English memory."""


def builtin_prompt(kind: str, language: str) -> str:
    """The built-in prompt ``kind`` (``image.describe``, ``image.ocr``, ``audio.describe``) in ``language``;
    English for anything but Chinese (``zh``, ``zh-CN``, ...)."""
    lang = "zh" if language.strip().lower().startswith("zh") else "en"
    return BUILTIN_PROMPTS[lang][kind]


@dataclass
class DescribeSettings:
    """Live reads of the settings (a change applies to the next image)."""

    source: Callable[[], str]
    model: Callable[[], str]
    describe_prompt: Callable[[], str]
    ocr_enabled: Callable[[], bool]
    ocr_prompt: Callable[[], str]


class FallbackDescriber:
    """``ImageDescriber`` (agent/media_input.py) over one source of the provider manager."""

    def __init__(self, manager: ProviderManager, settings: DescribeSettings, *, timeout: float = 120.0) -> None:
        self.manager = manager
        self.settings = settings
        self.timeout = timeout

    def available(self) -> bool:
        name = self.settings.source().strip()
        return bool(name) and self.manager.get(name) is not None

    async def ask(self, data: bytes, mime: str, prompt: str) -> str:
        """One question about the image to the fallback source; ProviderError when it fails."""
        name = self.settings.source().strip()
        provider = self.manager.get(name)
        if provider is None:
            raise ProviderError(f"image fallback source {name!r} is not configured", kind="client", source=name)
        url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        request = ChatRequest(
            messages=[{"role": "user", "content": [{"type": "text", "text": prompt},
                                                   {"type": "image_url", "image_url": {"url": url}}]}],
            model=self.settings.model().strip() or None,
        )
        response = await asyncio.wait_for(provider.chat(request), self.timeout)
        return response.content.strip()

    async def describe(self, data: bytes, mime: str) -> str:
        """The description (and, with OCR on, the text read from the image); ProviderError when the source fails."""
        prompts = [self.settings.describe_prompt()]
        if self.settings.ocr_enabled() and self.settings.ocr_prompt().strip():
            prompts.append(self.settings.ocr_prompt())
        answers = await asyncio.gather(*(self.ask(data, mime, p) for p in prompts))
        description = answers[0]
        if len(answers) > 1 and answers[1]:
            description = f"{description} — text in the image: {answers[1]}"
        return description


@dataclass
class TranscribeSettings:
    """Live reads of ``core.input_processing.audio.*``."""

    source: Callable[[], str]
    model: Callable[[], str]
    prompt: Callable[[], str]


class FallbackTranscriber:
    """``AudioTranscriber`` (agent/media_input.py): audio to text by one source of the provider manager.

    The audio goes as an OpenAI ``input_audio`` content part (base64 and its
    format, wav or mp3); the OpenAI-style adapters pass it on, the Gemini one
    makes it ``inlineData``. A source that cannot hear answers with an error,
    which the turn reports.
    """

    def __init__(self, manager: ProviderManager, settings: TranscribeSettings, *, timeout: float = 180.0) -> None:
        self.manager = manager
        self.settings = settings
        self.timeout = timeout

    def available(self) -> bool:
        name = self.settings.source().strip()
        return bool(name) and self.manager.get(name) is not None

    async def transcribe(self, data: bytes, mime: str) -> str:
        name = self.settings.source().strip()
        provider = self.manager.get(name)
        if provider is None:
            raise ProviderError(f"audio fallback source {name!r} is not configured", kind="client", source=name)
        fmt = AUDIO_FORMATS.get(mime)
        if fmt is None:
            raise ProviderError(f"{mime} cannot be sent for transcription (WAV and MP3 can)", kind="client")
        request = ChatRequest(
            messages=[{"role": "user", "content": [
                {"type": "text", "text": self.settings.prompt()},
                {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode("ascii"), "format": fmt}},
            ]}],
            model=self.settings.model().strip() or None,
        )
        response = await asyncio.wait_for(provider.chat(request), self.timeout)
        return response.content.strip()
