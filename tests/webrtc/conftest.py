"""Fixtures for the WebRTC transport tests: a config with loopback ICE, WAV files of espeak speech."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.speech import speak, write_wav
from tests.webrtc.harness import webrtc_config
from voicegate.internal.config import Config

WAV_RATE = 48000
# A microphone never delivers digital silence: a -60 dBFS noise floor between words. (Through Opus,
# exact zeros around an utterance made pocketsphinx lose whole phrases; a real room never has them.)
NOISE_FLOOR = 30.0


def room_noise(ms: int, seed: int = 1) -> bytes:
    samples = np.random.default_rng(seed).standard_normal(WAV_RATE * ms // 1000) * NOISE_FLOOR
    return samples.astype(np.int16).tobytes()


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return webrtc_config(tmp_path)


@pytest.fixture
def speech_wav(tmp_path: Path) -> Callable[..., Path]:
    """A 48 kHz WAV of espeak saying `text`, with a quiet room around it (what a microphone would send)."""

    def make(text: str, lead_ms: int = 800, tail_ms: int = 4000, name: str = "caller.wav") -> Path:
        pcm = room_noise(lead_ms) + speak(text, WAV_RATE) + room_noise(tail_ms, seed=2)
        return write_wav(tmp_path / name, pcm, WAV_RATE)

    return make
