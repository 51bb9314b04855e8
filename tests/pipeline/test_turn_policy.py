"""The end-of-turn policy: the words' cues, the graded hold, the text rules, and how the turn buffer applies them."""

from __future__ import annotations

import asyncio

import pytest

from internal.pipeline.turns import VERDICT_WAIT_MS, PendingTurn, TurnBuffer
from internal.turn.fusion import FEATURES, TurnFusion
from internal.turn.policy import TURN_MERGE_INCOMPLETE_MS, TURN_MERGE_MAX_MS, fused_wait_ms, text_rule_wait_ms
from internal.turn.text_cues import text_cues


@pytest.mark.parametrize(("text", "cue"), [
    ("I'd like to book a table for", "dangling"),
    ("Can you send it to my", "dangling"),
    ("My number is um", "filler"),
    ("My name is", "open_verb"),
    ("I would like to know if I", "subject"),
    ("My phone number is five five five.", "dictation"),
    ("The reference is Q 7", "dictation"),
    ("Where is my parcel?", "question_mark"),
    ("Where is my parcel", "question_start"),
    ("Can I pay by card, please?", "closer"),
    ("Thank you", "closer"),
    ("Yes.", "short"),
    ("", "empty"),
])
def test_each_cue_fires_on_the_words_it_describes(text: str, cue: str) -> None:
    assert getattr(text_cues(text), cue), (text, text_cues(text))


@pytest.mark.parametrize(("text", "cue"), [
    ("What time is it?", "dangling"),  # "it" ends sentences
    ("Thank you.", "dangling"),
    ("I want to order two pizzas.", "number_tail"),  # a number inside, not at the end
    ("I live at number 12 Oak Street.", "dictation"),
    ("I need to change the delivery date.", "open_verb"),
])
def test_cues_do_not_fire_on_finished_sentences(text: str, cue: str) -> None:
    assert not getattr(text_cues(text), cue), (text, text_cues(text))


def test_a_turn_above_the_threshold_is_answered_at_once() -> None:
    assert fused_wait_ms(0.9, threshold=0.5, max_wait_ms=2000, since_silence_ms=150) == 0.0
    assert fused_wait_ms(0.5, threshold=0.5, max_wait_ms=2000, since_silence_ms=0) == 0.0


def test_a_turn_below_the_threshold_waits_for_more_up_to_max_turn_wait() -> None:
    assert fused_wait_ms(0.45, threshold=0.5, max_wait_ms=2000, since_silence_ms=0) == 2000.0
    assert fused_wait_ms(0.0, threshold=0.5, max_wait_ms=2000, since_silence_ms=300) == 1700.0  # from the silence
    assert fused_wait_ms(0.0, threshold=0.5, max_wait_ms=2000, since_silence_ms=2500) == 0.0


def rules(text: str, since_end: float | None = 0.0, since_final: float = 0.0) -> float:
    return text_rule_wait_ms(text, merge_ms=350, quiet_ms=600, since_speech_end_ms=since_end,
                             since_first_final_ms=since_final)


def test_without_a_verdict_the_text_rules_decide() -> None:
    assert rules("Where is my parcel?", since_end=0.0) == 600.0  # the quiet window
    assert rules("Where is my parcel?", since_end=700.0) == 350.0  # the merge window
    assert rules("I want to", since_end=700.0) == TURN_MERGE_INCOMPLETE_MS
    assert rules("I want to", since_end=700.0, since_final=TURN_MERGE_MAX_MS) == 0.0
    assert rules("typed", since_end=None) == 350.0  # no speech in this call yet


def stub_fusion() -> TurnFusion:
    """Smart Turn's logit plus a strong veto for dangling words: enough to drive the buffer."""
    weights = [0.0] * len(FEATURES)
    weights[FEATURES.index("audio_logit")] = 1.0
    weights[FEATURES.index("dangling")] = -6.0
    text_only = [0.0] * len(FEATURES)
    text_only[FEATURES.index("bias")] = 1.0
    text_only[FEATURES.index("dangling")] = -6.0
    return TurnFusion(tuple(weights), tuple(text_only))


class Released:
    def __init__(self) -> None:
        self.turns: list[PendingTurn] = []
        self.event = asyncio.Event()

    def __call__(self, pending: PendingTurn) -> None:
        self.turns.append(pending)
        self.event.set()


def fused_buffer(released: Released, max_wait_ms: int = 20000) -> TurnBuffer:
    return TurnBuffer(350, 5000, released, max_turn_wait_ms=max_wait_ms, fusion=stub_fusion(), threshold=0.5)


