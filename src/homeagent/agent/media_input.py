"""The media turn path (the original's ``processMediaInput``): images that come with an input reach the model.

An input may carry media blocks (a web upload, ``ask --image``, a plugin's
``inject_input_media``). Before the turn's first LLM call each block is kept
in the media store (bytes that arrive) or read back from it (a digest), and
then, per item:

* an image, when the source that will answer sees images (its ``vision``
  setting), goes in as an OpenAI ``image_url`` content part with a data URL;
  each Lua adapter turns that into its provider's own block;
* an image the model cannot see is described by the image fallback source
  (``core.input_processing.image.*``) and the description goes in as text,
  and becomes the marker's description when the item had none but its file
  name;
* anything else (or an image nobody can describe) is its marker line only,
  with a note saying the model cannot see it.

The text memory keeps (the L1 event, the text log) is the input text with one
marker line per item, never the bytes: the description is the durable
memory. The turn's digests get ``context`` references from the recorder, so
the bytes of an image still in the live context are not evicted.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from homeagent.memory.media import MediaError, MediaInfo, MediaStore, marker
from homeagent.memory.media.inputs import MAX_BLOCKS, check_blocks
from homeagent.memory.media.sniff import sniff_mime
from homeagent.sdk.types import MediaBlock

__all__ = [
    "MAX_BLOCKS",
    "NOT_SEEN_NOTE",
    "TOOL_BLOCKS",
    "AudioTranscriber",
    "ImageDescriber",
    "MediaContent",
    "MediaInput",
    "MediaTurnPath",
    "UnseenImage",
    "check_blocks",
]

log = logging.getLogger("homeagent.agent.media")

NOT_SEEN_NOTE = "(the current model cannot see images and no image describer is configured)"
UNREADABLE_NOTE = "(the bytes could not be read: {error})"
UNSENDABLE_NOTE = "(this image type cannot be sent to a model; PNG, JPEG, GIF and WebP can)"

TOOL_BLOCKS: contextvars.ContextVar[list[MediaBlock] | None] = contextvars.ContextVar("tool_blocks", default=None)
"""Where ``set_tool_blocks`` puts media while a tool call runs (the turn runner sets a fresh list per call);
None outside a tool call. The media reach the model with the next LLM call, after the tool results."""


NOT_HEARD_NOTE = "(the model cannot hear audio and no transcriber is configured)"
UNHEARABLE_NOTE = "(this audio type cannot be transcribed; WAV and MP3 can)"

AUDIO_TYPES = frozenset({"audio/wav", "audio/mpeg"})
"""Audio the transcriber sends (OpenAI ``input_audio`` formats wav and mp3)."""

VISION_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Image types every provider with vision accepts; others stay a marker."""


@dataclass
class MediaContent:
    """One input with its media, as the model gets it and as memory keeps it."""

    content: str | list[dict[str, Any]]  # the user message's content: text, or OpenAI content parts
    text: str  # the input text with one marker line per item: what memory and the text log keep (no notes)
    digests: list[str] = field(default_factory=list)  # stored items of this input (context references)
    images: int = 0  # images sent as image parts
    described: int = 0  # images that went in as a description
    unseen: list[UnseenImage] = field(default_factory=list)  # images the model got as text only (media_look)


@dataclass(frozen=True)
class UnseenImage:
    """An image of this turn that the model could not see: ``media_look`` asks the describer about it."""

    label: str  # the 12-hex short digest of its marker ("" with the store off)
    mime: str
    data: bytes


class MediaInput(Protocol):
    """What the turn runner needs: an input's text and media as the user message content."""

    async def prepare(self, text: str, media: Sequence[MediaBlock], *, source: str = "") -> MediaContent: ...

    def can_look(self) -> bool:
        """Whether ``look`` can answer (an image describer is configured)."""
        ...

    async def look(self, image: UnseenImage, question: str) -> str: ...


class AudioTranscriber(Protocol):
    """Turns audio into text with a source that can hear (``core.input_processing.audio.*``)."""

    def available(self) -> bool: ...

    async def transcribe(self, data: bytes, mime: str) -> str: ...


class ImageDescriber(Protocol):
    """Turns an image into text with a source that can see (``core.input_processing.image.*``)."""

    def available(self) -> bool: ...

    async def describe(self, data: bytes, mime: str) -> str: ...

    async def ask(self, data: bytes, mime: str, prompt: str) -> str: ...


@dataclass
class _Item:
    mime: str
    data: bytes | None
    info: MediaInfo | None
    description: str
    error: str = ""

    def line(self) -> str:
        if self.info is not None:
            return marker(self.info)
        kind = "image" if self.mime.startswith("image/") else "file"
        return f"[{kind}: {self.description or self.mime}]"


