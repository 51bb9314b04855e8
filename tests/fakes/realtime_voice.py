"""The fake Realtime server's ears and mouth (tests/fakes/realtime_fake.py).

Ears: an energy VAD over the appended PCM (the real service's server VAD, as far as a test can tell
it apart) and Whisper through the project's own engine (tiny.en, one worker process, shared by every
fake in this test process: loading it once is most of its cost). Mouth: the pinned Piper voice through
the project's seeded renderer (internal/evals/voice.py), which caches each sentence on disk, so a
scripted reply costs Piper's CPU once per machine, not once per test. `stub` replies skip both.
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests.speech import NEURAL_CACHE
from voicegate.internal.audio.resample import resample
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.evals.voice import CallerVoice
from voicegate.internal.stt.whisper import WhisperSpeechToText

WINDOW_MS = 20
# Loud enough to be speech: far above G.711's and Opus's idle noise, well below a voice's syllables.
BASE_SPEECH_DBFS = -40.0
START_WINDOWS = 2  # 40 ms of sound before speech is said to start (a lone click is not a caller)

_whisper: WhisperSpeechToText | None = None
_voice: CallerVoice | None = None


def shared_whisper() -> WhisperSpeechToText:
    """One Whisper engine per test process (its worker starts on first use and is reused by later tests,
    whatever their event loop: the pool asks for the running loop on each decode)."""
    global _whisper
    if _whisper is None:
        # Never shed: on a loaded machine a test's turn may wait behind another's, and must still be heard.
        config = WhisperConfig(workers=1, shed_after_ms=0)
        _whisper = WhisperSpeechToText(config, Path(tempfile.mkdtemp(prefix="fake-realtime-")))
    return _whisper


def speech_dbfs(vad_threshold: float) -> float:
    """The session's `threshold` (0..1, 0.5 the API's default) as a level: higher is harder to trigger."""
    return BASE_SPEECH_DBFS + 20.0 * (vad_threshold - 0.5)


def level_dbfs(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    if not len(samples):
        return -120.0
    energy = float(np.dot(samples, samples)) / len(samples)
    return 10 * math.log10(energy / 32768**2) if energy > 0 else -120.0


@dataclass
class EnergyVad:
    """Speech start and stop over a stream of PCM16 at `rate`, in ms since the stream began."""

    rate: int
    threshold_dbfs: float = BASE_SPEECH_DBFS
    silence_ms: int = 500
    heard_ms: int = 0  # audio consumed so far (whole windows)
    speaking: bool = False
    loud_run: int = 0
    quiet_ms: int = 0
    last_loud_end_ms: int = 0
    _pending: bytearray = field(default_factory=bytearray)

    def feed(self, pcm: bytes) -> list[tuple[str, int]]:
        """("start", ms) / ("stop", ms) in order: start at the first loud window of the run, stop at the
        end of the last loud window once `silence_ms` of quiet followed it."""
        self._pending += pcm
        size = self.rate * WINDOW_MS // 1000 * 2
        events: list[tuple[str, int]] = []
        while len(self._pending) >= size:
            window = bytes(self._pending[:size])
            del self._pending[:size]
            self.heard_ms += WINDOW_MS
            if level_dbfs(window) > self.threshold_dbfs:
                self.loud_run += 1
                self.quiet_ms = 0
                self.last_loud_end_ms = self.heard_ms
                if not self.speaking and self.loud_run >= START_WINDOWS:
                    self.speaking = True
                    events.append(("start", self.heard_ms - START_WINDOWS * WINDOW_MS))
            else:
                self.loud_run = 0
                if self.speaking:
                    self.quiet_ms += WINDOW_MS
                    if self.quiet_ms >= self.silence_ms:
                        self.speaking = False
                        events.append(("stop", self.last_loud_end_ms))
        return events


def render_speech(text: str, rate: int) -> bytes:
    """PCM16 mono of the pinned Piper voice saying `text` at `rate` (blocking: run it in a thread)."""
    global _voice
    if _voice is None:
        _voice = CallerVoice(NEURAL_CACHE)
    (pcm,) = _voice.render([text], rate)
    return pcm


def stub_audio(ms: int, rate: int) -> bytes:
    """A fixed burst (a 300 Hz tone with a little noise, -20 dBFS): audible, no words, no CPU to make."""
    n = rate * ms // 1000
    t = np.arange(n) / rate
    noise = np.random.default_rng(7).normal(0, 0.05, n)
    return ((np.sin(2 * np.pi * 300 * t) + noise) * 3270).astype("<i2").tobytes()


def chunks(pcm: bytes, rate: int, chunk_ms: int) -> list[bytes]:
    size = rate * chunk_ms // 1000 * 2
    return [pcm[i : i + size] for i in range(0, len(pcm), size)] or [b""]


def word_pieces(text: str, parts: int) -> list[str]:
    """`text` cut at word boundaries into `parts` pieces (some may be empty): one per audio chunk."""
    words = re.findall(r"\S+\s*", text)
    out = []
    for index in range(parts):
        start, end = len(words) * index // parts, len(words) * (index + 1) // parts
        out.append("".join(words[start:end]))
    return out


def pcm_ms(pcm: bytes, rate: int) -> int:
    return len(pcm) * 1000 // (2 * rate)


def to_rate(pcm: bytes, source: int, target: int) -> bytes:
    return pcm if source == target else resample(pcm, source, target)
