"""The HTTP client under the LLM providers: aiohttp.

An LLM round is one POST whose answer streams back. httpx (which the daemon
keeps for its other, occasional requests) runs that through a pure-Python stack
(anyio, httpcore, h11, a cookie jar) that costs 0.7–1.0 ms more per streamed
request than aiohttp's C parser on a slow core: more than all the rest of the
kernel's own work in a turn (docs/PERFORMANCE.md, "Provider transport").

Providers share one session per daemon. It is made on first use, because an
aiohttp session belongs to the running event loop, and it keeps no cookies:
LLM APIs authenticate by header, and a cookie jar costs time on every answer.
Proxy variables (``HTTPS_PROXY``, ``NO_PROXY`` …) are honoured, as they were
with httpx, but read once per source (:func:`proxy_for`): aiohttp's
``trust_env`` reads them, and ``~/.netrc``, on every request (~0.8 ms here).
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from urllib.parse import urlsplit

import aiohttp

__all__ = [
    "TRANSPORT_ERRORS", "SharedSession", "describe_transport_error", "new_session", "proxy_for", "request_timeout",
]

# What a request can raise besides our own errors: aiohttp's, and the timeouts of a read.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, TimeoutError)


def trusted_ssl_context() -> ssl.SSLContext:
    """The CA bundle httpx used (certifi) when it is installed, else the system's.

    Loading a bundle reads ~200 KB from disk: call it off the event loop.
    """
    try:
        import certifi
    except ImportError:  # pragma: no cover - certifi comes with httpx
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def new_session(ssl_context: ssl.SSLContext | None = None) -> aiohttp.ClientSession:
    """A session for LLM requests (on the running loop)."""
    connector = aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else True)
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP(S)_PROXY`` or ``ALL_PROXY``, minus ``NO_PROXY``), if any.

    Only HTTP proxies: aiohttp speaks no SOCKS, so a ``socks5://`` one is left out (as httpx did without socksio).
    """
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not proxy.startswith(("http://", "https://")) or urllib.request.proxy_bypass(parts.hostname):
        return None
    return proxy


def request_timeout(read: float, connect: float) -> aiohttp.ClientTimeout:
    """No limit on a whole answer (a long stream is fine), only on connecting and on silence."""
    return aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=connect, sock_read=read)


class SharedSession:
    """The providers' one session: made when first asked for, on the loop that asks."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | None = None

    async def start(self) -> None:
        """Load the CA bundle in a worker thread, so the first request does not block the loop."""
        if self._ssl is None:
            self._ssl = await asyncio.to_thread(trusted_ssl_context)

    def get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = new_session(self._ssl)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def describe_transport_error(exc: BaseException, base_url: str) -> tuple[str, str]:
    """(message, ProviderError kind) for a failure below HTTP: no answer, or a broken one."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return f"cannot connect to {base_url}: timed out ({text})", "network"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {base_url}: {text}", "network"
    if isinstance(exc, TimeoutError):
        return f"timed out waiting for {base_url} ({type(exc).__name__}): {text}", "timeout"
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        return f"connection failed: {text}", "network"
    return f"HTTP error: {text}", "network"
