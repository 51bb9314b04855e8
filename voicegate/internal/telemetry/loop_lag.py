"""How late the event loop runs: the wait no worker queue shows.

Every call's RTP, WebRTC media (aiortc), VAD and pipeline run on one asyncio loop. When that loop has more
work than its core gives it, everything on it runs late: SIP frames leave with jitter, and a WebRTC peer's
consent checks (RFC 7675: aioice gives each 0.5 s) go unanswered until, after 30 s of that, the peer drops
the call. `LoopLag` wakes every `interval_s` and records how much later than asked it woke. A single long
stall (a slow import, a garbage collection) is one late sample; a loop that is overloaded is late on
nearly every wake, which is what `sustained_ms` reports (the median of the wakes in the last `window_s`,
and never of fewer than the last MIN_SAMPLES: a loop so late that it woke only once or twice in the
window is still measured) and what `server.shed_loop_lag_ms` refuses new calls on.

Pure bookkeeping plus one sleeping task; no locks, no I/O.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import deque
from collections.abc import Callable

INTERVAL_S = 0.1
WINDOW_S = 5.0
# The median is never taken over fewer wakes than this: one stall among them is outvoted, and the last
# few wakes of a loop seconds late still count when they are older than the window.
MIN_SAMPLES = 3


class LoopLag:
    """Lateness samples of one event loop over a sliding window."""

    def __init__(self, interval_s: float = INTERVAL_S, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.window_s = window_s
        self.observer: Callable[[float], None] | None = None  # each sample in ms, e.g. a histogram's record
        self._clock = clock
        self._recent: deque[tuple[float, float]] = deque()  # (woke at, lag ms)

    def record(self, lag_ms: float, at: float | None = None) -> None:
        now = self._clock() if at is None else at
        lag_ms = max(0.0, lag_ms)
        self._recent.append((now, lag_ms))
        self._forget(now)
        if self.observer is not None:
            self.observer(lag_ms)

    def sustained_ms(self) -> float:
        """The median lateness over the window (at least the last MIN_SAMPLES wakes); 0 before as many."""
        self._forget(self._clock())
        if len(self._recent) < MIN_SAMPLES:
            return 0.0
        return statistics.median(lag for _, lag in self._recent)

    def max_ms(self) -> float:
        """The latest wake in the window (stalls included)."""
        self._forget(self._clock())
        return max((lag for _, lag in self._recent), default=0.0)

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            asked = self._clock()
            await asyncio.sleep(self.interval_s)
            woke = self._clock()
            self.record((woke - asked - self.interval_s) * 1000.0, at=woke)

    def _forget(self, now: float) -> None:
        while len(self._recent) > MIN_SAMPLES and now - self._recent[0][0] > self.window_s:
            self._recent.popleft()
