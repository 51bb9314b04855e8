"""Deepgram live transcription against a local WebSocket server speaking its protocol."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.fakes.deepgram_fake import FakeDeepgram, results_message
from voicegate.internal.config.providers import DeepgramConfig
from voicegate.internal.stt.base import SttError, Transcript
from voicegate.internal.stt.deepgram import DeepgramSpeechToText, DeepgramSttStream, listen_url, parse_result

FRAME_16K = bytes(640)


@pytest.fixture
async def fake() -> AsyncIterator[FakeDeepgram]:
    async with FakeDeepgram(api_key="dg-secret-key") as server:
        yield server


def engine(fake: FakeDeepgram, **config: object) -> DeepgramSpeechToText:
    settings: dict[str, object] = {"api_key": "dg-secret-key", "url": fake.url}
    settings.update(config)
    return DeepgramSpeechToText(DeepgramConfig(**settings), keepalive_s=0.2)  # type: ignore[arg-type]


async def next_result(results: AsyncIterator[Transcript]) -> Transcript:
    return await asyncio.wait_for(anext(results), 20)


async def until(condition: Callable[[], object], timeout: float = 20) -> None:
    """Poll: the fake records what arrived in plain fields, with no event to wait on."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def test_interim_then_final_results_in_order(fake: FakeDeepgram) -> None:
    fake.script_result("book a", after_bytes=640 * 5)
    fake.script_result("Book a table.", after_bytes=640 * 10, is_final=True, speech_final=True, confidence=0.97)
    stream = engine(fake).open(16000)
    assert stream.continuous is True
    results = stream.results()
    for _ in range(12):
        stream.push(FRAME_16K)
    assert await next_result(results) == Transcript("book a", final=False, confidence=0.93)
    assert await next_result(results) == Transcript("Book a table.", final=True, confidence=0.97)
    await stream.aclose()
    assert fake.audio_bytes == 640 * 12


async def test_connection_carries_auth_header_and_query_parameters(fake: FakeDeepgram) -> None:
    stt = engine(fake, model="nova-3", language="en-US", endpointing_ms=250, utterance_end_ms=1200,
                 keyterms=["voicegate", "pgvector"])
    stream = stt.open(8000)
    stream.push(bytes(320))
    await until(lambda: fake.connections and fake.audio_bytes)
    await stream.aclose()
    (conn,) = fake.connections
    assert conn.headers["Authorization"] == "Token dg-secret-key"
    assert conn.params == {
        "model": ["nova-3"], "encoding": ["linear16"], "sample_rate": ["8000"], "channels": ["1"],
        "interim_results": ["true"], "punctuate": ["true"], "endpointing": ["250"], "utterance_end_ms": ["1200"],
        "vad_events": ["true"], "language": ["en-US"], "keyterm": ["voicegate", "pgvector"],
    }


def test_language_and_keyterms_are_left_out_when_unset() -> None:
    query = parse_qs(urlsplit(listen_url(DeepgramConfig(), 16000)).query)
    assert "language" not in query and "keyterm" not in query


async def test_end_of_speech_sends_finalize_after_the_audio_and_gets_a_final(fake: FakeDeepgram) -> None:
    fake.finalize_transcript = "That is all."
    stream = engine(fake).open(16000)
    results = stream.results()
    for _ in range(5):
        stream.push(FRAME_16K)
    stream.end_of_speech()
    assert await next_result(results) == Transcript("That is all.", final=True, confidence=0.9)
    assert fake.audio_bytes == 640 * 5  # all audio arrived before the Finalize
    assert fake.control_messages[-1] == "Finalize"
    await stream.aclose()


async def test_finalize_with_nothing_said_gives_an_empty_final(fake: FakeDeepgram) -> None:
    fake.finalize_transcript = ""
    stream = engine(fake).open(16000)
    stream.end_of_speech()
    assert await next_result(stream.results()) == Transcript("", final=True)
    await stream.aclose()


