"""The agent's voice as a real aiortc caller hears it: Opus the node encoded itself, cached silence while
the agent is quiet, and PCMU for a caller that offers no Opus."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from aiortc import RTCRtpSender

from tests.pipeline.conftest import ScriptedStt
from tests.speech import active_ms, transcribe
from tests.webrtc.harness import LiveServer, WhipClient, live_server
from voicegate.internal.audio.resample import resample
from voicegate.internal.config import Config
from voicegate.internal.peer.tracks import AgentAudioTrack
from voicegate.internal.webrtc.call import attached_call

pytestmark = pytest.mark.slow

# "world" alone is a choice so that a reply that lost its first word would be heard as such.
REPLY_PHRASES = ["hello world", "world", "goodbye", "what time is it"]


def outbound_track(server: LiveServer, client: WhipClient) -> AgentAudioTrack:
    session = server.session_at(client.location)
    assert session is not None
    call = attached_call(session)
    assert call is not None
    return call.peer.outbound


async def reply_heard(client: WhipClient, heard_rate: int = 48000) -> bytes:
    """Ask by typing, as the page can; return what the caller heard of the answer (decoded at
    `heard_rate`: 48 kHz for Opus, 8 kHz for PCMU), at 16 kHz."""
    client.send({"type": "text", "text": "say hello world"})
    thinking = await client.wait_for(lambda e: e["type"] == "state" and e["state"] == "thinking")
    await client.wait_said("Hello world.")  # sent once the reply has played out
    await asyncio.sleep(0.5)  # the last packets in flight
    return resample(client.heard_since(client.arrived_at(thinking)), heard_rate, 16000)


async def test_a_reply_after_five_seconds_of_quiet_is_heard_whole_and_the_quiet_is_silence(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http)).status_code == 201
        await client.wait_channel_open()
        await client.wait_for(lambda e: e["type"] == "connection")
        track = outbound_track(server, client)
        assert track.opus is not None, "an Opus call gets the node's own encoding"
        await asyncio.sleep(1.0)  # past the call's first packets
        quiet_from = time.monotonic()
        await asyncio.sleep(5.0)  # the agent says nothing for five seconds
        quiet = np.frombuffer(b"".join(pcm for at, pcm in client.heard if at >= quiet_from), np.int16)
        assert len(quiet) > 0, "packets keep flowing while the agent is quiet"
        assert np.abs(quiet).max() < 50, "the cached silence decodes to silence"

        audio = await reply_heard(client)
        assert active_ms(audio, 16000) > 300, "the reply should be audible"
        assert transcribe(audio, 16000, REPLY_PHRASES) == "hello world"
        assert track.opus.encoded < track.frames_sent / 2  # the quiet cost no encoder runs
        await client.close()


async def test_a_caller_offering_only_pcmu_hears_the_reply(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        pcmu = [c for c in RTCRtpSender.getCapabilities("audio").codecs if c.mimeType == "audio/PCMU"]
        client.pc.getTransceivers()[0].setCodecPreferences(pcmu)
        response = await client.dial(http)
        assert response.status_code == 201 and "opus" not in response.text.lower()
        await client.wait_channel_open()
        await client.wait_for(lambda e: e["type"] == "connection")
        assert outbound_track(server, client).opus is None  # aiortc encodes PCMU from our frames

        audio = await reply_heard(client, heard_rate=8000)
        assert active_ms(audio, 16000) > 300, "the reply should be audible"
        assert transcribe(audio, 16000, REPLY_PHRASES) == "hello world"
        await client.close()
