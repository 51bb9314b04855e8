"""A sound over the agent: backchannel, non-speech or a real interruption (internal/turn/bargein.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.speech import telephone
from tests.turn.test_turn_policy import Line, Replies
from voicegate.internal.pipeline.playout import Playout
from voicegate.internal.stt.base import SpeechEvidence, Transcript
from voicegate.internal.turn.bargein import Overlap, OverlapKind, classify_overlap, is_question, made_up_phrase
from voicegate.internal.turn.owner import TurnOwner, TurnSettings

BACKCHANNEL, NON_SPEECH, INTERRUPTION = OverlapKind.BACKCHANNEL, OverlapKind.NON_SPEECH, OverlapKind.INTERRUPTION
CLEAR = {"no_speech_prob": 0.05, "avg_logprob": -0.3}  # Whisper's scores on words it heard clearly


@pytest.mark.parametrize(("text", "voiced_ms", "scores", "kind", "reason"), [
    # Acknowledgements play on, configured phrases included.
    ("Mm-hm.", 300, CLEAR, BACKCHANNEL, "acknowledgement words only"),
    ("Yeah, okay.", 500, CLEAR, BACKCHANNEL, "acknowledgement words only"),
    ("Right, right.", 500, {}, BACKCHANNEL, "acknowledgement words only"),
    ("All right.", 240, CLEAR, BACKCHANNEL, "acknowledgement words only"),
    ("Yeah, go on.", 600, CLEAR, BACKCHANNEL, "acknowledgement words only"),
    ("Uh.", 200, CLEAR, BACKCHANNEL, "acknowledgement words only"),
    ("Okay then.", 540, {"no_speech_prob": 0.09, "avg_logprob": -0.54}, BACKCHANNEL, "no content words"),
    # ... said twice as Whisper spelled it over the agent (espeak-ng, G.711: once judged "content words").
    ("Mm-mm-mm-mm-mm-mm-mm.", 1540, {"no_speech_prob": 0.2, "avg_logprob": -0.78}, BACKCHANNEL,
     "acknowledgement words only"),
    ("Mmm, Mmm, Mmm.", 1600, {"no_speech_prob": 0.21, "avg_logprob": -0.77}, BACKCHANNEL,
     "acknowledgement words only"),
    ("Yeah-yeah.", 600, CLEAR, BACKCHANNEL, "acknowledgement words only"),
    ("And mmmmmmmmmmmmmmm", 1240, {"no_speech_prob": 0.51, "avg_logprob": -0.75}, BACKCHANNEL, "no content words"),
    ("Yeah, yeah, but wait.", 900, CLEAR, INTERRUPTION, "a command"),
    # Nothing said: no words, a click, Whisper's stock phrases, unsure scores, more words than the voice held.
    ("", 800, {}, NON_SPEECH, "nothing recognised"),
    ("Stop.", 60, CLEAR, NON_SPEECH, "too little voice for a word"),
    ("Make sure to hit the bell icon.", 700, CLEAR, NON_SPEECH, "a phrase the recogniser makes up from noise"),
    ("And make sure to hit the bell icon.", 700, {}, NON_SPEECH, "a phrase the recogniser makes up from noise"),
    ("Thanks for watching!", 400, {}, NON_SPEECH, "a phrase the recogniser makes up from noise"),
    ("Thank you for watching!", 1580, {"no_speech_prob": 0.2, "avg_logprob": -1.08}, INTERRUPTION,
     "more voice than noise gives, words unclear"),  # espeak-ng's "Excuse me, that's too expensive."
    ("Ha ha ha.", 700, CLEAR, NON_SPEECH, "a sound written as words"),
    ("(coughing)", 500, {}, NON_SPEECH, "a sound written as words"),
    ("Thank you.", 500, CLEAR, NON_SPEECH, "a phrase the recogniser makes up from noise"),
    ("and the make chain.", 700, {"no_speech_prob": 0.03, "avg_logprob": -0.99}, NON_SPEECH,
     "the recogniser doubts it was speech"),  # Whisper on "Mm-hm."
    ("And then make some.", 620, {"no_speech_prob": 0.02, "avg_logprob": -0.75}, NON_SPEECH,
     "the recogniser doubts it was speech"),  # ... through WebRTC
    ("Sorry, what time is it?", 620, {"no_speech_prob": 0.1, "avg_logprob": -0.75}, INTERRUPTION,
     "a question"),  # the same doubt does not drop a question
    ("Which branch?", 500, {"no_speech_prob": 0.2, "avg_logprob": -1.1}, NON_SPEECH,
     "the recogniser doubts it was speech"),  # ... past Whisper's own floor it does
    ("The car.", 400, {"no_speech_prob": 0.65, "avg_logprob": -0.5}, NON_SPEECH,
     "the recogniser doubts it was speech"),
    ("Frozen water.", 400, {"no_speech_prob": 0.1, "avg_logprob": -1.4}, NON_SPEECH,
     "the recogniser doubts it was speech"),
    # ... but over a long voice the caller surely spoke: a poor decode of a real sentence still stops it.
    ("I'm not gonna have to spend more.", 1320, {"no_speech_prob": 0.3, "avg_logprob": -1.39}, INTERRUPTION,
     "content words"),
    ("And then make 10.", 400, {}, NON_SPEECH, "more words than the voice could hold"),  # Whisper on "Mm-hm"
    # Real interruptions: commands, questions (however short and fast), content.
    ("Stop.", 200, CLEAR, INTERRUPTION, "a command"),
    ("Wait, wait.", 300, {}, INTERRUPTION, "a command"),
    ("Sorry, what time?", 350, CLEAR, INTERRUPTION, "a question"),
    ("Sorry, what time is it?", 450, CLEAR, INTERRUPTION, "a question"),
    ("Excuse me, how much is that", 500, CLEAR, INTERRUPTION, "a question"),
    ("Is it open on Sunday?", 400, {"no_speech_prob": 0.3, "avg_logprob": -0.7}, INTERRUPTION, "a question"),
    ("Sorry, I need to change the date.", 1300, CLEAR, INTERRUPTION, "content words"),
    ("That's the wrong address.", 900, CLEAR, INTERRUPTION, "content words"),
])
def test_a_sound_over_the_agent_is_classified(text: str, voiced_ms: int, scores: dict[str, float],
                                              kind: OverlapKind, reason: str) -> None:
    assert classify_overlap(text, voiced_ms, **scores) == Overlap(kind, reason)


GARBLED = {"no_speech_prob": 0.26, "avg_logprob": -1.33}  # Whisper tiny.en unsure of espeak-ng through G.711


@pytest.mark.parametrize(("text", "syllables", "kind", "reason"), [
    # What the recogniser doubts but held a sentence's syllables was words it could not make out: the turn.
    ("Welcome out, Sunday.", 5, INTERRUPTION, "more than an acknowledgement, words unclear"),
    ("I'll read what was that.", 6, INTERRUPTION, "more than an acknowledgement, words unclear"),
    # ... an acknowledgement's few syllables stay doubted, and so do acknowledgement words however many.
    ("Bye.", 4, NON_SPEECH, "the recogniser doubts it was speech"),
    ("And make sure.", 2, NON_SPEECH, "the recogniser doubts it was speech"),
    ("Okay, okay, yeah, right.", 6, NON_SPEECH, "the recogniser doubts it was speech"),
    ("Welcome out, Sunday.", None, NON_SPEECH, "the recogniser doubts it was speech"),  # not counted
])
def test_a_doubted_sound_is_a_turn_only_when_it_held_a_sentences_syllables(
        text: str, syllables: int | None, kind: OverlapKind, reason: str) -> None:
    assert classify_overlap(text, 840, **GARBLED, syllables=syllables) == Overlap(kind, reason)


@pytest.mark.parametrize(("syllables", "longest_ms", "scores", "kind"), [
    (3, 700, GARBLED, INTERRUPTION),  # one stretch long enough to pause the agent
    (None, 700, GARBLED, INTERRUPTION),
    (4, 680, GARBLED, NON_SPEECH),  # ... a shorter one, or two ("Uh-huh. Okay.")
    (5, 900, {"no_speech_prob": 0.7, "avg_logprob": -0.5}, NON_SPEECH),  # the recogniser says: no speech
])
def test_a_stretch_of_voice_long_enough_to_pause_the_agent_is_a_turn(
        syllables: int | None, longest_ms: int, scores: dict[str, float], kind: OverlapKind) -> None:
    assert classify_overlap("It's not to me.", 900, **scores, syllables=syllables, longest_ms=longest_ms).kind is kind


@pytest.mark.parametrize(("text", "rise", "scores", "kind"), [
    # A garbled short sound that ended on a rise: a question the recogniser could not make out.
    ("Power me.", 1.3, GARBLED, INTERRUPTION),  # espeak-ng's "Sorry, when?" at 8 kHz
    ("Hallelujah.", 1.7, {"no_speech_prob": 0.3, "avg_logprob": -0.89}, INTERRUPTION),  # "How late?"
    ("See you next time, see you next time.", 1.1, {"no_speech_prob": 0.37, "avg_logprob": -0.78},
     INTERRUPTION),  # "Is it expensive?" as a stock phrase
    # ... a level or falling end, or none measured, leaves it doubted.
    ("Power me.", 0.9, GARBLED, NON_SPEECH),
    ("Power me.", -3.4, GARBLED, NON_SPEECH),
    ("Power me.", None, GARBLED, NON_SPEECH),
    # ... and a rise does not make acknowledgement words, or what the recogniser calls no speech, a turn.
    ("Okay, yeah.", 2.0, GARBLED, NON_SPEECH),
    ("Power me.", 2.0, {"no_speech_prob": 0.7, "avg_logprob": -1.2}, NON_SPEECH),
    ("Thank you.", 2.0, {"no_speech_prob": 0.7, "avg_logprob": -1.2}, NON_SPEECH),
])
def test_a_doubted_sound_that_ended_like_a_question_is_a_turn(
        text: str, rise: float | None, scores: dict[str, float], kind: OverlapKind) -> None:
    assert classify_overlap(text, 580, **scores, syllables=3, longest_ms=400, rise=rise).kind is kind


def test_a_clear_acknowledgement_that_rose_is_still_one() -> None:
    assert classify_overlap("Okay, yep.", 500, **CLEAR, rise=lambda: 1.7).kind is BACKCHANNEL


@pytest.mark.parametrize(("evidence", "value", "doubted_text"), [
    ("syllables", 6, "Welcome out, Sunday."),
    ("rise", 2.0, "Power me."),
])
def test_the_sound_is_measured_only_for_a_decode_the_recogniser_doubts(
        evidence: str, value: float, doubted_text: str) -> None:
    """Syllables and pitch cost CPU on the event loop: clear words never pay it."""
    asked: list[int] = []

    def measure() -> float:
        asked.append(1)
        return value

    assert classify_overlap("Sorry, what time is it?", 900, **CLEAR, **{evidence: measure}).kind is INTERRUPTION
    assert not asked
    assert classify_overlap(doubted_text, 580, **GARBLED, **{evidence: measure}).kind is INTERRUPTION
    assert asked == [1]


def test_configured_backchannel_phrases_are_backchannels() -> None:
    assert classify_overlap("Righto.", 400).kind is INTERRUPTION
    assert classify_overlap("Righto.", 400, backchannels=frozenset({"righto"})).kind is BACKCHANNEL


def test_a_doubted_hum_held_long_is_no_turn() -> None:
    """Whisper's decode of Piper's "Mmm, mmm." over the agent (G.711): one 920 ms stretch, which would be more
    than an acknowledgement holds, were its words not a hum."""
    overlap = classify_overlap("MMMMMMM", 920, no_speech_prob=0.11, avg_logprob=-1.07, longest_ms=920)
    assert overlap == Overlap(NON_SPEECH, "the recogniser doubts it was speech")


def test_only_an_interruption_takes_the_turn() -> None:
    assert Overlap(INTERRUPTION, "a question").takes_turn
    assert not Overlap(BACKCHANNEL, "").takes_turn and not Overlap(NON_SPEECH, "").takes_turn


@pytest.mark.parametrize(("text", "question"), [
    ("What time is it", True), ("Sorry, what time?", True), ("Excuse me, could you repeat", True),
    ("it is late?", True), ("I need the date", False), ("Sorry.", False), ("", False),
])
def test_questions_are_recognised_past_their_lead_ins(text: str, question: bool) -> None:
    assert is_question(text) is question


@pytest.mark.parametrize(("text", "made_up"), [
    ("Make sure to hit the bell icon.", True), ("So make sure to hit the bell icon", True),
    ("you", True), ("Thank you.", True),
    ("Thank you, but I need to change the date.", False),  # a stock phrase inside real words
    ("Could you hit the bell icon on the app for me and then check my account balance", False),
])
def test_stock_phrases_only_when_they_are_most_of_the_text(text: str, made_up: bool) -> None:
    assert made_up_phrase(text) is made_up


# ---- the turn owner applies the decision: duck, pause, stop, play on, resume -------------------------

def over_agent(window_s: float, voiced_frames: int) -> tuple[TurnOwner, Replies]:
    """An owner whose agent is audible; the caller makes a sound of `voiced_frames` 20 ms frames over it."""
    replies = Replies()
    replies.active = replies.audible = True
    settings = TurnSettings(350, 5000, 20000, 0.5, True, 700, 120, resume_after_false_interruption_s=window_s)
    turn = TurnOwner(settings, replies, Line(), 8000, events=replies)
    turn.speech_started()
    for _ in range(voiced_frames):
        turn.audio(bytes(320), True)
    turn.speech_ended(final_owed=True)
    return turn, replies


@pytest.mark.parametrize(("window_s", "frames", "text", "scores", "calls", "turn_text"), [
    # A long sound pauses the agent; its words decide: nothing said resumes, a question stops it.
    (2.0, 40, "", {}, ["pause", "false_alarm:non_speech:resume"], None),
    (2.0, 40, "Make sure to hit the bell icon.", {}, ["pause", "false_alarm:non_speech:resume"], None),
    (2.0, 40, "Uh-huh, yeah.", {}, ["pause", "false_alarm:backchannel:resume"], None),
    (2.0, 40, "Sorry, what time is it?", {}, ["pause", "interrupt"], "Sorry, what time is it?"),
    (2.0, 38, "The weather.", {"no_speech_prob": 0.7, "avg_logprob": -0.95},
     ["pause", "false_alarm:non_speech:resume"], None),
    # A short one only ducked it: it plays on, or stops for a short question.
    (2.0, 12, "Mm-hm.", {}, ["false_alarm:backchannel:play_on"], None),
    (2.0, 12, "Sorry, what time?", {}, ["interrupt"], "Sorry, what time?"),
    # Off: a long sound stops the agent as before; the words then only decide whether it is a turn.
    (0.0, 40, "", {}, ["interrupt", "false_alarm:non_speech:play_on"], None),
])
async def test_the_owner_pauses_stops_or_resumes_the_agent_as_the_words_say(
        window_s: float, frames: int, text: str, scores: dict[str, float], calls: list[str],
        turn_text: str | None) -> None:
    turn, replies = over_agent(window_s, frames)
    evidence = SpeechEvidence(**scores) if scores else None
    turn.transcript(Transcript(text, final=True, evidence=evidence))
    assert list(dict.fromkeys(replies.calls)) == calls  # (this stand-in stays active after an interrupt)
    assert (turn.pending.text if turn.pending else None) == turn_text
    turn.close()


@pytest.mark.parametrize(("said", "calls"), [
    ("What about the other option?", ["pause", "interrupt"]),
    ("Okay.", ["false_alarm:non_speech:play_on"]),  # too short to pause it: ducked, it plays on
])
async def test_the_owner_counts_the_syllables_of_what_it_heard_over_the_agent(said: str, calls: list[str]) -> None:
    """The same garbled words and doubtful scores: the caller's own sound decides (phone-line espeak-ng)."""
    replies = Replies()
    replies.active = replies.audible = True
    settings = TurnSettings(350, 5000, 20000, 0.5, True, 700, 120, resume_after_false_interruption_s=2.0)
    turn = TurnOwner(settings, replies, Line(), 8000, events=replies)
    turn.speech_started()
    audio = telephone(said)
    for at in range(0, len(audio) - 319, 320):
        frame = np.frombuffer(audio[at:at + 320], dtype=np.int16).astype(np.float64)
        turn.audio(audio[at:at + 320], bool(np.sqrt(np.mean(frame ** 2)) > 300))  # the VAD: voiced or not
    turn.speech_ended(final_owed=True)
    turn.transcript(Transcript("Welcome out, Sunday.", final=True, evidence=SpeechEvidence(**GARBLED)))
    assert list(dict.fromkeys(replies.calls)) == calls
    turn.close()


