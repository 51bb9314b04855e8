"""The end-of-turn policy: the words' cues, the graded hold, dynamic endpointing, the text rules, and how the
turn owner applies them (internal/turn/owner.py, driven here through its input methods with a recording
reply side; the pipeline tests run the same owner with the real Responder)."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

from voicegate.internal.event_envelope import Event
from voicegate.internal.llm.base import Turn
from voicegate.internal.stt.base import Transcript
from voicegate.internal.turn.events import OverlapEvent
from voicegate.internal.turn.fusion import FEATURES, TurnFusion, shared_fusion
from voicegate.internal.turn.owner import TurnOwner, TurnSettings
from voicegate.internal.turn.pauses import MIN_CEILING_MS, PAUSE_MARGIN_MS, CallerPauses, hold_ceiling_ms
from voicegate.internal.turn.pending import Release, TurnTimes
from voicegate.internal.turn.policy import (
    SURE_GOES_ON_P,
    TURN_MERGE_INCOMPLETE_MS,
    TURN_MERGE_MAX_MS,
    VERDICT_WAIT_MS,
    asks_model,
    asks_model_early,
    fused_wait_ms,
    hold_ms,
    text_rule_wait_ms,
    verdict_threshold,
)
from voicegate.internal.turn.text_cues import opens_lead_in, text_cues


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


def test_the_all_or_nothing_hold_the_benchmark_compares_with() -> None:
    assert fused_wait_ms(0.45, threshold=0.5, max_wait_ms=2000, since_silence_ms=0) == 2000.0
    assert fused_wait_ms(0.0, threshold=0.5, max_wait_ms=2000, since_silence_ms=300) == 1700.0  # from the silence
    assert fused_wait_ms(0.0, threshold=0.5, max_wait_ms=2000, since_silence_ms=2500) == 0.0


@pytest.mark.parametrize(("probability", "ceiling", "expected"), [
    (0.9, 2000, 0.0),  # at or above the threshold: at once
    (0.75, 2000, 0.0),
    (0.74, 2000, 2000.0),  # unsure, nothing known of this caller: the longest hold
    (0.74, 900, 900.0),  # unsure, a caller whose inner pauses are short: their ceiling
    (SURE_GOES_ON_P - 0.01, 900, 2000.0),  # the words say it goes on: the longest hold whatever the caller
])
def test_the_hold_follows_the_verdict_and_this_callers_pauses(probability: float, ceiling: float,
                                                              expected: float) -> None:
    assert hold_ms(probability, threshold=0.75, max_wait_ms=2000, caller_ceiling_ms=ceiling,
                   since_silence_ms=0) == expected


def test_the_hold_is_counted_from_the_silence() -> None:
    assert hold_ms(0.5, threshold=0.75, max_wait_ms=2000, caller_ceiling_ms=2000, since_silence_ms=500) == 1500.0
    assert hold_ms(0.5, threshold=0.75, max_wait_ms=2000, caller_ceiling_ms=2000, since_silence_ms=2500) == 0.0


def test_dynamic_endpointing_follows_this_callers_own_pauses() -> None:
    assert hold_ceiling_ms([], 2000) == 2000  # nothing known: the configured longest hold
    assert hold_ceiling_ms([400.0], 2000) == 2000  # one pause is an anecdote
    assert hold_ceiling_ms([700.0, 650.0], 2000) == 700 + PAUSE_MARGIN_MS
    assert hold_ceiling_ms([350.0, 320.0], 2000) == MIN_CEILING_MS  # never below a breath
    assert hold_ceiling_ms([1900.0, 400.0], 2000) == 2000  # a caller who pauses long keeps the long hold
    pauses = CallerPauses()
    for gap in (5000.0, 150.0, 450.0, 380.0):  # a 5 s silence was not an inner pause; nor a word gap
        pauses.went_on_after(gap)
    assert list(pauses.pauses) == [450.0, 380.0]


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
    """Smart Turn's logit plus a strong veto for dangling words: enough to drive the owner."""
    weights = [0.0] * len(FEATURES)
    weights[FEATURES.index("audio_logit")] = 1.0
    weights[FEATURES.index("dangling")] = -6.0
    text_only = [0.0] * len(FEATURES)
    text_only[FEATURES.index("bias")] = 1.0
    text_only[FEATURES.index("dangling")] = -6.0
    return TurnFusion(tuple(weights), tuple(text_only))


