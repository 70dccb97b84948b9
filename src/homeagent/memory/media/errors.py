"""What the media store refuses, as exceptions whose message a user or a model can act on."""

from __future__ import annotations

__all__ = ["MediaCorrupt", "MediaError", "MediaGone", "MediaTooLarge", "UnknownMedia"]


class MediaError(Exception):
    """A media operation was refused or failed; nothing was changed."""


class MediaTooLarge(MediaError):
    """The input is over ``core.memory.media.max_bytes`` (found while reading it, not after)."""


class UnknownMedia(MediaError):
    """No stored media has this digest (or a short digest matches several)."""


class MediaGone(MediaError):
    """The metadata is known but the bytes are not there (evicted by GC, quarantined or missing)."""


class MediaCorrupt(MediaGone):
    """The bytes on disk did not match their digest; the file was moved to quarantine."""
