"""Sound over the agent on a real WebRTC call (aiortc caller, the offline defaults: Silero VAD and Whisper).

The agent reads a long greeting; a few seconds in, the caller says "mm-hm" (it goes on), coughs (it pauses,
then picks its sentence up again from the start) or asks "sorry, what time is it?" (it stops and answers).
The greeting starts when the call does and lasts far longer than the caller's lead-in, so the sound lands
on it however late a loaded machine runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.fakes.models import RecordingModel
from tests.speech import cough, neural, silence, write_wav
from tests.webrtc.harness import WhipClient, live_server, webrtc_config
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.stt.whisper import WhisperSpeechToText

pytestmark = pytest.mark.slow
WAV_RATE = 16000
LEAD_MS = 4000  # the agent has been talking this long when the caller's sound begins
GREETING = " ".join(
    f"This is part {n} of a long introduction about the opening hours, the prices and the branches." for n in
    ("one", "two", "three", "four", "five"))


@pytest_asyncio.fixture
async def whisper(tmp_path: Path) -> AsyncIterator[WhisperSpeechToText]:
    engine = WhisperSpeechToText(WhisperConfig(workers=1), tmp_path / "models")
    yield engine
    await engine.aclose()


async def call_with(tmp_path: Path, whisper: WhisperSpeechToText, model: RecordingModel, sound: bytes,
                    until: Any, **pipeline: Any) -> tuple[WhipClient, Any]:
    """The agent greets at length; LEAD_MS in, the caller makes `sound`; the call runs until `until(event)`."""
    config = webrtc_config(tmp_path)
    config.stt.provider = "whisper"
    config.pipeline.greeting = GREETING
    for key, value in pipeline.items():
        setattr(config.pipeline, key, value)
    wav = write_wav(tmp_path / "caller.wav", silence(LEAD_MS, WAV_RATE) + sound + silence(10000, WAV_RATE), WAV_RATE)
    async with live_server(config, stt=whisper, model=model) as server, server.http() as http:
        client = WhipClient(wav)
        assert (await client.dial(http)).status_code == 201
        try:
            event = await client.wait_for(until, timeout=90)
        finally:
            await client.close()
    return client, event


def agent_said(client: WhipClient) -> list[str]:
    return [e["text"] for e in client.of_type("transcript") if e["role"] == "agent" and e["final"]]


async def test_a_backchannel_over_the_agent_does_not_stop_it(tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    (mm,) = neural(["Mm-hm."], WAV_RATE)
    model = RecordingModel("It is three o'clock.")
    client, _ = await call_with(tmp_path, whisper, model, mm,
                                lambda e: e["type"] == "transcript" and e["role"] == "agent" and e["final"])
    assert agent_said(client) == [GREETING], [e for e in client.events if e["type"] in ("transcript", "overlap")]
    assert [e["text"] for e in client.of_type("transcript") if e["role"] == "user"], "the caller was not heard"
    assert not model.requests  # not answered: no turn
    assert not [e for e in client.of_type("overlap") if e["action"] == "resumed"]  # never paused for it


async def test_a_cough_over_the_agent_pauses_it_and_it_resumes_its_sentence(
        tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    model = RecordingModel("It is three o'clock.")
    # A coughing fit long enough to pause the agent (confirmation at 200 ms of voice: the VAD's voiced
    # frames of a cough vary); energy VAD, so the sound surely counts as sound.
    client, event = await call_with(tmp_path, whisper, model, cough(WAV_RATE),
                                    lambda e: e["type"] == "overlap" and e["action"] == "resumed",
                                    barge_in_confirm_ms=200, vad="energy")
    assert event["kind"] == "non_speech", event
    assert event["sentence"].startswith("This is part"), event  # the sentence it was paused in, from its start
    assert "resumed" in [e["outcome"] for e in client.of_type("turn")]
    assert not model.requests and not agent_said(client), client.events  # no turn, the greeting goes on


async def test_a_short_question_over_the_agent_stops_it_and_is_answered(
        tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    (question,) = neural(["Sorry, what time is it?"], WAV_RATE)
    model = RecordingModel("It is three o'clock.")
    client, _ = await call_with(tmp_path, whisper, model, question,
                                lambda e: e["type"] == "transcript" and e["role"] == "agent" and e["final"]
                                and "three" in str(e["text"]).lower())
    cut = agent_said(client)[0]  # the greeting, cut off where the caller spoke
    assert cut.startswith("This is part") and len(cut) < len(GREETING), client.events
    assert [r.turn.text.lower().rstrip("?") for r in model.requests] == ["sorry, what time is it"], model.requests
