"""Silero VAD v6 as a frame classifier: a small neural network that tells voice from noise.

One ONNX session per process, shared by every call (the session is thread-safe; a call's own state is
two 128-float LSTM vectors and 64 samples of context, so a call adds ~1 KB, not an ONNX session's 20 MB).
The model hears 32 ms chunks at 16 kHz: telephone audio is upsampled by linear interpolation, and the
20 ms frames the pipeline hands over are gathered into chunks, so a frame's answer is the answer for the
latest complete chunk. Chunks below -60 dBFS are not run at all (digital silence, muted microphones): the
network's answer there is always "no", and skipping them keeps an idle line free.

Silero tells a voice from noise, but other people talking behind the caller are voices too. So a frame is
speech only when the network hears a voice AND an optional `gate` (the adaptive energy classifier, which
follows the call's noise floor) hears it standing out from the background: the caller is close to the
microphone, the café is not.
"""

from __future__ import annotations

import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np

MODEL_RATE = 16000
CHUNK = 512  # samples per model step at 16 kHz (32 ms)
CONTEXT = 64  # samples of the previous chunk each step sees
SILENT_DBFS = -60.0
# Hysteresis, as Silero's authors recommend: speech starts above `threshold`, ends below threshold - 0.15.
HYSTERESIS = 0.15


class Gate(Protocol):
    def is_speech(self, pcm: bytes) -> bool: ...


class SileroModel:
    """The shared network. `step` runs one call's chunk and returns (probability, new state)."""

    def __init__(self, path: Path) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1  # a step is ~0.2 ms: more threads only add hand-offs
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 4
        self.path = path
        self._session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"],
                                                     sess_options=options)
        self.steps = 0
        self.cpu_s = 0.0  # CPU time of every step so far
        self._lock = threading.Lock()  # guards only the counter; session.run itself is thread-safe

    def step(self, window: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        started = time.thread_time()
        output, h, c = self._session.run(None, {"input": window.reshape(1, CONTEXT + CHUNK), "h": h, "c": c})
        with self._lock:
            self.steps += 1
            self.cpu_s += time.thread_time() - started
        return float(np.asarray(output).reshape(-1)[0]), h, c


@lru_cache(maxsize=1)
def shared_silero() -> SileroModel:
    """The process's one Silero session (loaded on first use; the weights are verified first)."""
    from voicegate.internal.turn.weights import silero_path

    return SileroModel(silero_path())


class SileroClassifier:
    """`is_speech(pcm)` for 20 ms PCM16 frames at 8 or 16 kHz (the FrameClassifier protocol of the VAD)."""

    def __init__(self, sample_rate: int, model: SileroModel, threshold: float = 0.5, gate: Gate | None = None) -> None:
        if sample_rate not in (8000, 16000):
            raise ValueError(f"Silero VAD takes 8000 or 16000 Hz audio, not {sample_rate}")
        self.model = model
        self.sample_rate = sample_rate
        self.threshold = threshold
        self.gate = gate
        self.probability = 0.0
        self.level_db = -120.0
        self._speech = False
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._window = np.zeros(CONTEXT + CHUNK, dtype=np.float32)  # context, then the chunk being filled
        self._filled = 0
        self._last = 0.0  # the previous frame's last sample (8 kHz interpolation across frames)

    def is_speech(self, pcm: bytes) -> bool:
        loud = self.gate.is_speech(pcm) if self.gate is not None else True  # the gate sees every frame
        voice = self._voice(pcm)
        heard_voice = getattr(self.gate, "heard_voice", None)
        if heard_voice is not None:  # a gate that learns whether the background has voices in it
            heard_voice(self.probability)
        return voice and loud

    def _voice(self, pcm: bytes) -> bool:
        samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) * (1.0 / 32768.0)
        if self.sample_rate == 8000:
            samples = self._upsample(samples)
        while samples.size:
            room = CHUNK - self._filled
            take = samples[:room]
            self._window[CONTEXT + self._filled:CONTEXT + self._filled + take.size] = take
            self._filled += take.size
            samples = samples[take.size:]
            if self._filled == CHUNK:
                self._run_chunk()
        return self._speech

    def _run_chunk(self) -> None:
        chunk = self._window[CONTEXT:]
        energy = float(np.dot(chunk, chunk)) / CHUNK
        self.level_db = 10.0 * np.log10(energy) if energy > 1e-12 else -120.0
        if self.level_db < SILENT_DBFS:
            self.probability = 0.0
        else:
            self.probability, self._h, self._c = self.model.step(self._window, self._h, self._c)
        if self._speech:
            self._speech = self.probability >= self.threshold - HYSTERESIS
        else:
            self._speech = self.probability >= self.threshold
        self._window[:CONTEXT] = chunk[-CONTEXT:]
        self._filled = 0

    def _upsample(self, samples: np.ndarray) -> np.ndarray:
        """8 -> 16 kHz: each sample, then the midpoint to the next (the first midpoint uses the last frame)."""
        out = np.empty(samples.size * 2, dtype=np.float32)
        previous = np.concatenate(([self._last], samples[:-1]))
        out[0::2] = (previous + samples) * 0.5
        out[1::2] = samples
        if samples.size:
            self._last = float(samples[-1])
        return out
