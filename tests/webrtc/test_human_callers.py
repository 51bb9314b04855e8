"""A real person's voice over WebRTC (aiortc caller, the offline defaults): recordings from tests/human_speech.py.

A finished turn is released on the end-of-turn verdict, not after the longest hold; a person who talks over
the agent's long greeting stops it, and their words are released on the verdict like a turn in silence. The
`release` event on the DataChannel says why each turn was answered when it was (a reason does not depend on
how loaded the test machine is; a duration would).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes.models import RecordingModel
from tests.human_speech import clip
from tests.speech import silence, write_wav
from tests.webrtc.harness import WhipClient, live_server, webrtc_config
from voicegate.internal.config import Config
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.stt.whisper import WhisperSpeechToText

pytestmark = pytest.mark.slow
WAV_RATE = 16000
GREETING = " ".join(
    f"This is part {n} of a long introduction about the opening hours, the prices and the branches." for n in
    ("one", "two", "three", "four"))


@pytest_asyncio.fixture
async def whisper(tmp_path: Path) -> AsyncIterator[WhisperSpeechToText]:
    engine = WhisperSpeechToText(WhisperConfig(workers=1), tmp_path / "models")
    yield engine
    await engine.aclose()


def defaults(tmp_path: Path) -> Config:
    config = webrtc_config(tmp_path)
    config.stt.provider = "whisper"
    return config


async def test_a_person_who_finished_is_released_on_the_verdict(tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    person = clip("goforward").pcm16k  # "Go forward ten meters."
    wav = write_wav(tmp_path / "person.wav", silence(1500, WAV_RATE) + person + silence(6000, WAV_RATE), WAV_RATE)
    async with live_server(defaults(tmp_path), stt=whisper, model=RecordingModel("Moving forward.")) as server, \
            server.http() as http:
        client = WhipClient(wav)
        assert (await client.dial(http)).status_code == 201
        released = await client.wait_for(lambda e: e["type"] == "release", timeout=60)
        await client.close()
    assert released["reason"] == "verdict", released


async def test_a_person_talking_over_the_agent_stops_it_and_is_released_on_the_verdict(
        tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    config = defaults(tmp_path)
    config.pipeline.greeting = GREETING
    person = clip("goforward").pcm16k
    wav = write_wav(tmp_path / "over.wav", silence(4000, WAV_RATE) + person + silence(8000, WAV_RATE), WAV_RATE)
    async with live_server(config, stt=whisper, model=RecordingModel("Moving forward.")) as server, \
            server.http() as http:
        client = WhipClient(wav)
        assert (await client.dial(http)).status_code == 201
        released = await client.wait_for(lambda e: e["type"] == "release", timeout=90)
        await client.close()
    said = [e["text"] for e in client.of_type("transcript") if e["role"] == "agent" and e["final"]]
    assert said and len(said[0]) < len(GREETING), said  # the greeting stopped for them where they came in
    assert released["reason"] == "verdict", released  # ... and their words were not held the longest hold
