"""The media store (content-addressed bytes with references and GC) and the markers that put media into text."""

from homeagent.memory.media.api import MediaAPI
from homeagent.memory.media.errors import MediaCorrupt, MediaError, MediaGone, MediaTooLarge, UnknownMedia
from homeagent.memory.media.gc_loop import MediaGCLoop
from homeagent.memory.media.markers import MediaRefs, marker, parse_digests, with_markers
from homeagent.memory.media.owners import MediaOwners, gc_pass
from homeagent.memory.media.store import OWNER_KINDS, GCReport, MediaInfo, MediaStore, PutResult

__all__ = [
    "OWNER_KINDS",
    "GCReport",
    "MediaAPI",
    "MediaCorrupt",
    "MediaError",
    "MediaGCLoop",
    "MediaGone",
    "MediaInfo",
    "MediaOwners",
    "MediaRefs",
    "MediaStore",
    "MediaTooLarge",
    "PutResult",
    "UnknownMedia",
    "gc_pass",
    "marker",
    "parse_digests",
    "with_markers",
]
