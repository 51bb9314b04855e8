"""Syllables counted from loudness alone (internal/audio/syllables.py): what tells a garbled acknowledgement
from a garbled question over the agent."""

from __future__ import annotations

import numpy as np
import pytest

from tests.speech import silence, telephone
from voicegate.internal.audio.syllables import syllable_nuclei


def vowels(count: int, rate: int, vowel_ms: int = 160, gap_ms: int = 90) -> bytes:
    """`count` vowel-like bursts (a 180 Hz voice with its harmonics, rising and falling), gaps between."""
    n = rate * vowel_ms // 1000
    t = np.arange(n) / rate
    voice = sum(np.sin(2 * np.pi * 180 * k * t) / k for k in range(1, 12)) * np.hanning(n)
    burst = (voice / np.max(np.abs(voice)) * 8000).astype(np.int16).tobytes()
    return silence(200, rate) + (burst + silence(gap_ms, rate)) * count + silence(200, rate)


@pytest.mark.parametrize("rate", [8000, 16000])
@pytest.mark.parametrize("count", [1, 2, 4, 6])
def test_each_vowel_is_one_nucleus(count: int, rate: int) -> None:
    assert syllable_nuclei(vowels(count, rate), rate) == count


def test_silence_and_a_steady_hum_hold_none_or_one() -> None:
    assert syllable_nuclei(silence(1000, 8000), 8000) == 0
    assert syllable_nuclei(b"", 8000) == 0
    assert syllable_nuclei(vowels(1, 8000, vowel_ms=900), 8000) == 1


@pytest.mark.parametrize("text", ["Uh-huh.", "Yeah.", "Okay.", "Right, sure."])
def test_acknowledgements_on_a_phone_line_hold_fewer_than_a_sentence(text: str) -> None:
    assert 1 <= syllable_nuclei(telephone(text), 8000) <= 4


@pytest.mark.parametrize("text", ["Could you say that one more time?", "What about the other option?"])
def test_a_short_sentence_on_a_phone_line_holds_five_or_more(text: str) -> None:
    assert syllable_nuclei(telephone(text), 8000) >= 5
