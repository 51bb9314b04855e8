"""Voice activity detection: is the caller speaking in this 20 ms frame?

The energy detector tracks each call's own noise floor, because a fixed threshold that works on a
quiet headset fails on a car phone. Speech is a frame louder than the floor by `threshold_db`;
an utterance starts after `onset` speech frames and ends after `offset` quiet frames. While the
agent is speaking, the pipeline switches to a faster onset profile so barge-in feels immediate.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import numpy as np

FRAME_MS = 20
# Below this level a frame is silence whatever the floor says (digital silence, comfort noise).
ABSOLUTE_FLOOR_DBFS = -55.0
# The noise floor is the quietest frame of the last 1.5 s, and never below this.
FLOOR_WINDOW_FRAMES = 75
FLOOR_MIN_DBFS = -90.0
# Frames at the start of a call used only to learn the floor (phones often open with a click).
WARMUP_FRAMES = 5


class VadEvent(Enum):
    SPEECH_START = "speech_start"
    SPEECH_END = "speech_end"


@dataclass(frozen=True, slots=True)
class VadProfile:
    onset_ms: int
    offset_ms: int

    @property
    def onset_frames(self) -> int:
        return max(1, self.onset_ms // FRAME_MS)

    @property
    def offset_frames(self) -> int:
        return max(1, self.offset_ms // FRAME_MS)


def frame_level_dbfs(pcm: bytes) -> float:
    """RMS level of PCM16 samples in dB relative to full scale (-inf for digital silence -> -120)."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
    if samples.size == 0:
        return -120.0
    energy = float(np.dot(samples, samples)) / samples.size
    if energy <= 1.0:
        return -120.0
    return 10.0 * math.log10(energy / (32768.0 * 32768.0))


class FrameClassifier(Protocol):
    def is_speech(self, pcm: bytes) -> bool: ...


class AdaptiveEnergyClassifier:
    """Speech = louder than this call's noise floor by `threshold_db`.

    The floor is the quietest frame of the last `FLOOR_WINDOW_FRAMES` (minimum statistics): speech
    always has pauses between words, steady noise does not, so the minimum follows the noise and not
    the voice, up when a car starts and down when it stops, without ever locking onto speech.
    """

    def __init__(self, threshold_db: float) -> None:
        self.threshold_db = threshold_db
        self.level_db = -120.0
        self._levels: deque[float] = deque(maxlen=FLOOR_WINDOW_FRAMES)

    @property
    def floor_db(self) -> float:
        return max(min(self._levels), FLOOR_MIN_DBFS) if self._levels else FLOOR_MIN_DBFS

    def is_speech(self, pcm: bytes) -> bool:
        level = frame_level_dbfs(pcm)
        self.level_db = level
        self._levels.append(level)
        if len(self._levels) <= WARMUP_FRAMES:
            return False
        return level > max(self.floor_db + self.threshold_db, ABSOLUTE_FLOOR_DBFS)


class WebRtcClassifier:
    """Google's WebRTC VAD (webrtcvad-wheels): better in babble noise, 8/16 kHz, 20 ms frames."""

    def __init__(self, sample_rate: int, aggressiveness: int = 2) -> None:
        import webrtcvad

        self._vad = webrtcvad.Vad(aggressiveness)
        self._rate = sample_rate
        self._energy = AdaptiveEnergyClassifier(6.0)

    def is_speech(self, pcm: bytes) -> bool:
        # The energy gate stops webrtcvad's known false positives on very quiet line noise.
        loud_enough = self._energy.is_speech(pcm) or frame_level_dbfs(pcm) > -35.0
        return loud_enough and bool(self._vad.is_speech(pcm, self._rate))


class VoiceActivityDetector:
    """Turns per-frame speech decisions into utterance start/end events with hysteresis."""

    def __init__(self, classifier: FrameClassifier, profile: VadProfile) -> None:
        self.classifier = classifier
        self.profile = profile
        self.speaking = False
        self.voiced = False  # the last frame itself sounded like speech (speaking includes the hangover)
        self._run = 0  # consecutive frames disagreeing with the current state

    def process(self, pcm: bytes) -> VadEvent | None:
        speech = self.classifier.is_speech(pcm)
        self.voiced = speech
        if speech == self.speaking:
            self._run = 0
            return None
        self._run += 1
        needed = self.profile.offset_frames if self.speaking else self.profile.onset_frames
        if self._run < needed:
            return None
        self._run = 0
        self.speaking = speech
        return VadEvent.SPEECH_START if speech else VadEvent.SPEECH_END

    @property
    def pending_onset_frames(self) -> int:
        """How many speech frames have been seen toward an onset (for pre-roll sizing)."""
        return 0 if self.speaking else self._run
