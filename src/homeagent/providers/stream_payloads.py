"""A streamed LLM response body cut into payloads: SSE ``data:`` values and NDJSON lines alike.

The adapter sees one payload at a time (``transform_stream_chunk``); this module
only splits and decodes bytes, so every wire format shares it.
"""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import AsyncGenerator

import aiohttp

from homeagent.providers.http import TRANSPORT_ERRORS

__all__ = ["MAX_LINE_BYTES", "LineTooLong", "finish_body", "payload_batches"]

MAX_LINE_BYTES = 8 * 1024 * 1024  # one stream line larger than this is refused
MAX_BATCH = 256  # payloads handed over together at most
FINISH_BODY_SECONDS = 0.25  # how long to wait for the end of a body after the stream's end marker
FINISH_BODY_MAX_READS = 16  # reads after the end marker before giving up on reusing the connection
_SSE_SKIP = ("event:", "id:", "retry:", ":")


class LineTooLong(Exception):
    """A stream line grew beyond :data:`MAX_LINE_BYTES` without a newline."""


async def payload_batches(resp: aiohttp.ClientResponse) -> AsyncGenerator[list[str], None]:
    """The body's payloads, in batches of those that arrived together (never an empty one).

    LLM APIs put one JSON document per ``data:`` line, so each is dispatched as
    soon as its line is complete, without waiting for the blank line that ends an
    SSE event; other SSE fields and blank lines are skipped. Invalid UTF-8 becomes
    U+FFFD. Batches let the adapter parse several payloads in one call.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    async for raw in resp.content.iter_any():
        text = decoder.decode(raw)
        if not text:
            continue
        pending += text
        if "\n" not in text:
            if len(pending) > MAX_LINE_BYTES:
                raise LineTooLong(f"a stream line is longer than {MAX_LINE_BYTES} bytes")
            continue
        lines = pending.split("\n")
        pending = lines.pop()
        batch = [p for p in map(_payload, lines) if p is not None]
        for start in range(0, len(batch), MAX_BATCH):
            yield batch[start:start + MAX_BATCH]
    pending += decoder.decode(b"", final=True)
    if pending.strip():
        payload = _payload(pending)
        if payload is not None:
            yield [payload]


def _payload(line: str) -> str | None:
    line = line.rstrip("\r")
    if not line:
        return None
    if line.startswith("data:"):
        value = line[5:]
        return value[1:] if value.startswith(" ") else value
    if line.startswith(_SSE_SKIP):
        return None
    return line


_AFTER_END_ERRORS: tuple[type[BaseException], ...] = (*TRANSPORT_ERRORS, LineTooLong)


async def finish_body(resp: aiohttp.ClientResponse, batches: AsyncGenerator[list[str], None]) -> None:
    """Read the little that follows the end marker so the connection goes back to the pool.

    A response left half-read is closed instead of reused, which costs a new
    TCP (and, against a real API, TLS) handshake on every request. Whatever a
    misbehaving server sends after its end marker is ignored, and only briefly.
    """
    if resp.content.at_eof():  # the body's end came with the marker: nothing to wait for
        await batches.aclose()  # now, rather than by a finaliser task later
        return
    try:
        async with asyncio.timeout(FINISH_BODY_SECONDS):
            extra = 0
            async for _batch in batches:
                extra += 1
                if extra > FINISH_BODY_MAX_READS:
                    return
    except _AFTER_END_ERRORS:
        return
