"""A phone-band end-of-turn head on the Whisper encoder states the recogniser computes anyway.

Smart Turn was trained on wideband speech, and a second model per decision costs CPU. Whisper already
encodes the turn's audio (the whole turn so far, re-heard at each pause) before it writes the words, and
its encoder states say a lot about how the last words sound. This head pools those states over the end
of the speech (means over the last second, the last 300 ms and the 200 ms after it: what the encoder made
of the stretch where a sentence ends or breaks off), standardises them and applies a logistic
regression: P(the caller has finished their turn), with the words, for a few microseconds of numpy.

The weights were fitted by scripts/train_phone_turn.py on turns generated here through 8 kHz G.711
(Piper joe with other seeds than the benchmark's, espeak-ng variants, speed and pitch changes, white
line noise; sentences the benchmark never uses), and the file is pinned by SHA-256 like every other
model: a changed file is refused, never half-used.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from voicegate.internal.stt.whisper_models import sha256_of

WEIGHTS_FILE = "phone_turn_weights.json"
WEIGHTS_SHA256 = "4f1bdf594dbb9b708a09190c41c1a8320686cb0e7147242525556c0c2b443b06"
HEAD_MODEL = "tiny.en"  # the Whisper model whose encoder states the head was fitted on
SAMPLES_PER_STATE = 320  # Whisper's encoder: one state per 20 ms of 16 kHz audio
# The pooling, in encoder states (20 ms) relative to the end of the audio the decode heard: (first, last)
# of each mean, concatenated in order. Training writes the same spans with the weights; a file whose
# spans differ is refused.
POOL_SPANS: tuple[tuple[int, int], ...] = ((-50, 0), (-15, 0), (0, 10))


class PhoneTurnWeightsError(Exception):
    """The head's weights are missing, not the pinned file, or not for this pooling."""


def pool_states(states: np.ndarray, audio_samples: int,
                spans: tuple[tuple[int, int], ...] = POOL_SPANS) -> np.ndarray:
    """One vector from the encoder's states (frames x width) of an utterance of `audio_samples` 16 kHz
    samples: the mean over each span around the end of the audio (clipped to the states there are)."""
    end = min(states.shape[0], math.ceil(audio_samples / SAMPLES_PER_STATE))
    parts = []
    for first, last in spans:
        low = min(max(0, end + first), states.shape[0] - 1)
        high = max(low + 1, min(states.shape[0], end + last))
        parts.append(states[low:high].astype(np.float64).mean(axis=0))
    return np.concatenate(parts)


@dataclass(frozen=True)
class PhoneTurnHead:
    """Standardise, then a logistic regression: P(turn finished) from the pooled states."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float

    def logit(self, pooled: np.ndarray) -> float:
        return float(((pooled - self.mean) / self.scale) @ self.weights + self.bias)

    def probability(self, pooled: np.ndarray) -> float:
        z = self.logit(pooled)
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def probability(pooled: np.ndarray) -> float:
    """P(turn finished) for pooled encoder states (pool_states), with the pinned weights."""
    return shared_head().probability(pooled)


def parse_weights(data: dict[str, object]) -> PhoneTurnHead:
    spans = data.get("pool_spans")
    if spans != [list(span) for span in POOL_SPANS]:
        raise PhoneTurnWeightsError(f"the weights are for pooling {spans}, not {[list(s) for s in POOL_SPANS]}")
    width = data.get("width")
    if not isinstance(width, int):
        raise PhoneTurnWeightsError("'width' must be the encoder's state width")
    size = width * len(POOL_SPANS)
    arrays = []
    for key in ("mean", "scale", "weights"):
        values = data.get(key)
        if not isinstance(values, list) or len(values) != size:
            raise PhoneTurnWeightsError(f"{key!r} must list {size} numbers")
        arrays.append(np.array(values, dtype=np.float64))
    bias = data.get("bias")
    if not isinstance(bias, (int, float)):
        raise PhoneTurnWeightsError("'bias' must be a number")
    return PhoneTurnHead(arrays[0], arrays[1], arrays[2], float(bias))


def weights_path() -> Path:
    return Path(str(resources.files("voicegate.internal.stt").joinpath(WEIGHTS_FILE)))


def load_head(path: Path, expected_sha256: str = WEIGHTS_SHA256) -> PhoneTurnHead:
    """The head from `path`, refused unless its SHA-256 is `expected_sha256`."""
    if not path.is_file():
        raise PhoneTurnWeightsError(f"{path} is missing: reinstall voicegate")
    digest = sha256_of(path)
    if digest != expected_sha256:
        raise PhoneTurnWeightsError(f"{path} has SHA-256 {digest}, not the pinned {expected_sha256}: "
                                    "restore it, or retrain with scripts/train_phone_turn.py and pin the new hash")
    return parse_weights(json.loads(path.read_text()))


@lru_cache(maxsize=1)
def shared_head() -> PhoneTurnHead:
    """The pinned weights shipped with the package (checked once per process)."""
    return load_head(weights_path())
