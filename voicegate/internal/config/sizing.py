"""Worker pool sizes derived from the machine, for the keys whose 0 means "size it for me".

Measured here (docs/performance.md, "Where callers wait"): a Whisper tiny.en decode is one core busy for
~0.3-0.6 s and gains nothing from a second thread, a Piper sentence is ~0.1-0.3 s of one core. Either pool
with fewer workers than cores leaves a core idle while callers queue; more workers than cores only
make every decode slower. So the default is one worker per core this process may run on (its CPU
affinity, which containers and `taskset` narrow), and the pools share the cores through the kernel.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def worker_count(configured: int) -> int:
    """`configured` workers, or one per usable core when it is 0."""
    return configured if configured > 0 else usable_cores()
