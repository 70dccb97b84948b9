"""The media type of stored bytes, read from the bytes themselves.

A claimed type (a browser's ``Content-Type``, a file name's extension, a
plugin's say-so) is often wrong and sometimes a lie; the type a marker shows
and a provider is told must come from the content. A small table of magic
numbers covers what the agent handles (images, audio, PDF, a few containers);
no library that does this is installed, and these signatures do not change.
Anything unknown is ``text/plain`` when its start is UTF-8 text, else
``application/octet-stream``. A claimed ``text/*`` type may refine a sniffed
``text/plain`` (``text/markdown``, ``text/csv``): both are text, so nothing a
reader relies on is lost.
"""

from __future__ import annotations

__all__ = ["HEAD_BYTES", "OCTET_STREAM", "sniff_mime"]

HEAD_BYTES = 4096
"""Bytes of the start of the content that sniffing looks at."""

OCTET_STREAM = "application/octet-stream"

_PREFIXES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
    (b"ID3", "audio/mpeg"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"\x1a\x45\xdf\xa3", "video/webm"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x00\x00\x01\x00", "image/x-icon"),
)

_RIFF = {b"WEBP": "image/webp", b"WAVE": "audio/wav", b"AVI ": "video/x-msvideo"}

_FTYP = {
    b"avif": "image/avif",
    b"avis": "image/avif",
    b"heic": "image/heic",
    b"heix": "image/heic",
    b"mif1": "image/heif",
    b"M4A ": "audio/mp4",
    b"qt  ": "video/quicktime",
}


def _is_mp3_frame(head: bytes) -> bool:
    """An MPEG audio frame header: 11 sync bits, layer III, a valid bitrate and sample rate."""
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return False
    layer = (head[1] >> 1) & 0x3
    bitrate = head[2] >> 4
    rate = (head[2] >> 2) & 0x3
    return layer == 1 and bitrate not in (0, 15) and rate != 3


def _is_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3  # a character cut off at the end of the sample
    return True


def sniff_mime(head: bytes, claimed: str = "") -> str:
    """The media type of content starting with ``head`` (at least :data:`HEAD_BYTES` of it when it has them)."""
    for prefix, mime in _PREFIXES:
        if head.startswith(prefix):
            return mime
    if head[:4] == b"RIFF" and head[8:12] in _RIFF:
        return _RIFF[head[8:12]]
    if head[4:8] == b"ftyp":
        return _FTYP.get(head[8:12], "video/mp4")
    if head[:2] == b"BM" and len(head) >= 14 and head[6:10] == b"\x00\x00\x00\x00":
        return "image/bmp"
    if _is_mp3_frame(head):
        return "audio/mpeg"
    if not _is_text(head):
        return OCTET_STREAM
    start = head.lstrip()[:256].lower()
    if start.startswith(b"<svg") or (start.startswith(b"<?xml") and b"<svg" in head[:1024].lower()):
        return "image/svg+xml"
    claim = claimed.split(";", 1)[0].strip().lower()
    if claim.startswith("text/") and claim.replace("/", "").replace("-", "").replace(".", "").replace("+", "").isalnum():
        return claim
    return "text/plain"