class MediaTurnPath:
    """:class:`MediaInput` over the media store (None: store off, the bytes stay in the turn only)."""

    def __init__(
        self,
        store: MediaStore | None,
        sees_images: Callable[[], bool],
        describer: ImageDescriber | None = None,
        transcriber: AudioTranscriber | None = None,
    ) -> None:
        self.store = store
        self.sees_images = sees_images
        self.describer = describer
        self.transcriber = transcriber

    async def prepare(self, text: str, media: Sequence[MediaBlock], *, source: str = "") -> MediaContent:
        items = [await self._item(block, source) for block in media]
        vision = self.sees_images()
        parts: list[dict[str, Any]] = []
        lines: list[str] = []
        out = MediaContent(content="", text="")
        describe: list[Awaitable[str]] = []
        to_describe: list[_Item] = []
        for item in items:
            if item.info is not None:
                out.digests.append(item.info.digest)
            if item.data is not None and item.mime in AUDIO_TYPES and self.transcriber is not None \
                    and self.transcriber.available():
                to_describe.append(item)
                describe.append(self.transcriber.transcribe(item.data, item.mime))
                continue
            if item.data is None or item.mime not in VISION_TYPES:
                continue
            if vision:
                parts.append({"type": "image_url", "image_url": {"url": _data_url(item.mime, item.data)}})
                out.images += 1
                continue
            out.unseen.append(UnseenImage(item.info.short if item.info else "", item.mime, item.data))
            if self.describer is not None and self.describer.available():
                to_describe.append(item)
                describe.append(self.describer.describe(item.data, item.mime))
        descriptions = await asyncio.gather(*describe, return_exceptions=True)
        notes: dict[int, str] = {}
        for item, found in zip(to_describe, descriptions, strict=True):
            what = "audio could not be transcribed" if item.mime.startswith("audio/") else "image could not be described"
            if isinstance(found, BaseException):
                if isinstance(found, asyncio.CancelledError):
                    raise found
                log.warning("the %s: %s", what, found)
                notes[id(item)] = f"(the {what}: {found})"
                continue
            description = " ".join(str(found).split())
            if not description:
                notes[id(item)] = f"(the {what}: the answer was empty)"
                continue
            out.described += 1
            await self._adopt(item, description)
            notes[id(item)] = ""
        said: list[str] = []  # the model's lines: the markers with what it should know about each item
        for item in items:
            line = item.line()
            lines.append(line)
            if item.error:
                line += " " + UNREADABLE_NOTE.format(error=item.error)
            elif item.mime.startswith("image/") and item.mime not in VISION_TYPES:
                line += " " + UNSENDABLE_NOTE
            elif item.mime.startswith("image/") and not vision:
                note = notes.get(id(item), NOT_SEEN_NOTE)
                if note:
                    line += " " + note
            elif item.mime.startswith("audio/"):
                note = notes.get(id(item), NOT_HEARD_NOTE if item.mime in AUDIO_TYPES else UNHEARABLE_NOTE)
                if note:
                    line += " " + note
            said.append(line)
        out.text = _joined(text, lines)
        model_text = _joined(text, said)
        out.content = [{"type": "text", "text": model_text}, *parts] if parts else model_text
        return out

    def can_look(self) -> bool:
        return self.describer is not None and self.describer.available()

    async def look(self, image: UnseenImage, question: str) -> str:
        if self.describer is None or not self.describer.available():
            raise MediaError("no image describer is configured (core.input_processing.image.fallback_provider)")
        return await self.describer.ask(image.data, image.mime, question)

    async def _item(self, block: MediaBlock, source: str) -> _Item:
        """The block's bytes, kept in (or read back from) the store when there is one."""
        description = " ".join(block.description.split())
        if self.store is None:
            if not block.data:
                return _Item(block.mime or "application/octet-stream", None, None, description or block.digest[:12],
                             error="the media store is off" if block.digest else "empty")
            mime = sniff_mime(block.data[:4096], block.mime)
            return _Item(mime, block.data, None, description)
        try:
            if block.data:
                put = await self.store.aput_bytes(block.data, claimed_mime=block.mime, source=source or "input",
                                                  description=description)
                return _Item(put.info.mime, block.data, put.info, description)
            info = await self.store.ainfo(block.digest)
            data = await self.store.aget(info.digest)
            return _Item(info.mime, data, info, description or info.description)
        except MediaError as exc:
            info = None
            if block.digest:
                try:
                    info = await self.store.ainfo(block.digest)
                except MediaError:
                    info = None
            return _Item(info.mime if info else block.mime or "application/octet-stream", None, info,
                         description or (info.description if info else block.digest[:12]), error=str(exc))

    async def _adopt(self, item: _Item, description: str) -> None:
        """A description made for an image becomes its marker's, unless someone wrote one (not just a file name)."""
        item.description = description
        if self.store is None or item.info is None:
            return
        current = item.info.description
        if current and not _looks_like_file_name(current):
            return
        try:
            item.info = await self.store.adescribe(item.info.digest, description)
        except MediaError as exc:  # the text still carries the description
            log.info("keeping the description of media %s failed: %s", item.info.short, exc)


def _joined(text: str, lines: list[str]) -> str:
    return "\n".join([text.rstrip(), *lines]) if text.strip() else "\n".join(lines)


def _data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _looks_like_file_name(text: str) -> bool:
    stem, dot, ext = text.rpartition(".")
    return bool(dot and stem and 1 <= len(ext) <= 5 and ext.isalnum() and " " not in text.strip())
