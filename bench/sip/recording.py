"""Call recording (internal/recording/): what a recorded call costs, on the event loop and on the writers.

    .venv/bin/python -m bench.sip.recording [--calls 50] [--seconds 60] [--rates 8000,16000]

For each format (WAV, Opus) and rate, --calls recorders are fed --seconds of 20 ms frames each, both
channels, all calls interleaved tick by tick as a server's transports feed them, as fast as the writer
threads take it (the loop waits whenever more than two seconds per call are waiting for them, as a real
call's clock would). Figures:
- loop us/frame: event-loop time per call per tick (`heard` + `said` and the hand-over each second): what
  recording adds to the media loop's 20 ms budget;
- CPU % of a core per call: this process's whole CPU (writer threads included) over the audio recorded,
  i.e. the share of one core a live recorded call keeps busy;
- RSS growth: resident memory at the end over the start (the audio itself is --calls x --seconds x
  rate x 4 bytes: it must not be in memory).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import progress, resident_kib, save, table
from voicegate.internal.recording.recorder import CallRecorder, new_info
from voicegate.internal.recording.service import MAX_WRITER_THREADS
from voicegate.internal.recording.store import RecordingStore
from voicegate.internal.recording.writers import RecordingWriters


def run(kind: str, rate: int, calls: int, seconds: int, directory: Path) -> dict[str, float]:
    store = RecordingStore(directory / f"{kind}-{rate}")
    store.ensure()
    threads = max(1, min(MAX_WRITER_THREADS, os.cpu_count() or 1))
    writers = RecordingWriters(threads, calls * 2 * rate * 4)
    recorders = [CallRecorder(store, writers, new_info(f"{kind}{rate}x{index:04d}", kind, rate,  # type: ignore[arg-type]
                                                       transport="sip", owner_key=None, identity_kind="anonymous",
                                                       consent="not_asked"), kind)  # type: ignore[arg-type]
                 for index in range(calls)]
    noise = np.random.default_rng(rate).standard_normal(rate // 50 * 50) * 2000
    frames = [f.astype("<i2").tobytes() for f in np.split(noise, 50)]
    rss_before = resident_kib()
    cpu_before = time.process_time()
    wall_before = time.perf_counter()
    loop_time = 0.0
    ticks = seconds * 50
    for tick in range(ticks):
        started = time.perf_counter()
        frame = frames[tick % 50]
        for recorder in recorders:
            recorder.heard(frame)
            recorder.said(frame)
        loop_time += time.perf_counter() - started
        if tick % 50 == 49:
            while writers.pending_bytes > calls * 2 * rate * 4 // 2:
                time.sleep(0.002)
            progress(f"{kind} {rate} Hz", tick + 1, ticks)
    for recorder in recorders:
        recorder.finish("not_asked")
    writers.close(600)
    cpu = time.process_time() - cpu_before
    wall = time.perf_counter() - wall_before
    audio_s = calls * seconds
    return {"format": kind, "rate": rate, "calls": calls, "seconds": seconds,
            "loop_us_per_frame": loop_time / (ticks * calls) * 1e6,
            "cpu_percent_per_call": cpu / audio_s * 100.0,
            "realtime_factor": wall / audio_s,
            "rss_growth_mb": (resident_kib() - rss_before) / 1024.0,
            "audio_mb": audio_s * rate * 4 / 1e6,
            "refused_chunks": float(writers.refused)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--rates", default="8000,16000")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as directory:
        for kind in ("wav", "opus"):
            for rate in (int(rate) for rate in args.rates.split(",")):
                results.append(run(kind, rate, args.calls, args.seconds, Path(directory)))
    rows = [[r["format"], str(r["rate"]), f"{r['loop_us_per_frame']:.1f}", f"{r['cpu_percent_per_call']:.2f}",
             f"{r['rss_growth_mb']:.1f}", f"{r['audio_mb']:.0f}", str(int(r["refused_chunks"]))] for r in results]
    print(table(rows, ["format", "rate", "loop us/frame", "CPU % of a core per call", "RSS growth MB",
                       "audio MB", "seconds refused"]))
    print(f"results: {save('recording', {'runs': results})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
