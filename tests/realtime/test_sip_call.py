"""Real SIP calls answered by a Realtime model: the fake (tests/fakes/realtime_fake.py) hears the caller with
Whisper and speaks with Piper, voicegate carries the call with `[realtime] enabled`.

The server is tests/sip_calls/conftest.py's Gateway (SIP on free ports, in the test's loop). The caller is the
evals' SIP phone (internal/evals/sip_phone.py: the product's own SIP user agent and G.711 RTP, a separate
dialog on its own ports) because it speaks when the test says so: each of the caller's turns follows what
it has heard, not a fixed timeline as a sipp audio file would, so a slow machine makes the call longer
but not different. What the caller heard is checked with Whisper, as tests/sip_calls/test_whisper_calls.py does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.fakes.realtime_fake import FakeRealtime
from tests.fakes.realtime_voice import shared_whisper
from tests.sip_calls.conftest import (
    CALLER,
    ServerFactory,
    agent_said,
    caller_stt,  # noqa: F401  (make_server's fixture)
    eventually,
    loud_part,
    make_server,  # noqa: F401  (a fixture)
    sip_calls_config,
)
from tests.speech import neural, silence
from voicegate.internal.config import Config
from voicegate.internal.evals.sip_phone import SipLine, SipPhone
from voicegate.internal.evals.voice import Sound
from voicegate.internal.evals.wire import Utterance

pytestmark = pytest.mark.slow

KEY = "rt-sip-key"
WAIT_S = 120.0  # generous: Whisper, Piper and the call share two loaded cores
GREETING = "Hello, you are through to the test line."
QUESTION = "When does my parcel arrive?"
ANSWER = "Your parcel arrives on Monday morning."
LONG_REPLY = ("Our opening hours are nine in the morning to six in the evening on weekdays, and ten to four on "
              "Saturdays. We are closed on Sundays and on public holidays, and the branch in the town centre "
              "keeps the same hours.")


def realtime_config(tmp_path: Path, fake: FakeRealtime) -> Config:
    config = sip_calls_config(tmp_path)
    config.pipeline.greeting = GREETING
    config.realtime.enabled = True
    config.realtime.url = fake.url
    config.realtime.api_key = KEY
    return config


@asynccontextmanager
async def caller_line() -> AsyncIterator[SipLine]:
    line = SipLine("127.0.0.1", None)
    await line.start()
    try:
        yield line
    finally:
        await line.stop()


async def say(phone: SipPhone, text: str) -> Utterance:
    """The caller says `text` in the Piper voice (G.711 on the wire); returns once it has all been sent."""
    (pcm,) = await asyncio.to_thread(neural, [text], 8000)
    utterance = phone.mouth.say([Sound(pcm=pcm + silence(200, 8000))])
    await asyncio.wait_for(utterance.done.wait(), WAIT_S)
    return utterance


async def quiet_again(phone: SipPhone, since: float) -> float:
    """Wait until the caller has heard something after `since` and then half a second of quiet; returns when
    the sound began."""
    await eventually(lambda: phone.ear.loud_after(since) is not None, WAIT_S, "the agent to be heard")
    await eventually(lambda: phone.ear.quiet_for(0.5), WAIT_S, "the agent to go quiet")
    frame = phone.ear.loud_after(since)
    assert frame is not None
    return frame.at


async def heard_words(phone: SipPhone, start: float, end: float | None = None) -> str:
    """Whisper's words for what the caller heard from `start` to `end` (now)."""
    speech = loud_part(phone.ear.heard.between(start, end or time.monotonic()))
    return (await shared_whisper().transcribe(speech, 8000)).lower() if speech else ""


