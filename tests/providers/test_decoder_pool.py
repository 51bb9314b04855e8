"""The worker pool local recognisers share: fair across calls, bounded, and replaced when a worker dies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.providers import pool_jobs
from voicegate.internal.stt.base import SttError
from voicegate.internal.stt.workers import DecoderPool, SttOverloaded, SttSuperseded, UtteranceStream


@pytest_asyncio.fixture
async def pool() -> AsyncIterator[DecoderPool]:
    decoder = DecoderPool("test", 1, pool_jobs.sleep_then_echo, pool_jobs.start_worker, ("w",), queue_limit=8)
    await decoder.warm_up("warm", 0.0)
    yield decoder
    await decoder.aclose()


async def test_a_talkative_caller_does_not_make_another_wait_behind_their_backlog(pool: DecoderPool) -> None:
    finished: list[str] = []

    async def decode(caller: str, tag: str) -> None:
        finished.append(await pool.decode(caller, tag, 0.15))

    talkative = [asyncio.create_task(decode("a", f"a{i}")) for i in range(5)]
    await asyncio.sleep(0.05)  # a0 is being decoded, a1-a4 wait
    other = asyncio.create_task(decode("b", "b0"))
    await asyncio.gather(*talkative, other)
    assert [tag.split(":")[0] for tag in finished] == ["a0", "a1", "b0", "a2", "a3", "a4"]


async def test_past_the_bound_a_new_utterance_is_refused_at_once(pool: DecoderPool) -> None:
    running = asyncio.create_task(pool.decode("a", "first", 0.5))
    await asyncio.sleep(0.05)
    waiting = [asyncio.create_task(pool.decode(f"c{i}", f"w{i}", 0.0)) for i in range(8)]
    await asyncio.sleep(0)
    assert pool.waiting == 8
    with pytest.raises(SttOverloaded, match="8 utterances already waiting"):
        await pool.decode("late", "refused", 0.0)
    assert (await running).startswith("first")
    assert len(await asyncio.gather(*waiting)) == 8
    assert pool.waiting == 0


async def test_a_worker_that_dies_is_replaced_and_the_utterance_retried_once() -> None:
    pool = DecoderPool("test", 1, pool_jobs.die, pool_jobs.start_worker, ("w",))
    try:
        with pytest.raises(SttError, match="worker died while decoding"):
            await pool.decode("a", "x", 0.0)
        assert pool.replaced == 2  # the first death and the retry's
    finally:
        await pool.aclose()


async def test_other_callers_utterances_survive_a_crash(pool: DecoderPool) -> None:
    before = pool.worker_pids()
    slow = asyncio.create_task(pool.decode("a", "slow", 1.0))
    queued = asyncio.create_task(pool.decode("b", "queued", 0.0))
    await asyncio.sleep(0.3)
    import os
    import signal

    os.kill(before[0], signal.SIGKILL)
    assert (await slow).startswith("slow:")
    assert (await queued).startswith("queued:")
    assert pool.replaced == 1 and pool.worker_pids() != before


async def test_utterances_still_waiting_at_shutdown_fail_cleanly() -> None:
    pool = DecoderPool("test", 1, pool_jobs.sleep_then_echo, pool_jobs.start_worker, ("w",))
    running = asyncio.create_task(pool.decode("a", "x", 0.5))
    waiting = asyncio.create_task(pool.decode("b", "y", 0.0))
    await asyncio.sleep(0.1)
    await pool.aclose()
    with pytest.raises(SttError, match="shut down"):
        await waiting
    with pytest.raises(SttError, match="shut down"):
        await pool.decode("c", "z", 0.0)
    running.cancel()


@pytest_asyncio.fixture
async def batching() -> AsyncIterator[DecoderPool]:
    decoder = DecoderPool("test", 1, pool_jobs.sleep_then_echo, pool_jobs.start_worker, ("w",),
                          decode_batch=pool_jobs.echo_batch, batch_size=3, batch_key=pool_jobs.length_key)
    await decoder.warm_up("warm", 0.0)
    yield decoder
    await decoder.aclose()


async def test_utterances_that_queue_up_are_decoded_together_one_per_caller(batching: DecoderPool) -> None:
    busy = asyncio.create_task(batching.decode("a", "a0", 0.3))
    await asyncio.sleep(0.1)  # a0 holds the only worker; everything below queues up behind it
    queued = {tag: asyncio.create_task(batching.decode(caller, tag, 0.05))
              for caller, tag in [("a", "a1"), ("a", "a2"), ("b", "b0"), ("c", "c0"), ("d", "d0")]}
    assert (await busy) == "a0:w"  # alone: nothing was waiting when it came
    answers = {tag: await task for tag, task in queued.items()}
    # First batch: the next utterance of a, b and c (one per caller); then d's and a's second.
    assert [answers[t] for t in ("a1", "b0", "c0")] == ["a1:batch3", "b0:batch3", "c0:batch3"]
    assert [answers[t] for t in ("d0", "a2")] == ["d0:batch2", "a2:batch2"]
    assert batching.batches == 2 and batching.waiting == 0


async def test_a_batch_holds_only_utterances_of_the_same_window(batching: DecoderPool) -> None:
    busy = asyncio.create_task(batching.decode("a", "a0", 0.3))
    await asyncio.sleep(0.1)
    short = [asyncio.create_task(batching.decode(c, f"{c}0", 0.05)) for c in ("b", "c")]
    long = asyncio.create_task(batching.decode("d", "long0", 0.05))
    await busy
    assert [await t for t in short] == ["b0:batch2", "c0:batch2"]
    assert (await long) == "long0:w"  # not padded into the short ones' batch; decoded next, alone


async def test_one_bad_utterance_in_a_batch_costs_only_its_own_answer(batching: DecoderPool) -> None:
    busy = asyncio.create_task(batching.decode("a", "a0", 0.3))
    await asyncio.sleep(0.1)
    good = asyncio.create_task(batching.decode("b", "b0", 0.0))
    bad = asyncio.create_task(batching.decode("c", "bad0", 0.0))
    await busy
    assert (await good) == "b0:w"  # the batch failed; each went again alone
    assert (await bad).startswith("bad0")  # alone, the plain decode takes it


async def test_an_utterance_that_waited_too_long_is_shed_and_the_wait_is_on_record() -> None:
    pool = DecoderPool("test", 1, pool_jobs.sleep_then_echo, pool_jobs.start_worker, ("w",), max_wait_s=0.2)
    waits: list[tuple[str, float]] = []
    pool.queue.observer = lambda name, ms: waits.append((name, ms))
    try:
        await pool.warm_up("warm", 0.0)
        busy = asyncio.create_task(pool.decode("a", "a0", 0.5))
        await asyncio.sleep(0.05)
        late = asyncio.create_task(pool.decode("b", "b0", 0.0))
        await asyncio.sleep(0.1)
        assert (pool.queue.waiting, pool.queue.running) == (1, 1)
        assert await busy == "a0:w"
        with pytest.raises(SttOverloaded, match="waited over 200 ms"):
            await late
        assert pool.shed == 1 and pool.queue.waiting == 0 and pool.queue.running == 0
        assert [name for name, _ in waits] == ["test"] and waits[0][1] < 100  # a0 was taken at once
    finally:
        await pool.aclose()


async def test_a_callers_waiting_utterances_are_withdrawn_and_one_being_decoded_finishes(
        pool: DecoderPool) -> None:
    running = asyncio.create_task(pool.decode("a", "a0", 0.3))
    await asyncio.sleep(0.05)  # a0 is with the worker
    waiting = [asyncio.create_task(pool.decode("a", f"a{i}", 0.0)) for i in (1, 2)]
    other = asyncio.create_task(pool.decode("b", "b0", 0.0))
    await asyncio.sleep(0)
    assert pool.withdraw("a") == 2 and pool.withdrawn == 2
    assert pool.waiting == 1  # b0 keeps its place
    for task in waiting:
        with pytest.raises(SttSuperseded):
            await task
    assert (await running).startswith("a0:")
    assert (await other).startswith("b0:")
    assert pool.withdraw("a") == 0 and pool.waiting == 0


class TurnEngine:
    """A whole-turn engine on a real pool whose worker echoes how many bytes it heard, slowly: the test
    controls when the pool is busy."""

    name = "turns"
    min_utterance_ms = 0
    max_utterance_s = 30
    whole_turn = True

    def __init__(self, pool: DecoderPool) -> None:
        self.pool = pool

    async def transcribe(self, pcm: bytes, sample_rate: int, caller: object | None = None) -> str:
        return str(await self.pool.decode(caller, f"{len(pcm)}bytes", 0.2))

    def withdraw(self, caller: object) -> int:
        return self.pool.withdraw(caller)


async def test_on_a_busy_node_a_fragment_still_waiting_is_replaced_by_the_whole_turns_decode(
        pool: DecoderPool) -> None:
    engine = TurnEngine(pool)
    busy = asyncio.create_task(pool.decode("someone else", "busy", 0.5))
    await asyncio.sleep(0.05)
    stream = UtteranceStream(engine, 8000)
    for _ in range(3):  # three pauses inside one turn, each ending an utterance of 20 ms
        stream.push(bytes(320))
        stream.end_of_speech()
        await asyncio.sleep(0)
    finals = []
    async for transcript in stream.results():
        finals.append(transcript)
        if len(finals) == 3:
            break
    await busy
    assert [t.superseded for t in finals] == [True, True, False]
    assert finals[-1].text.startswith("960bytes") and finals[-1].whole_turn  # the whole turn, decoded once
    assert pool.withdrawn == 2
    await stream.aclose()


async def test_on_an_idle_node_every_pause_is_decoded_at_once(pool: DecoderPool) -> None:
    stream = UtteranceStream(TurnEngine(pool), 8000)
    texts = []
    for _ in range(2):
        stream.push(bytes(320))
        stream.end_of_speech()
        texts.append((await anext(stream.results())).text.split(":")[0])
    assert texts == ["320bytes", "640bytes"] and pool.withdrawn == 0
    await stream.aclose()