class Replies:
    """The reply side as the owner sees it, recording what it was told."""

    def __init__(self) -> None:
        self.released: list[tuple[str, Release | None]] = []
        self.prepared: list[str] = []
        self.event = asyncio.Event()
        self.active = False
        self.audible = False
        self.paused = False
        self.calls: list[str] = []
        self.emitted: list[Event] = []

    def absorbable(self) -> bool:
        return bool(self.released)

    def prepare(self, text: str, confidence: float | None, times: TurnTimes) -> None:
        self.prepared.append(text)

    def release(self, turn: Turn, confidence: float | None, times: TurnTimes, why: Release | None = None) -> None:
        self.released.append((turn.text or turn.dtmf, why))
        self.event.set()

    def hold(self) -> None:
        self.calls.append("hold")

    def resume(self) -> None:
        self.calls.append("resume")

    def absorb(self) -> bool:
        self.calls.append("absorb")
        return True

    def interrupt(self, reason: str) -> None:
        self.calls.append("interrupt")

    def duck(self, ducked: bool) -> None:
        return None

    def pause(self) -> None:
        self.paused = True
        self.calls.append("pause")

    def false_alarm(self) -> tuple[Literal["resumed", "played_on"], str] | None:
        self.calls.append(f"false_alarm:{'resume' if self.paused else 'play_on'}")
        resumed, self.paused = self.paused, False
        return ("resumed", "") if resumed else ("played_on", "")

    def emit(self, event: Event) -> None:
        """The owner's own events (it is given this fake as its sink too): an overlap names the kind of sound
        in the false alarm it reports."""
        self.emitted.append(event)
        if isinstance(event, OverlapEvent) and self.calls and self.calls[-1].startswith("false_alarm:"):
            self.calls[-1] = f"false_alarm:{event.kind}:{self.calls[-1].split(':', 1)[1]}"

    def not_understood(self) -> None:
        self.calls.append("not_understood")

    def too_busy(self) -> None:
        self.calls.append("too_busy")

    def stage(self, name: str, ms: float) -> None:
        return None

    @property
    def texts(self) -> list[str]:
        return [text for text, _ in self.released]


class Profile:
    onset_frames = 3
    offset_frames = 6


class Line:
    snr_db: float | None = None
    profile = Profile()


class Model:
    """An end-of-turn model whose answers the test gives (one per question, in order)."""

    def __init__(self) -> None:
        self.questions: asyncio.Queue[asyncio.Future[float | None]] = asyncio.Queue()

    async def predict(self, pcm: bytes, sample_rate: int) -> float | None:
        answer: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        self.questions.put_nowait(answer)
        return await answer

    async def answer(self, probability: float | None) -> None:
        (await asyncio.wait_for(self.questions.get(), 1.0)).set_result(probability)


def owner(max_wait_ms: int = 20000, *, model: Model | None = None, fusion: TurnFusion | None = None,
          merge_ms: int = 350, quiet_ms: int = 5000, adaptive: bool = False) -> tuple[TurnOwner, Replies]:
    replies = Replies()
    settings = TurnSettings(merge_ms, quiet_ms, max_wait_ms, 0.5, True, 700, 120, early_verdict=True,
                            adaptive_hold=adaptive)
    turn = TurnOwner(settings, replies, Line(), 8000, model=model, fusion=fusion, events=replies)
    return turn, replies


def say(turn: TurnOwner, frames: int = 30) -> None:
    """An utterance of `frames` voiced 20 ms frames, then its end (a final is owed)."""
    turn.speech_started(0)
    for _ in range(frames):
        turn.audio(b"\0" * 320, True)
    turn.speech_ended(final_owed=True)


def final(turn: TurnOwner, text: str, whole: bool = True) -> None:
    turn.transcript(Transcript(text, final=True, whole_turn=whole))


async def test_a_finished_turn_is_released_on_the_verdict_asked_beside_the_decode() -> None:
    model = Model()
    turn, replies = owner(model=model, fusion=stub_fusion())  # the text rules alone would wait 5 s
    say(turn)
    await model.answer(0.9)  # the model answered before the words came: it was asked at the silence
    await asyncio.sleep(0.01)
    assert not replies.released  # the words are still owed
    final(turn, "Can you check my parcel?")
    await asyncio.wait_for(replies.event.wait(), 2.0)
    assert replies.texts == ["Can you check my parcel?"]
    why = replies.released[0][1]
    assert why is not None and why.reason == "verdict" and why.probability == pytest.approx(0.9, abs=0.01)
    assert turn.probability is not None and turn.probability > 0.5
    assert replies.prepared[0] == "Can you check my parcel?"  # the reply started the moment the words existed


