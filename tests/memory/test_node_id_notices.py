"""The memory change notices name the node with the same id as its logs, metrics and /health.

docs/scaling.md: a notice is `node id:owner key:changed|erased`; the node id is `server.node_id`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from tests.memory.conftest import base_config
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.notify import parse_notice
from voicegate.internal.memory.provider import ChangeContext
from voicegate.internal.memory.providers.pgvector import CHANGE_CHANNEL
from voicegate.server.gateway import Gateway

pytestmark = pytest.mark.slow


async def test_the_postgres_provider_notices_carry_the_configured_node_id(tmp_path: Path, fresh_db: str) -> None:
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.server.node_id = "node-lisbon"
    config.memory.enabled = True
    config.memory.embedding = "none"
    config.memory.owner_key_secret = "shared-between-nodes"
    config.pgvector.connection_string = fresh_db
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    try:
        assert gateway.memory is not None and gateway.memory_bus is not None
        await asyncio.wait_for(gateway.memory_bus.listening.wait(), 30)
        assert gateway.node_id == gateway.memory_bus.node_id == "node-lisbon"
        assert (await gateway.health())["node_id"] == "node-lisbon"
        async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as listener:
            await listener.execute(f"LISTEN {CHANGE_CHANNEL}")
            owner = gateway.memory.owner_key(CallerIdentity("jwt", "alice"))
            assert owner is not None
            await gateway.memory.edit(owner, "memory", "append", content="- Alice moved to Lisbon.",
                                      context=ChangeContext("api"))
            notices = [parse_notice(n.payload) async for n in listener.notifies(timeout=1.0)]
    finally:
        await gateway.stop()
    assert ("node-lisbon", owner, "changed") in notices
