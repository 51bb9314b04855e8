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
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np

from voicegate.internal.stt.base import SpeechEvidence, SttError, Transcript
from voicegate.internal.telemetry.queues import WorkQueue

log = logging.getLogger(__name__)

RETRIES_AFTER_CRASH = 1  # an utterance that kills a worker twice is dropped, not retried forever


class SttOverloaded(SttError):
    """More utterances are waiting than the pool's bound allows."""


class SttSuperseded(SttError):
    """Withdrawn before a worker took it: a later decode of the same turn holds all of its audio."""


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
    token: int = -1  # its place in the pool's WorkQueue while it waits
    alone: bool = False  # failed inside a batch: decoded on its own from now on


@dataclass
class _Lane:
    """One caller's waiting utterances."""

    jobs: deque[_Job] = field(default_factory=deque)


def _no_key(*args: Any) -> object:
    return None


class DecoderPool:
    """`decode_batch` (optional) decodes several callers' utterances in one call of a worker: a free
    worker takes up to `batch_size` waiting utterances, at most one per caller (so no caller waits
    behind another's for more than one batch) and only utterances with the same `batch_key` (for
    Whisper, the same encoder window, so a short one is not padded to a long one's length). Batches form
    only when utterances queue up; a quiet pool decodes each one at once, alone.
    `max_wait_s` sheds an utterance that waited that long for a worker (SttOverloaded): its answer would
    come too late to be of use, and the workers catch up sooner without it."""

    def __init__(self, name: str, workers: int, decode: Callable[..., Any], initializer: Callable[..., None],
                 initargs: tuple[Any, ...], queue_limit: int = 64, *,
                 decode_batch: Callable[[list[tuple[Any, ...]]], list[Any]] | None = None, batch_size: int = 1,
                 batch_key: Callable[..., object] = _no_key, max_wait_s: float = 0.0) -> None:
        self.name = name
        self.workers = workers
        self.queue_limit = queue_limit
        self.replaced = 0  # pools replaced after a worker died (for /health and tests)
        self.batches = 0  # worker calls that decoded more than one utterance
        self.shed = 0  # utterances refused after waiting max_wait_s
        self.withdrawn = 0  # utterances taken back before a worker took them (superseded)
        self.queue = WorkQueue(name)
        self._decode = decode
        self._decode_batch = decode_batch
        self._batch_size = batch_size if decode_batch is not None else 1
        self._batch_key = batch_key
        self._max_wait_ms = max_wait_s * 1000.0
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
        """Worker calls under way (one utterance or one batch each)."""
        return self._running

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def queues(self) -> list[WorkQueue]:
        return [self.queue]

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
        self._enqueue(caller, job)
        self._dispatch()
        return await job.future

    def withdraw(self, caller: object) -> int:
        """Take back every utterance of `caller` that still waits for a worker (each decode raises
        SttSuperseded); returns how many. One already being decoded is left to finish."""
        lane = self._lanes.pop(caller, None)
        if lane is None:
            return 0
        self._turns.remove(caller)
        for job in lane.jobs:
            if not job.future.done():
                self.queue.drop(job.token)
                self._settle(job, error=SttSuperseded(f"{self.name}: superseded by a later decode of the turn"))
        self._waiting -= len(lane.jobs)
        self.withdrawn += len(lane.jobs)
        return len(lane.jobs)

    def _enqueue(self, caller: object, job: _Job, front: bool = False) -> None:
        job.token = self.queue.enter()
        lane = self._lanes.get(caller)
        if lane is None:
            lane = self._lanes[caller] = _Lane()
            if front:
                self._turns.appendleft(caller)
            else:
                self._turns.append(caller)
        lane.jobs.append(job)
        self._waiting += 1

    def _dispatch(self) -> None:
        while self._running < self.workers and self._turns:
            batch = self._next_batch()
            if batch:
                self._set_running(+1)
                asyncio.get_running_loop().create_task(self._run(batch))

    def _next_batch(self) -> list[_Job]:
        first, callers = None, set()
        while first is None and self._turns:
            caller = self._turns.popleft()
            callers.add(id(caller))
            first = self._pop(caller)
        if first is None or first.alone or self._batch_size == 1:
            return [first] if first is not None else []
        batch: list[_Job] = [first]
        skipped: list[object] = []
        key = self._batch_key(*first.args)
        while len(batch) < self._batch_size and self._turns:
            caller = self._turns.popleft()
            if id(caller) in callers:
                self._turns.appendleft(caller)  # round the line once: one utterance per caller per batch
                break
            head = self._lanes[caller].jobs[0]
            if head.alone or self._batch_key(*head.args) != key:
                skipped.append(caller)
                continue
            callers.add(id(caller))
            job = self._pop(caller)
            if job is not None:
                batch.append(job)
        self._turns.extendleft(reversed(skipped))  # they keep their place at the front
        return batch

    def _pop(self, caller: object) -> _Job | None:
        """The next utterance of `caller` for a worker; None when it was cancelled or shed."""
        lane = self._lanes[caller]
        job = lane.jobs.popleft()
        if lane.jobs:
            self._turns.append(caller)  # back of the line: the next caller goes first
        else:
            del self._lanes[caller]
        self._waiting -= 1
        if job.future.cancelled():
            self.queue.drop(job.token)
            return None
        if self._max_wait_ms and self.queue.age_ms(job.token) > self._max_wait_ms:
            self.queue.shed(job.token)
            self.shed += 1
            self._settle(job, error=SttOverloaded(
                f"{self.name}: an utterance waited over {self._max_wait_ms:.0f} ms for a worker"))
            return None
        self.queue.leave(job.token)
        return job

    def _set_running(self, delta: int) -> None:
        self._running += delta
        self.queue.running = self._running

    async def _run(self, batch: list[_Job]) -> None:
        executor = self._executor
        loop = asyncio.get_running_loop()
        retry: list[_Job] = []
        started = time.monotonic()
        try:
            if len(batch) == 1:
                results = [await loop.run_in_executor(executor, self._decode, *batch[0].args)]
            else:
                assert self._decode_batch is not None
                self.batches += 1
                results = await loop.run_in_executor(executor, self._decode_batch, [job.args for job in batch])
        except BrokenProcessPool:
            self._replace(executor)
            for job in batch:
                job.attempts += 1
                if job.attempts <= RETRIES_AFTER_CRASH and not self._closed:
                    retry.append(job)
                else:
                    self._settle(job, error=SttError(f"{self.name} worker died while decoding"))
        except RuntimeError as exc:  # submitting to a pool that is shutting down
            for job in batch:
                self._settle(job, error=SttError(f"{self.name}: {exc}"))
        except Exception as exc:
            if len(batch) > 1 and not self._closed:
                for job in batch:  # one bad utterance must not cost the others theirs: each goes again alone
                    job.alone = True
                    retry.append(job)
            else:
                for job in batch:
                    self._settle(job, error=SttError(f"{self.name} decode failed: {type(exc).__name__}: {exc}"))
        else:
            self.queue.served(started)
            for job, result in zip(batch, results, strict=True):
                self._settle(job, result=result)
        self._set_running(-1)
        for job in reversed(retry):
            self._requeue(job)
        if not self._closed:
            self._dispatch()

    def _requeue(self, job: _Job) -> None:
        # A retried utterance goes to the front: it has waited longest.
        self._enqueue(object(), job, front=True)

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
                self.queue.drop(job.token)
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

    def withdraw(self, caller: object) -> int: ...


