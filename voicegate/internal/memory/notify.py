"""Memory changes across processes: PostgreSQL LISTEN/NOTIFY.

A notice on the `voicegate_memory` channel says that an owner's memory changed (payload: the sender's
node id, the owner key and the kind of change; never content). Every other node drops its cached copy,
reloads it for the calls it hosts, and tells that owner's connected clients (memory.changed), exactly
as for a change made locally. Who sends it:
- the PostgreSQL provider, inside every transaction that changes or erases an owner, so the notice
  reaches every process exactly when the change commits, whoever made it (a node, the CLI, a script);
  it says so with `notifies_changes = True` and the bus never doubles its notices;
- for any other provider, this bus, from the runtime's `on_changed` hook, right after the provider
  reported the change done (a change made outside a runtime with a bus is not announced).

Notices sent while a listener is disconnected are lost, so a listener that (re)connects resyncs: it
drops every cached copy and reloads the owners whose calls are live here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from voicegate.internal.db import Database
from voicegate.internal.memory.providers.pgvector import CHANGE_CHANNEL
from voicegate.internal.memory.runtime import FrontendMemoryRuntime

log = logging.getLogger(__name__)

RECONNECT_S = 2.0
LISTENER_NAME = "voicegate-memory-listener"  # application_name of the LISTEN connection
SEND_DRAIN_S = 5.0  # how long stopping waits for notices still being sent


def parse_notice(payload: str) -> tuple[str, str, str]:
    """(node id, owner key, kind) of a notice; kind is "changed" when an older sender left it out."""
    node, _, rest = payload.partition(":")
    owner, _, kind = rest.partition(":")
    return node, owner, kind or "changed"


def notice(node_id: str, owner: str, kind: str = "changed") -> str:
    return f"{node_id}:{owner}:{kind}"


class MemoryChangeBus:
    def __init__(self, database: Database, runtime: FrontendMemoryRuntime, node_id: str) -> None:
        self._db = database
        self._runtime = runtime
        self.node_id = node_id
        self._task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self.listening = asyncio.Event()
        self.resyncs = 0  # how many times a reconnect made this node drop its caches
        self.announces = not runtime.notifies_changes  # False: the provider sends its own notices
        self.sent = 0  # notices this bus sent for its provider

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="memory-change-bus")
        if self.announces:
            self._runtime.on_changed.append(self.announce)

    def announce(self, owner: str) -> None:
        """The runtime's change hook (synchronous): send the notice in the background, so a write never
        waits on, or fails with, the notice."""
        task = asyncio.create_task(self._send(owner), name="memory-change-notice")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, owner: str) -> None:
        try:
            async with self._db.pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_notify(%s, %s)", (CHANGE_CHANNEL, notice(self.node_id, owner)))
            self.sent += 1
        except Exception as exc:  # other nodes pick the change up when they next reload (a new call)
            log.warning("memory change notice not sent (%s); other nodes keep their cached copy",
                        type(exc).__name__)

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
        if self.announce in self._runtime.on_changed:
            self._runtime.on_changed.remove(self.announce)
        if self._sending:  # the last writes' notices (hang-up writes land just before this) go out
            await asyncio.wait(list(self._sending), timeout=SEND_DRAIN_S)
            for late in list(self._sending):
                late.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
