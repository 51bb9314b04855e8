"""CPU seconds spent by this server's process tree: the server and its worker children (Whisper, Piper,
Smart Turn processes), for admission control's per-call cost (internal/telemetry/admission.py).

Read once a second by a background task: psutil reads /proc, a few files per process, which must not run
on a call's turn. Children that came and went between two reads take their CPU seconds with them (a
restarted worker); the next sample starts from the new tree, and a tree that shrank never yields a
negative figure.
"""

from __future__ import annotations

import os

import psutil


class TreeCpu:
    """CPU seconds (user + system) of a process and its live descendants."""

    def __init__(self, pid: int | None = None) -> None:
        self._root = psutil.Process(pid or os.getpid())
        self._seen: dict[int, float] = {}  # pid -> its CPU seconds at the last read

    def _times(self) -> dict[int, float]:
        found: dict[int, float] = {}
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            processes = [self._root]
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.Error:  # ended between the listing and the read
                continue
            found[process.pid] = times.user + times.system
        return found

    def spent(self) -> float:
        """CPU seconds the tree spent since the previous call (0 on the first)."""
        now = self._times()
        first = not self._seen
        delta = sum(max(0.0, seconds - self._seen.get(pid, 0.0)) for pid, seconds in now.items()
                    if pid in self._seen)
        # A child born since the last read spent all its seconds in between (or at its start, close enough).
        delta += sum(seconds for pid, seconds in now.items() if pid not in self._seen)
        self._seen = now
        return 0.0 if first else delta
