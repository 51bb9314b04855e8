"""Memory changes across processes: PostgreSQL LISTEN/NOTIFY.

The PostgreSQL provider sends a notice on the `voicegate_memory` channel inside every transaction that
changes or erases an owner (payload: the sender's node id, the owner key, an HMAC, and the kind of
change; never content), so the notice reaches every process on the database exactly when the change
commits, whoever made it: a server node, the CLI, a script. Every other node drops its cached copy,
reloads it for the calls it hosts, and tells that owner's connected clients (memory.changed), exactly
as for a change made locally.

Notices sent while a listener is disconnected are lost, so a listener that (re)connects resyncs: it
drops every cached copy and reloads the owners whose calls are live here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from internal.db import Database
from internal.memory.providers.pgvector import CHANGE_CHANNEL
from internal.memory.runtime import FrontendMemoryRuntime

log = logging.getLogger(__name__)

RECONNECT_S = 2.0
LISTENER_NAME = "voicegate-memory-listener"  # application_name of the LISTEN connection


def parse_notice(payload: str) -> tuple[str, str, str]:
    """(node id, owner key, kind) of a notice; kind is "changed" when an older sender left it out."""
    node, _, rest = payload.partition(":")
    owner, _, kind = rest.partition(":")
    return node, owner, kind or "changed"


class MemoryChangeBus:
    def __init__(self, database: Database, runtime: FrontendMemoryRuntime, node_id: str) -> None:
        self._db = database
        self._runtime = runtime
        self.node_id = node_id
        self._task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()
        self.resyncs = 0  # how many times a reconnect made this node drop its caches

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="memory-change-bus")

    async def _listen(self) -> None:
        connected_before = False
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self._db.uri, autocommit=True, application_name=LISTENER_NAME) as conn:
                    await conn.execute(f"LISTEN {CHANGE_CHANNEL}")
                    if connected_before:  # whatever was sent while we were away is lost: start over
                        await self._runtime.resync()
                        self.resyncs += 1
                        log.info("memory change listener reconnected; caches dropped and reloaded")
                    connected_before = True
                    self.listening.set()
                    async for note in conn.notifies():
                        node, owner, _kind = parse_notice(note.payload)
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
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
