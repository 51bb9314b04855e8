"""A few shared workers handed to waiting work earliest-due first.

A voice shared by every call (Piper's processes) is asked for sentences with different urgency: a reply's
first sentence is due at once (the caller is waiting in silence), its later sentences only when the audio
queued before them runs out, seconds later. Served first come, first served, a new caller's first sentence
waits behind other replies' third and fourth sentences, and that wait is heard; served by deadline, it
goes first and the later sentences are still ready before they are needed, as long as the voice keeps up
at all (earliest deadline first meets every deadline that any order could).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Generic, TypeVar

Worker = TypeVar("Worker")


class EarliestDueFirst(Generic[Worker]):
    def __init__(self, workers: list[Worker]) -> None:
        self._free = list(workers)
        self._waiting: list[tuple[float, int, asyncio.Future[Worker]]] = []
        self._order = itertools.count()  # equal deadlines: first come, first served

    @property
    def waiting(self) -> int:
        return sum(not future.done() for _, _, future in self._waiting)

    async def acquire(self, due_at: float) -> Worker:
        """A free worker, once every waiter due before `due_at` has had one (`due_at` on the monotonic
        clock). Cancelling the wait gives up the place in line."""
        if self._free and not self._waiting:
            return self._free.pop()
        future: asyncio.Future[Worker] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (due_at, next(self._order), future))
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(future.result())  # handed over just as the waiter gave up: pass it on
            raise

    def release(self, worker: Worker) -> None:
        while self._waiting:
            _, _, future = heapq.heappop(self._waiting)
            if not future.done():
                future.set_result(worker)
                return
        self._free.append(worker)