async def test_a_dangling_word_holds_the_turn_however_finished_it_sounds_and_merges_what_follows() -> None:
    model = Model()
    turn, replies = owner(model=model, fusion=stub_fusion())
    say(turn)
    final(turn, "I'd like to book a table for")
    await model.answer(0.95)
    await asyncio.sleep(0.3)
    assert not replies.released
    say(turn)  # the caller goes on; the first silence's question is moot
    final(turn, "I'd like to book a table for four people.")
    await model.answer(0.8)
    await asyncio.wait_for(replies.event.wait(), 2.0)
    assert replies.texts == ["I'd like to book a table for four people."]


async def test_a_verdict_about_an_earlier_silence_is_ignored() -> None:
    model = Model()
    turn, replies = owner(model=model, fusion=stub_fusion())
    say(turn)
    first = await asyncio.wait_for(model.questions.get(), 1.0)
    say(turn)  # spoke again before the first answer came
    second = await asyncio.wait_for(model.questions.get(), 1.0)
    assert first.cancelled()  # the question about the first silence is withdrawn
    final(turn, "Can you check")
    final(turn, "Can you check my parcel?")
    await asyncio.sleep(0.05)
    assert not replies.released  # the answer about this silence is still out
    second.set_result(0.9)
    await asyncio.wait_for(replies.event.wait(), 2.0)
    assert replies.texts == ["Can you check my parcel?"]


async def test_an_unfinished_sentence_is_answered_after_the_longest_hold_for_the_hold_reason() -> None:
    model = Model()
    turn, replies = owner(max_wait_ms=400, model=model, fusion=stub_fusion())
    say(turn)
    final(turn, "I would like to")
    await model.answer(0.01)
    await asyncio.wait_for(replies.event.wait(), 3.0)
    assert replies.texts == ["I would like to"]
    why = replies.released[0][1]
    assert why is not None and why.reason == "hold"


@pytest.mark.parametrize("verdict", [None, "never"])
async def test_a_failed_or_missing_verdict_leaves_the_words_in_charge(verdict: str | None) -> None:
    model = Model()
    turn, replies = owner(model=model, fusion=stub_fusion())
    say(turn)
    final(turn, "Where is my parcel?")
    if verdict is None:
        await model.answer(None)  # the model raised: at once the text-only weights decide
        await asyncio.wait_for(replies.event.wait(), 0.5)
    else:  # the model never answered: decided when the verdict wait runs out
        await asyncio.wait_for(replies.event.wait(), 1.0 + VERDICT_WAIT_MS / 1000)
    assert replies.texts == ["Where is my parcel?"]


async def test_a_released_turn_taken_back_gathers_what_the_caller_adds() -> None:
    turn, replies = owner(fusion=stub_fusion())
    turn.speech_started(0)
    turn.speech_ended(final_owed=True)
    final(turn, "Can you send it")  # short: not asked; the text weights say finished
    await asyncio.wait_for(replies.event.wait(), 2.0)
    assert replies.texts == ["Can you send it"]
    replies.event.clear()
    turn.speech_started(0)  # right after the release: the reply is held
    assert replies.calls[-1] == "hold" and turn.continuing
    turn.speech_ended(final_owed=True)
    final(turn, "Can you send it to my office instead?")
    assert "absorb" in replies.calls
    await asyncio.wait_for(replies.event.wait(), 2.0)
    assert replies.texts == ["Can you send it", "Can you send it to my office instead?"]


async def released_then_heard() -> tuple[TurnOwner, Replies]:
    """A turn released and its reply playing (heard: active and audible)."""
    turn, replies = owner(fusion=stub_fusion())
    turn.speech_started(0)
    turn.speech_ended(final_owed=True)
    final(turn, "Can you tell me about your opening hours?")
    await asyncio.wait_for(replies.event.wait(), 2.0)
    replies.event.clear()
    replies.active = replies.audible = True
    return turn, replies


