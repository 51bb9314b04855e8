"""Shared synthesis workers go to the sentence due first: a caller waiting in silence before a reply that
is still playing its queued audio."""

from __future__ import annotations

import asyncio

import pytest

from internal.tts.due_order import EarliestDueFirst


async def served_order(pool: EarliestDueFirst[str], dues: list[float]) -> list[int]:
    """Waiters arriving in list order with these deadlines, while the only worker is busy: who gets it."""
    busy = await pool.acquire(0.0)
    order: list[int] = []

    async def wait(index: int, due: float) -> None:
        worker = await pool.acquire(due)
        order.append(index)
        pool.release(worker)

    tasks = []
    for index, due in enumerate(dues):
        tasks.append(asyncio.create_task(wait(index, due)))
        await asyncio.sleep(0)
    pool.release(busy)
    await asyncio.gather(*tasks)
    return order


async def test_a_first_sentence_due_now_goes_before_later_sentences_queued_earlier() -> None:
    assert await served_order(EarliestDueFirst(["w"]), [13.0, 12.5, 10.0]) == [2, 1, 0]


async def test_equal_deadlines_are_served_in_arrival_order() -> None:
    assert await served_order(EarliestDueFirst(["w"]), [5.0, 5.0, 5.0]) == [0, 1, 2]


async def test_a_free_worker_is_taken_at_once() -> None:
    pool = EarliestDueFirst(["a", "b"])
    assert {await pool.acquire(9.0), await pool.acquire(1.0)} == {"a", "b"}


async def test_a_waiter_that_gives_up_passes_its_place_and_any_worker_it_was_handed() -> None:
    pool = EarliestDueFirst(["w"])
    busy = await pool.acquire(0.0)
    quitter = asyncio.create_task(pool.acquire(1.0))
    patient = asyncio.create_task(pool.acquire(2.0))
    await asyncio.sleep(0)
    pool.release(busy)  # handed to the quitter, which is cancelled before it runs
    quitter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await quitter
    assert await asyncio.wait_for(patient, 1) == "w"
    assert pool.waiting == 0
