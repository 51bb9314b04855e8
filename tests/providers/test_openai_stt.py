"""Per-utterance transcription over the OpenAI-compatible /audio/transcriptions endpoint."""

from __future__ import annotations

import asyncio
import math
import struct
from collections.abc import AsyncIterator

import numpy as np
import pytest

from tests.fakes.openai_fake import FakeOpenAI
from voicegate.internal.config.providers import OpenAIConfig
from voicegate.internal.stt.base import Transcript
from voicegate.internal.stt.openai import OpenAISpeechToText
from voicegate.internal.tts.wav import wav_to_pcm


def tone(ms: int, rate: int) -> bytes:
    t = np.arange(rate * ms // 1000) / rate
    return (np.sin(2 * math.pi * 300 * t) * 6000).astype("<i2").tobytes()


def frames(pcm: bytes, rate: int) -> list[bytes]:
    size = rate // 50 * 2
    return [pcm[i : i + size] for i in range(0, len(pcm), size)]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-stt-key-1234567") as server:
        yield server


def engine(fake: FakeOpenAI, timeout_s: float = 10) -> OpenAISpeechToText:
    config = OpenAIConfig(api_key="sk-stt-key-1234567", base_url=fake.url + "/v1", stt_model="whisper-test",
                          timeout_s=timeout_s)
    return OpenAISpeechToText(config)


async def next_result(results: AsyncIterator[Transcript]) -> Transcript:
    return await asyncio.wait_for(anext(results), 20)


@pytest.mark.parametrize("rate", [8000, 16000])
async def test_utterance_is_uploaded_as_wav_and_yields_one_final(fake: FakeOpenAI, rate: int) -> None:
    fake.transcript = " Book a table for two. "
    stt = engine(fake)
    stream = stt.open(rate)
    assert stream.continuous is False
    pcm = tone(600, rate)
    for frame in frames(pcm, rate):
        stream.push(frame)
    stream.end_of_speech()
    result = await next_result(stream.results())
    assert result == Transcript(text="Book a table for two.", final=True)
    upload = fake.transcriptions[0]
    assert upload.fields["model"] == "whisper-test" and upload.fields["response_format"] == "json"
    assert upload.filename.endswith(".wav")
    assert wav_to_pcm(upload.audio) == (pcm, rate)
    assert fake.headers[0]["authorization"] == "Bearer sk-stt-key-1234567"
    await stream.aclose()
    await stt.aclose()


async def test_silence_transcribed_as_nothing_gives_an_empty_final(fake: FakeOpenAI) -> None:
    fake.transcript = ""
    stt = engine(fake)
    stream = stt.open(16000)
    stream.push(bytes(16000))
    stream.end_of_speech()
    assert await next_result(stream.results()) == Transcript(text="", final=True)
    await stream.aclose()
    await stt.aclose()


async def test_too_short_utterance_is_not_sent(fake: FakeOpenAI) -> None:
    stt = engine(fake)
    stream = stt.open(16000)
    stream.push(tone(60, 16000))
    stream.end_of_speech()
    assert await next_result(stream.results()) == Transcript(text="", final=True)
    assert fake.transcriptions == []
    await stream.aclose()
    await stt.aclose()


async def test_concurrent_utterances_keep_their_order(fake: FakeOpenAI) -> None:
    # The first upload is the slowest to answer: its result must still come first.
    def transcript_of(wav: bytes) -> str:
        pcm, _ = wav_to_pcm(wav)
        ms = len(pcm) // 32
        if ms > 500:
            import time

            time.sleep(0.5)  # blocks the fake's loop thread only
        return f"{ms} ms"

    fake.transcript = transcript_of
    stt = engine(fake)
    stream = stt.open(16000)
    results = stream.results()
    for ms in (800, 200, 300):
        stream.push(tone(ms, 16000))
        stream.end_of_speech()
    got = [await next_result(results) for _ in range(3)]
    assert [t.text for t in got] == ["800 ms", "200 ms", "300 ms"]
    await stream.aclose()
    await stt.aclose()


async def test_failure_and_timeout_drop_only_that_utterance(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    stt = engine(fake, timeout_s=0.5)
    stream = stt.open(16000)
    results = stream.results()
    fake.error_status = 500
    stream.push(tone(300, 16000))
    stream.end_of_speech()
    await asyncio.sleep(0.3)
    fake.error_status = None
    fake.hang_after_chunks = 0
    stream.push(tone(300, 16000))
    stream.end_of_speech()
    await asyncio.sleep(0.8)
    fake.hang_after_chunks = None
    fake.transcript = "still here"
    stream.push(tone(300, 16000))
    stream.end_of_speech()
    assert (await next_result(results)).text == "still here"
    assert len(fake.headers) == 3  # all three were sent; only the last answered
    warnings = [r.getMessage() for r in caplog.records if r.name == "voicegate.internal.stt.openai"]
    assert any("returned 500" in w for w in warnings) and any("timed out" in w for w in warnings)
    await stream.aclose()
    await stt.aclose()


async def test_close_ends_results_and_cancels_uploads(fake: FakeOpenAI) -> None:
    fake.hang_after_chunks = 0
    stt = engine(fake)
    stream = stt.open(16000)
    stream.push(tone(300, 16000))
    stream.end_of_speech()
    await asyncio.sleep(0.2)
    await stream.aclose()
    assert [t async for t in stream.results()] == []
    stream.push(b"\x00\x00")  # after close: ignored, never raises
    stream.end_of_speech()
    await stt.aclose()


def test_bogus_length_header_wav_reads_to_the_end() -> None:
    pcm = tone(100, 22050)
    header = b"RIFF" + struct.pack("<I", 0x7FFFF024) + b"WAVE"
    header += b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, 22050, 44100, 2, 16)
    header += b"data" + struct.pack("<I", 0x7FFFF000)
    assert wav_to_pcm(header + pcm) == (pcm, 22050)
