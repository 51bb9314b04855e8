"""Consent policy: what a caller's words and keys mean, and where doubt falls (on not recording)."""

from __future__ import annotations

import pytest

from voicegate.internal.config.recording import RecordingConfig
from voicegate.internal.recording.call import ConsentedRecording
from voicegate.internal.recording.consent import ConsentState, keyed_answer, opts_out, spoken_answer
from voicegate.internal.recording.objection import asks_to_stop_recording
from voicegate.internal.recording.recorder import CallRecorder


@pytest.mark.parametrize(("text", "answer"), [
    ("Yes.", "yes"), ("Yeah, sure, go ahead.", "yes"), ("Yes, you may record.", "yes"),
    ("I don't mind.", "yes"), ("No problem.", "yes"), ("That's fine", "yes"),
    ("No.", "no"), ("No, please don't.", "no"), ("I'd rather not.", "no"), ("Nope", "no"),
    ("Yes... no, wait.", "no"),  # both: not a yes
    ("I know the answer", None),  # "no" is not inside "know"
    ("Hi, I'm calling about my bill.", None), ("", None),
])
def test_spoken_answers_match_whole_words_and_a_longer_phrase_wins(text: str, answer: str | None) -> None:
    assert spoken_answer(text, RecordingConfig()) == answer


def test_keys_answer_with_the_configured_keys_only() -> None:
    config = RecordingConfig(yes_key="1", no_key="2")
    assert keyed_answer("1", config) == "yes" and keyed_answer("2", config) == "no"
    assert keyed_answer("12", config) is None and keyed_answer("3", config) is None


@pytest.mark.parametrize("text", ["Don't record this call.", "Please stop recording", "I do not want to be "
                                  "recorded", "no recording please"])
def test_opt_out_phrases(text: str) -> None:
    assert opts_out(text, RecordingConfig())


# Phrasings that are in no configured phrase list: the objection rules must catch them (held out).
OBJECTIONS = [
    "I don't want this call recorded", "I do not consent to recording", "turn off the recording",
    "I object to being recorded", "Please don't tape this.", "I'd rather you didn't record me.",
    "Switch the recording off, please.", "I withdraw my consent to the recording.", "Can you stop the tape now?",
    "I'm not okay with being recorded.", "I don't agree to this call being recorded", "Let's keep this off the record.",
    "I refuse to be recorded.", "I never agreed to be recorded.", "Cancel the recording.",
    "I wouldn't like to be recorded", "Turn the recorder off", "I am against this call being recorded",
    "I didn\u2019t agree to any recording",
]
NOT_OBJECTIONS = [
    "Is this call recorded?", "Are you recording this?", "I don't mind being recorded.", "Recording is no problem.",
    "Yes, you may record.", "I want to record a message.", "That's fine, record it.", "Hi, I'm calling about my bill.",
    "I have no objection to the recording.", "I know it's recorded", "Don't worry about it.",
]


@pytest.mark.parametrize("text", OBJECTIONS)
def test_objections_in_words_of_the_callers_own_stop_the_recording(text: str) -> None:
    config = RecordingConfig(consent="announce")
    assert not any(phrase.lower() in text.lower() for phrase in config.opt_out_phrases)  # held out
    assert opts_out(text, config)
    state = ConsentState(config)
    decision = state.spoken(text, "")
    assert (decision.outcome, decision.reply, state.recording) == ("opted_out", config.opted_out_reply, False)


@pytest.mark.parametrize("text", NOT_OBJECTIONS)
def test_questions_and_acceptances_about_recording_are_not_objections(text: str) -> None:
    assert not opts_out(text, RecordingConfig())


# Requests the objection rules leave to the model: enough for its `stop_recording` tool to act on.
REQUESTS = ["Could you get rid of the recording of this call?", "Can the recording be wiped afterwards?",
            "I would prefer you lose the recording.", "Please opt me out of the recording."]


