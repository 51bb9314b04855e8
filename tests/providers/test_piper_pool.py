"""Piper's workers chosen from the live load: one intra-op thread per worker on a busy node, a worker with a
thread per core for a lone call on a quiet one (internal/tts/piper_pool.py), with real Piper processes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.tts.piper import PiperTextToSpeech
from voicegate.internal.tts.piper_pool import PoolShape, WorkerPool, choose_worker, pool_shape, watch_live_calls

pytestmark = pytest.mark.asyncio(loop_scope="module")

SENTENCE = "The quick brown fox jumps over the lazy dog."


@pytest.mark.parametrize(("workers", "threads", "cores", "cuda", "shape"), [
    (0, 0, 2, False, PoolShape(2, 1, 2, 2)),  # the default on 2 cores: two narrow workers and two wide ones
    (0, 0, 8, False, PoolShape(8, 1, 8, 2)),
    (3, 0, 8, False, PoolShape(3, 1, 8, 2)),  # piper.workers still sets the narrow ones
    (0, 0, 1, False, PoolShape(1, 1, 0)),  # one core: a wide worker would be another narrow one
    (0, 1, 4, False, PoolShape(4, 1, 0)),  # piper.threads forces the count, no wide worker
    (2, 3, 4, False, PoolShape(2, 3, 0)),
    (0, 0, 4, True, PoolShape(4, 0, 0)),  # on the GPU: onnxruntime's default threads, as before
])
async def test_the_pool_shape_comes_from_the_cores_and_the_settings(
        workers: int, threads: int, cores: int, cuda: bool, shape: PoolShape) -> None:
    assert pool_shape(workers, threads, cores, cuda) == shape


DEFAULT = PoolShape(2, 1, 2, 2)
FORCED = PoolShape(2, 1, 0)


@pytest.mark.parametrize(("shape", "live_calls", "rendering", "waiting", "wide_idle", "kind"), [
    (DEFAULT, 1, 0, 0, True, "wide"),  # a lone call on a quiet node: all the cores on its sentence
    (DEFAULT, 0, 0, 0, True, "wide"),  # nobody said how many calls: the queue alone decides
    (DEFAULT, 2, 0, 0, True, "narrow"),  # two calls: one thread per render is cheaper and sooner
    (DEFAULT, 16, 0, 0, True, "narrow"),
    (DEFAULT, 1, 1, 0, True, "narrow"),  # another sentence renders: a wide one would fight it
    (DEFAULT, 0, 0, 1, True, "narrow"),  # sentences wait: the load is there
    (DEFAULT, 1, 0, 0, False, "narrow"),  # both wide workers are busy
    (FORCED, 1, 0, 0, True, "narrow"),  # piper.threads set: there is no wide worker
])
async def test_the_worker_kind_comes_from_the_live_calls_and_the_queue(
        shape: PoolShape, live_calls: int, rendering: int, waiting: int, wide_idle: bool, kind: str) -> None:
    assert choose_worker(shape, live_calls, rendering, waiting, wide_idle) == kind


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tts() -> AsyncIterator[PiperTextToSpeech]:
    engine = PiperTextToSpeech(PiperConfig(), cores=4)  # 4 narrow workers and two 4-thread ones, on any machine
    await engine.warm_up()
    yield engine
    await engine.aclose()


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


async def say(engine: PiperTextToSpeech, text: str = SENTENCE) -> bytes:
    return b"".join([chunk async for chunk in engine.synthesize(text, 8000)])


def said(engine: PiperTextToSpeech) -> tuple[int, int]:
    """Sentences given to the wide worker, and to the narrow ones."""
    slots = engine.pool.slots
    return sum(s.said for s in slots if s.wide), sum(s.said for s in slots if not s.wide)


async def test_the_workers_start_with_their_kind_of_thread_pool(tts: PiperTextToSpeech) -> None:
    wide = [slot for slot in tts.pool.slots if slot.wide]
    narrow = [slot for slot in tts.pool.slots if not slot.wide]
    assert [slot.threads for slot in wide] == [4, 4] and [slot.threads for slot in narrow] == [1] * 4
    # onnxruntime's intra-op pool holds threads - 1 threads beside the one that runs the session
    wide_threads = threads_of(wide[0].process.pid)  # type: ignore[union-attr]
    assert all(threads_of(slot.process.pid) == wide_threads - 3 for slot in narrow)  # type: ignore[union-attr]


async def test_a_lone_call_is_spoken_by_the_wide_worker(tts: PiperTextToSpeech) -> None:
    assert watch_live_calls(tts, lambda: 1)
    before = said(tts)
    for _ in range(3):  # one call's sentences, one after another
        assert await say(tts)
    assert said(tts) == (before[0] + 3, before[1])


async def test_concurrent_calls_are_spoken_by_the_narrow_workers(tts: PiperTextToSpeech) -> None:
    assert watch_live_calls(tts, lambda: 3)
    before = said(tts)
    for pcm in await asyncio.gather(*(say(tts) for _ in range(6))):  # three calls, two sentences each
        assert pcm
    assert said(tts) == (before[0], before[1] + 6)


async def test_without_a_live_count_sentences_beside_each_other_fill_the_wide_workers_then_the_narrow(
        tts: PiperTextToSpeech) -> None:
    tts.pool.live_calls = None
    before = said(tts)
    # Three at once: the two wide workers (a lone call's sentence and one it left behind), then a narrow one.
    assert all(await asyncio.gather(say(tts), say(tts), say(tts)))
    assert said(tts) == (before[0] + 2, before[1] + 1)


async def test_a_forced_thread_count_keeps_no_wide_worker() -> None:
    pool: WorkerPool[object] = WorkerPool.sized(workers=2, threads=1, cores=4)
    assert [(slot.threads, slot.wide) for slot in pool.slots] == [(1, False), (1, False)]
    slot = await pool.take()
    assert not slot.wide
    pool.give_back(slot)


async def test_engines_without_a_pool_ignore_the_live_count() -> None:
    assert not watch_live_calls(object(), lambda: 1)


async def test_a_sentence_needed_now_gets_the_next_free_worker_before_one_with_audio_still_to_play() -> None:
    pool: WorkerPool[object] = WorkerPool.sized(workers=1, threads=1, cores=4)
    busy = await pool.take()
    order: list[str] = []

    async def wait(name: str, slack_s: float) -> None:
        slot = await pool.take(slack_s)
        order.append(name)
        pool.give_back(slot)

    # Another call's next sentence (3 s of its reply still to play) queues first, then a reply's first.
    later = asyncio.create_task(wait("continuation", 3.0))
    await asyncio.sleep(0)
    first = asyncio.create_task(wait("first sentence", 0.0))
    await asyncio.sleep(0)
    assert pool.waiting == 2
    pool.give_back(busy)
    await asyncio.gather(later, first)
    assert order == ["first sentence", "continuation"]
    assert pool.waiting == 0 and pool.rendering == 0


async def test_a_waiter_that_gives_up_does_not_keep_the_worker() -> None:
    pool: WorkerPool[object] = WorkerPool.sized(workers=1, threads=1, cores=4)
    busy = await pool.take()
    gone = asyncio.create_task(pool.take())
    await asyncio.sleep(0)
    gone.cancel()
    pool.give_back(busy)  # handed to the cancelled waiter or skipped: either way the worker is free again
    with contextlib.suppress(asyncio.CancelledError):
        await gone
    slot = await asyncio.wait_for(pool.take(), 5)
    assert slot is busy and pool.rendering == 1
