"""Sound and words together: one probability that the caller has finished their turn.

Smart Turn hears how the last words sound (pitch, a stretched last word); the transcript says whether
they end where a sentence can end (text_cues.py). Neither is enough alone: Smart Turn hears "I need to
change | the delivery date" as finished, and the words cannot tell "the address is twelve Oak Street"
from "the address is twelve Oak Street | apartment four". A logistic model over Smart Turn's logit and
the text cues weighs them; its weights were fitted by scripts/train_turn_fusion.py on turns generated
here (Piper and espeak-ng voices, 8 kHz G.711 and 16 kHz, sentences apart from the benchmark's), and
the file is pinned by SHA-256 like every other model: a changed file is refused, never half-used.

When Smart Turn has no answer (off, busy, failed) the same cues decide through the text-only weights,
fitted on the same cases.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from voicegate.internal.stt.whisper_models import sha256_of
from voicegate.internal.turn.text_cues import TextCues, text_cues, whole_utterance

WEIGHTS_FILE = "fusion_weights.json"
WEIGHTS_SHA256 = "8f674111f192a6b0451f2f2e24af396464cf4d161a96ffe0d1083e4fb57d6704"
LOGIT_CLIP = 8.0  # Smart Turn's probabilities of 0 or 1 are not infinitely sure

# The model's inputs, in order. Training (scripts/train_turn_fusion.py) writes the same names with the
# weights, and a file whose names differ is refused.
FEATURES = ("bias", "audio_logit", "audio_logit_clean", "empty", "short", "answer_only", "terminal",
            "question_mark", "question_start", "dangling", "open_verb", "subject", "number_tail", "dictation", "closer",
            "trailing_off")
# Smart Turn was trained on clean speech; under 10 dB of noise it hears no better than chance (measured on
# the training turns), so the model weighs it by how clean the line is: 0 at 10 dB SNR, 1 from 30 dB.
CLEAN_FROM_DB, CLEAN_TO_DB = 10.0, 30.0


# The logits Smart Turn's answers span in practice (P 0.02 .. 0.98): if neither end would change the decision,
# it is not asked, and the decision is taken at the middle of that range (NOT_ASKED).
SOUND_RANGE = 4.0
NOT_ASKED = 0.5
# "Hello.", "Thanks.", "Yes.", "What is my name?": whole turns by their words alone (text_cues.whole_utterance).
# The fitted weights hold one- and two-word turns (most short fragments in the training turns were first
# halves) and overrule a confident Smart Turn on them; these are answered at once instead, and a caller
# who goes on after one is absorbed by the continuation merge.
WHOLE_UTTERANCE_P = 0.95


def cleanness(snr_db: float | None) -> float:
    """0 (noisy) .. 1 (clean) from the line's SNR; unknown counts as clean."""
    if snr_db is None:
        return 1.0
    return min(1.0, max(0.0, (snr_db - CLEAN_FROM_DB) / (CLEAN_TO_DB - CLEAN_FROM_DB)))


class FusionWeightsError(Exception):
    """The weights file is missing, not the pinned one, or does not match FEATURES."""


def logit(probability: float) -> float:
    p = min(max(probability, 1e-6), 1.0 - 1e-6)
    return max(-LOGIT_CLIP, min(LOGIT_CLIP, math.log(p / (1.0 - p))))


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def feature_vector(audio_probability: float | None, cues: TextCues, snr_db: float | None = None,
                   sound_trained_on_noise: bool = False) -> list[float]:
    """The model's inputs for one decision (the audio terms are 0 when there is no audio verdict).
    `sound_trained_on_noise`: the verdict comes from a model trained on noisy lines (the phone-band head),
    so its logit keeps full weight whatever the SNR."""
    audio = logit(audio_probability) if audio_probability is not None else 0.0
    clean = 1.0 if sound_trained_on_noise else cleanness(snr_db)
    return [
        1.0, audio, audio * clean,
        float(cues.empty), float(cues.short), float(cues.answer_only), float(cues.terminal), float(cues.question_mark),
        float(cues.question_start), float(cues.dangling), float(cues.open_verb),
        float(cues.subject), float(cues.number_tail), float(cues.dictation), float(cues.closer),
        float(cues.trailing_off),
    ]


@dataclass(frozen=True, slots=True)
class TurnFusion:
    """P(turn complete) from Smart Turn's probability (or None) and the transcript."""

    with_audio: tuple[float, ...]
    text_only: tuple[float, ...]

    def needs_audio(self, text: str, threshold: float, snr_db: float | None = None) -> bool:
        """Could Smart Turn's answer change the decision? Not when the words settle it whatever the sound
        ("a table for", "Can I pay by card, please?"), nor on a line too noisy for the sound to count: each
        verdict costs a third of a decode, and the default asks it only where it can matter."""
        if whole_utterance(text, questions=cleanness(snr_db) >= 1.0):
            return False
        low = self.probability(1.0 / (1.0 + math.exp(SOUND_RANGE)), text, snr_db)
        high = self.probability(1.0 / (1.0 + math.exp(-SOUND_RANGE)), text, snr_db)
        return low < threshold <= high

    def probability(self, audio_probability: float | None, text: str, snr_db: float | None = None,
                    sound_trained_on_noise: bool = False) -> float:
        # A short question is trusted on a clean line only: in noise the recogniser makes them of fragments.
        if whole_utterance(text, questions=cleanness(snr_db) >= 1.0):
            return WHOLE_UTTERANCE_P
        weights = self.with_audio if audio_probability is not None else self.text_only
        x = feature_vector(audio_probability, text_cues(text), snr_db, sound_trained_on_noise)
        return sigmoid(sum(w * v for w, v in zip(weights, x, strict=True)))


def parse_weights(data: dict[str, object]) -> TurnFusion:
    names = data.get("features")
    if names != list(FEATURES):
        raise FusionWeightsError(f"the weights are for features {names}, not {list(FEATURES)}")
    vectors = []
    for key in ("with_audio", "text_only"):
        values = data.get(key)
        if not isinstance(values, list) or len(values) != len(FEATURES):
            raise FusionWeightsError(f"{key!r} must list {len(FEATURES)} weights")
        vectors.append(tuple(float(v) for v in values))
    return TurnFusion(vectors[0], vectors[1])


def weights_path() -> Path:
    return Path(str(resources.files("voicegate.internal.turn").joinpath(WEIGHTS_FILE)))


@lru_cache(maxsize=1)
def shared_fusion() -> TurnFusion:
    """The pinned weights shipped with the package (checked once per process)."""
    path = weights_path()
    if not path.is_file():
        raise FusionWeightsError(f"{path} is missing: reinstall voicegate")
    digest = sha256_of(path)
    if digest != WEIGHTS_SHA256:
        raise FusionWeightsError(f"{path} has SHA-256 {digest}, not the pinned {WEIGHTS_SHA256}: "
                                 "restore it, or retrain with scripts/train_turn_fusion.py and pin the new hash")
    return parse_weights(json.loads(path.read_text()))
