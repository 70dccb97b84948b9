"""Who may use the web UI: the API token, browser sessions, CSRF and the login limiter.

Only a hash of the API token is stored (``plugin.webui.token_hash``), so the
token cannot be read back from the data directory: it is printed once when it
is created, and ``homeagent webui token`` replaces it with a new one. The
token is high-entropy (``secrets.token_urlsafe(32)``), so one SHA-256 is
enough; a slow KDF would only slow every API call down.

Browsers sign in with the token once and then carry an HttpOnly,
SameSite=Strict session cookie. Writes made with that cookie must repeat the
session's CSRF token in ``X-CSRF-Token`` (double submit: the same value sits
in a readable ``homeagent_csrf`` cookie), so another site cannot make the
browser write even where SameSite is not honoured.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from homeagent.config import ConfigRegistry
from homeagent.sdk.types import ConfigDef

PLUGIN = "webui"
TOKEN_HASH_KEY = "token_hash"
SESSION_COOKIE = "homeagent_session"
CSRF_COOKIE = "homeagent_csrf"
CSRF_HEADER = "x-csrf-token"
HASH_PREFIX = "sha256:"


def webui_defs() -> list[ConfigDef]:
    """Settings the web UI keeps in its own table (``plugin.webui.*``)."""
    return [
        ConfigDef(
            TOKEN_HASH_KEY,
            "",
            "password",
            "API token hash",
            "SHA-256 of the API token; rotate with `homeagent webui token`.",
            category="webui",
            secret=True,
            hidden=True, owner_only=True,
        ),
        ConfigDef(
            "session_ttl_hours",
            24,
            "int",
            "Session lifetime",
            "Hours a browser sign-in stays valid.",
            category="webui",
            min=1,
            max=24 * 365, owner_only=True,
        ),
        ConfigDef(
            "max_upload_mb",
            64,
            "int",
            "Upload size limit",
            "Largest file (MB) accepted by the chat upload.",
            category="webui",
            min=1,
            max=4096,
        ),
        ConfigDef(
            "max_concurrent_turns",
            8,
            "int",
            "Turns per client",
            "Chat turns one browser session (or the API token) may have queued or running at once; "
            "more are refused with 429.",
            category="webui",
            min=1,
            max=1000,
            owner_only=True,
        ),
        ConfigDef(
            "chat_timeout",
            "300s",
            "duration",
            "Chat timeout",
            "How long a synchronous chat request waits for the turn.",
            category="webui",
            min=1,
        ),
    ]


def hash_token(token: str) -> str:
    return HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """The API token, kept as a hash in the config registry."""

    def __init__(self, config: ConfigRegistry) -> None:
        self.config = config

    @property
    def stored_hash(self) -> str:
        return str(self.config.get_plugin(PLUGIN, TOKEN_HASH_KEY, "") or "")

    def ensure(self) -> str | None:
        """Create a token if none exists; returns the new token (to show once) or None."""
        if self.stored_hash.startswith(HASH_PREFIX):
            return None
        return self.rotate()

    def rotate(self) -> str:
        """Replace the token; the old one stops working at once. Returns the new token."""
        token = secrets.token_urlsafe(32)
        self.config.set_plugin(PLUGIN, TOKEN_HASH_KEY, hash_token(token))
        return token

    def check(self, candidate: str | None) -> bool:
        stored = self.stored_hash
        if not candidate or not stored.startswith(HASH_PREFIX) or len(candidate) > 512:
            return False
        return hmac.compare_digest(hash_token(candidate), stored)


@dataclass
class Session:
    id: str
    csrf: str
    created: float
    expires: float
    client: str = ""
    last_seen: float = field(default_factory=time.time)


class SessionStore:
    """Browser sessions, in memory: a restart or a token rotation signs everyone out."""

    def __init__(self, ttl: Callable[[], float], *, max_sessions: int = 1000) -> None:
        self._ttl = ttl
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, client: str = "") -> Session:
        now = time.time()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(24), now, now + self._ttl(), client)
        self._sessions[session.id] = session
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)  # the oldest sign-in goes first
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = time.time()
        if now >= session.expires:
            del self._sessions[session_id]
            return None
        session.last_seen = now
        return session

    def delete(self, session_id: str | None) -> bool:
        return bool(session_id) and self._sessions.pop(session_id or "", None) is not None

    def clear(self) -> int:
        count = len(self._sessions)
        self._sessions.clear()
        return count


def csrf_ok(session: Session, header: str | None, cookie: str | None) -> bool:
    """Double submit: the header must equal the cookie and the session's own token."""
    if not header or not cookie:
        return False
    return hmac.compare_digest(header, cookie) and hmac.compare_digest(header, session.csrf)


@dataclass
class _Attempts:
    failures: list[float] = field(default_factory=list)
    locked_until: float = 0.0
    lockouts: int = 0


class LoginLimiter:
    """Failed sign-ins per client address: ``limit`` per ``window`` seconds, then a doubling lockout."""

    def __init__(
        self,
        *,
        limit: int = 5,
        window: float = 60.0,
        base_lockout: float = 60.0,
        max_lockout: float = 900.0,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self.base_lockout = base_lockout
        self.max_lockout = max_lockout
        self.max_clients = max_clients
        self.clock = clock
        self._clients: OrderedDict[str, _Attempts] = OrderedDict()

    def retry_after(self, client: str) -> float:
        """Seconds until ``client`` may try again (0: now)."""
        state = self._clients.get(client)
        if state is None:
            return 0.0
        return max(0.0, state.locked_until - self.clock())

    def failure(self, client: str) -> float:
        """Record a failed attempt; returns the lockout it caused (0: none)."""
        now = self.clock()
        state = self._clients.pop(client, None) or _Attempts()
        self._clients[client] = state  # most recent last
        while len(self._clients) > self.max_clients:
            self._clients.popitem(last=False)
        state.failures = [t for t in state.failures if now - t < self.window]
        state.failures.append(now)
        if len(state.failures) >= self.limit:
            lockout = min(self.max_lockout, self.base_lockout * (2**state.lockouts))
            state.lockouts += 1
            state.failures.clear()
            state.locked_until = now + lockout
            return lockout
        return 0.0

    def success(self, client: str) -> None:
        self._clients.pop(client, None)
