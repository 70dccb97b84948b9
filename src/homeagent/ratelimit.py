"""A token bucket: the one rate limiter, shared by the plugin host and the local socket."""

from __future__ import annotations

import time


class TokenBucket:
    """``rate`` per second, at most ``burst`` at once; :meth:`take` says whether one more may pass."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self._tokens, self._at = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
