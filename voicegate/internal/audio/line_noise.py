"""How noisy a caller's line is, measured on one utterance: its speech-active level over its noise, in dB.

The recogniser hears each utterance whole (the VAD has cut it, with its pre-roll and the quiet before
its end), so the noise can be measured on the utterance itself, with no state per call and nothing on
the live audio path.

- **Noise**: a low percentile of the utterance's 20 ms frame powers, smoothed over a few frames first
  (minimum statistics: between words and around them only the noise is left, and steady noise keeps
  its level), corrected for the percentile's bias on noise alone.
- **Speech**: the mean power of the frames that stand out from the noise by ACTIVE_OVER_NOISE_DB, less
  the noise's own share.

This is the definition bench/common/noises.py mixes its conditions with (speech-active level over noise
level), so an estimate can be checked against the SNR a benchmark line was made at: on VAD-cut turns
through G.711 at 15 dB it reads white noise as ~17.5 dB, pink 15.4, street 16.6 and babble 18.6
(median), a clean line as MAX_SNR_DB.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

RATE = 16000
LEVEL_FRAME = RATE // 50  # 20 ms
SMOOTH_FRAMES = 5  # frames averaged before the percentile (less spread on noise alone)
NOISE_PERCENTILE = 20.0
# The 20th percentile of 5-frame means of a steady noise's power, over its mean (0.66-0.70 measured on
# white, pink and brown noise): divided out so the estimate is the noise's mean power.
PERCENTILE_BIAS = 0.68
# The quietest 5-frame mean of a steady noise, over its mean (0.5-0.7 over an utterance's frames).
MINIMUM_BIAS = 0.5
ACTIVE_OVER_NOISE_DB = 6.0  # a frame 6 dB over the noise has speech in it
MAX_SNR_DB = 60.0  # a clean line (digital silence between the words reads as this)


def smoothed(values: npt.NDArray[np.float64], frames: int = SMOOTH_FRAMES) -> npt.NDArray[np.float64]:
    """Moving mean over `frames` along the first axis (unchanged when there are fewer)."""
    if values.shape[0] < frames:
        return values
    cumulative = np.cumsum(values, axis=0, dtype=np.float64)
    cumulative = np.concatenate([np.zeros((1, *values.shape[1:])), cumulative])
    return (cumulative[frames:] - cumulative[:-frames]) / frames


def noise_power(powers: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The noise's mean power from frame powers (frames, or frames x bins), by minimum statistics.

    A low percentile rather than the minimum, which one quiet moment would drag down; but an utterance
    cut from a clean line may have less silence than the percentile reaches (its pre-roll alone), and
    then the percentile lands on the caller's quietest sounds: where the quietest stretch lies far below
    the percentile, that stretch is the line's noise."""
    frames = smoothed(powers)
    typical = np.percentile(frames, NOISE_PERCENTILE, axis=0) / PERCENTILE_BIAS
    quietest = frames.min(axis=0) / MINIMUM_BIAS
    return np.asarray(np.minimum(typical, quietest))


def estimate_snr_db(audio: npt.NDArray[np.float32]) -> float:
    """The utterance's (16 kHz floats) speech-active level over its noise level, in dB."""
    frames = audio.size // LEVEL_FRAME
    if frames < 4:
        return MAX_SNR_DB
    powers = (audio[: frames * LEVEL_FRAME].reshape(frames, LEVEL_FRAME).astype(np.float64) ** 2).mean(axis=1)
    noise = float(noise_power(powers))
    if noise <= 1e-10:  # digital silence between the words: a clean line
        return MAX_SNR_DB
    active = powers[powers > noise * 10 ** (ACTIVE_OVER_NOISE_DB / 10)]
    if not active.size:
        return 0.0
    speech = max(float(active.mean()) - noise, noise * 1e-6)
    return float(min(MAX_SNR_DB, max(0.0, 10 * np.log10(speech / noise))))
