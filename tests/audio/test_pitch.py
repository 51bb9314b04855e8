"""The voice's pitch and whether a sound ended on a rise (internal/audio/pitch.py): what tells a garbled
question over the agent from a garbled acknowledgement."""

from __future__ import annotations

import numpy as np
import pytest

from tests.speech import cough, neural_telephone, silence, telephone
from voicegate.internal.audio.pitch import end_rise, pitch_track
from voicegate.internal.turn.bargein import QUESTION_RISE_ST


def voice(start_hz: float, end_hz: float, ms: int, rate: int, glide_ms: int = 250) -> bytes:
    """A voice-like tone (harmonics of a glottal pitch) held at `start_hz`, gliding to `end_hz` over its
    last `glide_ms`."""
    n = rate * ms // 1000
    glide = min(n, rate * glide_ms // 1000)
    f0 = np.full(n, start_hz)
    f0[n - glide:] = np.geomspace(start_hz, end_hz, glide)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    wave = sum(np.sin(k * phase) / k for k in range(1, 10))
    wave *= np.minimum(1.0, np.minimum(np.arange(n), n - np.arange(n)) / (0.02 * rate))  # 20 ms fades
    return silence(150, rate) + (wave / np.max(np.abs(wave)) * 8000).astype(np.int16).tobytes() + silence(150, rate)


@pytest.mark.parametrize("rate", [8000, 16000])
@pytest.mark.parametrize("hz", [110.0, 180.0, 260.0])
def test_a_steady_voice_is_tracked_at_its_pitch(hz: float, rate: int) -> None:
    track = pitch_track(voice(hz, hz, 600, rate), rate)
    voiced = track[track > 0]
    assert voiced.size >= 40
    assert abs(float(np.median(voiced)) - hz) < hz * 0.03


@pytest.mark.parametrize("rate", [8000, 16000])
def test_a_rising_end_stands_above_the_median_and_a_falling_one_below(rate: int) -> None:
    rising = end_rise(voice(150.0, 200.0, 700, rate), rate)
    falling = end_rise(voice(200.0, 150.0, 700, rate), rate)
    level = end_rise(voice(170.0, 170.0, 700, rate), rate)
    assert rising is not None and rising > 3.0  # 150 -> 200 Hz is 5 semitones
    assert falling is not None and falling < -3.0
    assert level is not None and abs(level) < 0.5


def test_silence_and_too_little_voice_have_no_melody() -> None:
    assert end_rise(b"", 8000) is None
    assert end_rise(silence(800, 8000), 8000) is None
    assert end_rise(voice(180.0, 180.0, 40, 8000), 8000) is None


def test_a_cough_ends_on_no_question() -> None:
    rise = end_rise(cough(8000), 8000)
    assert rise is None or rise < QUESTION_RISE_ST


@pytest.mark.parametrize("text", ["Is it raining?", "Are you sure?", "Can you hear me?"])
def test_a_yes_no_question_on_a_phone_line_ends_above_the_question_line(text: str) -> None:
    rise = end_rise(telephone(text), 8000)
    assert rise is not None and rise >= QUESTION_RISE_ST


@pytest.mark.parametrize("text", ["Okay, fine.", "Yeah, sure.", "Uh-huh, I see."])
def test_an_acknowledgement_on_a_phone_line_ends_below_it(text: str) -> None:
    rise = end_rise(telephone(text), 8000)
    assert rise is None or rise < QUESTION_RISE_ST


@pytest.mark.parametrize("text", ["Okay, fine.", "Yeah, sure.", "Uh-huh, I see."])
def test_another_voices_acknowledgements_stay_below_the_question_line(text: str) -> None:
    """Piper's voice, not the espeak-ng the line was measured on. (Its questions did not rise past the
    line either, "Is it raining?" 0.6 semitones: the rule finds espeak-ng's questions, and with Piper
    neither helps nor harms; docs/agent-runtime.md.)"""
    rise = end_rise(neural_telephone(text), 8000)
    assert rise is None or rise < QUESTION_RISE_ST
