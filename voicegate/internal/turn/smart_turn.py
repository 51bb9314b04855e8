"""Smart Turn v3.2: has the caller finished their turn, judged from the sound of it?

A person who pauses mid-sentence ("my number is five five five ...") sounds unfinished: the pitch stays up,
the last word is stretched. Smart Turn (Daily, BSD-2) is a small Whisper-encoder classifier trained on that:
it hears the last 8 s of the caller's audio at 16 kHz and gives the probability that the turn is complete.

The features are Whisper's 80-bin log-mel spectrogram of exactly 8 s (shorter audio is zero-padded at the
start, the waveform normalised to zero mean and unit variance first, as the model was trained). One ONNX
session per process, shared by every call; each inference (~15-90 ms of CPU) runs on a small thread pool
so the event loop never waits for it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np

from voicegate.internal.devices import CPU_PROVIDER, DeviceUnavailable, missed_device
from voicegate.internal.telemetry.queues import WorkQueue

MODEL_RATE = 16000
WINDOW_S = 8
WINDOW_SAMPLES = MODEL_RATE * WINDOW_S
FRAMES = 800  # 10 ms hops over 8 s


def upsample_8k(samples: np.ndarray) -> np.ndarray:
    """8 -> 16 kHz by linear interpolation (the model's input is band-limited speech anyway)."""
    if samples.size == 0:
        return samples
    out = np.empty(samples.size * 2, dtype=np.float32)
    out[0::2] = samples
    out[1:-1:2] = (samples[:-1] + samples[1:]) * 0.5
    out[-1] = samples[-1]
    return out


# A pause inside the turn is shortened to this before Smart Turn hears it: the model judges how the last
# words sound, and a long silence earlier in its 8 s window ("my order | has been shipped yet?") made it
# hear a finished sentence as unfinished (measured on the turn benchmark's paused sentences).
INNER_PAUSE_FRAMES = 10  # 200 ms of 20 ms frames


def without_long_pauses(frames: list[tuple[bytes, bool]], keep: int = INNER_PAUSE_FRAMES) -> bytes:
    """The turn's 20 ms frames (pcm, voiced) with every run of unvoiced frames cut to `keep` frames."""
    out: list[bytes] = []
    quiet = 0
    for pcm, voiced in frames:
        quiet = 0 if voiced else quiet + 1
        if quiet <= keep:
            out.append(pcm)
    return b"".join(out)


def last_window(samples: np.ndarray) -> np.ndarray:
    """The last 8 s, zero-padded at the start when shorter."""
    if samples.size >= WINDOW_SAMPLES:
        return samples[-WINDOW_SAMPLES:]
    return np.concatenate((np.zeros(WINDOW_SAMPLES - samples.size, dtype=np.float32), samples))


class SmartTurnModel:
    def __init__(self, path: Path, threads: int = 1, workers: int = 1,
                 providers: Sequence[str] = (CPU_PROVIDER,)) -> None:
        """`providers`: onnxruntime's, best first (internal/devices.py `onnx_providers`)."""
        import onnxruntime
        from faster_whisper.feature_extractor import FeatureExtractor

        from voicegate.internal.stt.workers import one_blas_thread

        one_blas_thread()  # the features' matrix product would leave OpenBLAS threads spinning through the model
        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = threads
        options.log_severity_level = 4
        self.path = path
        self._session = onnxruntime.InferenceSession(str(path), providers=list(providers), sess_options=options)
        self.providers: list[str] = list(self._session.get_providers())
        if missed_device(providers, self.providers):
            raise DeviceUnavailable(f'pipeline.end_of_turn_device: "cuda" but onnxruntime could not start its CUDA '
                                    f"provider for Smart Turn (it runs on {', '.join(self.providers)}); see its "
                                    'message above, or set it to "auto" or "cpu"')
        self._features = FeatureExtractor(feature_size=80, chunk_length=WINDOW_S)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="smart-turn")
        self._lock = threading.Lock()
        self.inferences = 0
        self.cpu_s = 0.0  # CPU time of every inference so far (features included)
        self.skipped = 0  # asked while the pool was full: the text rules decided those turns
        self._inflight = 0
        self._workers = workers
        self._max_inflight = workers + 1  # one running per worker, one waiting
        self.queue = WorkQueue("smart_turn")

    def queues(self) -> list[WorkQueue]:
        return [self.queue]

    def features(self, samples16k: np.ndarray) -> np.ndarray:
        """(1, 80, 800) log-mel features of the last 8 s of float32 samples at 16 kHz."""
        window = last_window(samples16k.astype(np.float32, copy=False))
        window = (window - window.mean()) / np.sqrt(window.var() + 1e-7)
        mel = self._features(window, padding=0)[:, :FRAMES]
        return mel[np.newaxis].astype(np.float32)

    def probability(self, pcm: bytes, sample_rate: int) -> float:
        """P(turn complete) for PCM16 audio ending where the caller fell silent (blocking)."""
        started = time.thread_time()
        samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) * (1.0 / 32768.0)
        if sample_rate == 8000:
            samples = upsample_8k(samples)
        elif sample_rate != MODEL_RATE:
            raise ValueError(f"Smart Turn takes 8000 or 16000 Hz audio, not {sample_rate}")
        output = self._session.run(None, {"input_features": self.features(samples)})
        with self._lock:
            self.inferences += 1
            self.cpu_s += time.thread_time() - started
        return float(np.asarray(output[0]).reshape(-1)[0])

    async def predict(self, pcm: bytes, sample_rate: int) -> float | None:
        """`probability` on the model's thread pool; None, at once, when the pool is already full.

        An inference costs ~90 ms of CPU on a core without int8 dot-product instructions, so under load the
        model runs on one worker with one turn waiting, and the rest fall back to the text rules: the
        CPU it takes stays bounded however many callers pause at once.
        """
        if self._inflight >= self._max_inflight:
            self.skipped += 1
            return None
        self._inflight += 1
        self.queue.running = min(self._inflight, self._workers)
        token = self.queue.enter()
        started: list[float] = []

        def run() -> float:
            started.append(time.monotonic())
            return self.probability(pcm, sample_rate)

        try:
            verdict = await asyncio.get_running_loop().run_in_executor(self._executor, run)
            self.queue.served(started[0])
            return verdict
        finally:
            self.queue.leave(token, at=started[0] if started else None)
            self._inflight -= 1
            self.queue.running = min(self._inflight, self._workers)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


@lru_cache(maxsize=4)
def shared_smart_turn(configured: str = "", download: bool = True,
                      providers: tuple[str, ...] = (CPU_PROVIDER,)) -> SmartTurnModel:
    """The process's one Smart Turn session (weights found, fetched if allowed, and verified first)."""
    from voicegate.internal.turn.weights import smart_turn_path

    return SmartTurnModel(smart_turn_path(configured, download=download), providers=providers)
