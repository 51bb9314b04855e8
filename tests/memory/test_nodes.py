"""Two voicegate nodes on one PostgreSQL: memory changes cross between them through LISTEN/NOTIFY.

Each node is a full gateway with its own connection pool and its own memory cache, in one test process;
the only thing they share is the database, as two processes would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import websockets

from tests.memory.test_api import SECRET, auth, token
from tests.webrtc.harness import LiveServer, live_server, webrtc_config
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity


@contextlib.asynccontextmanager
async def node(tmp_path: Path, name: str, db: str) -> AsyncIterator[LiveServer]:
    config = webrtc_config(tmp_path / name, jwt_secret=SECRET, patch_rate_per_min=0)
    config.memory.enabled = True
    config.pgvector.connection_string = db
    config.memory.owner_key_secret = "shared-between-nodes"
    async with live_server(config) as live:
        assert live.gateway.memory_bus is not None
        await asyncio.wait_for(live.gateway.memory_bus.listening.wait(), 30)
        yield live


@pytest.mark.slow
async def test_a_patch_on_node_a_reaches_clients_and_calls_on_node_b(tmp_path: Path, fresh_db: str) -> None:
    async with node(tmp_path, "a", fresh_db) as a, node(tmp_path, "b", fresh_db) as b:
        # Alice is in a call on node B and has the page open on node B.
        gateway_b = b.gateway
        assert gateway_b.memory is not None
        session = await gateway_b.open_session(CallerIdentity("jwt", "alice"), "webrtc")
        sink = CollectingSink()
        gateway_b.new_pipeline(session, 16000, sink)
        url = b.url.replace("http://", "ws://") + f"/api/events?token={token('alice')}"
        async with websockets.connect(url) as events_b:
            async with a.http() as http:
                response = await http.patch("/api/memory", headers=auth("alice"),
                                            json={"document": "memory", "action": "append",
                                                  "content": "- Alice moved to Lisbon."})
            assert response.status_code == 200, response.text
            event = json.loads(await asyncio.wait_for(events_b.recv(), 15))
            assert event["type"] == "memory.changed" and set(event) == {"type", "ts"}
        # The live call on node B picks the change up at its next idle point.
        assert any(e.type == "memory.changed" for e in sink.events)
        assert gateway_b.session_memory is not None
        await gateway_b.session_memory.before_turn(session)
        assert "Lisbon" in session.conversation.memory
        # A new call on node B reads the updated memory too.
        fresh = await gateway_b.open_session(CallerIdentity("jwt", "alice"), "webrtc")
        assert "Lisbon" in fresh.conversation.memory
        # And bob, on either node, hears nothing of it.
        bob = await gateway_b.open_session(CallerIdentity("jwt", "bob"), "webrtc")
        assert bob.conversation.memory == ""
        for s in (session, fresh, bob):
            await gateway_b.sessions.end(s, "test over")  # type: ignore[union-attr]