# A repeated acknowledgement: "Yes, | yes." said as the reply begins. The first "yes" holds the reply (the caller may be
# going on with the question); the second was judged apart, as words over an agent it could not hear, so a
# turn: the agent stopped and the question was answered again with "yes, yes" on it.
async def test_a_repeated_acknowledgement_right_after_a_release_plays_the_reply_on_when_the_window_closes_between(
        ) -> None:
    turn, replies = await released_then_heard()
    say(turn, 10)  # "Yes," inside the continuation window: the reply is held
    assert turn.continuing and replies.calls[-1] == "hold"
    replies.audible = False  # held: silent
    replies.absorbable = lambda: False  # type: ignore[method-assign]  # the window closes before "yes."
    say(turn, 10)
    turn.transcript(Transcript("", final=True, whole_turn=True, superseded=True))  # "Yes,": in the next decode
    final(turn, "Can you tell me about your opening hours? Yes, yes.")  # the whole turn's
    await asyncio.sleep(0.3)
    assert replies.calls[-1] == "resume" and "interrupt" not in replies.calls and "absorb" not in replies.calls
    assert replies.texts == ["Can you tell me about your opening hours?"]  # nothing more released


async def test_a_repeated_acknowledgement_right_after_a_release_plays_the_reply_on_when_a_half_is_decoded_early(
        ) -> None:
    turn, replies = await released_then_heard()
    say(turn, 10)
    replies.audible = False
    turn.speech_started(0)  # "yes." begun before the decode of "Yes," is in
    final(turn, "Can you tell me about your opening hours? Yes.")
    assert "resume" not in replies.calls  # still held: what is being said decides
    for _ in range(10):
        turn.audio(b"\0" * 320, True)
    turn.speech_ended(final_owed=True)
    final(turn, "Can you tell me about your opening hours? Yes, yes.")
    await asyncio.sleep(0.3)
    assert replies.calls[-1] == "resume" and "interrupt" not in replies.calls and "absorb" not in replies.calls
    assert replies.texts == ["Can you tell me about your opening hours?"]


async def test_an_acknowledgement_and_more_right_after_a_release_is_the_rest_of_the_turn() -> None:
    turn, replies = await released_then_heard()
    say(turn, 10)
    replies.audible = False
    turn.speech_started(0)
    final(turn, "Can you tell me about your opening hours? Yes.")
    for _ in range(30):
        turn.audio(b"\0" * 320, True)
    turn.speech_ended(final_owed=True)
    final(turn, "Can you tell me about your opening hours? Yes, and on Sunday?")
    assert "absorb" in replies.calls
    await asyncio.wait_for(replies.event.wait(), 2.0)
    assert replies.texts[-1] == "Can you tell me about your opening hours? Yes, and on Sunday?"


async def test_a_turn_waits_for_the_words_the_caller_already_said_however_late_they_come() -> None:
    # On a loaded machine recognition runs seconds behind: the first half's text is in, the second
    # half is still being decoded. Answering now would answer half the phone number.
    turn, replies = owner(max_wait_ms=300, merge_ms=50, quiet_ms=100)  # the text rules
    say(turn)
    say(turn)  # the caller spoke again and stopped; both decodes are owed
    final(turn, "My phone number is five five five.", whole=False)
    await asyncio.sleep((TURN_MERGE_MAX_MS + 500) / 1000)  # past every window and the old ceiling
    assert not replies.released
    final(turn, "One two three, four five six seven.", whole=False)
    await asyncio.wait_for(replies.event.wait(), 3.0)
    assert replies.texts == ["My phone number is five five five. One two three, four five six seven."]
    why = replies.released[0][1]
    assert why is not None and why.reason == "text_rules"


async def test_a_final_that_never_comes_releases_the_turn_when_the_recogniser_gives_up_on_it() -> None:
    turn, replies = owner(max_wait_ms=300, merge_ms=50, quiet_ms=100)
    say(turn)
    say(turn)
    final(turn, "Where is my parcel?", whole=False)
    await asyncio.sleep(0.5)
    assert not replies.released
    turn.finals_lost(1)  # what VoicePipeline._stt_timed_out does after turn_timeout_s
    await asyncio.wait_for(replies.event.wait(), 2.0)
    assert replies.texts == ["Where is my parcel?"]


