"""The beep an answering machine plays before it records: one steady tone, found frame by frame.

Each 20 ms frame is tested against a bank of Goertzel filters (the DFT at chosen frequencies, done as
one matrix product) from 300 to 2500 Hz: voicemail beeps sit there, most at 1000, 1400 or 2000 Hz
(some 425-480 Hz or 850-950 Hz). A frame is *tonal* when one filter holds most of the frame's energy;
speech spreads its energy over many harmonics and formants, so even a sung vowel rarely does. A beep
is a run of tonal frames at the same frequency (within one filter step either side), at a steady level,
for at least `min_ms`; it is reported once, when it ends (the recording starts then).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voicegate.internal.audio.frame import FRAME_MS

BEEP_LOW_HZ = 300.0
BEEP_HIGH_HZ = 2500.0
# A 20 ms frame at 8 kHz resolves ~50 Hz; filters every 25 Hz keep any tone within 12.5 Hz of one, where
# a rectangular window still gives the filter ~80 % of the tone's energy.
STEP_HZ = 25.0
# Share of the frame's energy in its strongest filter for the frame to count as a tone. A pure tone
# scores 0.8-1.0; speech scored at most 0.5 on the benchmark's voices (bench/sip/amd.py).
TONAL_SHARE = 0.6
# Quieter than this is no beep (line noise is not a tone worth waiting for).
MIN_LEVEL_DBFS = -45.0
# A beep holds its level; a frame more than this away from the run's first frame breaks the run.
LEVEL_SPREAD_DB = 6.0
MIN_BEEP_MS = 120  # the shortest voicemail beeps measured are ~150 ms
MAX_BEEP_MS = 3000  # a longer tone is a fax or a ringback, not a beep
FILTER_SLACK = 1  # a beep may drift one filter step between frames (leakage near a bin edge)


@dataclass(frozen=True, slots=True)
class Beep:
    """A beep that has ended: when it started and ended (ms from the detector's start) and its pitch."""

    start_ms: int
    end_ms: int
    hz: float

    @property
    def length_ms(self) -> int:
        return self.end_ms - self.start_ms


class FilterBank:
    """The Goertzel bank for one sample rate: `share(pcm)` -> (strongest filter, its share, level dBFS)."""

    def __init__(self, sample_rate: int = 8000) -> None:
        self.sample_rate = sample_rate
        samples = sample_rate * FRAME_MS // 1000
        self.frequencies = np.arange(BEEP_LOW_HZ, min(BEEP_HIGH_HZ, sample_rate / 2 - STEP_HZ) + 1, STEP_HZ)
        t = np.arange(samples) / sample_rate
        phase = 2.0 * np.pi * np.outer(self.frequencies, t)
        self._cos, self._sin = np.cos(phase), np.sin(phase)
        self._samples = samples

    def strongest(self, pcm: bytes) -> tuple[int, float, float]:
        x = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
        if x.size != self._samples:
            return 0, 0.0, -120.0
        energy = float(np.dot(x, x))
        if energy <= x.size:  # digital silence
            return 0, 0.0, -120.0
        power = (self._cos @ x) ** 2 + (self._sin @ x) ** 2
        best = int(np.argmax(power))
        # |X(f)|^2 of a full-scale-normalised sinusoid is (A N / 2)^2 while its energy is A^2 N / 2, so
        # 2 |X|^2 / (N * energy) is 1 for a pure tone on a filter's frequency.
        share = 2.0 * float(power[best]) / (x.size * energy)
        level = 10.0 * np.log10(energy / x.size / (32768.0 * 32768.0))
        return best, share, float(level)


class BeepDetector:
    """Feed 20 ms frames; `feed` returns a Beep on the frame after one ends."""

    def __init__(self, sample_rate: int = 8000, *, min_ms: int = MIN_BEEP_MS, bank: FilterBank | None = None) -> None:
        self.bank = bank or FilterBank(sample_rate)
        self.min_frames = max(1, min_ms // FRAME_MS)
        self._frames = 0
        self._run_start = -1
        self._run_filter = -1
        self._run_level = 0.0
        self._run_length = 0
        self.in_tone = False  # inside a run of tonal frames long enough to be a beep

    def feed(self, pcm: bytes) -> Beep | None:
        index = self._frames
        self._frames += 1
        best, share, level = self.bank.strongest(pcm)
        tonal = share >= TONAL_SHARE and level >= MIN_LEVEL_DBFS
        continues = (tonal and self._run_length > 0 and abs(best - self._run_filter) <= FILTER_SLACK
                     and abs(level - self._run_level) <= LEVEL_SPREAD_DB)
        if continues:
            self._run_length += 1
            self.in_tone = self._run_length >= self.min_frames
            return None
        ended = self._ended(index)
        if tonal:
            self._run_start, self._run_filter, self._run_level, self._run_length = index, best, level, 1
        else:
            self._run_length = 0
        self.in_tone = False
        return ended

    def _ended(self, index: int) -> Beep | None:
        if self._run_length < self.min_frames or self._run_length * FRAME_MS > MAX_BEEP_MS:
            return None
        return Beep(self._run_start * FRAME_MS, index * FRAME_MS, float(self.bank.frequencies[self._run_filter]))
