"""The threads that write recordings: the event loop hands them whole seconds and never waits on a disk.

Each recording is pinned to one thread, so its jobs run in order; recordings are spread over a few
threads so one call's Opus encoding (about 1 % of a core) never holds another's audio up. Audio waiting
for a thread is bounded for the whole process (`recording.max_pending_s`): past the bound, `submit`
refuses and the caller of it writes silence of the same length instead (a tiny job), so a slow disk costs
audio, never memory, and the two channels and the call's clock stay aligned.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

Job = Callable[[], None]


class _Lane:
    """One thread and its queue of jobs."""

    def __init__(self, name: str, done: Callable[[int], None]) -> None:
        self._jobs: deque[tuple[Job, int]] = deque()
        self._ready = threading.Condition()
        self._stopping = False
        self._done = done
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, job: Job, size: int) -> None:
        with self._ready:
            self._jobs.append((job, size))
            self._ready.notify()

    def stop(self, timeout_s: float) -> None:
        with self._ready:
            self._stopping = True
            self._ready.notify()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._jobs and not self._stopping:
                    self._ready.wait()
                if not self._jobs:
                    return  # stopping, and every job queued before the stop has run
                job, size = self._jobs.popleft()
            try:
                job()
            except Exception:  # one recording's failure is that recording's; the thread writes on
                log.exception("a recording job failed")
            finally:
                self._done(size)


class RecordingWriters:
    def __init__(self, threads: int, max_pending_bytes: int) -> None:
        self.max_pending_bytes = max_pending_bytes
        self._pending = 0
        self._lock = threading.Lock()
        self._lanes = [_Lane(f"recording-writer-{index}", self._finished) for index in range(max(1, threads))]
        self._next = itertools.cycle(range(len(self._lanes)))
        self.refused = 0  # audio jobs refused because too much was waiting

    def lane(self) -> int:
        """A lane for a new recording (round robin)."""
        return next(self._next)

    @property
    def pending_bytes(self) -> int:
        return self._pending

    def submit(self, lane: int, job: Job, size: int) -> bool:
        """Queue an audio job of `size` bytes; False when the bound is reached (nothing was queued)."""
        with self._lock:
            if self._pending + size > self.max_pending_bytes:
                self.refused += 1
                return False
            self._pending += size
        self._lanes[lane].put(job, size)
        return True

    def control(self, lane: int, job: Job) -> None:
        """Queue a small job (open, close, a stretch of silence): never refused, so a recording always
        gets its end."""
        self._lanes[lane].put(job, 0)

    def _finished(self, size: int) -> None:
        if size:
            with self._lock:
                self._pending -= size

    def close(self, timeout_s: float = 10.0) -> None:
        """Run what is queued, then stop the threads (at shutdown, after every call has ended)."""
        for lane in self._lanes:
            lane.stop(timeout_s)
