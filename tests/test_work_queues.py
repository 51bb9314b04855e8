"""WorkQueue: the waits in front of a pool of workers, as /metrics and admission see them."""

from __future__ import annotations

from voicegate.internal.telemetry.queues import PRESSURE_WINDOW_S, WorkQueue, queues_of


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_wait_is_measured_from_enter_to_leave_and_reported() -> None:
    clock, seen = Clock(), []
    queue = WorkQueue("whisper", clock)
    queue.observer = lambda pool, ms: seen.append((pool, round(ms)))
    first, second = queue.enter(), queue.enter()
    clock.now += 0.25
    assert queue.waiting == 2 and round(queue.oldest_ms()) == 250
    assert round(queue.leave(first)) == 250
    clock.now += 0.5
    queue.leave(second)
    assert seen == [("whisper", 250), ("whisper", 750)]
    assert queue.describe() == {"pool": "whisper", "waiting": 0, "running": 0, "mean_wait_ms": 500.0}
    assert queue.leave(first) == 0.0  # twice: not counted again


def test_pressure_is_the_oldest_wait_now_or_the_longest_that_just_ended() -> None:
    clock = Clock()
    queue = WorkQueue("piper", clock)
    assert queue.pressure_ms() == 0.0
    token = queue.enter()
    clock.now += 2.0
    assert round(queue.pressure_ms()) == 2000  # still waiting
    queue.leave(token)
    clock.now += 1.0
    assert round(queue.pressure_ms()) == 2000  # the queue emptied a second ago: it was long
    clock.now += PRESSURE_WINDOW_S
    assert queue.pressure_ms() == 0.0  # long ago: no pressure now


def test_a_dropped_item_leaves_no_wait_behind() -> None:
    clock = Clock()
    queue = WorkQueue("whisper", clock)
    token = queue.enter()
    clock.now += 3.0
    queue.drop(token)
    assert queue.waiting == 0 and queue.pressure_ms() == 0.0 and queue.taken == 0


def test_queues_of_collects_from_engines_that_have_them() -> None:
    class Engine:
        def __init__(self) -> None:
            self.queue = WorkQueue("x")

        def queues(self) -> list[WorkQueue]:
            return [self.queue]

    engine = Engine()
    assert queues_of(engine, object(), None) == [engine.queue]


def test_a_worker_calls_own_time_is_reported_apart_from_the_wait() -> None:
    clock, seen = Clock(), []
    queue = WorkQueue("piper", clock)
    queue.service_observer = lambda pool, ms: seen.append((pool, round(ms)))
    started = clock.now
    clock.now += 0.3
    queue.served(started)
    assert seen == [("piper", 300)] and queue.taken == 0  # serving is not waiting


def test_a_shed_item_leaves_its_wait_in_the_pressure_but_is_not_counted_as_taken() -> None:
    """An item shed for waiting too long is the strongest sign of a queue too long: the node keeps refusing
    new calls for the pressure window after it, not only while the next item happens to be waiting."""
    clock = Clock()
    queue = WorkQueue("whisper", clock)
    token = queue.enter()
    clock.now += 0.8
    queue.shed(token)
    assert queue.waiting == 0 and queue.taken == 0
    assert round(queue.pressure_ms()) == 800
    clock.now += PRESSURE_WINDOW_S + 0.1
    assert queue.pressure_ms() == 0.0
