"""`memory.outbox_max_entries` through the gateway: while PostgreSQL is down, the hang-up outbox keeps at
most that many pending writes, the oldest going first, and lands the ones it kept once the store is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.memory.test_calls import SAM, memory_config
from tests.memory.test_outbox import wait_until
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.db import EmbeddedPostgres
from voicegate.server.gateway import Gateway


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this test's own, so stopping it disturbs no other test."""
    server = EmbeddedPostgres(tmp_path / "pg")
    server.start_sync()
    yield server
    server.stop_sync()


async def test_a_full_outbox_keeps_the_newest_hang_ups_and_lands_them(own_postgres: EmbeddedPostgres,
                                                                      tmp_path: Path) -> None:
    uri = own_postgres.start_sync()
    config = memory_config(tmp_path, uri, outbox_max_entries=2, write_retry_max_s=1.0, read_timeout_ms=2000)
    config.pgvector.connect_timeout_s = 1.0
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    try:
        assert gateway.sessions is not None and gateway.session_memory is not None and gateway.memory is not None
        sessions = []
        for n in range(4):  # four calls, each with something said (the hang-up path is what is tested)
            session = await gateway.open_session(SAM, "talk")
            session.conversation.transcript.add("user", f"please note parcel number {n}{n}{n} is missing")
            session.conversation.transcript.add("agent", "I have noted that.")
            sessions.append(session)
        own_postgres.stop_sync()  # the store goes away just before the callers hang up
        outbox = gateway.session_memory.outbox
        for ended, session in enumerate(sessions, start=1):
            await gateway.sessions.end(session, "caller hung up")
            await wait_until(lambda n=ended: outbox.pending + outbox.dropped == n)  # in order: oldest first
        assert outbox.pending == 2 and outbox.dropped == 2 and outbox.landed == 0
        assert len(list((tmp_path / "data" / "memory-outbox").glob("*.json"))) == 2
        own_postgres.start_sync()  # back: the two it kept land
        await wait_until(lambda: outbox.pending == 0, timeout=90)
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        memory = (await gateway.memory.latest(owner))["memory"].content
        assert "222" in memory and "333" in memory  # the newest two
        assert "000" not in memory and "111" not in memory  # the oldest went first
        assert outbox.landed == 2
    finally:
        await gateway.stop()
