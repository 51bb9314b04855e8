"""Per-client token buckets for the signalling endpoints (`whip_rate_per_min`, `patch_rate_per_min`).

Each POST /whip builds a peer connection and gathers ICE candidates, so it costs sockets and CPU even
when auth is off; a bucket per client address caps that. A bucket holds a minute's allowance and
refills continuously: a page that redials a few times in a row is never refused, a loop is. POST and
PATCH have separate buckets so a client's PATCH attempts never eat into its allowance for calls.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

# Past this many tracked clients, idle (full) buckets are forgotten so an address scan cannot grow
# the table without bound; a forgotten bucket is indistinguishable from a full one.
MAX_TRACKED_CLIENTS = 10_000


class _Peer(Protocol):
    @property
    def host(self) -> str: ...


class _Request(Protocol):
    @property
    def client(self) -> _Peer | None: ...


def client_address(request: _Request) -> str:
    """The TCP peer's address. Not X-Forwarded-For: anyone can write that header, and a limit keyed
    on it is no limit. Behind a reverse proxy every client shares the proxy's bucket."""
    return request.client.host if request.client is not None else "unknown"


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