@pytest.mark.parametrize(("barge_in", "calls_while_speaking"), [
    (True, ["pause", "interrupt"]),  # the default: a long sound pauses the agent, the words stop it
    (False, []),  # off: nothing the caller says touches the agent while it speaks
])
async def test_words_over_the_agent_stop_it_only_with_barge_in_and_are_answered_after_it_without(
        barge_in: bool, calls_while_speaking: list[str]) -> None:
    replies = Replies()
    replies.active = replies.audible = True
    settings = TurnSettings(100, 100, 20000, 0.5, barge_in, 700, 120, resume_after_false_interruption_s=2.0)
    turn = TurnOwner(settings, replies, Line(), 8000, events=replies)
    turn.speech_started()
    for _ in range(60):  # 1.2 s of voice over the agent
        turn.audio(bytes(320), True)
    turn.speech_ended(final_owed=True)
    turn.transcript(Transcript("Wait, what about Tuesday?", final=True, evidence=SpeechEvidence(**CLEAR)))
    await asyncio.sleep(0.3)  # past the hold: the turn is decided
    assert replies.calls == calls_while_speaking
    if not barge_in:
        assert replies.texts == []  # not answered over the agent (a release would cancel its reply)
        replies.active = replies.audible = False  # the agent finished its reply
    await asyncio.wait_for(replies.event.wait(), 1.0)
    assert replies.texts == ["Wait, what about Tuesday?"]
    turn.close()


