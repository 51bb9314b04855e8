"""Memory changes across nodes: PostgreSQL LISTEN/NOTIFY.

Every voicegate process sharing one database announces each persisted change of an owner's memory on
the `voicegate_memory` channel (payload: this node's id and the owner key, an HMAC, never content).
Every other node drops its cached copy, reloads it for the calls it hosts, and tells that owner's
connected clients (memory.changed), exactly as for a change made locally.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

import psycopg

from internal.db import Database
from internal.memory.runtime import FrontendMemoryRuntime

log = logging.getLogger(__name__)

CHANNEL = "voicegate_memory"
RECONNECT_S = 2.0


class MemoryChangeBus:
    def __init__(self, database: Database, runtime: FrontendMemoryRuntime) -> None:
        self._db = database
        self._runtime = runtime
        self.node_id = secrets.token_hex(6)
        self._task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.listening = asyncio.Event()

    def start(self) -> None:
        self._runtime.on_changed.append(self._announce)
        self._task = asyncio.create_task(self._listen(), name="memory-change-bus")

    def _announce(self, owner: str) -> None:
        task = asyncio.create_task(self._notify(owner))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _notify(self, owner: str) -> None:
        try:
            async with self._db.pool.connection() as conn:
                await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{self.node_id}:{owner}"))
        except Exception as exc:  # other nodes then learn of it when their cache is next refreshed
            log.warning("could not announce a memory change to other nodes: %s", type(exc).__name__)

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self._db.uri, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    async for note in conn.notifies():
                        node, _, owner = note.payload.partition(":")
                        if node != self.node_id and owner:
                            await self._runtime.changed_elsewhere(owner)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.listening.clear()
                log.warning("memory change listener lost its connection (%s); reconnecting",
                            type(exc).__name__)
                await asyncio.sleep(RECONNECT_S)

    async def stop(self) -> None:
        if self._announce in self._runtime.on_changed:
            self._runtime.on_changed.remove(self._announce)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
