"""Which Piper worker speaks the next sentence: onnxruntime's threads chosen from the cores and the live load.

onnxruntime fixes a session's intra-op thread count when the session is made, and a Piper worker keeps its
session for life, so the pool cannot change a worker's threads: it keeps two kinds and picks one per sentence.
Measured on 2 cores (docs/performance.md, "Capacity once the turn is fast"): one thread per worker costs 13-21
% less CPU per second of speech and, with two workers busy, finishes 23 % sooner (the workers' thread pools
stop fighting for the cores); but a lone caller on a quiet node waited 32 ms longer for the first audio (387
against 352 ms p50), since one thread renders a lone sentence more slowly than all the cores do.

So by default (`piper.threads = 0`) the pool keeps its one-per-core workers at one thread each ("narrow")
plus two "wide" workers with a thread per core, used only while the node is quiet: at most one live call
and no narrow render running or waiting. The lone caller gets the render it had before, and a loaded node
the cheaper, sooner narrow ones. Two wide workers, not one: a lone call often leaves a sentence behind on
one (a reply begun when the turn was released early and then dropped, or a barge-in: Piper cannot stop a
sentence it has begun), and with a single wide worker the real reply then went to a one-thread worker.
Measured over SIP with one wide worker (Whisper, 44 turns, two runs each, interleaved): first reply audio
139 / 151 ms after the release against 117 / 82 ms with onnxruntime's default threads.
`piper.threads` set forces that count on every worker, with no wide one.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from voicegate.internal.config.sizing import usable_cores

WorkerKind = Literal["wide", "narrow"]
WIDE_WORKERS = 2  # the lone call's sentence, and one it left behind (module doc)
P = TypeVar("P")  # the worker process (internal/tts/piper.py's PiperProcess)


@dataclass(frozen=True)
class PoolShape:
    narrow: int  # workers that serve any sentence
    narrow_threads: int  # onnxruntime intra-op threads in each (0: onnxruntime's default, one per core)
    wide_threads: int  # threads of each wide worker; 0: there is none
    wide: int = 0  # wide workers


def pool_shape(workers: int, threads: int, cores: int, cuda: bool = False) -> PoolShape:
    """The workers `piper.workers` and `piper.threads` ask for on a machine with `cores` usable cores."""
    narrow = workers if workers > 0 else cores
    if threads > 0:  # forced: every worker the same, as configured
        return PoolShape(narrow, threads, 0)
    if cuda:  # the GPU does the work; the CPU threads only feed it, and onnxruntime's default is fine
        return PoolShape(narrow, 0, 0)
    if cores < 2:  # a wide worker would have the one thread a narrow one has: it would only cost memory
        return PoolShape(narrow, 1, 0)
    return PoolShape(narrow, 1, cores, WIDE_WORKERS)


def choose_worker(shape: PoolShape, live_calls: int, rendering: int, waiting: int, wide_idle: bool) -> WorkerKind:
    """The kind of worker for the next sentence. `live_calls`: calls on the node (0 when nobody said);
    `rendering`: sentences on narrow workers now; `waiting`: sentences queued for one."""
    if shape.wide == 0 or not wide_idle:
        return "narrow"
    if live_calls > 1:
        return "narrow"  # callers share the cores: one thread per render is cheaper and sooner
    if rendering > 0 or waiting > 0:
        return "narrow"  # a wide render would fight the narrow ones for the cores
    return "wide"  # the node is quiet: all the cores render this sentence, the sooner first audio


@dataclass
class Slot(Generic[P]):
    """One place a Piper process lives in; its process is replaced when it dies."""

    index: int
    threads: int  # onnxruntime intra-op threads, 0: its default
    wide: bool = False
    process: P | None = None  # once started
    said: int = 0  # sentences this slot was given


@dataclass
class WorkerPool(Generic[P]):
    """The slots, and which is free. `live_calls` tells the pool how many calls the node has (the gateway
    sets it: `watch_live_calls`); without it only the pool's own queue decides."""

    shape: PoolShape
    live_calls: Callable[[], int] | None = None
    slots: list[Slot[P]] = field(default_factory=list)

    def __post_init__(self) -> None:
        shape = self.shape
        self.slots = [Slot[P](i, shape.narrow_threads) for i in range(shape.narrow)]
        self.slots += [Slot[P](shape.narrow + i, shape.wide_threads, wide=True) for i in range(shape.wide)]
        self._idle: list[Slot[P]] = [slot for slot in self.slots if not slot.wide]
        self._wide_idle = [slot for slot in self.slots if slot.wide]
        # Sentences waiting for a narrow worker, the least slack first (tts/base.py SLACK_S): (when the
        # caller needs it, arrival order, the future the slot is handed through).
        self._waiters: list[tuple[float, int, asyncio.Future[Slot[P]]]] = []
        self._arrivals = itertools.count()
        self.rendering = 0  # narrow slots taken

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, future in self._waiters if not future.done())

    @classmethod
    def sized(cls, workers: int, threads: int, cuda: bool = False, cores: int | None = None) -> WorkerPool[P]:
        return cls(pool_shape(workers, threads, cores or usable_cores(), cuda))

    def next_kind(self) -> WorkerKind:
        live = self.live_calls() if self.live_calls is not None else 0
        return choose_worker(self.shape, live, self.rendering, self.waiting, bool(self._wide_idle))

    async def take(self, slack_s: float = 0.0) -> Slot[P]:
        """A free slot for one sentence, waiting for a narrow one when the policy says narrow. Waiting
        sentences get the next free narrow worker by when their caller needs them: `slack_s` from now."""
        if self.next_kind() == "wide":
            slot = self._wide_idle.pop(0)
        elif self._idle and not self.waiting:
            slot = self._idle.pop(0)
            self.rendering += 1
        else:
            future: asyncio.Future[Slot[P]] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiters, (time.monotonic() + max(0.0, slack_s), next(self._arrivals), future))
            try:
                slot = await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():  # handed a slot as the wait was cancelled
                    self._hand_on(future.result())
                raise
            self.rendering += 1
        slot.said += 1
        return slot

    def give_back(self, slot: Slot[P]) -> None:
        if slot.wide:
            self._wide_idle.append(slot)
        else:
            self.rendering -= 1
            self._hand_on(slot)

    def _hand_on(self, slot: Slot[P]) -> None:
        """A narrow slot is free: to the waiter needed soonest, else idle."""
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(slot)
                return
        self._idle.append(slot)


def watch_live_calls(tts: object, count: Callable[[], int]) -> bool:
    """Tell `tts` how many calls the node has, for its choice of workers; False when it keeps no pool that
    would care (espeak-ng, OpenAI)."""
    pool = getattr(tts, "pool", None)
    if not isinstance(pool, WorkerPool):
        return False
    pool.live_calls = count
    return True