async def test_a_paused_agent_resumes_when_no_words_come_in_time() -> None:
    turn, replies = over_agent(0.05, 40)
    assert replies.calls == ["pause"]
    for _ in range(50):
        if len(replies.calls) > 1:
            break
        await asyncio.sleep(0.01)
    assert replies.calls == ["pause", "false_alarm:non_speech:resume"]
    # Words that come later and take the turn still stop it.
    turn.transcript(Transcript("Wait, stop.", final=True))
    assert replies.calls[-1] == "interrupt"
    turn.close()


async def test_a_paused_agent_resumes_when_the_recogniser_gives_up() -> None:
    turn, replies = over_agent(2.0, 40)
    turn.finals_lost(1)
    assert replies.calls == ["pause", "false_alarm:non_speech:resume"]
    turn.close()


# ---- the playout picks the sentence up again from its start -----------------------------------------

def test_a_sentence_cut_off_by_a_pause_plays_again_from_its_start_and_counts_as_heard_only_then() -> None:
    playout = Playout(16000)
    frame = bytes(640)
    first = playout.begin_segment("One two three four.")
    for n in range(4):
        playout.append(first, bytes([n + 1]) * 640)
    playout.end_segment(first)
    second = playout.begin_segment("Five six.")
    playout.append(second, frame * 2)
    playout.end_segment(second)
    played = [playout.pull() for _ in range(2)]
    assert playout.heard_text() == "One two"
    assert playout.rewind_sentence() == "One two three four."
    assert playout.heard_text() == ""  # what was played before the pause is not heard twice
    again = [playout.pull() for _ in range(4)]
    assert again[:2] == played and playout.heard_text() == "One two three four."


def test_a_pause_between_sentences_replays_nothing() -> None:
    playout = Playout(16000)
    first = playout.begin_segment("Done.")
    playout.append(first, bytes(640))
    playout.end_segment(first)
    playout.pull()
    assert playout.rewind_sentence() == ""
    assert playout.pull() is None and playout.heard_text() == "Done."
