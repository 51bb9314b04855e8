"""A real WebRTC call answered by a Realtime model: an aiortc caller over WHIP (Opus both ways) against the
server of tests/webrtc/harness.py with `[realtime] enabled`, the fake (tests/fakes/realtime_fake.py) hearing
with Whisper and speaking with Piper.

The caller is the evals' WebRTC phone (internal/evals/webrtc_phone.py, aiortc over WHIP like the harness's
WhipClient) because its mouth speaks when the test says so: the caller talks once the greeting has been
heard, whatever time that takes on a loaded machine.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.fakes.realtime_fake import FakeRealtime
from tests.fakes.realtime_voice import shared_whisper
from tests.sip_calls.conftest import agent_said, eventually, loud_part
from tests.speech import neural, silence
from tests.webrtc.harness import live_server, webrtc_config
from voicegate.internal.evals.voice import Sound
from voicegate.internal.evals.webrtc_phone import EAR_RATE, OPUS_RATE, WebRtcPhone
from voicegate.internal.session import Session

pytestmark = pytest.mark.slow

KEY = "rt-webrtc-key"
WAIT_S = 120.0  # generous: Whisper, Piper, Opus and the call share two loaded cores
GREETING = "Hello, you are through to the test line."
QUESTION = "When does my parcel arrive?"
ANSWER = "Your parcel arrives on Monday morning."


async def test_a_webrtc_call_is_greeted_by_the_model_and_its_spoken_turn_answered(tmp_path: Path) -> None:
    config = webrtc_config(tmp_path)
    config.pipeline.greeting = GREETING
    async with FakeRealtime(api_key=KEY) as fake:
        fake.script_reply(ANSWER)
        config.realtime.enabled = True
        config.realtime.url = fake.url
        config.realtime.api_key = KEY
        async with live_server(config, stt=shared_whisper()) as server, server.http() as http:
            phone = WebRtcPhone(None)
            await phone.dial(http, "")
            session = server.sessions.get(phone.session_id)
            assert isinstance(session, Session)
            await agent_said(session, "test line", WAIT_S)
            await eventually(lambda: phone.ear.quiet_for(0.5), WAIT_S, "the greeting to end")

            (pcm,) = await asyncio.to_thread(neural, [QUESTION], OPUS_RATE)
            asked = phone.mouth.say([Sound(pcm=pcm + silence(200, OPUS_RATE))])
            await asyncio.wait_for(asked.done.wait(), WAIT_S)
            assert asked.finished_at is not None
            await agent_said(session, "Monday", WAIT_S)
            await eventually(lambda: phone.ear.loud_after(asked.finished_at or 0) is not None, WAIT_S, "the reply")
            await eventually(lambda: phone.ear.quiet_for(0.5), WAIT_S, "the reply to end")
            reply = loud_part(phone.ear.heard.between(asked.finished_at, time.monotonic()), EAR_RATE)
            answer = (await shared_whisper().transcribe(reply, EAR_RATE)).lower()
            await phone.hang_up()
            await eventually(lambda: server.sessions.get(phone.session_id) is None, WAIT_S, "the call to end")

    assert not fake.failures, fake.failures
    assert fake.said[:2] == [GREETING, ANSWER], fake.said
    assert len(fake.heard) == 1 and "parcel" in fake.heard[0].lower(), fake.heard
    entries = session.conversation.transcript.entries()
    users = [e.text.lower() for e in entries if e.role == "user"]
    assert len(users) == 1 and "parcel" in users[0], entries
    assert [e.text for e in entries if e.role == "agent"] == [GREETING, ANSWER], entries
    assert "monday" in answer and ("parcel" in answer or "arriv" in answer), answer
    # The caller heard the greeting before it spoke (Opus, 48 kHz in, heard at 16 kHz).
    first = phone.ear.heard.frames[0].at
    greeting = loud_part(phone.ear.heard.between(first, asked.started_at or first), EAR_RATE)
    heard_greeting = (await shared_whisper().transcribe(greeting, EAR_RATE)).lower()
    assert "test line" in heard_greeting or "through" in heard_greeting, heard_greeting
