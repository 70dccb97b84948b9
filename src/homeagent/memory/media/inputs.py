"""Media that plugins hand over (SDK and RPC): checked before anything is queued or stored."""

from __future__ import annotations

from collections.abc import Sequence

from homeagent.memory.media.errors import MediaError
from homeagent.memory.media.store import MediaInfo, MediaStore
from homeagent.sdk.types import MediaBlock

__all__ = ["MAX_BLOCKS", "check_blocks", "store_blocks"]

MAX_BLOCKS = 10
"""Media items one input, document or tool result may carry."""

def check_blocks(blocks: Sequence[object], max_bytes: int) -> list[MediaBlock]:
    """A plugin's media blocks, checked before anything is queued; a ``ValueError`` says what is wrong."""
    if isinstance(blocks, str | bytes) or not isinstance(blocks, Sequence):
        raise ValueError("media must be a list of media blocks")
    if len(blocks) > MAX_BLOCKS:
        raise ValueError(f"at most {MAX_BLOCKS} media blocks go with one input, not {len(blocks)}")
    out: list[MediaBlock] = []
    for i, block in enumerate(blocks):
        if not isinstance(block, MediaBlock):
            raise ValueError(f"media[{i}] is a {type(block).__name__}, not a MediaBlock")
        if not block.data and not block.digest.strip():
            raise ValueError(f"media[{i}] has neither data nor a digest")
        if len(block.data) > max_bytes:
            raise ValueError(f"media[{i}] is {len(block.data)} bytes; the limit is {max_bytes} "
                             "(core.memory.media.max_bytes)")
        out.append(block)
    return out


async def store_blocks(store: MediaStore, blocks: Sequence[MediaBlock], *, source: str) -> list[MediaInfo]:
    """Each block in the store (bytes kept, digests resolved), in order; the first failure raises ``MediaError``."""
    infos: list[MediaInfo] = []
    for i, block in enumerate(blocks):
        try:
            if block.data:
                put = await store.aput_bytes(block.data, claimed_mime=block.mime, source=source,
                                             description=block.description)
                infos.append(put.info)
            else:
                infos.append(await store.ainfo(block.digest))
        except MediaError as exc:
            raise type(exc)(f"media[{i}]: {exc}") from None
    return infos