async def test_keepalive_is_sent_during_silence(fake: FakeDeepgram) -> None:
    stream = engine(fake).open(16000)
    stream.push(FRAME_16K)
    await until(lambda: "KeepAlive" in fake.control_messages)
    await stream.aclose()


async def test_close_sends_close_stream_and_ends_results(fake: FakeDeepgram) -> None:
    stream = engine(fake).open(16000)
    results = stream.results()
    stream.push(FRAME_16K)
    await stream.aclose()
    assert fake.control_messages[-1] == "CloseStream"
    assert [t async for t in results] == []
    stream.push(FRAME_16K)  # after close: ignored, never raises


async def test_utterance_end_is_informational(fake: FakeDeepgram) -> None:
    fake.script_result("Hi.", after_bytes=640, is_final=True)
    fake.script_utterance_end(after_bytes=1280)
    fake.script_result("Bye.", after_bytes=1920, is_final=True)
    stream = engine(fake).open(16000)
    results = stream.results()
    for _ in range(3):
        stream.push(FRAME_16K)
    assert [(await next_result(results)).text for _ in range(2)] == ["Hi.", "Bye."]
    await stream.aclose()


async def test_a_dropped_socket_is_reconnected_once(fake: FakeDeepgram) -> None:
    fake.drop_after_bytes = 640 * 3
    fake.script_result("after the drop", after_bytes=640 * 8, is_final=True)
    stream = engine(fake).open(16000)
    results = stream.results()
    for _ in range(4):
        stream.push(FRAME_16K)
    await until(lambda: len(fake.connections) == 2)
    for _ in range(6):
        stream.push(FRAME_16K)
    assert (await next_result(results)).text == "after the drop"
    assert isinstance(stream, DeepgramSttStream) and stream.reconnects == 1
    await stream.aclose()


async def test_a_second_drop_ends_results_with_stt_error(fake: FakeDeepgram) -> None:
    fake.drop_after_bytes, fake.max_drops = 640, 2
    stream = engine(fake).open(16000)
    results = stream.results()
    stream.push(FRAME_16K)
    await until(lambda: len(fake.connections) == 2)
    stream.push(FRAME_16K)
    with pytest.raises(SttError, match="closed the connection"):
        async with asyncio.timeout(20):
            [t async for t in results]
    assert fake.drops == 2
    await stream.aclose()


async def test_wrong_key_ends_results_with_stt_error(fake: FakeDeepgram) -> None:
    stream = DeepgramSpeechToText(DeepgramConfig(api_key="wrong", url=fake.url)).open(16000)
    stream.push(FRAME_16K)
    with pytest.raises(SttError, match="401"):
        async with asyncio.timeout(20):
            [t async for t in stream.results()]
    assert fake.rejected == [401]
    await stream.aclose()


async def test_slow_socket_drops_the_oldest_audio_not_the_newest(fake: FakeDeepgram) -> None:
    stt = DeepgramSpeechToText(DeepgramConfig(api_key="dg-secret-key", url=fake.url), max_queued_frames=10)
    stream = stt.open(16000)
    for index in range(30):  # pushed before the socket is even open
        stream.push(index.to_bytes(2, "little") * 320)
    assert isinstance(stream, DeepgramSttStream) and stream.dropped_frames == 20
    await until(lambda: fake.audio_bytes == 640 * 10)
    await stream.aclose()


def test_parse_result_maps_is_final_and_skips_empty_interims() -> None:
    assert parse_result(results_message("hi", True, False, 0.8)) == Transcript("hi", final=True, confidence=0.8)
    assert parse_result(results_message("", False, False, 0.0)) is None
    assert parse_result(results_message("", True, True, 0.0)) is None  # silence, not an answer to Finalize
    assert parse_result({"type": "UtteranceEnd"}) is None
    assert parse_result({"type": "Results", "channel": {"alternatives": []}}) is None
