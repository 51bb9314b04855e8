"""The end-of-turn policy: the model's verdict, the text rules, and how the turn buffer applies them."""

from __future__ import annotations

import asyncio

import pytest

from internal.pipeline.turns import (
    TURN_MERGE_INCOMPLETE_MS,
    TURN_MERGE_MAX_MS,
    VERDICT_WAIT_MS,
    PendingTurn,
    TurnBuffer,
    Verdict,
    release_wait_ms,
)


def wait(text: str, verdict: Verdict, since_end: float | None = 0.0, since_final: float = 0.0) -> float:
    return release_wait_ms(text, verdict, merge_ms=350, quiet_ms=600, max_turn_wait_ms=3000,
                           since_speech_end_ms=since_end, since_first_final_ms=since_final)


def test_a_complete_verdict_releases_at_once_whatever_the_words() -> None:
    assert wait("what time is it", Verdict.COMPLETE) == 0.0  # "it" would make the text rules wait 900 ms
    assert wait("my number is", Verdict.COMPLETE, since_end=0.0) == 0.0


def test_an_incomplete_verdict_waits_for_more_up_to_max_turn_wait() -> None:
    assert wait("My phone number is five five five.", Verdict.INCOMPLETE, since_end=300.0) == 2700.0
    assert wait("anything", Verdict.INCOMPLETE, since_end=3500.0) == 0.0
    # The merge ceiling of the text rules does not cut an unfinished sentence short.
    assert wait("anything", Verdict.INCOMPLETE, since_end=400.0, since_final=TURN_MERGE_MAX_MS) == 2600.0


def test_the_words_can_overrule_the_sound_both_ways() -> None:
    # It sounds finished, but no sentence ends on "for" or in the middle of a number being dictated.
    assert wait("I'd like to book a table for", Verdict.COMPLETE, since_end=300.0) == 2700.0
    assert wait("My phone number is 555.", Verdict.COMPLETE, since_end=300.0) == 2700.0
    # It sounds unfinished, but the recogniser heard a question: the text rules' short wait.
    assert wait("What is my name?", Verdict.INCOMPLETE, since_end=300.0) == 350.0
    assert wait("Can you send it to my?", Verdict.INCOMPLETE, since_end=300.0) == 2700.0  # "?" after "my"


def test_without_a_verdict_the_text_rules_decide() -> None:
    assert wait("Where is my parcel?", Verdict.NONE, since_end=0.0) == 600.0  # the quiet window
    assert wait("Where is my parcel?", Verdict.NONE, since_end=700.0) == 350.0  # the merge window
    assert wait("I want to", Verdict.NONE, since_end=700.0) == TURN_MERGE_INCOMPLETE_MS
    assert wait("I want to", Verdict.NONE, since_end=700.0, since_final=TURN_MERGE_MAX_MS) == 0.0
    assert wait("typed", Verdict.NONE, since_end=None) == 350.0  # no speech in this call yet


def test_a_pending_verdict_holds_the_turn_a_little_longer_than_the_text_rules() -> None:
    assert wait("Where is my parcel?", Verdict.PENDING, since_end=0.0) == VERDICT_WAIT_MS
    assert wait("Where is my parcel?", Verdict.PENDING, since_end=VERDICT_WAIT_MS) == 350.0


class Released:
    def __init__(self) -> None:
        self.turns: list[PendingTurn] = []
        self.event = asyncio.Event()

    def __call__(self, pending: PendingTurn) -> None:
        self.turns.append(pending)
        self.event.set()


async def settle(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def test_a_complete_verdict_releases_the_turn_once_its_words_are_in() -> None:
    released = Released()
    turns = TurnBuffer(350, 5000, released, max_turn_wait_ms=20000)  # the text rules alone would wait 5 s
    silence = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("What time is it?")
    await settle(0.05)
    assert not released.turns  # the verdict is still being computed
    turns.set_verdict(silence, True)
    await asyncio.wait_for(released.event.wait(), 2.0)
    assert [t.text for t in released.turns] == ["What time is it?"]


async def test_an_unfinished_sentence_waits_and_merges_with_what_follows() -> None:
    released = Released()
    turns = TurnBuffer(350, 100, released, max_turn_wait_ms=20000)
    silence = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("My phone number is five five five.")
    turns.set_verdict(silence, False)
    await settle(0.5)  # well past the quiet and merge windows: still held
    assert not released.turns
    turns.caller_started_speaking()
    assert turns.verdict is Verdict.NONE
    second = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("One two three, four five six seven.")
    turns.set_verdict(silence, True)  # a late answer about the first silence is ignored
    assert turns.verdict is Verdict.PENDING
    turns.set_verdict(second, True)
    await asyncio.wait_for(released.event.wait(), 2.0)
    assert [t.text for t in released.turns] == [
        "My phone number is five five five. One two three, four five six seven."]


async def test_an_unfinished_sentence_is_answered_after_max_turn_wait() -> None:
    released = Released()
    turns = TurnBuffer(350, 100, released, max_turn_wait_ms=400)
    silence = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("I would like to")
    turns.set_verdict(silence, False)
    await asyncio.wait_for(released.event.wait(), 3.0)
    assert [t.text for t in released.turns] == ["I would like to"]


@pytest.mark.parametrize("verdict", [None, "never"])
async def test_a_failed_or_missing_verdict_leaves_the_text_rules_in_charge(verdict: str | None) -> None:
    released = Released()
    turns = TurnBuffer(50, 100, released, max_turn_wait_ms=20000)
    silence = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("Where is my parcel?")
    if verdict is None:
        turns.set_verdict(silence, None)  # the model raised: at once back to the text rules
        await asyncio.wait_for(released.event.wait(), 0.5 + VERDICT_WAIT_MS / 1000)
    else:  # the model never answered: released when the verdict wait runs out
        await asyncio.wait_for(released.event.wait(), 2.0 + VERDICT_WAIT_MS / 1000)
    assert [t.text for t in released.turns] == ["Where is my parcel?"]


async def test_a_turn_waits_for_the_words_the_caller_already_said_however_late_they_come() -> None:
    # On a loaded machine recognition runs seconds behind: the first half's text is in, the second
    # half is still being decoded. Answering now would answer half the phone number.
    released = Released()
    turns = TurnBuffer(50, 100, released, max_turn_wait_ms=300)
    turns.caller_stopped_speaking(verdict_expected=False)
    turns.add_final("My phone number is five five five.")
    turns.awaiting_final = True  # the caller spoke again and stopped; that decode is still running
    await settle((TURN_MERGE_MAX_MS + 500) / 1000)  # past every window and the old ceiling
    assert not released.turns
    turns.add_final("One two three, four five six seven.")
    turns.awaiting_final = False  # the pipeline clears it when the final (or its deadline) arrives
    await asyncio.wait_for(released.event.wait(), 3.0)
    assert [t.text for t in released.turns] == [
        "My phone number is five five five. One two three, four five six seven."]


async def test_a_final_that_never_comes_releases_the_turn_when_its_deadline_clears_the_wait() -> None:
    released = Released()
    turns = TurnBuffer(50, 100, released, max_turn_wait_ms=300)
    turns.caller_stopped_speaking()
    turns.add_final("Where is my parcel?")
    turns.awaiting_final = True
    await settle(0.5)
    assert not released.turns
    turns.awaiting_final = False  # what VoicePipeline._stt_timed_out does after turn_timeout_s
    await asyncio.wait_for(released.event.wait(), 2.0)
    assert [t.text for t in released.turns] == ["Where is my parcel?"]