@pytest.mark.parametrize("text", REQUESTS + OBJECTIONS)
def test_requests_about_stopping_the_recording_let_the_tool_act(text: str) -> None:
    assert asks_to_stop_recording(text)


@pytest.mark.parametrize("text", [*NOT_OBJECTIONS, "What are your opening hours?", "Please stop, that's wrong.",
                                  "Don't do that."])
def test_words_that_do_not_ask_about_stopping_the_recording_do_not_let_the_tool_act(text: str) -> None:
    assert not asks_to_stop_recording(text)


def test_the_tool_acts_on_the_callers_last_two_turns_only() -> None:
    def no_recorder(rate: int, consent: str) -> CallRecorder:
        raise AssertionError("never attached to a pipeline: no recorder starts")

    recording = ConsentedRecording(ConsentState(RecordingConfig(consent="announce")), no_recorder, "s1")
    assert recording.stop_requested() == "not_asked"  # nothing said yet
    for text in ["Could you get rid of the recording?", "Thanks.", "What time is it?"]:
        assert recording.caller_said(text) is None
    assert recording.stop_requested() == "not_asked" and recording.consent.recording  # asked three turns ago
    recording.caller_said("Yes, get rid of the recording.")
    recording.caller_said("All of it.")
    assert recording.stop_requested() == "stopped" and recording.consent.outcome == "opted_out"
    assert recording.stop_requested() == "not_recording"


def test_after_a_yes_an_objection_still_stops_it() -> None:
    state = ConsentState(RecordingConfig(consent="ask"))
    state.spoken("Yes, go ahead.", "Hello.")
    assert state.recording
    assert state.spoken("Actually, I do not consent to recording.", "").outcome == "opted_out"


def test_ask_records_only_after_a_yes_and_greets_after_the_answer() -> None:
    state = ConsentState(RecordingConfig(consent="ask"))
    assert state.opening("Hello!") == RecordingConfig().question and not state.recording and state.pending
    decision = state.spoken("Yes, go ahead.", "Hello!")
    assert decision.changed and decision.outcome == "granted" and state.recording
    assert decision.reply == f"{RecordingConfig().granted_reply} Hello!"


def test_ask_declined_by_key_two_and_an_unclear_answer_is_no_answer_that_goes_to_the_agent() -> None:
    declined = ConsentState(RecordingConfig(consent="ask"))
    assert declined.keys("2", "").outcome == "declined" and not declined.recording
    unclear = ConsentState(RecordingConfig(consent="ask"))
    decision = unclear.spoken("What are your opening hours?", "Hello!")
    assert decision.reply is None and decision.outcome == "no_answer" and not unclear.recording
    never = ConsentState(RecordingConfig(consent="ask"))
    assert never.ended() == "no_answer"


def test_announce_records_from_the_start_and_the_caller_can_opt_out_by_voice_or_key() -> None:
    state = ConsentState(RecordingConfig(consent="announce"))
    assert state.opening("Hello!").endswith("Hello!") and state.recording
    assert state.spoken("What time is it?", "").reply is None  # an ordinary turn
    decision = state.keys("*", "")
    assert decision.outcome == "opted_out" and decision.reply == RecordingConfig().opted_out_reply
    assert not state.recording
    again = ConsentState(RecordingConfig(consent="none"))
    assert again.opening("Hi") == "Hi" and again.spoken("Don't record this call.", "").outcome == "opted_out"


def test_opting_out_while_asked_is_a_no() -> None:
    state = ConsentState(RecordingConfig(consent="ask"))
    assert state.spoken("Don't record this call.", "").outcome == "declined"


def test_bad_keys_and_empty_phrases_are_refused_with_the_key_named() -> None:
    with pytest.raises(ValueError, match="one keypad key"):
        RecordingConfig(yes_key="11")
    with pytest.raises(ValueError, match="phrase is empty"):
        RecordingConfig(no_phrases=["  "])
