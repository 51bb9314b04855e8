"""Noise suppression (RNNoise, internal/audio/denoise.py): CPU per 20 ms frame and memory per call.

    .venv/bin/python -m bench.speech.denoise [--seconds 10] [--repeat 5] [--instances 200]

One RnnoiseDenoiser per rate is fed --seconds of 20 ms frames, --repeat times; the figure is CPU time
of this process per frame (the median run, and the quickest, which is the least disturbed by other work
on the machine), then the share of one core a call takes (that over 20 ms) and calls per core.
Two inputs: white noise at -40 dBFS, a line's hiss, which costs what speech costs (RNNoise runs its
network on every frame that is not digital zero), and digital silence, on which RNNoise skips its network.

Memory: the growth of this process's resident set over --instances more denoisers (each having
processed a frame), per instance, with the Python objects' share of it (tracemalloc); and the growth
for the first one, which loads librnnoise: about 15 MB of file-backed pages, mostly the model,
shared by every call of the process and by every process on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

# numpy's OpenBLAS threads would only spin on another core: the filters are small products.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import resident_kib, save, table
from voicegate.internal.audio.denoise import DELAY_MS, SUPPORTED_RATES, RnnoiseDenoiser, rnnoise_available
from voicegate.internal.audio.frame import FRAME_MS, frame_bytes


def hiss(rate: int, seconds: float) -> list[bytes]:
    samples = np.random.default_rng(rate).standard_normal(int(rate * seconds)) * 32768 * 10 ** (-40 / 20)
    pcm = np.rint(samples).astype(np.int16).tobytes()
    size = frame_bytes(rate)
    return [pcm[i : i + size] for i in range(0, len(pcm) - size + 1, size)]


def cpu_per_frame(rate: int, frames: list[bytes], repeat: int) -> list[float]:
    """Microseconds of CPU per frame, one figure per run, each run on a fresh denoiser."""
    runs = []
    for _ in range(repeat):
        denoiser = RnnoiseDenoiser(rate)
        for frame in frames[:50]:  # first calls touch the model's pages
            denoiser.process(frame)
        start = time.process_time()
        for frame in frames:
            denoiser.process(frame)
        runs.append((time.process_time() - start) / len(frames) * 1e6)
    return runs


def library_load_kib() -> int:
    """Resident growth for the first denoiser of the process, which loads librnnoise and its model."""
    before = resident_kib()
    RnnoiseDenoiser(SUPPORTED_RATES[0]).process(bytes(frame_bytes(SUPPORTED_RATES[0])))
    return resident_kib() - before


def memory_per_instance(rate: int, instances: int, kept: list[RnnoiseDenoiser]) -> dict[str, float]:
    """KiB per denoiser; `kept` holds them alive, so the next rate's cannot reuse their freed memory."""
    frame = bytes(frame_bytes(rate))
    before = resident_kib()
    tracemalloc.start()
    made = [RnnoiseDenoiser(rate) for _ in range(instances)]
    for denoiser in made:
        denoiser.process(frame)
    python_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    kept += made
    return {"resident_kib": (resident_kib() - before) / instances,
            "python_objects_kib": python_bytes / 1024 / instances}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--instances", type=int, default=200)
    args = parser.parse_args()
    reason = rnnoise_available()
    if reason:
        print(f"skipped: {reason}")
        return 0
    # Memory first, in a process that has not made a denoiser yet, so the library's load shows.
    library_kib = library_load_kib()
    kept: list[RnnoiseDenoiser] = []
    memories = {rate: memory_per_instance(rate, args.instances, kept) for rate in SUPPORTED_RATES}
    kept.clear()
    results: dict[str, object] = {"delay_ms": DELAY_MS, "library_load_kib": library_kib,
                                  "load_average": os.getloadavg()[0]}
    rows = []
    for rate in SUPPORTED_RATES:
        inputs = {"hiss -40 dBFS": hiss(rate, args.seconds), "digital silence": [bytes(frame_bytes(rate))] * 500}
        figures: dict[str, object] = {"memory": memories[rate]}
        for name, frames in inputs.items():
            runs = cpu_per_frame(rate, frames, args.repeat)
            median = statistics.median(runs)
            figures[name] = {"cpu_us_per_frame": runs, "median": median, "core_share_pct": median / FRAME_MS / 10}
            rows.append([f"{rate}", name, f"{median:.0f}", f"{min(runs):.0f}", f"{median / FRAME_MS / 10:.2f}",
                         f"{FRAME_MS * 1000 / median:.0f}"])
        results[str(rate)] = figures
    print(table(rows, ["rate", "input", "CPU us/frame p50", "min", "% of a core", "calls per core"]))
    print()
    print(table([[f"{rate}", f"{m['resident_kib']:.1f}", f"{m['python_objects_kib']:.1f}"]
                 for rate, m in memories.items()], ["rate", "KiB per instance", "of which Python objects"]))
    print(f"\nloading librnnoise (once per process, file-backed): {library_kib / 1024:.1f} MiB resident")
    print(f"delay {DELAY_MS} ms; load average {results['load_average']:.2f} over {os.cpu_count()} CPUs")
    print(f"results: {save('denoise', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
