"""The retention sweeper: deletes expired memory every `memory.sweep_interval_s`.

Reads already refuse expired rows (checked in SQL at read time); the sweeper makes sure they are also
gone from disk, so retention is real deletion and not just hiding.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from voicegate.internal.memory.runtime import FrontendMemoryRuntime

log = logging.getLogger(__name__)


class RetentionSweeper:
    def __init__(self, runtime: FrontendMemoryRuntime, interval_s: float) -> None:
        self._runtime = runtime
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="memory-sweeper")

    async def sweep(self) -> dict[str, int]:
        removed = await self._runtime.purge_expired()
        if any(removed.values()):
            log.info("expired memory deleted", extra={"removed": removed})
        return removed

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database may be down; try again next round
                log.warning("memory sweep failed: %s", type(exc).__name__)
            await asyncio.sleep(self._interval_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
