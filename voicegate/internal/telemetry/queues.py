"""The waits in front of each pool of workers (recogniser, synthesiser, end-of-turn model).

At capacity a caller waits in a queue, not in a computation: an utterance for a free Whisper worker, a
sentence for a free Piper process. Each pool keeps one `WorkQueue`, so that /metrics shows the queue
length and the wait per pool (the bottleneck is named, not guessed) and the gateway can refuse new
calls while the queues are already longer than a reply can afford (`server.shed_wait_ms`).

Pure bookkeeping on the event loop: no locks, no I/O.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from itertools import count

PRESSURE_WINDOW_S = 5.0  # a wait counts towards the pressure this long after it ended

Observer = Callable[[str, float], None]  # (pool, ms), e.g. Telemetry.worker_wait


class WorkQueue:
    """Items waiting for a worker of one pool, and the waits they had."""

    def __init__(self, pool: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.pool = pool
        self.running = 0  # items a worker holds now (the pool keeps it up to date)
        self.observer: Observer | None = None  # each wait for a worker
        self.service_observer: Observer | None = None  # each worker call's own time (decode, synthesis)
        self._clock = clock
        self._entered: dict[int, float] = {}
        self._tokens = count()
        self._recent: deque[tuple[float, float]] = deque()  # (ended at, wait ms)
        self.taken = 0
        self.waited_ms = 0.0

    @property
    def waiting(self) -> int:
        return len(self._entered)

    def enter(self) -> int:
        token = next(self._tokens)
        self._entered[token] = self._clock()
        return token

    def leave(self, token: int, at: float | None = None) -> float:
        """A worker took the item (now, or `at` on this queue's clock): its wait in ms (0 for an unknown
        token)."""
        entered = self._entered.pop(token, None)
        if entered is None:
            return 0.0
        now = self._clock() if at is None else at
        wait_ms = (now - entered) * 1000.0
        self.taken += 1
        self.waited_ms += wait_ms
        self._recent.append((now, wait_ms))
        self._forget(now)
        if self.observer is not None:
            self.observer(self.pool, wait_ms)
        return wait_ms

    def served(self, started: float) -> None:
        """A worker call that began at `started` (this queue's clock) is done."""
        if self.service_observer is not None:
            self.service_observer(self.pool, (self._clock() - started) * 1000.0)

    def drop(self, token: int) -> None:
        """The item left without a worker (its caller gave up)."""
        self._entered.pop(token, None)

    def shed(self, token: int) -> None:
        """The item waited too long and was shed: it leaves without a worker, and its wait still counts
        towards the pressure (the strongest sign of a queue too long; forgotten, the node looked idle between
        two long decodes and took new calls it could not serve)."""
        entered = self._entered.pop(token, None)
        if entered is not None:
            now = self._clock()
            self._recent.append((now, (now - entered) * 1000.0))
            self._forget(now)

    def age_ms(self, token: int) -> float:
        entered = self._entered.get(token)
        return 0.0 if entered is None else (self._clock() - entered) * 1000.0

    def oldest_ms(self) -> float:
        if not self._entered:
            return 0.0
        return (self._clock() - min(self._entered.values())) * 1000.0

    def pressure_ms(self) -> float:
        """How long an item waits here now: the oldest waiting item's age, or the longest wait that
        ended in the last few seconds (a queue that just emptied is still a queue that was long)."""
        now = self._clock()
        self._forget(now)
        recent = max((wait for _, wait in self._recent), default=0.0)
        return max(recent, self.oldest_ms())

    def _forget(self, now: float) -> None:
        while self._recent and now - self._recent[0][0] > PRESSURE_WINDOW_S:
            self._recent.popleft()

    def describe(self) -> dict[str, object]:
        return {"pool": self.pool, "waiting": self.waiting, "running": self.running,
                "mean_wait_ms": round(self.waited_ms / self.taken, 1) if self.taken else 0.0}


def overload_reasons(queues: list[WorkQueue], wait_bound_ms: float, loop_lag_ms: float,
                     lag_bound_ms: float) -> list[str]:
    """Why a node should refuse new calls now (none: it should not). A bound of 0 never refuses.

    - work has waited longer than `wait_bound_ms` for a worker of one of `queues` (server.shed_wait_ms);
    - the event loop runs `loop_lag_ms` late, sustained, at or past `lag_bound_ms` (server.shed_loop_lag_ms).
    """
    reasons = []
    late = [queue.pool for queue in queues if wait_bound_ms and queue.pressure_ms() > wait_bound_ms]
    if late:
        reasons.append(f"the {'/'.join(late)} workers are over {wait_bound_ms:.0f} ms behind")
    if lag_bound_ms and loop_lag_ms >= lag_bound_ms:
        reasons.append(f"the event loop runs {loop_lag_ms:.0f} ms late (over {lag_bound_ms:.0f} ms)")
    return reasons


def queues_of(*engines: object) -> list[WorkQueue]:
    """The work queues of whichever engines have any (`queues()`), in order."""
    found: list[WorkQueue] = []
    for engine in engines:
        queues = getattr(engine, "queues", None)
        if callable(queues):
            found.extend(queue for queue in queues() if isinstance(queue, WorkQueue))
    return found
