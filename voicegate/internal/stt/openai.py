"""Speech-to-text over the OpenAI-compatible transcription endpoint (Whisper, gpt-4o-transcribe, ...).

The endpoint transcribes whole files, so this is an utterance provider: the pipeline's VAD decides
where speech ends, the stream uploads that utterance as a WAV in the background and yields one final
transcript for it. Uploads run concurrently (a caller who speaks twice in quick succession does not
wait for the first round trip), but results come out in the order the utterances were spoken.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import openai

from voicegate.internal.audio.frame import BYTES_PER_SAMPLE
from voicegate.internal.config.providers import OpenAIConfig
from voicegate.internal.llm.openai import CONNECT_TIMEOUT_S, KEYLESS_PLACEHOLDER
from voicegate.internal.stt.base import SttStream, Transcript
from voicegate.internal.tts.wav import pcm_to_wav

log = logging.getLogger(__name__)

# Shorter than this is a click or a cough the VAD let through: uploading it costs a round trip and
# money, and Whisper tends to hallucinate words ("Thank you.") into near-silence.
MIN_UTTERANCE_MS = 100
# A runaway utterance (the VAD never closing) is cut here rather than growing without bound; the
# endpoint's own limit is 25 MB, about 13 minutes at 16 kHz.
MAX_UTTERANCE_S = 120
# A failed upload is dropped, not retried: by the time a retry answered the caller has moved on.
TRANSCRIBE_RETRIES = 0


class OpenAISpeechToText:
    name = "openai"

    def __init__(self, config: OpenAIConfig) -> None:
        self._model = config.stt_model
        self._timeout_s = config.timeout_s
        self._client = openai.AsyncOpenAI(
            api_key=config.api_key or KEYLESS_PLACEHOLDER,
            base_url=config.base_url.strip().rstrip("/"),
            timeout=openai.Timeout(config.timeout_s, connect=min(CONNECT_TIMEOUT_S, config.timeout_s)),
            max_retries=TRANSCRIBE_RETRIES,
        )

    def open(self, sample_rate: int) -> SttStream:
        return OpenAISttStream(self, sample_rate)

    async def aclose(self) -> None:
        await self._client.close()

    async def transcribe(self, pcm: bytes, sample_rate: int) -> Transcript | None:
        """One utterance's final transcript, or None (logged) when the endpoint failed."""
        try:
            async with asyncio.timeout(self._timeout_s):
                result = await self._client.audio.transcriptions.create(
                    model=self._model,
                    file=("utterance.wav", pcm_to_wav(pcm, sample_rate), "audio/wav"),
                    response_format="json",
                )
        except TimeoutError:
            log.warning("transcription timed out after %.1f s; utterance dropped", self._timeout_s)
            return None
        except openai.APIStatusError as exc:
            log.warning("transcription endpoint returned %d; utterance dropped", exc.status_code)
            return None
        except openai.OpenAIError as exc:
            log.warning("transcription failed (%s); utterance dropped", type(exc).__name__)
            return None
        text = (result.text or "").strip()
        log.debug("transcribed %d ms", len(pcm) * 1000 // (BYTES_PER_SAMPLE * sample_rate), extra={"text": text})
        return Transcript(text=text, final=True)


class OpenAISttStream:
    continuous = False

    def __init__(self, engine: OpenAISpeechToText, sample_rate: int) -> None:
        self._engine = engine
        self._rate = sample_rate
        self._buffer = bytearray()
        self._max_bytes = MAX_UTTERANCE_S * sample_rate * BYTES_PER_SAMPLE
        self._overflowed = False
        # One entry per utterance, in speaking order; None closes the stream.
        self._pending: asyncio.Queue[asyncio.Task[Transcript | None] | None] = asyncio.Queue()
        self._tasks: set[asyncio.Task[Transcript | None]] = set()
        self._closed = False

    def push(self, pcm: bytes) -> None:
        if self._closed:
            return
        room = self._max_bytes - len(self._buffer)
        if len(pcm) > room and not self._overflowed:
            self._overflowed = True
            log.warning("utterance longer than %d s; the rest is not transcribed", MAX_UTTERANCE_S)
        self._buffer += pcm[: max(room, 0)]

    def end_of_speech(self) -> None:
        if self._closed:
            return
        pcm, self._buffer, self._overflowed = bytes(self._buffer), bytearray(), False
        pcm = pcm[: len(pcm) - len(pcm) % BYTES_PER_SAMPLE]
        task = asyncio.get_running_loop().create_task(self._transcribe(pcm))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._pending.put_nowait(task)

    def new_turn(self) -> None:
        return None  # each utterance is transcribed on its own

    async def _transcribe(self, pcm: bytes) -> Transcript | None:
        if len(pcm) * 1000 < MIN_UTTERANCE_MS * self._rate * BYTES_PER_SAMPLE:
            return Transcript(text="", final=True)  # too short to hold words: nothing was said
        return await self._engine.transcribe(pcm, self._rate)

    async def results(self) -> AsyncIterator[Transcript]:
        while (task := await self._pending.get()) is not None:
            try:
                transcript = await task
            except asyncio.CancelledError:
                if task.cancelled():
                    continue  # closed while in flight
                raise
            if transcript is not None:
                yield transcript

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        self._pending.put_nowait(None)
