"""Session resume: a new connection carries on the old conversation, once, for the same caller only."""

from __future__ import annotations

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.webrtc.harness import WhipClient, live_server, wait_until
from voicegate.internal.config import Config
from voicegate.internal.identity.jwt import mint_token
from voicegate.internal.webrtc.call import CALL_KEY

pytestmark = pytest.mark.slow

GREETING = "Hello there."


def agent_lines(client: WhipClient) -> list[str]:
    return [e["text"] for e in client.of_type("transcript") if e["role"] == "agent"]


async def hear_greeting_and_one_turn(client: WhipClient) -> None:
    await client.wait_for(lambda e: e["type"] == "transcript" and e["role"] == "agent" and e["text"] == GREETING)
    await client.wait_channel_open()
    client.send({"type": "text", "text": "say hello world"})
    await client.wait_for(lambda e: e["type"] == "transcript" and e["role"] == "agent" and e["text"] == "Hello world.")


async def test_redial_within_the_grace_period_resumes_the_same_conversation_without_a_second_greeting(
        config: Config) -> None:
    config.pipeline.greeting = GREETING
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        first = WhipClient()
        assert (await first.dial(http)).status_code == 201
        await hear_greeting_and_one_turn(first)
        session = server.session_at(first.location)
        assert session is not None
        await first.close()  # the tab vanished: no DELETE
        await wait_until(lambda: session.attached == 0, what="the server noticing the drop")

        second = WhipClient()
        response = await second.dial(http, resume=first.resume_token)
        assert response.status_code == 201
        assert response.headers["x-resume-status"] == "resumed"
        assert response.headers["location"] == first.location
        assert response.headers["x-resume-token"] not in (first.resume_token, session.id)
        assert response.headers["etag"] != first.response.headers["etag"]  # type: ignore[union-attr]
        resumed = await second.wait_for(lambda e: e["type"] == "connection")
        assert resumed["state"] == "resumed" and resumed["session_id"] == session.id
        assert server.session_at(second.location) is session
        assert session.attached == 1

        await second.wait_channel_open()
        second.send({"type": "text", "text": "say hello world"})
        await second.wait_for(lambda e: e["type"] == "response")
        await second.wait_said("hello")  # the turn is on record once its reply has played
        assert session.conversation.turns == 2
        users = [m.content for m in session.conversation.history if m.role == "user"]
        assert users == ["say hello world", "say hello world"]
        spoken = [e.text for e in session.conversation.transcript.entries() if e.role == "agent"]
        assert spoken.count(GREETING) == 1 and spoken[0] == GREETING
        assert GREETING not in agent_lines(second), "a resumed call must not be greeted again"
        await second.close()


async def test_a_resume_token_works_once_only(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        first = WhipClient()
        assert (await first.dial(http)).status_code == 201
        await first.close()
        second = WhipClient()
        assert (await second.dial(http, resume=first.resume_token)).headers["x-resume-status"] == "resumed"
        await second.close()
        replay = WhipClient()
        response = await replay.dial(http, resume=first.resume_token)
        assert response.status_code == 201
        assert response.headers["x-resume-status"] == "expired"
        assert response.headers["location"] != first.location
        assert len(server.sessions) == 2
        await replay.close()


async def test_after_the_grace_period_the_token_is_expired_and_a_new_conversation_starts(config: Config) -> None:
    config.server.session_grace_ms = 300
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        first = WhipClient()
        assert (await first.dial(http)).status_code == 201
        await first.wait_for(lambda e: e["type"] == "connection")
        await first.close()
        await wait_until(lambda: server.session_at(first.location) is None, what="the reaper")
        second = WhipClient()
        response = await second.dial(http, resume=first.resume_token)
        assert response.status_code == 201
        assert response.headers["x-resume-status"] == "expired"
        assert response.headers["location"] != first.location
        connected = await second.wait_for(lambda e: e["type"] == "connection")
        assert connected["state"] == "connected"
        await second.close()


async def test_a_token_presented_by_another_caller_does_not_resume_and_stays_valid_for_its_owner(
        config: Config) -> None:
    config.server.jwt_secret = "a-test-secret-that-is-long-enough"
    server_cfg = config.server

    def token_for(name: str) -> str:
        return mint_token(server_cfg.jwt_secret, name, issuer=server_cfg.jwt_issuer,
                          audience=server_cfg.jwt_audience, ttl_s=600)

    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        alice = WhipClient()
        assert (await alice.dial(http, token=token_for("alice"))).status_code == 201
        await alice.close()

        mallory = WhipClient()
        response = await mallory.dial(http, token=token_for("mallory"), resume=alice.resume_token)
        assert response.status_code == 201
        assert response.headers["x-resume-status"] == "expired"
        stolen_into = server.session_at(mallory.location)
        assert stolen_into is not None and stolen_into.resource_id == "jwt:mallory"
        assert mallory.location != alice.location
        await mallory.close()

        again = WhipClient()
        response = await again.dial(http, token=token_for("alice"), resume=alice.resume_token)
        assert response.headers["x-resume-status"] == "resumed"
        assert response.headers["location"] == alice.location
        await again.close()


async def test_resuming_while_the_old_connection_still_looks_alive_replaces_it(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        first = WhipClient()
        assert (await first.dial(http)).status_code == 201
        await first.wait_for(lambda e: e["type"] == "connection")
        session = server.session_at(first.location)
        assert session is not None
        old_peer = session.slots.get(CALL_KEY).peer
        second = WhipClient()  # the network changed; the server has not noticed the old path die
        response = await second.dial(http, resume=first.resume_token)
        assert response.headers["x-resume-status"] == "resumed"
        await second.wait_for(lambda e: e["type"] == "connection" and e["state"] == "resumed")
        assert old_peer.closed and old_peer.pc.connectionState == "closed"
        assert session.attached == 1
        assert session.slots.get(CALL_KEY).peer is not old_peer
        await first.close()
        await second.close()
