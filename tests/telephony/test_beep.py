"""The voicemail beep: a steady tone found frame by frame, and speech that is not one."""

from __future__ import annotations

import numpy as np
import pytest

from tests.speech import neural, speak, tone
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.telephony.beep import Beep, BeepDetector

FRAME = 320


def frames(pcm: bytes) -> list[bytes]:
    return [pcm[i:i + FRAME] for i in range(0, len(pcm) - FRAME + 1, FRAME)]


def beeps_in(pcm: bytes) -> list[Beep]:
    detector = BeepDetector(8000)
    found = [beep for frame in frames(ulaw_decode(ulaw_encode(pcm))) if (beep := detector.feed(frame))]
    return found


def noise(ms: int, dbfs: float = -55.0, seed: int = 1) -> bytes:
    samples = np.random.default_rng(seed).normal(0.0, 32768 * 10 ** (dbfs / 20), 8 * ms)
    return samples.astype(np.int16).tobytes()


@pytest.mark.parametrize("hz", [440.0, 850.0, 1000.0, 1400.0, 1412.0, 2000.0])
def test_a_beep_is_found_with_its_pitch_and_end(hz: float) -> None:
    pcm = noise(500) + tone(400, 8000, -18.0, hz) + noise(600)
    (beep,) = beeps_in(pcm)
    assert abs(beep.start_ms - 500) <= 40 and abs(beep.end_ms - 900) <= 40
    assert abs(beep.hz - hz) <= 25


def test_too_short_or_too_long_tones_are_no_beep() -> None:
    assert beeps_in(noise(300) + tone(60, 8000, -18.0, 1000.0) + noise(300)) == []
    assert beeps_in(noise(300) + tone(4000, 8000, -18.0, 1100.0) + noise(300)) == []  # a fax tone


def test_speech_in_two_voices_has_no_beep_in_it() -> None:
    lines = ["Hello?", "Hi, you've reached Sam. Please leave a message after the tone.",
             "Hi, this is Sam speaking, how can I help?"]
    for pcm in [speak(text, 8000) for text in lines] + neural(lines, 8000):
        assert beeps_in(noise(200) + pcm + noise(200)) == []