async def test_a_finished_turn_is_released_once_its_words_and_its_sound_are_in() -> None:
    released = Released()
    turns = fused_buffer(released)  # the text rules alone would wait 5 s
    silence = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("What time is it?")
    await asyncio.sleep(0.05)
    assert not released.turns  # Smart Turn is still out
    turns.set_verdict(silence, 0.9)
    await asyncio.wait_for(released.event.wait(), 2.0)
    assert [t.text for t in released.turns] == ["What time is it?"]
    assert turns.probability is not None and turns.probability > 0.5


async def test_a_dangling_word_holds_the_turn_however_finished_it_sounds_and_merges_what_follows() -> None:
    released = Released()
    turns = fused_buffer(released)
    silence = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("I'd like to book a table for")
    turns.set_verdict(silence, 0.95)
    await asyncio.sleep(0.5)
    assert not released.turns
    turns.caller_started_speaking()
    second = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("I'd like to book a table for four people.", replace=True)  # a whole-turn recogniser
    turns.set_verdict(silence, 0.1)  # a late answer about the first silence is ignored
    assert turns.verdict_pending
    turns.set_verdict(second, 0.8)
    await asyncio.wait_for(released.event.wait(), 2.0)
    assert [t.text for t in released.turns] == ["I'd like to book a table for four people."]


async def test_an_unfinished_sentence_is_answered_after_max_turn_wait() -> None:
    released = Released()
    turns = fused_buffer(released, max_wait_ms=400)
    silence = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("I would like to")
    turns.set_verdict(silence, 0.01)
    await asyncio.wait_for(released.event.wait(), 3.0)
    assert [t.text for t in released.turns] == ["I would like to"]


@pytest.mark.parametrize("verdict", [None, "never"])
async def test_a_failed_or_missing_verdict_leaves_the_words_in_charge(verdict: str | None) -> None:
    released = Released()
    turns = fused_buffer(released)
    silence = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("Where is my parcel?")
    if verdict is None:
        turns.set_verdict(silence, None)  # the model raised: at once the text-only weights decide
        await asyncio.wait_for(released.event.wait(), 0.5)
    else:  # the model never answered: decided when the verdict wait runs out
        await asyncio.wait_for(released.event.wait(), 1.0 + VERDICT_WAIT_MS / 1000)
    assert [t.text for t in released.turns] == ["Where is my parcel?"]


async def test_each_decision_is_reported_so_a_reply_can_be_prepared() -> None:
    released = Released()
    decisions: list[tuple[str, float | None]] = []
    turns = TurnBuffer(350, 5000, released, max_turn_wait_ms=20000, fusion=stub_fusion(),
                       on_decision=lambda pending, p: decisions.append((pending.text, p)))
    silence = turns.caller_stopped_speaking(verdict_expected=True)
    turns.add_final("Where is my parcel?")
    assert decisions == []  # not before the sound's verdict
    turns.set_verdict(silence, 0.2)
    assert [text for text, _ in decisions] == ["Where is my parcel?"]
    assert decisions[0][1] == pytest.approx(0.2, abs=0.01)
    turns.close()


async def test_a_released_turn_taken_back_gathers_what_the_caller_adds() -> None:
    released = Released()
    turns = fused_buffer(released)
    turns.caller_stopped_speaking(verdict_expected=False)
    turns.add_final("Can you send it")
    turns.flush()
    assert [t.text for t in released.turns] == ["Can you send it"]
    first = released.turns[0]
    turns.caller_started_speaking()
    turns.caller_stopped_speaking(verdict_expected=False)
    turns.restore(first)
    turns.add_final("to my office instead?")
    assert turns.pending is first and first.text == "Can you send it to my office instead?"
    turns.close()


async def test_a_turn_waits_for_the_words_the_caller_already_said_however_late_they_come() -> None:
    # On a loaded machine recognition runs seconds behind: the first half's text is in, the second
    # half is still being decoded. Answering now would answer half the phone number.
    released = Released()
    turns = TurnBuffer(50, 100, released, max_turn_wait_ms=300)
    turns.caller_stopped_speaking(verdict_expected=False)
    turns.add_final("My phone number is five five five.")
    turns.awaiting_final = True  # the caller spoke again and stopped; that decode is still running
    await asyncio.sleep((TURN_MERGE_MAX_MS + 500) / 1000)  # past every window and the old ceiling
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
    await asyncio.sleep(0.5)
    assert not released.turns
    turns.awaiting_final = False  # what VoicePipeline._stt_timed_out does after turn_timeout_s
    await asyncio.wait_for(released.event.wait(), 2.0)
    assert [t.text for t in released.turns] == ["Where is my parcel?"]
