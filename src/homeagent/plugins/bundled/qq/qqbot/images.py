"""Images in QQ messages, fetched so they reach the model with the message (the media path of the SDK).

OneBot implementations report an image as a URL on QQ's image servers. The
URL comes from the implementation, not from the person writing (in the CQ
string format a user's own ``[`` arrives escaped), but a fetch is still a
request the bot makes on someone's behalf, so it is kept small and public:

* http(s) only, no redirects, a deadline, at most ``max_bytes`` read;
* by default only public addresses: a literal private or loopback address
  is refused, and the resolver drops private answers, so a name that
  resolves to the LAN (or changes its answer between check and connect)
  cannot reach it. ``allow_private`` (owner-only setting ``images_to_model``
  = ``any``) lifts that for an implementation that serves images itself.

A failed fetch is not an error for the message: the model still gets the
``[图片 URL]`` marker, and ``qq_status`` counts ``image_errors``.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from homeagent.sdk import MediaBlock

IMAGES_PER_MESSAGE = 4
FETCH_WAIT = 10.0


def _public(host: str) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_global and not ip.is_multicast


class PublicResolver(AbstractResolver):
    """The default resolver, keeping only public addresses."""

    def __init__(self) -> None:
        self._inner = aiohttp.DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        kept = [r for r in found if _public(str(r["host"]))]
        if not kept:
            raise OSError(f"{host} has no public address; images are fetched from public addresses only "
                          "(plugin.qq.images_to_model)")
        return kept

    async def close(self) -> None:
        await self._inner.close()


class ImageFetcher:
    """One HTTP session for the plugin's image fetches (made on first use, closed with the plugin)."""

    def __init__(self, *, allow_private: bool, max_bytes: int) -> None:
        self.allow_private = allow_private
        self.max_bytes = max_bytes
        self._session: aiohttp.ClientSession | None = None
        self._session_private = allow_private

    async def _client(self) -> aiohttp.ClientSession:
        if self._session is not None and self._session_private != self.allow_private:
            stale, self._session = self._session, None  # the setting changed: a connector with the other resolver
            await stale.close()
        if self._session is None or self._session.closed:
            self._session_private = self.allow_private
            connector = aiohttp.TCPConnector(resolver=None if self.allow_private else PublicResolver(), limit=8)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=FETCH_WAIT), trust_env=False
            )
        return self._session

    async def fetch(self, url: str) -> MediaBlock:
        """The image at ``url``; ``ValueError``/``OSError``/``aiohttp.ClientError`` say why not."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) image URL: {url[:120]!r}")
        host = parts.hostname
        try:
            literal: Any = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None and not self.allow_private and not _public(host):
            raise ValueError(f"{host} is not a public address; images are fetched from public addresses only "
                             "(plugin.qq.images_to_model)")
        session = await self._client()
        try:
            async with session.get(url, allow_redirects=False) as resp:
                if resp.status != 200:
                    raise ValueError(f"the image server answered HTTP {resp.status}")
                if resp.content_length is not None and resp.content_length > self.max_bytes:
                    raise ValueError(f"the image is {resp.content_length} bytes, more than {self.max_bytes}")
                data = bytearray()
                async for chunk in resp.content.iter_chunked(65536):
                    data += chunk
                    if len(data) > self.max_bytes:
                        raise ValueError(f"the image is more than {self.max_bytes} bytes")
                mime = resp.content_type if resp.content_type.startswith("image/") else ""
        except aiohttp.ClientConnectorError as e:  # say why (the resolver's refusal), not just "cannot connect"
            raise OSError(f"{host}: {e.os_error}") from None
        if not data:
            raise ValueError("the image is empty")
        return MediaBlock(mime=mime, data=bytes(data), description=f"QQ image {url[:200]}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
