"""How many syllables a short sound holds, from its loudness alone (no words needed).

Each syllable has one loud vowel: the speech band's energy rises to a peak and falls again. Counting the
peaks that stand out from the dips around them (by PROMINENCE_DB), that are not far below the loudest
(FLOOR_DB) and that are at least MIN_GAP_MS apart counts the syllables closely enough to tell a
backchannel ("mm-hm", "okay, yep": one to four) from a sentence (five and more), even where the
recogniser garbled the words. Measured on Piper and espeak-ng through G.711 (docs/performance.md,
"Sound over the agent"): held-out acknowledgements counted 1 to 4, five-syllable questions 5.
"""

from __future__ import annotations

import numpy as np

HOP_S = 0.010  # one energy value per 10 ms
BAND_HZ = (300.0, 2500.0)  # where vowels are loud, inside the telephone band
SMOOTH_HOPS = 5  # 50 ms moving average: one vowel, one peak
PROMINENCE_DB = 4.0  # a peak stands this far above the lower of the dips on either side
FLOOR_DB = -22.0  # peaks quieter than the loudest by more than this are breath or line noise
MIN_GAP_MS = 160  # two nuclei closer than this are one (120 counted a hummed "mm-hm" as 3 to 4)


def band_energy_db(pcm: bytes, sample_rate: int) -> np.ndarray:
    """The speech band's energy in dB, one value per 10 ms hop (20 ms Hann windows)."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
    hop = max(1, int(sample_rate * HOP_S))
    window = 2 * hop
    if samples.size < window:
        return np.zeros(0)
    count = (samples.size - window) // hop + 1
    frames = np.lib.stride_tricks.as_strided(
        samples, shape=(count, window), strides=(samples.strides[0] * hop, samples.strides[0]), writeable=False)
    spectrum = np.abs(np.fft.rfft(frames * np.hanning(window).astype(np.float32), axis=1)) ** 2
    freqs = np.fft.rfftfreq(window, 1.0 / sample_rate)
    band = (freqs >= BAND_HZ[0]) & (freqs <= BAND_HZ[1])
    level = 10.0 * np.log10(spectrum[:, band].sum(axis=1) + 1e-9)
    return np.convolve(level, np.ones(SMOOTH_HOPS) / SMOOTH_HOPS, mode="same")


def syllable_nuclei(pcm: bytes, sample_rate: int) -> int:
    """The number of syllable nuclei in `pcm` (PCM16 mono): prominent peaks of the speech band's energy."""
    level = band_energy_db(pcm, sample_rate)
    if level.size < 3:
        return 0
    floor = float(level.max()) + FLOOR_DB
    peaks: list[int] = []
    for i in range(1, level.size - 1):
        if not (level[i] >= level[i - 1] and level[i] > level[i + 1] and level[i] > floor):
            continue
        if level[i] - max(_dip(level, i, -1), _dip(level, i, 1)) < PROMINENCE_DB:
            continue
        if peaks and (i - peaks[-1]) * HOP_S * 1000 < MIN_GAP_MS:
            if level[i] > level[peaks[-1]]:
                peaks[-1] = i  # one nucleus: keep its loudest point
            continue
        peaks.append(i)
    return len(peaks)


def _dip(level: np.ndarray, peak: int, step: int) -> float:
    """The lowest level from `peak` towards one side, until the level rises above the peak or ends."""
    lowest = float(level[peak])
    i = peak + step
    while 0 <= i < level.size and level[i] <= level[peak]:
        lowest = min(lowest, float(level[i]))
        i += step
    return lowest