class VerdictEngine(UtteranceEngine, Protocol):
    """An engine whose decode also says whether the turn sounds finished (end_of_turn_head)."""

    async def transcribe_turn(self, pcm: bytes, sample_rate: int, caller: object | None = None,
                              earlier: str = "") -> tuple[str, float | None, SpeechEvidence | None]: ...


class EarlyDecodingEngine(UtteranceEngine, Protocol):
    """An engine that can hear a part of a turn as the continuation of words it already decoded."""

    early_decode_s: float  # undecoded speech past which a part is decoded while the caller talks (0: never)

    async def transcribe(self, pcm: bytes, sample_rate: int, caller: object | None = None,
                         earlier: str = "") -> str: ...


# Audio kept back from an early decode: the caller may be inside a word.
EARLY_DECODE_LEAVE_MS = 500
# The cut goes at least this far into the utterance being spoken: never at the pause before it, which would
# decode the turn's earlier words without the ones that complete them ("the meeting is moved to |
# Thursday" heard as "the meeting is moving.").
EARLY_CUT_INTO_UTTERANCE_MS = 1000
# The cut before it goes in the middle of the quietest 100 ms of this stretch: a gap between words, most
# often (a cut inside a word is heard twice, or not at all).
EARLY_CUT_SEARCH_MS = 1000
EARLY_CUT_GAP_FRAMES = 5


