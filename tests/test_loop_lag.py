"""LoopLag: how late the event loop runs, and when that is a reason to refuse new calls."""

from __future__ import annotations

import asyncio
import time

from voicegate.internal.telemetry.loop_lag import MIN_SAMPLES, LoopLag
from voicegate.internal.telemetry.queues import WorkQueue, overload_reasons


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_one_long_stall_is_not_a_trend_but_a_late_loop_is() -> None:
    clock = Clock()
    lag = LoopLag(window_s=5.0, clock=clock)
    lag.record(4000.0)  # a stall: the first wake after it is the window's only sample
    assert lag.sustained_ms() == 0.0 and lag.max_ms() == 4000.0
    for _ in range(4):
        clock.now += 0.1
        lag.record(2.0)
    assert lag.sustained_ms() == 2.0  # the stall is one sample among five: the median ignores it
    for _ in range(10):
        clock.now += 0.4
        lag.record(300.0)
    assert lag.sustained_ms() == 300.0


def test_wakes_leave_the_window_but_the_last_few_always_count() -> None:
    clock, seen = Clock(), []
    lag = LoopLag(window_s=5.0, clock=clock)
    lag.observer = seen.append
    for _ in range(10):
        lag.record(400.0)
    clock.now += 6.0  # a loop that late may not wake again within the window: its last wakes still say so
    assert lag.sustained_ms() == 400.0
    for _ in range(MIN_SAMPLES):
        lag.record(1.0)
    assert lag.sustained_ms() == 1.0 and lag.max_ms() == 1.0  # the old wakes left once newer ones came
    lag.record(-3.0)
    assert seen[-1] == 0.0


async def test_a_loop_kept_busy_is_measured_late_and_an_idle_one_is_not() -> None:
    lag = LoopLag(interval_s=0.02, window_s=1.0)
    task = asyncio.create_task(lag.run())
    try:
        await asyncio.sleep(0.3)
        idle = lag.sustained_ms()

        def hog() -> None:
            time.sleep(0.12)  # work that holds the loop, as an overloaded node's callbacks do
            hogging.append(asyncio.get_running_loop().call_soon(hog))

        hogging = [asyncio.get_running_loop().call_soon(hog)]
        await asyncio.sleep(1.5)
        hogging[-1].cancel()
        busy = lag.sustained_ms()
    finally:
        task.cancel()
    assert busy >= 60.0, busy
    assert idle < busy


def test_new_calls_are_refused_for_either_reason_and_each_bound_can_be_off() -> None:
    clock = Clock()
    queue = WorkQueue("whisper", clock)
    queue.enter()
    clock.now += 4.0
    assert overload_reasons([queue], 3000, 0.0, 250) == ["the whisper workers are over 3000 ms behind"]
    assert overload_reasons([queue], 0, 0.0, 250) == []
    assert overload_reasons([], 3000, 260.0, 250) == ["the event loop runs 260 ms late (over 250 ms)"]
    assert overload_reasons([], 3000, 260.0, 0) == []
    assert len(overload_reasons([queue], 3000, 300.0, 250)) == 2
