"""Pure policy functions of the turn: barge-in words, turn merging, and the VAD's frame decisions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from voicegate.internal.turn.bargein import is_backchannel, is_meaningful_interruption, listens_for_barge_in
from voicegate.internal.turn.pending import merge_text
from voicegate.internal.turn.policy import (
    TURN_MERGE_INCOMPLETE_MS,
    forced_end,
    judged_by_head,
    max_utterance_frames,
    merge_wait_ms,
)
from voicegate.internal.turn.text_cues import ends_dictation, ends_incomplete, ends_terminal
from voicegate.internal.turn.vad import (
    AdaptiveEnergyClassifier,
    VadEvent,
    VadProfile,
    VoiceActivityDetector,
    frame_level_dbfs,
)


@pytest.mark.parametrize("text", ["mm-hm", "yeah", "okay", "yeah okay", "uh huh right", "Mm hmm.", "i see"])
def test_backchannels_are_recognised(text: str) -> None:
    assert is_backchannel(text)
    assert not is_meaningful_interruption(text)


@pytest.mark.parametrize("text", ["stop", "wait a second", "no that's wrong", "what about tuesday",
                                  "okay stop", "cancel my order"])
def test_commands_and_content_interrupt(text: str) -> None:
    assert is_meaningful_interruption(text)
    assert not is_backchannel(text)


@pytest.mark.parametrize("text", ["Sure thing.", "Fair enough.", "Makes sense.", "No problem.", "Yeah, that's fine.",
                                  "I get it.", "Perfect.", "Okay, understood.", "Mhm, go ahead.", "No worries."])
def test_acknowledgement_phrases_are_backchannels(text: str) -> None:
    assert is_backchannel(text)
    assert not is_meaningful_interruption(text)


@pytest.mark.parametrize("text", ["No, that's wrong.", "Go back.", "I get it, but I want Monday.",
                                  "The thing is broken.", "No, the other problem.", "That's not fine."])
def test_a_phrases_words_alone_or_with_content_are_no_acknowledgement(text: str) -> None:
    assert not is_backchannel(text)
    assert is_meaningful_interruption(text)


def test_configured_backchannel_phrases_extend_the_vocabulary() -> None:
    assert not is_backchannel("righto")
    assert is_backchannel("righto", frozenset({"righto"}))


# An acknowledgement said again, as the recogniser spells it over the agent. The first four
# are Whisper's own decodes of "Mm-hm, mm-hm." and "Mm-hmm, mm-hmm." (Piper and espeak-ng through G.711),
# which were a content word and stopped the agent.
@pytest.mark.parametrize("text", ["Mm-mm-mm-mm-mm-mm-mm.", "Mmm, Mmm, Mmm.", "Mm-m-m-m-m-m-m-", "Mm hm Mm hm",
                                  "Yeah, yeah.", "Okay okay.", "Right, right, right.", "Mm-hmm, mm-hmm.",
                                  "Yeah-yeah.", "Uh-huh-uh-huh.", "Mm-hmm-mm-hmm", "Okay-okay-okay.", "Hmmm.",
                                  "Yeah, okay, yeah."])
def test_a_repeated_acknowledgement_is_a_backchannel(text: str) -> None:
    assert is_backchannel(text)
    assert not is_meaningful_interruption(text)


@pytest.mark.parametrize("text", ["Yeah, yeah, but wait.", "Yeah-yeah, the bill is wrong.", "Okay okay, what time?",
                                  "Mm-hmm, mm-hmm, Tuesday.", "Mama.", "Hi-hi.",
                                  "Uh-uh.", "Uh-oh."])
def test_a_repeated_acknowledgement_with_more_words_is_no_backchannel(text: str) -> None:
    assert not is_backchannel(text)
    assert is_meaningful_interruption(text)


def test_a_hum_with_filler_is_no_interruption() -> None:
    assert not is_meaningful_interruption("And mmmmmmmmmmmmmmm")  # Whisper on "Mm-hmm, mm-hmm." (espeak-ng, G.711)


def test_a_configured_phrase_repeated_is_a_backchannel() -> None:
    assert not is_backchannel("Righto-righto.")
    assert is_backchannel("Righto-righto.", frozenset({"righto"}))
    assert is_backchannel("Righto, righto, righto.", frozenset({"righto"}))


def test_turn_shape_predicates() -> None:
    assert ends_terminal("Book a table.") and ends_terminal('He said "yes!"')
    assert not ends_terminal("book a table")
    assert ends_incomplete("I want to") and ends_incomplete("my number is um")
    assert not ends_incomplete("I want to.")
    assert ends_dictation("john dot") and ends_dictation("zero four one 2") and ends_dictation("n z y")


def test_merge_wait_is_longer_when_the_caller_trails_off() -> None:
    assert merge_wait_ms("I want to book a table.", 350) == 350
    assert merge_wait_ms("I want to", 350) == TURN_MERGE_INCOMPLETE_MS
    assert merge_wait_ms("my email is john dot", 350) == TURN_MERGE_INCOMPLETE_MS
    assert merge_wait_ms("book a table", 350) == 350
    assert merge_text("I want to... um", "book a table") == "I want to... um book a table"


def tone(level_dbfs: float, frames: int, rate: int = 16000, freq: float = 300.0) -> list[bytes]:
    n = rate // 50
    amplitude = 32768 * math.sqrt(2) * 10 ** (level_dbfs / 20)
    t = np.arange(frames * n) / rate
    samples = (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.int16)
    return [samples[i * n : (i + 1) * n].tobytes() for i in range(frames)]


def noise(level_dbfs: float, frames: int, rate: int = 16000, seed: int = 1) -> list[bytes]:
    n = rate // 50
    rng = np.random.default_rng(seed)
    samples = rng.normal(0, 32768 * 10 ** (level_dbfs / 20), frames * n).clip(-32768, 32767).astype(np.int16)
    return [samples[i * n : (i + 1) * n].tobytes() for i in range(frames)]


def test_frame_level() -> None:
    (frame,) = tone(-20, 1)
    assert abs(frame_level_dbfs(frame) - (-20)) < 0.5
    assert frame_level_dbfs(bytes(640)) == -120.0


def numpy_level_dbfs(pcm: bytes) -> float:
    """The straightforward float64 computation the fast frame_level_dbfs must agree with."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    energy = float(np.dot(samples, samples)) / samples.size
    return -120.0 if energy <= 1.0 else 10.0 * math.log10(energy / 32768.0**2)


