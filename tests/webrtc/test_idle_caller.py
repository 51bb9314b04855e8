"""An idle caller over WebRTC (an aiortc client over WHIP that sends only silence): asked whether they are there,
then told goodbye, and the session ended from the server's side."""

from __future__ import annotations

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.speech import active_ms
from tests.webrtc.harness import WhipClient, live_server, wait_until
from voicegate.internal.config import Config

pytestmark = pytest.mark.slow


async def test_a_silent_caller_is_prompted_then_the_session_is_ended(config: Config) -> None:
    config.pipeline.idle_prompt_s = 1.0
    config.pipeline.idle_hangup_s = 1.0
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()  # aiortc's AudioStreamTrack: silence, 20 ms at a time
        assert (await client.dial(http)).status_code == 201
        await client.wait_channel_open()
        await client.wait_for(lambda e: e["type"] == "connection")
        session = server.session_at(client.location)
        prompt = await client.wait_for(lambda e: e["type"] == "idle" and e["step"] == "prompt")
        goodbye = await client.wait_for(lambda e: e["type"] == "idle" and e["step"] == "goodbye")
        ended = await client.wait_for(lambda e: e["type"] == "connection" and e["state"] == "ended")
        assert ended["reason"] == "agent ended the call"
        assert prompt["quiet_ms"] >= 1000 and goodbye["quiet_ms"] >= 1000
        # The client heard the lines (the prompt is said before its event reaches the page: look from the
        # call's start), and neither was the agent's answer.
        assert active_ms(b"".join(pcm for _, pcm in client.heard), 48000) > 1000
        assert [e for e in client.events if e["type"] in ("transcript", "response")] == []
        assert session is not None and session.ended and session.conversation.history == []
        await wait_until(lambda: client.pc.connectionState == "closed", what="the hang-up to reach the client")
        await client.close()


async def test_a_caller_who_answers_the_prompt_by_typing_is_asked_again_not_hung_up(config: Config) -> None:
    config.pipeline.idle_prompt_s = 1.0
    config.pipeline.idle_hangup_s = 1.0
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http)).status_code == 201
        await client.wait_channel_open()
        await client.wait_for(lambda e: e["type"] == "idle" and e["step"] == "prompt")
        client.send({"type": "text", "text": "say hello world"})
        await client.wait_said("Hello world.")
        answered = len(client.events)
        # Typing was an answer: the count starts over, so the next silence is asked about again.
        following = await client.wait_for(lambda e: e["type"] == "idle" and client.events.index(e) >= answered)
        assert following["step"] == "prompt", client.events
        session = server.session_at(client.location)
        assert session is not None and not session.ended
        await client.close()