def quietest_cut(pcm: bytes, sample_rate: int, end: int, search_ms: int = EARLY_CUT_SEARCH_MS,
                 gap_frames: int = EARLY_CUT_GAP_FRAMES) -> int:
    """A byte offset at or before `end`: the middle of the quietest run of `gap_frames` 20 ms frames within
    `search_ms` before it."""
    frame = sample_rate // 50 * 2
    end -= end % frame
    start = max(0, end - search_ms * sample_rate // 1000 * 2)
    start -= start % frame
    samples = np.frombuffer(pcm[start:end], dtype=np.int16).astype(np.float32).reshape(-1, frame // 2)
    if not len(samples):
        return end
    energy = np.einsum("ij,ij->i", samples, samples)
    run = min(gap_frames, len(energy))
    sums = np.convolve(energy, np.ones(run), mode="valid")
    best = int(np.argmin(sums))
    return start + (best + run // 2) * frame


# An echo of the prompt: at least this many of the earlier part's words, not all of them numbers (a caller
# reading "555, 555 ..." says a group twice).
ECHO_MIN_WORDS = 3


_NUMBER_WORDS = frozenset("zero oh one two three four five six seven eight nine ten eleven twelve twenty thirty "
                          "forty fifty sixty seventy eighty ninety hundred thousand double triple".split())


def _numberish(word: str) -> bool:
    return word.isdigit() or word in _NUMBER_WORDS


def _word_list(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def without_echo(earlier: str, later: str) -> str:
    """`later` without a copy of the end of `earlier` it opens with.

    The later part of a turn is decoded with the earlier part's words as Whisper's prompt. In noise Whisper
    sometimes writes the prompt out again before the new words ("I'd like to move my appointment." + "I'd like
    to move my appointment to Friday"), and the turn read "<first half>. <first half again> <the rest>".
    The audio decoded holds none of the earlier words (it starts where
    the earlier decode ended), so a later part that opens with the earlier part's closing words (three or
    more, not only numbers) is that echo, and it goes."""
    before, after = _word_list(earlier), _word_list(later)
    longest = 0
    for size in range(min(len(before), len(after)), 0, -1):
        if size >= ECHO_MIN_WORDS and before[-size:] == after[:size] and not all(map(_numberish, after[:size])):
            longest = size
            break
    if not longest:
        return later
    tokens = list(re.finditer(r"[A-Za-z0-9']+", later))
    return later[tokens[longest - 1].end():].lstrip(" ,.;:!?-") if longest < len(tokens) else ""


def join_words(earlier: str, later: str) -> str:
    """Two parts of one turn's text: a full stop Whisper put at the end of the first part goes when the
    second carries on in lower case ("... the end of the month." + "and send me ..."); a copy of the first
    part that the second opens with goes too (without_echo)."""
    earlier, later = earlier.strip(), without_echo(earlier, later.strip())
    if not earlier or not later:
        return earlier or later
    if later[0].islower() and earlier.endswith("."):
        earlier = earlier[:-1]
    return f"{earlier} {later}"


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
        # Decoding during speech (whole-turn mode, an engine with early_decode_s): the turn's audio up to
        # `_prefix_bytes` is already heard as `_prefix_text`, so an end of speech decodes only the rest.
        early_s = float(getattr(engine, "early_decode_s", 0.0)) if self.whole_turn else 0.0
        self._early_bytes = int(early_s * sample_rate) * 2
        self._prefix_text = ""
        self._prefix_bytes = 0
        self._next_try = 0  # the turn's length in bytes before which no part is decoded (after one was tried)
        self._early: asyncio.Task[None] | None = None
        self._generation = 0  # bumped when the prefix may no longer be extended by a decode in flight
        self.early_decodes = 0  # parts decoded while the caller spoke (for tests and /health)
        self.tail_decodes = 0  # ends of speech that decoded only what those parts left
        self._limit = sample_rate * 2 * engine.max_utterance_s
        self._results: asyncio.Queue[Transcript | None] = asyncio.Queue()
        self._previous: asyncio.Task[None] | None = None
        self._closed = False

    def push(self, pcm: bytes) -> None:
        if not self._closed and len(self._buffer) < self._limit:
            self._buffer.extend(pcm)
            total = len(self._turn) + len(self._buffer)
            if (self._early_bytes and (self._early is None or self._early.done())
                    and total - self._prefix_bytes >= self._early_bytes and total >= self._next_try
                    and len(self._buffer) >= self._bytes(EARLY_CUT_INTO_UTTERANCE_MS + EARLY_DECODE_LEAVE_MS + 100)):
                self._next_try = total + self._bytes(1000)  # a part found too short is looked at again in 1 s
                self._decode_part()

    def _bytes(self, ms: int) -> int:
        return self._rate * 2 * ms // 1000

    def new_turn(self) -> None:
        self._turn = bytearray()
        self._forget_prefix()

    def _forget_prefix(self) -> None:
        self._prefix_text, self._prefix_bytes, self._next_try = "", 0, 0
        self._generation += 1

    def _decode_part(self) -> None:
        """The caller is still talking: decode the turn's audio so far (less the last half second), so at
        the end of speech only the tail is left to decode."""
        audio = bytes(self._turn) + bytes(self._buffer)
        end = len(audio) - self._bytes(EARLY_DECODE_LEAVE_MS)
        earliest = len(self._turn) + self._bytes(EARLY_CUT_INTO_UTTERANCE_MS)
        search_ms = min(EARLY_CUT_SEARCH_MS, (end - earliest) * 1000 // (self._rate * 2))
        cut = quietest_cut(audio, self._rate, end, search_ms=max(20, search_ms))
        start = self._prefix_bytes
        if cut - start < self._early_bytes // 2:
            return
        self._early = asyncio.create_task(
            self._decode_early(audio[start:cut], start, cut, self._prefix_text, self._generation))

    async def _decode_early(self, audio: bytes, start: int, end: int, earlier: str, generation: int) -> None:
        engine = cast(EarlyDecodingEngine, self._engine)
        try:
            text = await engine.transcribe(audio, self._rate, self, earlier=earlier)
        except Exception as exc:  # superseded, shed or failed: the end of speech decodes this part too
            log.debug("%s early decode dropped: %s", self._engine.name, exc)
            return
        if generation == self._generation and self._prefix_bytes == start and not self._closed:
            self._prefix_text = join_words(earlier, text)
            self._prefix_bytes = end
            self.early_decodes += 1

    def end_of_speech(self) -> None:
        audio, self._buffer = bytes(self._buffer), bytearray()
        if self._closed:
            return
        click = len(audio) < self._rate * 2 * self._engine.min_utterance_ms // 1000
        whole = self.whole_turn
        start, earlier = 0, ""
        if whole and not click:
            if len(self._turn) + len(audio) > self._limit:
                self._turn = bytearray()  # past the engine's window: this utterance starts afresh
                self._forget_prefix()
                whole = False
            elif self._turn or (self._early is not None and not self._early.done()):
                # The turn's earlier utterances are in this decode too: one still waiting for a worker
                # (a busy node) would only be replaced by it, so it gives its place up. On an idle node
                # each decode starts at once and nothing is withdrawn.
                self._engine.withdraw(self)
            self._turn.extend(audio)
            audio = bytes(self._turn)
            # What was decoded while the caller spoke is not decoded again; a part still being decoded now
            # is not waited for (this decode covers it).
            start, earlier = self._prefix_bytes, self._prefix_text
            self._generation += 1
        elif click:
            # A click: not worth a decode, but its result keeps its place in line (in whole-turn mode the
            # turn's text as it stands).
            audio = b""
        # Chain on the previous decode so results come out in the order the caller spoke.
        self._previous = asyncio.create_task(self._decode(audio, self._previous, whole and bool(self._turn),
                                                          start, earlier))

    async def _decode(self, audio: bytes, previous: asyncio.Task[None] | None, whole: bool, start: int = 0,
                      earlier: str = "") -> None:
        text = ""
        verdict: float | None = None
        evidence: SpeechEvidence | None = None
        overloaded = superseded = False
        try:
            if audio and start:
                self.tail_decodes += 1
            if audio and getattr(self._engine, "end_of_turn_head", False):
                engine = cast(VerdictEngine, self._engine)
                text, verdict, evidence = await engine.transcribe_turn(audio[start:], self._rate, self,
                                                                      earlier=earlier)
                text = join_words(earlier, text)
            elif audio and start:
                engine_e = cast(EarlyDecodingEngine, self._engine)
                text = join_words(earlier, await engine_e.transcribe(audio[start:], self._rate, self, earlier=earlier))
            elif audio:
                text = await self._engine.transcribe(audio, self._rate, self)
        except SttSuperseded:
            superseded = True
        except SttOverloaded as exc:  # shed: the caller is asked to say it again, not left in silence
            overloaded = True
            log.warning("%s", exc)
        except Exception as exc:  # a failed decode loses one utterance, never the call
            log.warning("%s decode failed: %s", self._engine.name, exc)
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        if superseded:
            self._results.put_nowait(Transcript("", final=True, whole_turn=whole, superseded=True))
            return
        if whole:
            if audio:
                self._turn_text = text
            else:
                text = self._turn_text
        self._results.put_nowait(Transcript(text, final=True, whole_turn=whole, overloaded=overloaded,
                                            end_of_turn=verdict, evidence=evidence))

    async def results(self) -> AsyncIterator[Transcript]:
        while (item := await self._results.get()) is not None:
            yield item

    async def aclose(self) -> None:
        self._closed = True
        self._results.put_nowait(None)
