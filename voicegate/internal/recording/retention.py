"""The retention sweep of call recordings: delete what is older than `recording.retention_days`.

It runs in every server whose data directory holds recordings, recording on or off: a deployer who
turns recording off has not asked to keep the recordings already made past their retention. With
recording on the RecordingService runs it (and keeps its totals for /health and /metrics); with
recording off the gateway runs `RecordingRetention`, which looks at the directory each round and sweeps
only when it holds files, so a server that never recorded does nothing but a directory listing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable

from voicegate.internal.recording.store import RecordingStore

log = logging.getLogger(__name__)


async def sweep_forever(sweep: Callable[[], Awaitable[int]], interval_s: float) -> None:
    """Run `sweep` now and every `interval_s`; a round that fails (a disk that went away) is tried again
    at the next one."""
    while True:
        try:
            await sweep()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("recording sweep failed: %s", type(exc).__name__)
        await asyncio.sleep(interval_s)


def holds_files(store: RecordingStore) -> bool:
    try:
        with os.scandir(store.directory) as entries:
            return any(entry.is_file() for entry in entries)
    except OSError:
        return False


class RecordingRetention:
    """The sweep for a server that does not record (any more) but whose data directory still holds recordings."""

    def __init__(self, store: RecordingStore, retention_days: float, interval_s: float) -> None:
        self.store = store
        self.retention_days = retention_days
        self.interval_s = interval_s
        self.removed = 0
        self._task: asyncio.Task[None] | None = None

    async def sweep(self) -> int:
        if not await asyncio.to_thread(holds_files, self.store):
            return 0
        removed = await asyncio.to_thread(self.store.sweep, self.retention_days)
        if removed:
            self.removed += removed
            log.info("expired recordings deleted", extra={"removed": removed})
        return removed

    def start(self) -> None:
        self._task = asyncio.create_task(sweep_forever(self.sweep, self.interval_s), name="recording-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
