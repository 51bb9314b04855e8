"""A draining node and its browser calls: real aiortc callers against the real app over HTTP.

The SIGTERM that starts a drain, and the SIP side, are in tests/test_drain.py; here the drain is started
as server/serve.py starts it (server.drain.drain on the gateway), then the server shuts down as it would.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.webrtc.harness import WhipClient, live_server, wait_until
from voicegate.internal.config import Config
from voicegate.server.drain import drain

pytestmark = pytest.mark.slow


async def test_a_live_browser_call_carries_on_while_new_ones_get_503_then_is_closed_at_the_deadline(
        config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        caller = WhipClient()
        assert (await caller.dial(http)).status_code == 201
        await caller.wait_channel_open()
        session = server.session_at(caller.location)
        assert session is not None

        draining = asyncio.create_task(drain(server.gateway, 2.0))
        await wait_until(lambda: server.gateway.draining, what="the drain to start")
        latecomer = WhipClient()
        refused = await latecomer.dial(http)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
        assert int(refused.headers["retry-after"]) > 0
        await latecomer.close()
        health = await http.get("/health")
        assert health.status_code == 503 and health.json()["draining"] is True
        assert not session.ended and caller.pc.connectionState == "connected"  # the live call goes on

        assert await draining == "deadline"
        assert not session.ended  # the drain only waits; the shutdown that follows ends what is left
    assert session.ended and "shutdown" in session.end_reason
    await caller.close()


async def test_the_drain_ends_as_soon_as_the_last_browser_call_hangs_up(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        caller = WhipClient()
        assert (await caller.dial(http)).status_code == 201
        await caller.wait_channel_open()
        draining = asyncio.create_task(drain(server.gateway, 120.0))
        await wait_until(lambda: server.gateway.draining, what="the drain to start")
        assert not draining.done()
        assert (await caller.hang_up(http)).status_code == 200  # in-dialog requests still served
        assert await asyncio.wait_for(draining, 30) == "idle"
        await caller.close()
