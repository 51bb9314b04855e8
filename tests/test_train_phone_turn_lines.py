"""The phone-band head's training (scripts/train_phone_turn.py): the perturbations a caller's voice and line get
before the head hears them, and how a candidate head is made and chosen. Real audio: a person's recording
from tests/human_speech.py."""

from __future__ import annotations

import numpy as np
import pytest

from scripts.train_phone_turn import (
    FIRST_HEAD,
    FIRST_HEAD_SHA256,
    OPUS_SHARE,
    TrainDialogue,
    blended,
    dev_score,
    opus_line,
    training_lines,
    warped_vocal_tract,
)
from tests.human_speech import clip
from voicegate.internal.stt.phone_turn import load_head, shared_head


def centroid_hz(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples))
    return float((spectrum * np.arange(spectrum.size)).sum() / spectrum.sum() * 8000 / spectrum.size)


@pytest.fixture(scope="module")
def person() -> bytes:
    return clip("goforward").pcm16k


def test_a_shorter_vocal_tract_raises_the_spectrum_and_keeps_the_timing(person: bytes) -> None:
    shorter, longer = warped_vocal_tract(person, 1.1), warped_vocal_tract(person, 0.9)
    assert len(shorter) == len(longer) == len(person)
    assert centroid_hz(longer) < centroid_hz(person) < centroid_hz(shorter)
    assert warped_vocal_tract(person, 1.0) == person


def test_the_opus_line_keeps_the_speech_and_its_length(person: bytes) -> None:
    heard = opus_line(person)
    assert len(heard) == len(person)
    sent = np.frombuffer(person, dtype=np.int16).astype(np.float64)
    got = np.frombuffer(heard, dtype=np.int16).astype(np.float64)
    lag = max(range(0, 480, 8), key=lambda k: float(np.dot(sent[:sent.size - k], got[k:])))  # the codec's delay
    assert np.corrcoef(sent[:sent.size - lag], got[lag:])[0, 1] > 0.9
    assert heard != person  # it went through the codec


def test_each_dialogue_gets_one_reproducible_line() -> None:
    noisy = training_lines("piper-b", True, 400)
    assert noisy == training_lines("piper-b", True, 400)
    assert noisy != training_lines("piper-c", True, 400)
    assert all(rate == (16000 if noise.endswith("+opus") else 8000) for noise, rate in noisy)
    kinds = {noise.split("+")[0].rstrip("0123456789") for noise, _ in noisy}
    assert kinds == {"white", "street", "babble"}
    opus = sum(noise.endswith("+opus") for noise, _ in noisy) / len(noisy)
    assert abs(opus - OPUS_SHARE) < 0.08
    assert {noise.split("+")[0] for noise, _ in training_lines("piper-b", False, 50)} == {"none"}


def test_a_training_dialogue_is_heard_through_its_line(person: bytes) -> None:
    dialogue = TrainDialogue("complete", "Go forward ten meters.", "human", person, 1.0)
    assert len(dialogue.audio(8000, "none", 1)) == len(person) // 2  # 8 kHz G.711
    assert len(dialogue.audio(16000, "none+opus", 1)) == len(person)
    noisy = dialogue.audio(8000, "street10", 1)
    assert noisy != dialogue.audio(8000, "none", 1)
    assert noisy == dialogue.audio(8000, "street10", 1)


def test_the_dev_score_prefers_fewer_early_answers_and_a_better_ranking() -> None:
    def report(auc: float, premature: float | None) -> dict[str, object]:
        return {"by_model": {"head+text": {"auc": auc, "premature_pct_at_600ms": premature}}}

    better = {"none": report(0.95, 0.0), "babble15": report(0.9, 5.0)}
    worse = {"none": report(0.95, 10.0), "babble15": report(0.9, 5.0)}
    unreachable = {"none": report(0.99, None), "babble15": report(0.99, None)}  # 600 ms never reached
    assert dev_score(better) > dev_score(worse) > dev_score(unreachable)


def test_a_blend_of_two_heads_is_one_head_whose_logit_is_their_mean() -> None:
    first, second = load_head(FIRST_HEAD, FIRST_HEAD_SHA256), shared_head()
    mixed = blended(first, second)
    states = np.random.default_rng(7).normal(size=(6, first.weights.size)) * first.scale + first.mean
    for pooled in states:
        assert mixed.logit(pooled) == pytest.approx(0.5 * first.logit(pooled) + 0.5 * second.logit(pooled), abs=1e-9)
    assert np.array_equal(mixed.mean, second.mean) and np.array_equal(mixed.scale, second.scale)
