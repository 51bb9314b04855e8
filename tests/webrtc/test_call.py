"""A browser-like aiortc caller over WHIP: real espeak speech in, real pocketsphinx, the reply heard back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.speech import active_ms, transcribe
from tests.webrtc.harness import WhipClient, live_server, wait_until
from voicegate.internal.audio.resample import resample
from voicegate.internal.config import Config
from voicegate.internal.config.providers import PocketsphinxConfig
from voicegate.internal.stt.pocketsphinx import PocketsphinxSpeechToText

pytestmark = pytest.mark.slow

CALLER_PHRASES = ["say hello world", "what time is it", "goodbye", "my name is sam", "i want to book a table"]
REPLY_PHRASES = ["hello world", "goodbye", "what time is it", "my name is sam"]


@pytest.fixture
async def pocketsphinx() -> AsyncIterator[PocketsphinxSpeechToText]:
    engine = PocketsphinxSpeechToText(PocketsphinxConfig(phrases=CALLER_PHRASES, workers=1))
    yield engine
    await engine.aclose()


def is_final(role: str) -> Callable[[dict[str, object]], bool]:
    return lambda e: e["type"] == "transcript" and e["role"] == role and bool(e["final"])


async def test_spoken_question_is_transcribed_answered_and_heard(
        config: Config, speech_wav: Callable[..., Path], pocketsphinx: PocketsphinxSpeechToText) -> None:
    async with live_server(config, stt=pocketsphinx) as server, server.http() as http:
        client = WhipClient(speech_wav("say hello world"))
        response = await client.dial(http)
        assert response.status_code == 201, response.text
        assert response.headers["content-type"].startswith("application/sdp")
        assert response.headers["location"].startswith("/whip/")
        assert response.headers["x-resume-status"] == "new"
        assert response.headers["etag"].startswith('"')

        connected = await client.wait_for(lambda e: e["type"] == "connection")
        assert connected["state"] == "connected"
        assert connected["session_id"] == client.location.rsplit("/", 1)[-1]
        heard_user = await client.wait_for(is_final("user"))
        assert "hello world" in heard_user["text"]
        thinking = await client.wait_for(lambda e: e["type"] == "state" and e["state"] == "thinking")
        reply = await client.wait_for(lambda e: e["type"] == "response")
        assert reply["text"] == "Hello world."
        await client.wait_for(is_final("agent"))  # sent once the reply has been played out
        await asyncio.sleep(0.5)  # the last packets in flight

        audio = resample(client.heard_since(client.arrived_at(thinking)), 48000, 16000)
        assert active_ms(audio, 16000) > 300, "the reply should be audible"
        assert "hello world" in transcribe(audio, 16000, REPLY_PHRASES)
        states = [e["state"] for e in client.of_type("state")]
        assert states[:3] == ["thinking", "speaking", "listening"]
        assert {"stt", "first_audio"} <= {e["stage"] for e in client.of_type("timing")}

        ended = await client.hang_up(http)
        assert ended.status_code == 200
        ending = await client.wait_for(lambda e: e["type"] == "connection" and e["state"] == "ended")
        assert ending["reason"] == "client hung up"
        assert len(server.sessions) == 0
        await client.close()


async def test_a_typed_turn_on_the_data_channel_is_answered(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http)).status_code == 201
        await client.wait_channel_open()
        await client.wait_for(lambda e: e["type"] == "connection")
        client.send({"type": "text", "text": "say hello world"})
        typed = await client.wait_for(is_final("user"))
        assert typed["text"] == "say hello world"
        reply = await client.wait_for(lambda e: e["type"] == "response")
        assert reply["text"] == "Hello world."
        await client.wait_said("Hello world.")  # the turn is on record once its reply has played
        session = server.session_at(client.location)
        assert session is not None and session.conversation.turns == 1
        await client.close()


async def test_the_greeting_is_spoken_and_shown_once_the_call_connects(config: Config) -> None:
    config.pipeline.greeting = "Hello there."
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http)).status_code == 201
        greeting = await client.wait_for(is_final("agent"))
        assert greeting["text"] == "Hello there."
        await wait_until(lambda: len(client.heard) > 50, what="agent audio")
        await client.close()
        await wait_until(lambda: server.session_at(client.location) is None
                         or server.session_at(client.location).attached == 0,  # type: ignore[union-attr]
                         what="the server noticing the drop")


async def test_saying_goodbye_ends_the_call_after_the_farewell(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http)).status_code == 201
        await client.wait_channel_open()
        await client.wait_for(lambda e: e["type"] == "connection")
        session = server.session_at(client.location)
        client.send({"type": "text", "text": "goodbye"})
        farewell = await client.wait_for(is_final("agent"))
        assert farewell["text"].startswith("Goodbye")
        ended = await client.wait_for(lambda e: e["type"] == "connection" and e["state"] == "ended")
        assert ended["reason"] == "agent ended the call"
        assert session is not None and session.ended and len(server.sessions) == 0
        await wait_until(lambda: client.pc.connectionState == "closed", what="the hang-up to reach the client")
        await client.close()


async def test_a_crash_in_one_call_ends_only_that_session(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        healthy, broken = WhipClient(), WhipClient()
        for client in (healthy, broken):
            assert (await client.dial(http)).status_code == 201
            await client.wait_for(lambda e: e["type"] == "connection")
        victim = server.session_at(broken.location)
        assert victim is not None and victim.pipeline is not None

        def explode() -> bytes | None:
            raise RuntimeError("a bug in the pipeline")

        victim.pipeline.pull_audio = explode  # type: ignore[method-assign]
        ended = await broken.wait_for(lambda e: e["type"] == "connection" and e["state"] == "ended")
        assert ended["reason"] == "transport error"
        assert victim.ended
        survivor = server.session_at(healthy.location)
        assert survivor is not None and not survivor.ended
        await healthy.wait_channel_open()
        healthy.send({"type": "text", "text": "say hello world"})
        assert (await healthy.wait_for(lambda e: e["type"] == "response"))["text"] == "Hello world."
        await healthy.close()
        await broken.close()
