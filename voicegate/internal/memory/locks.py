"""Per-owner write locks within one process (across processes the store's own lock serialises)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class OwnerLocks:
    """One asyncio lock per owner, dropped when nobody holds or waits for it (bounded by live writers)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, owner: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(owner, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[owner] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[owner]
            if users <= 1:
                del self._locks[owner]
            else:
                self._locks[owner] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)