def test_frame_level_is_the_exact_rms_whatever_the_level() -> None:
    frames = [frame for db in range(-100, 1, 5) for frame in noise(db, 3, seed=db + 200)]
    frames += [bytes(320), b"\x01\x00" * 160, b"\xff\xff" * 160, b"\x00\x80" * 160, b"\xff\x7f" * 160]
    for frame in frames:
        assert frame_level_dbfs(frame) == pytest.approx(numpy_level_dbfs(frame), abs=1e-4)
    assert frame_level_dbfs(b"") == -120.0


def test_noise_floor_is_the_quietest_frame_of_the_last_75() -> None:
    # The floor is kept incrementally; it must equal the minimum over the window at every frame.
    rng = np.random.default_rng(7)
    levels = rng.choice([-80, -70, -60, -50, -40, -30, -20], size=400)
    levels[200:260] = -85  # a long quiet stretch, then louder again: the floor must climb back
    classifier = AdaptiveEnergyClassifier(9.0)
    seen: list[float] = []
    for index, db in enumerate(levels):
        (frame,) = noise(float(db), 1, rate=8000, seed=index)
        classifier.is_speech(frame)
        seen.append(classifier.level_db)
        assert classifier.floor_db == max(min(seen[-75:]), -90.0)


def run_vad(frames: list[bytes], profile: VadProfile = VadProfile(60, 300)) -> list[tuple[int, VadEvent]]:
    vad = VoiceActivityDetector(AdaptiveEnergyClassifier(9.0), profile)
    return [(i, e) for i, frame in enumerate(frames) if (e := vad.process(frame)) is not None]


def test_vad_finds_speech_in_silence_with_onset_and_offset_hysteresis() -> None:
    frames = [bytes(640)] * 20 + tone(-20, 50) + [bytes(640)] * 30
    events = run_vad(frames)
    assert [e for _, e in events] == [VadEvent.SPEECH_START, VadEvent.SPEECH_END]
    assert events[0][0] == 20 + 2  # 60 ms onset = 3 frames
    assert events[1][0] == 70 + 14  # 300 ms offset = 15 frames


def test_vad_adapts_to_a_noisy_line() -> None:
    # Loud steady noise (-35 dBFS) is not speech once learnt; speech 15 dB above it is.
    frames = noise(-35, 100) + tone(-20, 40) + noise(-35, 40, seed=2)
    events = run_vad(frames)
    assert [e for _, e in events] == [VadEvent.SPEECH_START, VadEvent.SPEECH_END]
    assert 100 <= events[0][0] <= 104


def test_vad_ignores_a_short_click() -> None:
    frames = [bytes(640)] * 20 + tone(-10, 2) + [bytes(640)] * 20
    assert run_vad(frames) == []


def test_barge_in_profile_starts_faster() -> None:
    frames = [bytes(640)] * 20 + tone(-20, 10) + [bytes(640)] * 20
    fast = run_vad(frames, VadProfile(40, 300))
    slow = run_vad(frames, VadProfile(100, 300))
    assert fast[0][0] < slow[0][0]


@pytest.mark.parametrize(("audible", "barge_in", "fast"), [
    (True, True, True),  # the caller hears the agent: their interruption must stop it at once
    (True, False, False),  # their speech never stops it: the normal onset
    (False, True, False),
    (False, False, False),
])
def test_the_barge_in_onset_only_while_the_agent_can_be_heard(audible: bool, barge_in: bool, fast: bool) -> None:
    assert listens_for_barge_in(audible, barge_in) is fast


@pytest.mark.parametrize(("max_s", "voiced", "ended"), [
    (30.0, 1499, False),
    (30.0, 1500, True),  # 30 s of voiced 20 ms frames
    (0.5, 25, True),
    (0.5, 24, False),
])
def test_an_utterance_without_a_pause_is_ended_at_max_utterance_s(max_s: float, voiced: int, ended: bool) -> None:
    assert forced_end(voiced, max_utterance_frames(max_s)) is ended


@pytest.mark.parametrize(("end_of_turn", "head", "has_head", "rate", "judged"), [
    ("smart_turn", "always", True, 16000, True),
    ("smart_turn", "always", True, 8000, True),
    ("smart_turn", "auto", True, 8000, True),  # auto: the phone band it was trained on
    ("smart_turn", "auto", True, 16000, False),
    ("smart_turn", "off", True, 8000, False),
    ("smart_turn", "always", False, 8000, False),  # a recogniser without the head (Deepgram, base.en)
    ("off", "always", True, 8000, False),  # the text rules: no sound is judged
])
def test_who_judges_the_sound_of_a_turn(end_of_turn: str, head: str, has_head: bool, rate: int, judged: bool) -> None:
    assert judged_by_head(end_of_turn, head, has_head, rate) is judged
