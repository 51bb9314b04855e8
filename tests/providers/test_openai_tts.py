"""Streamed speech from the OpenAI-compatible /audio/speech endpoint, resampled to the call's rate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from tests.fakes.openai_fake import SPEECH_RATE, FakeOpenAI, tone_pcm
from voicegate.internal.audio.resample import resample
from voicegate.internal.config.providers import OpenAIConfig
from voicegate.internal.tts.base import TtsError
from voicegate.internal.tts.openai import OpenAITextToSpeech


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-tts-key-1234567") as server:
        yield server


@pytest.fixture
async def tts(fake: FakeOpenAI) -> AsyncIterator[OpenAITextToSpeech]:
    engine = OpenAITextToSpeech(
        OpenAIConfig(api_key="sk-tts-key-1234567", base_url=fake.url + "/v1", tts_model="tts-test", tts_voice="nova")
    )
    yield engine
    await engine.aclose()


@pytest.mark.parametrize("rate", [8000, 16000, 24000])
async def test_speech_is_streamed_and_resampled_to_the_call_rate(
    fake: FakeOpenAI, tts: OpenAITextToSpeech, rate: int
) -> None:
    source = tone_pcm(1.5)
    fake.speech_audio = source
    chunks = [chunk async for chunk in tts.synthesize("Hello there, caller.", rate)]
    assert len(chunks) > 5  # yielded per network chunk, not once at the end
    assert all(len(chunk) % 2 == 0 for chunk in chunks)
    pcm = b"".join(chunks)
    expected_bytes = len(source) * rate // SPEECH_RATE
    assert abs(len(pcm) - expected_bytes) <= 0.03 * expected_bytes
    # Odd-sized network chunks must not shift samples: the stream matches a one-shot conversion.
    reference = np.frombuffer(resample(source, SPEECH_RATE, rate), dtype="<i2").astype(np.int32)
    got = np.frombuffer(pcm, dtype="<i2").astype(np.int32)
    n = min(len(reference), len(got))
    assert np.abs(reference[:n] - got[:n]).max() < 200
    assert fake.speech_requests == [
        {"model": "tts-test", "voice": "nova", "input": "Hello there, caller.", "response_format": "pcm"}
    ]
    assert fake.headers[0]["authorization"] == "Bearer sk-tts-key-1234567"


async def test_first_audio_arrives_before_the_body_ends(fake: FakeOpenAI, tts: OpenAITextToSpeech) -> None:
    fake.speech_audio, fake.chunk_delay_s = tone_pcm(2.0), 0.05
    stream = tts.synthesize("A long sentence.", 16000)
    first = await asyncio.wait_for(anext(stream), 10)
    assert first
    assert fake.disconnects == 0
    await stream.aclose()  # type: ignore[attr-defined]
    assert await fake.wait_disconnect()  # closing early closed the connection


async def test_cancelling_synthesis_closes_the_connection(fake: FakeOpenAI, tts: OpenAITextToSpeech) -> None:
    fake.hang_after_chunks = 2
    got_audio = asyncio.Event()

    async def play() -> None:
        async for _ in tts.synthesize("Something long.", 8000):
            got_audio.set()

    task = asyncio.create_task(play())
    await asyncio.wait_for(got_audio.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await fake.wait_disconnect()


@pytest.mark.parametrize("status", [400, 401, 500])
async def test_error_status_is_tts_error(fake: FakeOpenAI, tts: OpenAITextToSpeech, status: int) -> None:
    fake.error_status = status
    with pytest.raises(TtsError, match=str(status)):
        [chunk async for chunk in tts.synthesize("hi", 16000)]


async def test_stalled_body_times_out_as_tts_error(fake: FakeOpenAI) -> None:
    fake.hang_after_chunks = 1
    engine = OpenAITextToSpeech(OpenAIConfig(api_key="sk-tts-key-1234567", base_url=fake.url + "/v1", timeout_s=0.5))
    try:
        with pytest.raises(TtsError, match="timed out"):
            [chunk async for chunk in engine.synthesize("hi", 16000)]
    finally:
        await engine.aclose()


async def test_blank_text_makes_no_request(fake: FakeOpenAI, tts: OpenAITextToSpeech) -> None:
    assert [chunk async for chunk in tts.synthesize("  ", 16000)] == []
    assert fake.speech_requests == []
