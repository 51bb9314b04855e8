"""Turn-taking over WebRTC on the offline recogniser: a browser caller (aiortc) who pauses mid-sentence.

The agent is made to answer every pause (a threshold of 0.01) with a model slower than the caller's pause,
so the first half is released and its reply is still being made when the caller goes on: that reply must
never reach the caller, and the whole sentence is answered once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from tests.fakes.models import RecordingModel
from tests.speech import neural, silence, write_wav
from tests.turn.test_turn_models import fragment_before_comma
from tests.webrtc.harness import WhipClient, live_server, webrtc_config
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.stt.whisper import WhisperSpeechToText

pytestmark = pytest.mark.slow
WAV_RATE = 16000


@pytest_asyncio.fixture
async def whisper(tmp_path: Path) -> AsyncIterator[WhisperSpeechToText]:
    engine = WhisperSpeechToText(WhisperConfig(workers=1), tmp_path / "models")
    yield engine
    await engine.aclose()


def loud(pcm: bytes, threshold_dbfs: float = -40.0) -> bool:
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    return bool(samples.size) and 10 * np.log10(np.mean(samples**2) / 32768**2 + 1e-12) > threshold_dbfs


async def test_a_reply_released_during_the_pause_never_plays_and_the_whole_sentence_is_answered(
        tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    config = webrtc_config(tmp_path)
    config.pipeline.end_of_turn_threshold = 0.01
    model = RecordingModel("Thank you, noted.", delay_s=2.0)
    (sentence,) = neural(["Please send the parcel, to my office on Monday."], WAV_RATE)
    first = fragment_before_comma(sentence, WAV_RATE)
    wav = write_wav(tmp_path / "paused.wav", silence(1500, WAV_RATE) + first + silence(1500, WAV_RATE)
                    + sentence[len(first):] + silence(8000, WAV_RATE), WAV_RATE)
    async with live_server(config, stt=whisper, model=model) as server, server.http() as http:
        client = WhipClient(wav)
        assert (await client.dial(http)).status_code == 201
        await client.wait_said("thank you", timeout=60)
        whole = await client.wait_for(lambda e: e["type"] == "transcript" and e["role"] == "user"
                                      and "monday" in e["text"].lower())
        session = server.session_at(client.location)
        assert session is not None
        users = [m.content.lower() for m in session.conversation.history if m.role == "user"]
        await client.close()
    asked = [r.turn.text.lower() for r in model.requests]
    assert any("parcel" in a and "monday" not in a for a in asked), asked  # the first half was released
    outcomes = [e["outcome"] for e in client.of_type("turn")]
    assert "continued_before_reply" in outcomes and "continued_after_reply_heard" not in outcomes, outcomes
    assert whole["replaces"]  # the whole sentence, heard again, replaces the half on the page
    assert len(users) == 1 and "parcel" in users[0] and "monday" in users[0], users
    # Nothing of the agent reached the caller before the whole sentence was in.
    before = [pcm for at, pcm in client.heard if at < client.arrived_at(whole)]
    assert not any(loud(pcm) for pcm in before)
    assert any(loud(pcm) for at, pcm in client.heard if at >= client.arrived_at(whole))


async def test_a_browser_callers_greeting_is_released_on_the_verdict(
        tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    """The `release` event on the DataChannel says why the turn was answered when it was."""
    config = webrtc_config(tmp_path)
    (greeting,) = neural(["Good afternoon."], WAV_RATE)
    wav = write_wav(tmp_path / "greeting.wav", silence(1500, WAV_RATE) + greeting + silence(6000, WAV_RATE),
                    WAV_RATE)
    async with live_server(config, stt=whisper, model=RecordingModel("Good afternoon to you.")) as server, \
            server.http() as http:
        client = WhipClient(wav)
        assert (await client.dial(http)).status_code == 201
        released = await client.wait_for(lambda e: e["type"] == "release", timeout=60)
        await client.close()
    assert released["reason"] == "verdict", released
    assert released["probability"] >= config.pipeline.end_of_turn_threshold
