"""Noise suppression of a caller's audio with RNNoise (Xiph's recurrent network), one instance per call.

RNNoise only works at 48 kHz, on 10 ms frames of 480 samples; calls carry 20 ms frames at 8 or 16 kHz.
48 kHz is an exact multiple of both, so each frame is interpolated (x6 or x3) into exactly two RNNoise
frames and decimated back into exactly one frame of the same size: no FIFO, no frame ever early or late.
Both filters are one windowed-sinc low-pass at the call's Nyquist frequency, applied in polyphase form,
and each keeps its history across frames, so frame edges are seamless. libswresample (resample.py)
would also do, but its output per chunk is not an exact count, which would need buffering here, and
the two conversions cost 2-4 times as much CPU per frame as these two small products.

The output lags the input by a constant DELAY_MS: 20 ms are RNNoise's own (two of its frames: its
overlap-add and the look-ahead of the 0.2 model), 3 ms are the two linear-phase filters' (half their
length each).

The library comes from the pinned `pyrnnoise` wheel (`pip install voicegate[denoise]`), but its Python
layer is not imported: `import pyrnnoise` loads audiolab, av, soxr, soundfile and jinja2 for its file
helpers. Its librnnoise is called through ctypes instead, with RNNoise's own C API (rnnoise.h), which
releases the GIL for the call. `rnnoise_available()` says why not when the library cannot be loaded,
so a caller can run without noise suppression instead of failing.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import weakref
from pathlib import Path

import numpy as np
import numpy.typing as npt

from voicegate.internal.audio.frame import frame_bytes

RNNOISE_RATE = 48000
RNNOISE_FRAME = 480  # samples, 10 ms at 48 kHz; fixed by the library
SUPPORTED_RATES = (8000, 16000)
DELAY_MS = 23

# The prototype low-pass, at 48 kHz: 145 taps keep the two filters' delay to 3 ms (144 samples, a whole
# number of samples at 8 and at 16 kHz). With Kaiser beta 6 it is flat (0.01 dB) up to 640 Hz under the
# call's Nyquist frequency (3.36 kHz for a phone line, whose G.711 audio stops at 3.4 kHz), 6 dB down at
# it, and at least 62 dB down from 700 Hz over it, where images of the call's band and aliases lie.
_FILTER_TAPS = 145
_KAISER_BETA = 6.0
_LIBRARY_NAMES = ("librnnoise.so", "librnnoise.dylib", "rnnoise.dll")

_Floats = npt.NDArray[np.float32]


class RnnoiseUnavailable(RuntimeError):
    """RNNoise cannot be loaded here; the message says why and how to install it."""


@functools.cache
def _load() -> ctypes.CDLL | str:
    """The loaded library, or why it cannot be loaded (computed once: it cannot change while running)."""
    spec = importlib.util.find_spec("pyrnnoise")  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        return "pyrnnoise is not installed (pip install 'voicegate[denoise]')"
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = [folder / name for name in _LIBRARY_NAMES if (folder / name).is_file()]
    if not found:
        return f"pyrnnoise is installed at {folder} but has no RNNoise library for this platform"
    try:
        lib = ctypes.CDLL(str(found[0]))
    except OSError as exc:
        return f"cannot load {found[0]}: {exc}"
    lib.rnnoise_create.argtypes = [ctypes.c_void_p]
    lib.rnnoise_create.restype = ctypes.c_void_p
    lib.rnnoise_destroy.argtypes = [ctypes.c_void_p]
    lib.rnnoise_destroy.restype = None
    lib.rnnoise_get_frame_size.argtypes = []
    lib.rnnoise_get_frame_size.restype = ctypes.c_int
    lib.rnnoise_process_frame.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.rnnoise_process_frame.restype = ctypes.c_float
    if lib.rnnoise_get_frame_size() != RNNOISE_FRAME:
        return f"{found[0]} uses {lib.rnnoise_get_frame_size()}-sample frames, not {RNNOISE_FRAME}"
    return lib


def rnnoise_available() -> str | None:
    """None when RnnoiseDenoiser can be used, otherwise the reason it cannot."""
    loaded = _load()
    return loaded if isinstance(loaded, str) else None


@functools.cache
def _lowpass(factor: int) -> _Floats:
    """Windowed-sinc low-pass at 48 kHz with its cutoff at 24 kHz / factor and a DC gain of 1."""
    n = np.arange(_FILTER_TAPS) - (_FILTER_TAPS - 1) / 2
    taps = np.sinc(n / factor) * np.kaiser(_FILTER_TAPS, _KAISER_BETA)
    lowpass = (taps / taps.sum()).astype(np.float32)
    lowpass.flags.writeable = False
    return lowpass


class RnnoiseDenoiser:
    """One call's noise suppressor: 20 ms PCM16 mono frames in, frames of the same size out, DELAY_MS late.

    Holds RNNoise's recurrent state and both filters' history, so frames must be one stream, in order,
    from one thread at a time. `speech_probability` is RNNoise's voice activity estimate for the last frame.
    """

    def __init__(self, sample_rate: int) -> None:
        if sample_rate not in SUPPORTED_RATES:
            raise ValueError(f"noise suppression works at {' or '.join(map(str, SUPPORTED_RATES))} Hz, "
                             f"not {sample_rate} Hz")
        lib = _load()
        if isinstance(lib, str):
            raise RnnoiseUnavailable(lib)
        self.sample_rate = sample_rate
        self.frame_bytes = frame_bytes(sample_rate)
        self.speech_probability = 0.0
        factor = RNNOISE_RATE // sample_rate
        samples = self.frame_bytes // 2
        taps = _lowpass(factor)
        # Interpolation: 48 kHz sample i*factor + p is the dot product of the last `phase_taps` input samples
        # with phase p of the filter, scaled by `factor` (the energy the zeros of zero-stuffing would lose).
        phase_taps = -(-_FILTER_TAPS // factor)
        padded = np.zeros(phase_taps * factor, dtype=np.float32)
        padded[:_FILTER_TAPS] = taps * factor
        self._phases = np.ascontiguousarray(padded.reshape(phase_taps, factor)[::-1])
        # Each buffer is its filter's history followed by the frame at hand. The views over them are made
        # once: building a sliding window view costs more than the filtering it serves.
        self._low = np.zeros(phase_taps - 1 + samples, dtype=np.float32)
        self._low_windows = np.lib.stride_tricks.sliding_window_view(self._low, phase_taps)
        self._high = np.zeros(_FILTER_TAPS - 1 + samples * factor, dtype=np.float32)
        self._high_frame = self._high[_FILTER_TAPS - 1 :].reshape(samples, factor)
        # Decimation: the same low-pass at every factor-th 48 kHz sample from the frame's first, so each
        # output sample falls on the call's sampling grid (the filters' 144 samples are a whole number).
        self._high_windows = np.lib.stride_tricks.sliding_window_view(self._high, _FILTER_TAPS)[::factor]
        self._taps_reversed = np.ascontiguousarray(taps[::-1])
        self._lib = lib
        self._state = ctypes.c_void_p(lib.rnnoise_create(None))
        if not self._state.value:
            raise MemoryError("rnnoise_create failed")
        weakref.finalize(self, lib.rnnoise_destroy, self._state)
        first = self._high_frame.ctypes.data
        self._halves = (first, first + RNNOISE_FRAME * self._high.itemsize)

    def process(self, pcm: bytes) -> bytes:
        """Denoise one 20 ms frame."""
        if len(pcm) != self.frame_bytes:
            raise ValueError(f"noise suppression at {self.sample_rate} Hz takes 20 ms frames of "
                             f"{self.frame_bytes} bytes, got {len(pcm)}")
        low, high, samples = self._low, self._high, self.frame_bytes // 2
        low[-samples:] = np.frombuffer(pcm, dtype=np.int16)
        np.matmul(self._low_windows, self._phases, out=self._high_frame)
        low[:-samples] = low[samples:]
        # In place, as RNNoise allows: the 48 kHz frame is two of its frames.
        first, second = (self._lib.rnnoise_process_frame(self._state, half, half) for half in self._halves)
        self.speech_probability = max(first, second)
        out = np.dot(self._high_windows, self._taps_reversed)
        high[: _FILTER_TAPS - 1] = high[-(_FILTER_TAPS - 1) :]
        return np.clip(np.rint(out), -32768, 32767).astype(np.int16).tobytes()
