"""A Wiener filter in numpy, tried in front of the recogniser (bench/speech_noise.py `wiener`): it did not pay.

The whole utterance's noise spectrum by minimum statistics (internal/audio/line_noise.py's estimate,
per frequency), a Wiener gain per frequency and frame from the a-priori SNR by Ephraim and Malah's
decision-directed estimate (which keeps the residual noise from warbling), never below GAIN_FLOOR, and
overlap-add with a square-root Hann window (exact where the gain is one). Kept here so the measurement
can be repeated; the product does not filter what Whisper hears (docs/speech.md, "Noisy lines").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from voicegate.internal.audio.line_noise import noise_power

WINDOW = 512  # 32 ms at 16 kHz
HOP = WINDOW // 2
DECISION_DIRECTED = 0.96
GAIN_FLOOR = 0.15  # -16.5 dB

Floats = npt.NDArray[np.float32]


def suppress_noise(audio: Floats, gain_floor: float = GAIN_FLOOR) -> Floats:
    """`audio` (16 kHz floats) with its steady noise filtered out; the same length."""
    if audio.size < WINDOW:
        return audio
    count = int(np.ceil((audio.size + WINDOW) / HOP))
    padded = np.zeros((count + 1) * HOP + WINDOW, dtype=np.float32)
    padded[WINDOW // 2: WINDOW // 2 + audio.size] = audio
    window = np.sqrt(np.hanning(WINDOW + 1)[:WINDOW]).astype(np.float32)
    spectra = np.fft.rfft(np.lib.stride_tricks.sliding_window_view(padded, WINDOW)[::HOP][:count] * window, axis=1)
    power = spectra.real ** 2 + spectra.imag ** 2
    posterior = power / np.maximum(noise_power(power), 1e-12)
    gains = np.empty_like(power)
    previous = np.ones(power.shape[1])
    for index in range(power.shape[0]):
        prior = DECISION_DIRECTED * previous + (1 - DECISION_DIRECTED) * np.maximum(posterior[index] - 1.0, 0.0)
        gains[index] = np.maximum(prior / (1.0 + prior), gain_floor)
        previous = gains[index] ** 2 * posterior[index]
    cleaned = np.fft.irfft(spectra * gains, WINDOW, axis=1) * window
    out = np.zeros(padded.size, dtype=np.float32)
    for index, frame in enumerate(cleaned):
        out[index * HOP: index * HOP + WINDOW] += frame
    return out[WINDOW // 2: WINDOW // 2 + audio.size]
