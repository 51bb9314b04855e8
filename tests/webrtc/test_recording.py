"""A browser call recorded: the consent events on the DataChannel, a typed opt-out that deletes what was
recorded, and a kept recording at the pipeline's rate with the caller's speech on the left channel and the
agent's reply on the right, in that order."""

from __future__ import annotations

import asyncio
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.speech import active_ms
from tests.webrtc.harness import WhipClient, live_server, wait_until
from voicegate.internal.config import Config

pytestmark = pytest.mark.slow


def recorded(config: Config, consent: str) -> Config:
    config.recording.enabled = True
    config.recording.consent = consent  # type: ignore[assignment]
    config.pipeline.greeting = "Hello, how can I help?"
    return config


def loud_frames(samples: np.ndarray, rate: int) -> np.ndarray:
    """Indexes of the 20 ms frames louder than -40 dBFS."""
    frames = samples[: len(samples) // (rate // 50) * (rate // 50)].reshape(-1, rate // 50).astype(np.float64)
    level = np.sqrt((frames ** 2).mean(axis=1)) / 32768
    return np.flatnonzero(level > 10 ** (-40 / 20))


async def test_an_announced_browser_call_is_recorded_in_stereo_caller_left_agent_right(
        config: Config, speech_wav: Callable[..., Path]) -> None:
    recorded(config, "announce")
    async with live_server(config, stt=ScriptedStt(["say hello world"])) as server, server.http() as http:
        client = WhipClient(speech_wav("say hello world", lead_ms=9000))
        assert (await client.dial(http)).status_code == 201
        event = await client.wait_for(lambda e: e["type"] == "recording")
        assert event["consent"] == "announced" and event["recording"] is True
        await client.wait_for(lambda e: e["type"] == "response" and "hello world" in e["text"].lower(), 60)
        await client.wait_for(lambda e: e["type"] == "transcript" and e["role"] == "agent"
                              and "hello world" in e["text"].lower(), 30)
        session_id = client.location.rsplit("/", 1)[-1]
        await client.hang_up(http)
        await client.close()
        directory = config.data_dir / "recordings"
        await wait_until(lambda: (directory / f"{session_id}.json").exists()
                         and '"ended_at": null' not in (directory / f"{session_id}.json").read_text(), 30)
    with wave.open(str(directory / f"{session_id}.wav")) as wav:
        assert wav.getnchannels() == 2 and wav.getframerate() == 16000
        samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    left, right = samples[:, 0], samples[:, 1]
    assert active_ms(left.tobytes(), 16000) > 500 and active_ms(right.tobytes(), 16000) > 1000
    caller, agent = loud_frames(left, 16000), loud_frames(right, 16000)
    # The announcement and greeting come first on the right; the caller speaks after them (a 9 s lead);
    # then the agent's reply follows the caller's words.
    assert agent[0] < caller[0], (agent[0], caller[0])
    assert agent[-1] > caller[-1], (agent[-1], caller[-1])


async def test_a_typed_opt_out_stops_the_recording_and_deletes_it(config: Config) -> None:
    recorded(config, "announce")
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http)).status_code == 201
        await client.wait_for(lambda e: e["type"] == "recording")
        await client.wait_channel_open()
        session_id = client.location.rsplit("/", 1)[-1]
        directory = config.data_dir / "recordings"
        await wait_until(lambda: (directory / f"{session_id}.json").exists(), 30)
        await asyncio.sleep(1.5)  # some of the call is on disk
        client.send({"type": "text", "text": "Please don't record this call."})
        event = await client.wait_for(lambda e: e["type"] == "recording" and e["consent"] == "opted_out")
        assert event["recording"] is False
        await client.wait_said("stopped recording")
        await wait_until(lambda: not any(directory.iterdir()), 30)
        await client.hang_up(http)
        await client.close()
    assert not any(directory.iterdir())
