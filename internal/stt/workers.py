"""Worker processes that decode whole utterances for local recognisers (pocketsphinx, Whisper).

Local engines hold the GIL or several cores while they decode, so they never run on the event loop
or in a thread. A `DecoderPool` owns a few spawned worker processes and hands them utterances:
- fair across calls: each call has its own queue and the pool takes turns between calls, so one
  caller who talks a lot cannot make everyone else wait behind their backlog;
- bounded: past `queue_limit` waiting utterances a new one fails at once (`SttOverloaded`) rather
  than making every caller wait longer and longer;
- self-healing: a worker that dies (killed, out of memory, a crash in native code) breaks the
  process pool; the pool is replaced and each interrupted utterance is tried once more.
`UtteranceStream` is the per-call side both engines share: it buffers one utterance, sends it to the
pool when the VAD ends it, and yields the transcripts in the order the caller spoke.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Protocol

from internal.stt.base import SttError, Transcript

log = logging.getLogger(__name__)

RETRIES_AFTER_CRASH = 1  # an utterance that kills a worker twice is dropped, not retried forever


class SttOverloaded(SttError):
    """More utterances are waiting than the pool's bound allows."""


# ---- worker process side ----------------------------------------------------------------------


def _exit_when_orphaned(parent: int) -> None:
    # A worker whose server died without shutting the pool down (SIGKILL, a crashed test process) would
    # otherwise sit idle forever holding its model in memory.
    import os
    import time

    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def one_blas_thread() -> None:
    """Keep numpy's OpenBLAS to one thread in this process.

    Its worker threads keep spinning after each small matrix product (the mel filter bank of Whisper's and
    Smart Turn's features) and burn a second core while the model itself runs. Measured here: a Smart Turn
    verdict 84 -> 42 ms of CPU, a Whisper decode 343 -> 232 ms; the products are tiny, one thread is as fast.
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def watch_parent() -> None:
    """Call first in a worker's initializer: the worker exits when its server goes away (and keeps numpy
    to one thread)."""
    import os

    one_blas_thread()
    import threading

    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True, name="orphan-watch").start()


# ---- event loop side --------------------------------------------------------------------------


@dataclass(eq=False)
class _Job:
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    attempts: int = 0


@dataclass
class _Lane:
    """One caller's waiting utterances."""

    jobs: deque[_Job] = field(default_factory=deque)