async def test_a_caller_who_pauses_briefly_is_held_only_past_their_own_pauses() -> None:
    model = Model()
    turn, replies = owner(max_wait_ms=3000, model=model, fusion=stub_fusion(), adaptive=True)
    for gap in (0.35, 0.4):  # two inner pauses inside a held turn: "My order is, um, ..."
        say(turn)
        final(turn, "My order is")
        await model.answer(0.3)  # unsure (the stub's fused P is Smart Turn's): held
        await asyncio.sleep(gap)
    say(turn)
    final(turn, "My order is")
    await model.answer(0.3)  # unsure: held this caller's ceiling, not the configured 3 s
    assert len(turn.pauses.pauses) == 2 and max(turn.pauses.pauses) < 700
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(replies.event.wait(), 3.0)
    waited_ms = (asyncio.get_running_loop().time() - started) * 1000
    assert waited_ms < 1500, waited_ms  # not the configured 3 s
    assert replies.texts == ["My order is"]


async def test_the_recognisers_own_verdict_judges_the_sound_and_the_model_is_not_asked() -> None:
    """On a phone line Whisper's phone-band head scores the turn in the decode (Transcript.end_of_turn)."""
    model = Model()
    turn, replies = owner(model=model, fusion=stub_fusion())
    turn.recogniser_verdicts = True
    say(turn)
    turn.transcript(Transcript("Can you check my parcel?", final=True, whole_turn=True, end_of_turn=0.9))
    await asyncio.wait_for(replies.event.wait(), 2.0)
    assert replies.texts == ["Can you check my parcel?"]
    why = replies.released[0][1]
    assert why is not None and why.reason == "verdict"
    assert model.questions.empty()  # Smart Turn never heard this turn


async def test_a_final_without_the_recognisers_verdict_falls_back_to_the_model() -> None:
    model = Model()
    turn, replies = owner(model=model, fusion=stub_fusion())
    turn.recogniser_verdicts = True
    say(turn)
    final(turn, "Can you check my parcel?")  # no end_of_turn on it
    await model.answer(0.9)
    await asyncio.wait_for(replies.event.wait(), 2.0)
    assert replies.texts == ["Can you check my parcel?"]


@pytest.mark.parametrize(("clean", "expected"), [(1.0, 0.5), (0.0, 0.75), (0.5, 0.625)])
def test_the_heads_verdict_answers_sooner_on_a_clean_line_only(clean: float, expected: float) -> None:
    assert verdict_threshold(0.75, 0.5, clean) == pytest.approx(expected)
    assert verdict_threshold(0.5, 0.75, clean) == 0.5  # never stricter than the usual threshold


async def test_a_clean_phone_line_answers_the_heads_verdict_at_its_own_threshold() -> None:
    replies = Replies()
    settings = TurnSettings(350, 5000, 20000, 0.75, True, 700, 120, head_threshold=0.5)
    turn = TurnOwner(settings, replies, Line(), 8000, fusion=stub_fusion(), recogniser_verdicts=True,
                     events=replies)
    say(turn)  # the stub fusion's P is the head's: 0.6, between the head's threshold and the usual one
    turn.transcript(Transcript("Can you check my parcel?", final=True, whole_turn=True, end_of_turn=0.6))
    await asyncio.wait_for(replies.event.wait(), 1.0)  # not the 20 s hold
    why = replies.released[0][1]
    assert why is not None and why.reason == "verdict"


async def test_a_number_being_read_out_is_held_however_finished_the_head_hears_it() -> None:
    """ "My phone number is 555." sounds finished on the phone (the reader's comma); the words say more is
    coming, so the head's verdict does not answer it at its own threshold."""
    replies = Replies()
    settings = TurnSettings(350, 5000, 600, 0.75, True, 700, 120, head_threshold=0.55)
    turn = TurnOwner(settings, replies, Line(), 8000, fusion=shared_fusion(), recogniser_verdicts=True,
                     events=replies)
    say(turn)
    turn.transcript(Transcript("My phone number is 555.", final=True, whole_turn=True, end_of_turn=0.99))
    await asyncio.wait_for(replies.event.wait(), 2.0)
    why = replies.released[0][1]
    assert why is not None and why.reason == "hold"  # held (here the 600 ms longest hold), not at once


# ---- real callers: an interruption is a turn like any other; a lead-in waits for what it leads to ------


