"""Voice activity detection: is the caller speaking in this 20 ms frame?

The energy detector tracks each call's own noise floor, because a fixed threshold that works on a
quiet headset fails on a car phone. Speech is a frame louder than the floor by `threshold_db`;
an utterance starts after `onset` speech frames and ends after `offset` quiet frames. While the
agent is speaking, the pipeline switches to a faster onset profile so barge-in feels immediate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import numpy as np

FRAME_MS = 20
# Below this level a frame is silence whatever the floor says (digital silence, comfort noise).
ABSOLUTE_FLOOR_DBFS = -55.0
# The floor follows quieter frames quickly and louder ones slowly, so speech does not drag it up.
FLOOR_FALL = 0.3
FLOOR_RISE = 0.02
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
    """Speech = louder than this call's noise floor by `threshold_db`."""

    def __init__(self, threshold_db: float) -> None:
        self.threshold_db = threshold_db
        self.floor_db: float | None = None
        self.level_db = -120.0
        self._frames = 0

    def is_speech(self, pcm: bytes) -> bool:
        level = frame_level_dbfs(pcm)
        self.level_db = level
        self._frames += 1
        if self.floor_db is None:
            self.floor_db = max(level, -90.0)
        speech = level > max(self.floor_db + self.threshold_db, ABSOLUTE_FLOOR_DBFS) and self._frames > WARMUP_FRAMES
        if not speech:
            rate = FLOOR_FALL if level < self.floor_db else FLOOR_RISE
            self.floor_db += rate * (max(level, -90.0) - self.floor_db)
        return speech


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
        self._run = 0  # consecutive frames disagreeing with the current state

    def process(self, pcm: bytes) -> VadEvent | None:
        speech = self.classifier.is_speech(pcm)
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
