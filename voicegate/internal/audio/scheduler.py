"""One pacing clock for every media stream in the process.

Each stream's n-th tick is due at `start + n * period` on the loop's monotonic clock: computed, never
accumulated from sleeps, so an hour of ticks does not drift by a sample. All streams share one
deadline heap and one armed `loop.call_at` (the earliest deadline): measured, that holds about a
third more calls per core than a sleep loop per stream (~800 against ~600 for a bare media loop).

Stream starts are rounded up to a phase grid (5 ms) so that streams share deadlines: the heap holds
one entry per phase with the list of streams due then, the loop wakes at most once per grid step
whatever the number of calls, and a tick costs a list step instead of a heap operation per stream.
The work is still spread over the four phases of each 20 ms period instead of landing in one burst.
Deadlines are kept as whole grid steps, so streams of one phase share the very same deadline.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
from collections.abc import Callable
from typing import Protocol

from voicegate.internal.audio.frame import FRAME_MS

log = logging.getLogger(__name__)

# A stream this many ticks behind (a stalled loop) jumps to the present instead of replaying every
# missed tick in a burst: a few late frames are worth catching up, a second of them is not.
MAX_CATCH_UP_TICKS = 5
PHASE_GRID_S = 0.005


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class TimerLoop(Protocol):
    """The two things the scheduler needs from an event loop; a test passes a simulated one."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], object], /) -> TimerHandle: ...


class PacedStream:
    """A handle returned by `PacedScheduler.add`; pass it to `remove`."""

    __slots__ = ("_grid", "_steps", "active", "callback", "errors", "origin", "skipped", "slot", "stream_id", "ticks")

    def __init__(self, stream_id: int, callback: Callable[[], None], origin: int, grid: float, steps: int) -> None:
        self.stream_id = stream_id
        self.callback = callback
        self.origin = origin  # the start, in whole grid steps
        self.slot = 0  # index of the next tick
        self.ticks = 0  # ticks run
        self.skipped = 0  # ticks jumped over after a stall, never run
        self.errors = 0  # ticks whose callback raised
        self.active = True
        self._grid = grid
        self._steps = steps

    @property
    def start(self) -> float:
        return self.origin * self._grid

    @property
    def due(self) -> float:
        """When the next tick is due: start + slot * period."""
        return (self.origin + self.slot * self._steps) * self._grid

    def __repr__(self) -> str:
        return f"PacedStream(id={self.stream_id}, ticks={self.ticks}, skipped={self.skipped})"


class PacedScheduler:
    def __init__(
        self,
        *,
        period_s: float = FRAME_MS / 1000,
        loop: TimerLoop | None = None,
        max_catch_up_ticks: int = MAX_CATCH_UP_TICKS,
        phase_grid_s: float = PHASE_GRID_S,
    ) -> None:
        steps = round(period_s / phase_grid_s)
        if steps < 1 or abs(steps * phase_grid_s - period_s) > 1e-9:
            raise ValueError(f"the period ({period_s} s) must be a whole number of phase-grid steps ({phase_grid_s} s)")
        self.period = period_s
        self.max_catch_up = max_catch_up_ticks
        self._grid = phase_grid_s
        self._steps = steps
        self._loop = loop
        self._heap: list[int] = []  # deadlines in grid steps, one per non-empty bucket
        self._buckets: dict[int, list[PacedStream]] = {}
        self._next_id = 0
        self._timer: TimerHandle | None = None
        self._timer_at = math.inf
        self._streams = 0

    @property
    def loop(self) -> TimerLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def time(self) -> float:
        """The clock every deadline is measured on."""
        return self.loop.time()

    @property
    def clock(self) -> Callable[[], float]:
        """`time` as a plain callable, for hot paths that read the clock per packet."""
        return self.loop.time

    def __len__(self) -> int:
        return self._streams

    def add(self, callback: Callable[[], None]) -> PacedStream:
        """Call `callback` every period from now on (first within one grid step)."""
        origin = math.ceil(self.time() / self._grid)
        self._next_id += 1
        stream = PacedStream(self._next_id, callback, origin, self._grid, self._steps)
        self._streams += 1
        self._enqueue(origin, [stream])
        if origin * self._grid < self._timer_at:
            self._arm()
        return stream

    def remove(self, stream: PacedStream) -> None:
        """Stop a stream; safe from inside its own callback and when already removed."""
        if stream.active:
            stream.active = False
            self._streams -= 1
        # Its bucket entry is dropped when that bucket next comes due, at most one period away.

    def run_due(self, now: float | None = None) -> None:
        """Run every tick due by `now` in deadline order, then arm the timer for the next one."""
        now = self.time() if now is None else now
        heap, grid = self._heap, self._grid
        while heap and heap[0] * grid <= now:
            step = heapq.heappop(heap)
            streams = self._buckets.pop(step)
            behind = int((now - step * grid) / self.period)
            if behind > self.max_catch_up:
                # Jump to the tick due now, counting the ones that will never run.
                step += behind * self._steps
                for stream in streams:
                    stream.skipped += behind
                    stream.slot += behind
            survivors = []
            for stream in streams:
                if not stream.active:
                    continue
                stream.ticks += 1
                try:
                    stream.callback()
                except Exception:
                    self._failed(stream)
                if stream.active:
                    stream.slot += 1
                    survivors.append(stream)
            if survivors:
                # Still due by `now` after a short stall: the loop comes back to it (catch-up).
                self._enqueue(step + self._steps, survivors)
        self._arm()

    def close(self) -> None:
        """Stop all streams and the timer."""
        for streams in self._buckets.values():
            for stream in streams:
                self.remove(stream)
        self._buckets.clear()
        self._heap.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = math.inf

    def _enqueue(self, step: int, streams: list[PacedStream]) -> None:
        bucket = self._buckets.get(step)
        if bucket is None:
            self._buckets[step] = streams
            heapq.heappush(self._heap, step)
        else:
            bucket.extend(streams)

    def _failed(self, stream: PacedStream) -> None:
        stream.errors += 1
        # Logged at 1, 2, 4, 8... failures: a stream broken for good must not flood the log.
        if stream.errors & (stream.errors - 1) == 0:
            log.exception("media stream %d tick failed (%d failures so far)", stream.stream_id, stream.errors)

    def _arm(self) -> None:
        when = self._heap[0] * self._grid if self._heap else math.inf
        if when == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = when
        if self._heap:
            self._timer = self.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        when = self._timer_at
        self._timer = None
        self._timer_at = math.inf
        # A loop may fire a timer a clock-resolution early; what it was armed for is due regardless.
        self.run_due(max(self.time(), when))
