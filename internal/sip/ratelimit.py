"""Per-source token buckets for new INVITEs (`sip.invite_rate_per_min`).

A bucket holds a minute's worth of calls and refills continuously, so a trunk may burst and a
flood from one address is cut off without affecting others. Idle buckets are forgotten so a scan
from many addresses cannot grow the table without bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class InviteRateLimiter:
    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic, max_keys: int = 10000) -> None:
        self._capacity = float(per_minute)
        self._rate = per_minute / 60.0
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last update)

    @property
    def enabled(self) -> bool:
        return self._capacity > 0

    def check(self, key: str) -> int:
        """0 when allowed (a token is taken), else the whole seconds until one is available."""
        if not self.enabled:
            return 0
        now = self._clock()
        tokens, last = self._buckets.get(key, (self._capacity, now))
        tokens = min(self._capacity, tokens + (now - last) * self._rate)
        if tokens >= 1:
            self._buckets[key] = (tokens - 1, now)
            self._prune(now)
            return 0
        self._buckets[key] = (tokens, now)
        return max(1, math.ceil((1 - tokens) / self._rate))

    def _prune(self, now: float) -> None:
        if len(self._buckets) <= self._max_keys:
            return
        full_after = self._capacity / self._rate
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full_after}
        while len(self._buckets) > self._max_keys:  # everyone is busy: drop the oldest
            oldest = min(self._buckets, key=lambda k: self._buckets[k][1])
            del self._buckets[oldest]
