"""The fused end-of-turn decision as table tests: the shipped weights, the words and the sound.

These pin what the policy relies on (at the default threshold): words that go on hold a turn however
finished it sounds; a finished sentence is answered when it also sounds finished and waits when it sounds
cut off; a closing phrase needs no sound at all; on a noisy line the sound hardly counts. Smart Turn is
asked only where its answer could change the decision.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from voicegate.internal.config.sections import PipelineConfig
from voicegate.internal.turn import fusion as fusion_module
from voicegate.internal.turn.fusion import FEATURES, FusionWeightsError, parse_weights, shared_fusion

THRESHOLD = PipelineConfig().end_of_turn_threshold
CLEAN_DB, NOISY_DB = 40.0, 5.0
SURE_FINISHED, SURE_CUT_OFF = 0.98, 0.02  # what Smart Turn says of a clear case


@pytest.mark.parametrize("text", ["I'd like to book a table for", "I'd like to...", "Can I pay with", "My name is", ""])
def test_words_that_go_on_hold_the_turn_however_finished_it_sounds(text: str) -> None:
    fusion = shared_fusion()
    assert fusion.probability(SURE_FINISHED, text, CLEAN_DB) < THRESHOLD
    assert not fusion.needs_audio(text, THRESHOLD, CLEAN_DB)  # so Smart Turn is not even asked


@pytest.mark.parametrize("text", ["Can you tell me where my parcel is?", "I want to report a broken street light.",
                                  "Please cancel my subscription."])
def test_a_finished_sentence_is_answered_when_it_sounds_finished_and_waits_when_it_sounds_cut_off(text: str) -> None:
    fusion = shared_fusion()
    assert fusion.probability(SURE_FINISHED, text, CLEAN_DB) >= THRESHOLD
    assert fusion.probability(SURE_CUT_OFF, text, CLEAN_DB) < THRESHOLD
    assert fusion.needs_audio(text, THRESHOLD, CLEAN_DB)


@pytest.mark.parametrize("text", ["Thank you very much.", "Thanks a lot.", "That's everything, thanks."])
def test_thanks_and_farewells_are_answered_unless_they_sound_plainly_cut_off(text: str) -> None:
    """Said, then waited on: a caller who thanks the agent is rarely halfway through a sentence, so a
    sound Smart Turn is unsure of (what it says of most short turns) is enough."""
    assert shared_fusion().probability(0.3, text, CLEAN_DB) >= THRESHOLD


@pytest.mark.parametrize("text", ["Hello.", "Good morning.", "Good afternoon.", "Thanks.", "Yes.", "No thanks.",
                                  "What is my name?", "What time is it?", "Where is my parcel?", "Bye.",
                                  "What's the time?", "Hello again.", "What is the date today?"])
def test_a_short_whole_utterance_is_answered_at_once_however_it_sounds(text: str) -> None:
    """Greetings, thanks, bare answers and short wh-questions: a caller says them and waits. The weights
    alone held "Hello." and "What is my name?" for the longest hold even when Smart Turn was sure."""
    fusion = shared_fusion()
    assert fusion.probability(SURE_CUT_OFF, text, CLEAN_DB) >= THRESHOLD
    assert fusion.probability(None, text, CLEAN_DB) >= THRESHOLD
    assert not fusion.needs_audio(text, THRESHOLD, CLEAN_DB)


@pytest.mark.parametrize("text", ["Hello, I", "What is the", "What?", "Can I pay with it?", "Is it possible?",
                                  "What is my...", "That's everything.", "What is the code for 5?"])
def test_openings_and_longer_questions_are_not_whole_utterances(text: str) -> None:
    assert shared_fusion().probability(SURE_CUT_OFF, text, CLEAN_DB) < THRESHOLD


def test_a_short_question_in_noise_is_not_trusted_by_its_words_alone() -> None:
    """In noise the recogniser makes short questions of fragments ("Can I stay with it?")."""
    assert shared_fusion().probability(None, "What is your lead?", NOISY_DB) < THRESHOLD
    assert shared_fusion().probability(None, "Hello.", NOISY_DB) >= THRESHOLD


def test_a_closing_phrase_needs_no_sound() -> None:
    fusion = shared_fusion()
    text = "Thank you, that's all."
    assert fusion.probability(SURE_CUT_OFF, text, CLEAN_DB) >= THRESHOLD
    assert not fusion.needs_audio(text, THRESHOLD, CLEAN_DB)


@pytest.mark.parametrize("text", ["Where is my parcel?", "My phone number is 555.", "Can I pay by card?"])
def test_on_a_noisy_line_the_sound_counts_for_little_and_is_not_asked(text: str) -> None:
    fusion = shared_fusion()
    swing = fusion.probability(SURE_FINISHED, text, NOISY_DB) - fusion.probability(SURE_CUT_OFF, text, NOISY_DB)
    assert abs(swing) < 0.1
    assert not fusion.needs_audio(text, THRESHOLD, NOISY_DB)


@pytest.mark.parametrize("text", ["Where is my parcel?", "I'd like to book a table for", "My phone number is 555."])
def test_a_more_finished_sound_never_lowers_the_probability_on_a_clean_line(text: str) -> None:
    fusion = shared_fusion()
    values = [fusion.probability(p, text, CLEAN_DB) for p in (0.02, 0.2, 0.5, 0.8, 0.98)]
    assert values == sorted(values)


def test_weights_for_other_features_are_refused() -> None:
    data = json.loads(fusion_module.weights_path().read_text())
    data["features"] = [*FEATURES[:-1], "something_else"]
    with pytest.raises(FusionWeightsError, match="features"):
        parse_weights(data)


def test_a_changed_weights_file_is_refused_with_its_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.loads(fusion_module.weights_path().read_text())
    data["with_audio"][0] += 1.0
    changed = tmp_path / "fusion_weights.json"
    changed.write_text(json.dumps(data))
    monkeypatch.setattr(fusion_module, "weights_path", lambda: changed)
    shared_fusion.cache_clear()
    try:
        with pytest.raises(FusionWeightsError, match="SHA-256"):
            shared_fusion()
    finally:
        shared_fusion.cache_clear()