def judged_by_the_head(max_wait_ms: int, *, agent_speaking: bool = False) -> tuple[TurnOwner, Replies]:
    """An owner whose turns the recogniser's head judges (head threshold 0.55, usual 0.75)."""
    replies = Replies()
    replies.active = replies.audible = agent_speaking
    settings = TurnSettings(350, 5000, max_wait_ms, 0.75, True, 700, 120, head_threshold=0.55)
    turn = TurnOwner(settings, replies, Line(), 8000, fusion=stub_fusion(), recogniser_verdicts=True,
                     events=replies)
    return turn, replies


@pytest.mark.parametrize(("speech_ms", "asked"), [(100, False), (239, False), (240, True), (3000, True)])
def test_every_utterance_long_enough_to_hold_words_is_asked_for_a_verdict(speech_ms: float, asked: bool) -> None:
    assert asks_model(speech_ms) is asked


@pytest.mark.parametrize(("over_agent", "recogniser", "early"), [
    (False, False, True),  # in silence, Smart Turn hears the end beside the decode
    (True, False, False),  # over the agent, only once the words make it a turn (most are backchannels)
    (False, True, False),  # the recogniser's head comes with the words anyway
    (True, True, False),
])
def test_the_model_is_asked_beside_the_decode_only_in_silence(over_agent: bool, recogniser: bool, early: bool) -> None:
    assert asks_model_early(over_agent, recogniser) is early


@pytest.mark.parametrize(("text", "lead_in"), [
    ("Before anything else,", True),
    ("He turned sharply,", True),
    ("Unless to be rather.", True),  # a subordinate clause with no main clause yet
    ("If possible.", True),
    ("When I called yesterday", True),
    ("When does it open?", False),  # a question
    ("If you could send me the bill, that would help.", False),  # the main clause came
    ("Because I was away.", False),  # an answer to "why", not a lead-in
    ("Ten of clubs.", False),
    ("He was not an ill-disposed young man.", False),
    ("", False),
])
def test_a_lead_in_is_told_by_its_comma_or_its_opening_word(text: str, lead_in: bool) -> None:
    assert opens_lead_in(text) is lead_in


async def test_a_lead_in_that_sounds_finished_to_the_head_waits_for_the_rest() -> None:
    """A held-out call's case: "<instruction>, <the part that matters>" released at the comma with the head at 0.63
    over its 0.55 line. A lead-in keeps the usual threshold, so the comma is no end of turn."""
    turn, replies = judged_by_the_head(600)
    say(turn)
    turn.transcript(Transcript("Before you book anything,", final=True, whole_turn=True, end_of_turn=0.63))
    await asyncio.wait_for(replies.event.wait(), 2.0)
    why = replies.released[0][1]
    assert why is not None and why.reason == "hold"  # held the longest hold (600 ms here), not at the comma


async def test_the_same_words_without_a_lead_in_go_at_the_heads_threshold() -> None:
    turn, replies = judged_by_the_head(20000)
    say(turn)
    turn.transcript(Transcript("You booked it.", final=True, whole_turn=True, end_of_turn=0.63))
    await asyncio.wait_for(replies.event.wait(), 1.0)  # not the 20 s hold
    why = replies.released[0][1]
    assert why is not None and why.reason == "verdict"


async def test_an_interruption_over_the_agent_is_answered_through_the_verdict_not_the_hold() -> None:
    """A caller who talks over the agent with a real question: the agent stops, and their turn is judged by
    the recogniser's verdict like a turn in silence (it waited the whole 2 s hold before)."""
    turn, replies = judged_by_the_head(20000, agent_speaking=True)
    say(turn, frames=60)
    turn.transcript(Transcript("Which store is closest to me?", final=True, whole_turn=True, end_of_turn=0.9))
    await asyncio.wait_for(replies.event.wait(), 1.0)  # not the 20 s hold
    assert "interrupt" in replies.calls
    why = replies.released[0][1]
    assert replies.texts == ["Which store is closest to me?"]
    assert why is not None and why.reason == "verdict"


async def test_a_backchannel_over_the_agent_is_still_no_turn_with_a_verdict_asked() -> None:
    turn, replies = judged_by_the_head(600, agent_speaking=True)
    say(turn, frames=20)
    turn.transcript(Transcript("Mm-hm.", final=True, whole_turn=True, end_of_turn=0.95))
    await asyncio.sleep(0.8)  # past the longest hold
    assert not replies.released and "interrupt" not in replies.calls