async def test_a_sip_call_is_greeted_by_the_model_which_hears_the_caller_and_answers_aloud(
        make_server: ServerFactory, tmp_path: Path) -> None:  # noqa: F811
    async with FakeRealtime(api_key=KEY) as fake:
        fake.script_reply(ANSWER)
        server = await make_server(stt=shared_whisper(), config=realtime_config(tmp_path, fake))
        async with caller_line() as line:
            phone = await line.dial(f"sip:agent@{server.target}", CALLER)
            (session,) = await server.wait_live()
            dialled = phone.ear.heard.frames[0].at if phone.ear.heard.frames else time.monotonic() - 1
            greeted_at = await quiet_again(phone, dialled)
            greeting = await heard_words(phone, greeted_at)
            await agent_said(session, "test line", WAIT_S)

            asked = await say(phone, QUESTION)
            assert asked.finished_at is not None
            await agent_said(session, "Monday", WAIT_S)
            answered_at = await quiet_again(phone, asked.finished_at)
            answer = await heard_words(phone, answered_at)
            await phone.hang_up()
        (ended,) = await server.wait_ended(timeout=WAIT_S)

    assert not fake.failures, fake.failures
    # The model was told the greeting and said it; the caller heard it.
    assert fake.said[:2] == [GREETING, ANSWER], fake.said
    assert "test line" in greeting or "through" in greeting, greeting
    # The fake's Whisper heard the caller's sentence, and its transcript reached the call's transcript.
    assert len(fake.heard) == 1 and "parcel" in fake.heard[0].lower(), fake.heard
    entries = ended.conversation.transcript.entries()
    users = [e.text.lower() for e in entries if e.role == "user"]
    assert len(users) == 1 and "parcel" in users[0], entries
    assert [e.text for e in entries if e.role == "agent"] == [GREETING, ANSWER], entries
    # The model's spoken reply reached the caller over G.711.
    assert "monday" in answer and ("parcel" in answer or "arriv" in answer), answer
    connection = fake.connections[0]
    assert connection.headers.get("Authorization") == f"Bearer {KEY}" and connection.dialect == "ga"
    assert fake.sessions and fake.instructions  # the session was set up before the greeting


async def test_speaking_over_a_long_reply_truncates_it_where_the_caller_stopped_hearing_it(
        make_server: ServerFactory, tmp_path: Path) -> None:  # noqa: F811
    # Twenty times real time: the whole reply has arrived long before the caller talks over it (so the reply is
    # done and only the truncate can say how much of it the caller heard).
    async with FakeRealtime(api_key=KEY, speed=20.0) as fake:
        fake.script_reply(LONG_REPLY)  # then the echo brain answers the interruption
        server = await make_server(stt=shared_whisper(), config=realtime_config(tmp_path, fake))
        async with caller_line() as line:
            phone = await line.dial(f"sip:agent@{server.target}", CALLER)
            (session,) = await server.wait_live()
            await agent_said(session, "test line", WAIT_S)
            await eventually(lambda: phone.ear.quiet_for(0.5), WAIT_S, "the greeting to end")

            asked = await say(phone, "What are your opening hours?")
            asked_at = asked.finished_at or time.monotonic()
            await eventually(lambda: phone.ear.loud_after(asked_at) is not None, WAIT_S, "the reply")
            await asyncio.sleep(1.5)  # the caller hears the start of the reply ...
            assert not phone.ear.quiet_for(0.5), "the long reply should still be playing"
            barge = await say(phone, "Sorry, can I stop you there?")  # ... and talks over it
            assert barge.first_loud_at is not None
            await eventually(lambda: bool(fake.truncations), WAIT_S, "a truncate")
            await agent_said(session, "You said", WAIT_S)  # the model answers the interruption
            await eventually(lambda: phone.ear.quiet_for(0.5), WAIT_S, "the answer to end")
            after_barge = await heard_words(phone, barge.first_loud_at)
            await phone.hang_up()
        (ended,) = await server.wait_ended(timeout=WAIT_S)

    assert not fake.failures, fake.failures
    (long_item,) = [item for item, text in fake.item_text.items() if text == LONG_REPLY]
    (truncation,) = fake.truncations
    # Truncated at what the caller was played of it: more than the second and a half heard before talking,
    # less than all of it (the fake sent all of it, faster than real time).
    assert truncation.item_id == long_item and truncation.content_index == 0
    assert 1000 <= truncation.audio_end_ms < fake.audio_items[long_item], (truncation, fake.audio_items)
    # The caller heard the reply stop: nothing of its second sentence came after the interruption.
    assert not any(word in after_barge for word in ("sunday", "holiday", "centre", "center")), after_barge
    agent = [e for e in ended.conversation.transcript.entries() if e.role == "agent"]
    # On record as the cascade records an interrupted line: what the caller heard of it, and all it meant to say.
    (cut,) = [e for e in agent if e.text.startswith("Our opening hours")]
    assert cut.interrupted and len(cut.text) < len(LONG_REPLY) and cut.intended == LONG_REPLY, (cut, truncation)
    assert fake.heard and "stop" in fake.heard[-1].lower(), fake.heard
