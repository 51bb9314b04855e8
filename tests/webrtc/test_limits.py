"""Limits: the live-session cap, per-address rate limits, reaping abandoned calls, clean shutdown."""

from __future__ import annotations

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.webrtc.harness import WhipClient, live_server, wait_until
from voicegate.internal.config import Config
from voicegate.internal.webrtc.call import CALL_KEY

pytestmark = pytest.mark.slow


async def test_past_max_sessions_new_calls_get_503_but_a_resume_still_works(config: Config) -> None:
    config.server.max_sessions = 1
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        first = WhipClient()
        assert (await first.dial(http)).status_code == 201
        await first.wait_channel_open()  # connected: its close is seen at once (a peer that never connects waits 30 s)
        refused = WhipClient()
        response = await refused.dial(http)
        assert response.status_code == 503
        assert int(response.headers["retry-after"]) > 0
        assert response.json()["error"]["code"] == "at_capacity"
        await refused.close()
        await first.close()
        await wait_until(lambda: server.sessions.sessions()[0].attached == 0, what="the drop")

        back = WhipClient()
        response = await back.dial(http, resume=first.resume_token)
        assert response.status_code == 201, response.text
        assert response.headers["x-resume-status"] == "resumed"
        # A stale token at the cap is a new session, and there is no room for one.
        stale = WhipClient()
        assert (await stale.dial(http, resume=first.resume_token)).status_code == 503
        await stale.close()
        await back.close()


async def test_too_many_calls_from_one_address_get_429_with_retry_after(config: Config) -> None:
    config.server.whip_rate_per_min = 2
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        statuses = []
        for _ in range(3):
            response = await http.post("/whip", content="v=0", headers={"Content-Type": "text/plain"})
            statuses.append(response.status_code)
        assert statuses == [415, 415, 429]
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["error"]["code"] == "rate_limited"


async def test_patch_is_rate_limited_on_its_own_bucket(config: Config) -> None:
    config.server.patch_rate_per_min = 1
    config.server.whip_rate_per_min = 1
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http)).status_code == 201
        headers = {"Content-Type": "application/trickle-ice-sdpfrag", "If-Match": "*",
                   "X-Resume-Token": client.resume_token}
        assert (await http.patch(client.location, content="a=ice-ufrag:x", headers=headers)).status_code == 405
        limited = await http.patch(client.location, content="a=ice-ufrag:x", headers=headers)
        assert limited.status_code == 429
        assert int(limited.headers["retry-after"]) >= 1
        await client.close()


async def test_zero_disables_the_rate_limit(config: Config) -> None:
    config.server.whip_rate_per_min = 0
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        for _ in range(40):
            response = await http.post("/whip", content="v=0", headers={"Content-Type": "text/plain"})
            assert response.status_code == 415


async def test_the_reaper_ends_sessions_whose_transport_went_away(config: Config) -> None:
    config.server.session_grace_ms = 200
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        clients = [WhipClient() for _ in range(2)]
        for client in clients:
            assert (await client.dial(http)).status_code == 201
            await client.wait_for(lambda e: e["type"] == "connection")
        assert len(server.sessions) == 2
        ended = server.sessions.sessions()
        for client in clients:
            await client.close()
        await wait_until(lambda: len(server.sessions) == 0, what="the reaper")
        assert all(s.ended and s.end_reason == "grace period expired" for s in ended)
        assert all(s.pipeline is None for s in ended)


async def test_shutdown_closes_every_peer_connection(config: Config) -> None:
    server_ctx = live_server(config, stt=ScriptedStt([]))
    server = await server_ctx.__aenter__()
    try:
        async with server.http() as http:
            clients = [WhipClient() for _ in range(2)]
            for client in clients:
                assert (await client.dial(http)).status_code == 201
                await client.wait_for(lambda e: e["type"] == "connection")
        peers = [s.slots.get(CALL_KEY).peer for s in server.sessions.sessions()]
        assert len(peers) == 2
    finally:
        await server_ctx.__aexit__(None, None, None)
    assert all(peer.closed and peer.pc.connectionState == "closed" for peer in peers)
    for client in clients:
        ended = await client.wait_for(lambda e: e["type"] == "connection" and e["state"] == "ended", timeout=5)
        assert ended["reason"] == "shutdown"
        await wait_until(lambda c=client: c.pc.connectionState == "closed", what="the client seeing the hang-up")  # type: ignore[misc]
        await client.close()
