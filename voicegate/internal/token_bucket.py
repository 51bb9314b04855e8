"""Per-client token buckets: how often one address may open a call (WHIP POST, SIP INVITE) or edit.

A bucket holds a minute's allowance and refills continuously: a client that redials a few times in a
row is never refused, a loop or a flood is, and other clients are unaffected. Idle (full) buckets are
forgotten past a bound, so a scan from many addresses cannot grow the table without limit; a forgotten
bucket is indistinguishable from a full one.

It sits below every package that limits a client (internal/sip, internal/signaling, the memory HTTP API),
so the SIP protocol library needs nothing of the session to use it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

MAX_TRACKED_CLIENTS = 10_000


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    retry_after_s: int = 0  # whole seconds until a token is available (for Retry-After), when refused


class TokenBucketLimiter:
    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic,
                 max_clients: int = MAX_TRACKED_CLIENTS) -> None:
        self.capacity = float(per_minute)
        self._refill_per_s = per_minute / 60.0
        self._clock = clock
        self._max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, updated at)

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def take(self, client: str) -> Decision:
        if not self.enabled:
            return Decision(True)
        now = self._clock()
        tokens, updated = self._buckets.get(client, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - updated) * self._refill_per_s)
        if tokens >= 1.0:
            self._buckets[client] = (tokens - 1.0, now)
            self._forget_idle(now)
            return Decision(True)
        self._buckets[client] = (tokens, now)
        return Decision(False, max(1, math.ceil((1.0 - tokens) / self._refill_per_s)))

    def _forget_idle(self, now: float) -> None:
        if len(self._buckets) <= self._max_clients:
            return
        refill_s = self.capacity / self._refill_per_s
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < refill_s}
        if len(self._buckets) > self._max_clients:  # everyone is busy: keep the most recent
            recent = sorted(self._buckets.items(), key=lambda item: item[1][1], reverse=True)
            self._buckets = dict(recent[: self._max_clients])
