"""PacedScheduler on a simulated loop: no drift, shared wake-ups, bounded catch-up, errors contained."""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
from collections.abc import Callable

import pytest

from voicegate.internal.audio.scheduler import PacedScheduler

PERIOD = 0.020


class SimulatedTimer:
    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SimulatedLoop:
    """Time moves only when `advance` says so; timers fire late by whatever `lateness` returns."""

    def __init__(self, start: float = 1000.0, lateness: Callable[[], float] = lambda: 0.0) -> None:
        self.now = start
        self.lateness = lateness
        self.wakeups = 0
        self._timers: list[tuple[float, int, SimulatedTimer]] = []
        self._count = 0

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], object], /) -> SimulatedTimer:
        timer = SimulatedTimer(when, callback)
        self._count += 1
        heapq.heappush(self._timers, (when, self._count, timer))
        return timer

    def advance(self, until: float) -> None:
        while self._timers and self._timers[0][0] <= until:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.now = max(self.now, when + self.lateness())
            self.wakeups += 1
            timer.callback()
        self.now = max(self.now, until)


def test_an_hour_of_ticks_has_no_drift_even_when_every_wakeup_is_late() -> None:
    rng = random.Random(1)
    loop = SimulatedLoop(lateness=lambda: rng.uniform(0, 0.003))
    scheduler = PacedScheduler(loop=loop)
    fired: list[float] = []
    stream = scheduler.add(lambda: fired.append(loop.now))
    loop.advance(1000.0 + 3600.0)
    # 5 ms phase grid: the stream starts at 1000.0 exactly, so 3600 s hold 180000 ticks plus the first.
    assert stream.start == 1000.0
    assert len(fired) == stream.ticks == 180001 and stream.skipped == 0
    lateness = [t - (stream.start + n * PERIOD) for n, t in enumerate(fired)]
    assert min(lateness) >= 0 and max(lateness) <= 0.0031  # every tick on its own deadline
    assert fired[-1] - (1000.0 + 3600.0) <= 0.0031  # the last one too: zero accumulated drift


def test_streams_share_wakeups_through_the_phase_grid() -> None:
    rng = random.Random(2)
    loop = SimulatedLoop()
    scheduler = PacedScheduler(loop=loop)
    streams = []
    for _ in range(200):
        loop.advance(loop.now + rng.uniform(0, 0.05))
        streams.append(scheduler.add(lambda: None))
    loop.wakeups = 0
    loop.advance(loop.now + 1.0)
    assert loop.wakeups <= 4 * 50 + 1  # at most one per 5 ms, whatever the number of streams
    assert all(49 <= s.ticks for s in streams)
    assert all(abs(s.start / 0.005 - round(s.start / 0.005)) < 1e-6 for s in streams)  # all on the grid


def test_a_short_stall_is_caught_up_tick_by_tick() -> None:
    loop = SimulatedLoop()
    scheduler = PacedScheduler(loop=loop)
    calls: list[float] = []
    stream = scheduler.add(lambda: calls.append(loop.now))
    loop.advance(1000.1)
    loop.now += 0.075  # the loop was blocked: ticks due at 1000.12, .14, .16 are late
    loop.advance(1000.2)
    assert stream.skipped == 0
    assert stream.ticks == len(calls) == 11  # 1000.00 ... 1000.20, every one of them run
    # The late three ran back to back when the loop woke up.
    assert [round(t, 6) for t in calls].count(1000.175) == 3


def test_a_long_stall_skips_ahead_and_counts_the_skipped_ticks() -> None:
    loop = SimulatedLoop()
    scheduler = PacedScheduler(loop=loop)
    stream = scheduler.add(lambda: None)
    loop.advance(1000.1)
    loop.now += 1.0  # a full second blocked: 50 ticks behind
    loop.advance(1001.2)
    assert 45 <= stream.skipped <= 50
    assert stream.ticks + stream.skipped == 61  # every slot from 1000.00 to 1001.20 accounted for
    assert stream.due == pytest.approx(stream.start + stream.slot * PERIOD)


def test_a_period_off_the_phase_grid_is_rejected() -> None:
    with pytest.raises(ValueError, match="whole number of phase-grid steps"):
        PacedScheduler(period_s=0.020, phase_grid_s=0.003, loop=SimulatedLoop())


def test_a_failing_callback_is_logged_and_keeps_ticking(caplog: pytest.LogCaptureFixture) -> None:
    loop = SimulatedLoop()
    scheduler = PacedScheduler(loop=loop)
    calls = 0

    def broken() -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("boom")

    stream = scheduler.add(broken)
    healthy = scheduler.add(lambda: None)
    with caplog.at_level(logging.ERROR, logger="voicegate.internal.audio.scheduler"):
        loop.advance(1000.0 + 100 * PERIOD)
    assert calls == stream.errors == 101 and healthy.ticks == 101
    assert 1 <= len(caplog.records) <= 8  # 1, 2, 4, ... 64: not one line per failure
    assert "boom" in caplog.text


def test_remove_stops_a_stream_even_from_its_own_callback() -> None:
    loop = SimulatedLoop()
    scheduler = PacedScheduler(loop=loop)
    ticks: list[int] = []

    def three_then_stop() -> None:
        ticks.append(1)
        if len(ticks) == 3:
            scheduler.remove(handle)

    handle = scheduler.add(three_then_stop)
    other = scheduler.add(lambda: None)
    assert len(scheduler) == 2
    loop.advance(1001.0)
    assert len(ticks) == 3 and len(scheduler) == 1
    scheduler.remove(other)
    scheduler.remove(other)
    loop.advance(1002.0)
    assert len(scheduler) == 0 and other.ticks == 51


async def test_runs_on_a_real_event_loop() -> None:
    scheduler = PacedScheduler()
    stream = scheduler.add(lambda: None)
    for _ in range(500):
        if stream.ticks >= 5:
            break
        await asyncio.sleep(0.01)
    scheduler.close()
    assert stream.ticks >= 5 and len(scheduler) == 0