class DecoderPool:
    def __init__(self, name: str, workers: int, decode: Callable[..., Any], initializer: Callable[..., None],
                 initargs: tuple[Any, ...], queue_limit: int = 64) -> None:
        self.name = name
        self.workers = workers
        self.queue_limit = queue_limit
        self.replaced = 0  # pools replaced after a worker died (for /health and tests)
        self._decode = decode
        self._initializer = initializer
        self._initargs = initargs
        self._lanes: dict[object, _Lane] = {}
        self._turns: deque[object] = deque()
        self._waiting = 0
        self._running = 0
        self._closed = False
        self._executor = self._new_executor()

    def _new_executor(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=self._initializer, initargs=self._initargs)

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def running(self) -> int:
        """Utterances handed to the workers and not yet back."""
        return self._running

    def worker_pids(self) -> list[int]:
        return [p.pid for p in getattr(self._executor, "_processes", {}).values() if p.pid is not None]

    async def warm_up(self, *args: Any) -> None:
        """Start every worker and let each load its model now, not on the first caller's words."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._executor, self._decode, *args)
                               for _ in range(self.workers)))

    async def decode(self, caller: object, *args: Any) -> Any:
        """Decode one utterance for `caller`; raises SttOverloaded or SttError."""
        if self._closed:
            raise SttError(f"{self.name} is shut down")
        if self._waiting >= self.queue_limit:
            raise SttOverloaded(f"{self.name}: {self._waiting} utterances already waiting")
        job = _Job(args, asyncio.get_running_loop().create_future())
        lane = self._lanes.get(caller)
        if lane is None:
            lane = self._lanes[caller] = _Lane()
            self._turns.append(caller)
        lane.jobs.append(job)
        self._waiting += 1
        self._dispatch()
        return await job.future

    def _dispatch(self) -> None:
        while self._running < self.workers and self._turns:
            caller = self._turns.popleft()
            lane = self._lanes[caller]
            job = lane.jobs.popleft()
            if lane.jobs:
                self._turns.append(caller)  # back of the line: the next caller goes first
            else:
                del self._lanes[caller]
            self._waiting -= 1
            if job.future.cancelled():
                continue
            self._running += 1
            asyncio.get_running_loop().create_task(self._run(job))

    async def _run(self, job: _Job) -> None:
        executor = self._executor
        try:
            result = await asyncio.get_running_loop().run_in_executor(executor, self._decode, *job.args)
        except BrokenProcessPool:
            self._replace(executor)
            job.attempts += 1
            if job.attempts <= RETRIES_AFTER_CRASH and not self._closed:
                self._running -= 1
                self._requeue(job)
                return
            self._settle(job, error=SttError(f"{self.name} worker died while decoding"))
        except RuntimeError as exc:  # submitting to a pool that is shutting down
            self._settle(job, error=SttError(f"{self.name}: {exc}"))
        except Exception as exc:
            self._settle(job, error=SttError(f"{self.name} decode failed: {type(exc).__name__}: {exc}"))
        else:
            self._settle(job, result=result)
        self._running -= 1
        if not self._closed:
            self._dispatch()

    def _requeue(self, job: _Job) -> None:
        # A retried utterance goes to the front: it has waited longest.
        key = object()
        self._lanes[key] = _Lane(deque([job]))
        self._turns.appendleft(key)
        self._waiting += 1
        self._dispatch()

    @staticmethod
    def _settle(job: _Job, *, result: Any = None, error: Exception | None = None) -> None:
        if job.future.done():
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        if broken is not self._executor or self._closed:
            return  # another job already replaced it
        log.warning("a %s worker process died; starting new workers", self.name)
        broken.shutdown(wait=False, cancel_futures=True)
        self.replaced += 1
        self._executor = self._new_executor()

    async def aclose(self) -> None:
        self._closed = True
        for lane in self._lanes.values():
            for job in lane.jobs:
                self._settle(job, error=SttError(f"{self.name} is shut down"))
        self._lanes.clear()
        self._turns.clear()
        self._waiting = 0
        self._executor.shutdown(wait=False, cancel_futures=True)


class UtteranceEngine(Protocol):
    name: str
    min_utterance_ms: int
    max_utterance_s: int
    whole_turn: bool  # decode each utterance together with the turn's earlier ones (see UtteranceStream)

    async def transcribe(self, pcm: bytes, sample_rate: int, caller: object | None = None) -> str: ...


class UtteranceStream:
    """One call's recognition: whole utterances, decoded when the VAD ends them, results in order.

    For an engine that hears better with context (`whole_turn`: Whisper), each utterance is decoded
    together with the earlier utterances of the same turn, and the final is the whole turn's text: a
    caller who pauses inside "five five five | one two three" is heard as one number, not as two
    fragments each with its own full stop. The pipeline says where a turn starts (`new_turn`).
    """

    continuous = False

    def __init__(self, engine: UtteranceEngine, sample_rate: int) -> None:
        self._engine = engine
        self._rate = sample_rate
        self.whole_turn = engine.whole_turn
        self._buffer = bytearray()
        self._turn = bytearray()  # the turn's earlier utterances (whole-turn mode)
        self._turn_text = ""  # the latest decode of the turn
        self._limit = sample_rate * 2 * engine.max_utterance_s
        self._results: asyncio.Queue[Transcript | None] = asyncio.Queue()
        self._previous: asyncio.Task[None] | None = None
        self._closed = False

    def push(self, pcm: bytes) -> None:
        if not self._closed and len(self._buffer) < self._limit:
            self._buffer.extend(pcm)

    def new_turn(self) -> None:
        self._turn = bytearray()

    def end_of_speech(self) -> None:
        audio, self._buffer = bytes(self._buffer), bytearray()
        if self._closed:
            return
        click = len(audio) < self._rate * 2 * self._engine.min_utterance_ms // 1000
        whole = self.whole_turn
        if whole and not click:
            if len(self._turn) + len(audio) > self._limit:
                self._turn = bytearray()  # past the engine's window: this utterance starts afresh
                whole = False
            self._turn.extend(audio)
            audio = bytes(self._turn)
        elif click:
            # A click: not worth a decode, but its result keeps its place in line (in whole-turn mode the
            # turn's text as it stands).
            audio = b""
        # Chain on the previous decode so results come out in the order the caller spoke.
        self._previous = asyncio.create_task(self._decode(audio, self._previous, whole and bool(self._turn)))

    async def _decode(self, audio: bytes, previous: asyncio.Task[None] | None, whole: bool) -> None:
        text = ""
        try:
            if audio:
                text = await self._engine.transcribe(audio, self._rate, self)
        except Exception as exc:  # a failed decode loses one utterance, never the call
            log.warning("%s decode failed: %s", self._engine.name, exc)
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        if whole:
            if audio:
                self._turn_text = text
            else:
                text = self._turn_text
        self._results.put_nowait(Transcript(text, final=True, whole_turn=whole))

    async def results(self) -> AsyncIterator[Transcript]:
        while (item := await self._results.get()) is not None:
            yield item

    async def aclose(self) -> None:
        self._closed = True
        self._results.put_nowait(None)
