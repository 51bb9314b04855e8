"""Whether a short sound ended on a rise of the voice's pitch, the way a question does.

The pitch of each 10 ms hop comes from the normalised autocorrelation of a 40 ms window (the shortest
lag between 2.5 and 14 ms, 70 to 400 Hz, whose peak comes near the highest), kept only where the peak is
clear (VOICED_CORRELATION) and the hop is not far below the loudest (FLOOR_DB); a 5-hop median removes
single octave jumps, and the end ignores a hop JUMP_ST from the middle (the tracker slipped). The
end of the sound is the median pitch of its last END_HOPS voiced hops; `end_rise` is how many semitones
that stands above the median of all of it. Measured on Piper and espeak-ng through G.711
(docs/performance.md, "Sound over the agent"): espeak-ng's questions ended 0.5 to 2.5 semitones above
their median, its acknowledgements mostly 3 to 5 below. Piper's wh-questions fall, as people's often do,
so a rise is evidence of a question, and its absence is none against one.
"""

from __future__ import annotations

import numpy as np

HOP_S = 0.010
WINDOW_S = 0.040
PITCH_HZ = (70.0, 400.0)
VOICED_CORRELATION = 0.6  # the autocorrelation's peak, normalised: below it the hop is noise or a consonant
FLOOR_DB = -25.0  # hops quieter than the loudest by more than this are breath or the line
OCTAVE_SHARE = 0.85  # a lag whose correlation is this share of the highest is the period, not a multiple
MEDIAN_HOPS = 5
JUMP_ST = 9.0  # no voice's melody moves this far from its middle within a short sound: an octave slip
END_HOPS = 5  # the end: the last 50 ms of voice
MIN_VOICED_HOPS = 8  # fewer voiced hops than this carry no melody


def pitch_track(pcm: bytes, sample_rate: int) -> np.ndarray:
    """Pitch in Hz per 10 ms hop of `pcm` (PCM16 mono); 0 where the hop is not voiced."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
    hop = max(1, int(sample_rate * HOP_S))
    window = int(sample_rate * WINDOW_S)
    shortest, longest = int(sample_rate / PITCH_HZ[1]), int(sample_rate / PITCH_HZ[0])
    if samples.size < window + hop:
        return np.zeros(0)
    count = (samples.size - window) // hop + 1
    frames = np.lib.stride_tricks.as_strided(
        samples, shape=(count, window), strides=(samples.strides[0] * hop, samples.strides[0]), writeable=False)
    frames = frames - frames.mean(axis=1, keepdims=True)
    energy = (frames * frames).sum(axis=1)
    size = 1 << int(np.ceil(np.log2(2 * window)))
    spectrum = np.fft.rfft(frames, n=size, axis=1)
    correlation = np.fft.irfft(spectrum * np.conj(spectrum), n=size, axis=1)[:, :longest + 1]
    # The unbiased estimate: a lag overlaps fewer samples of the window.
    correlation = correlation * (window / np.maximum(1, window - np.arange(longest + 1)))
    normalised = (correlation / (correlation[:, :1] + 1e-9))[:, shortest:longest + 1]
    # The shortest lag near the highest peak: a period's multiples correlate as well as the period itself.
    near = normalised >= OCTAVE_SHARE * normalised.max(axis=1, keepdims=True)
    first = np.argmax(near, axis=1)
    reach = max(2, shortest // 2)
    lags = np.array([start + int(np.argmax(row[start:start + reach]))
                     for row, start in zip(normalised, first, strict=True)])
    peak = normalised[np.arange(count), lags]
    lags = lags + shortest
    level = 10.0 * np.log10(energy / window + 1e-9)
    voiced = (peak >= VOICED_CORRELATION) & (level >= level.max() + FLOOR_DB)
    track = np.where(voiced, sample_rate / lags, 0.0)
    return _median_voiced(track)


def _median_voiced(track: np.ndarray) -> np.ndarray:
    """A running median over the voiced hops of each stretch (unvoiced hops stay 0)."""
    out = track.copy()
    half = MEDIAN_HOPS // 2
    for i in np.flatnonzero(track):
        near = track[max(0, i - half):i + half + 1]
        out[i] = float(np.median(near[near > 0]))
    return out


def end_rise(pcm: bytes, sample_rate: int) -> float | None:
    """Semitones the end of the sound's pitch stands above its median; None when too little was voiced."""
    track = pitch_track(pcm, sample_rate)
    voiced = track[track > 0]
    if voiced.size < MIN_VOICED_HOPS:
        return None
    semitones = 12.0 * np.log2(voiced / 100.0)
    middle = float(np.median(semitones))
    semitones = semitones[np.abs(semitones - middle) < JUMP_ST]  # a jump this far is the tracker's octave slip
    return float(np.median(semitones[-END_HOPS:]) - middle)
