"""Text-to-speech over the OpenAI-compatible /audio/speech endpoint, streamed.

The endpoint's `pcm` format is raw 24 kHz 16-bit mono little-endian with no header, so audio can be
played from the first bytes: each chunk is resampled to the call's rate and yielded as it arrives,
instead of waiting for the whole clip. HTTP reads split the stream at arbitrary byte offsets, so an
odd trailing byte is held back until its other half arrives.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx

from voicegate.internal.audio.resample import Resampler
from voicegate.internal.config.providers import OpenAIConfig
from voicegate.internal.tts.base import TtsError

log = logging.getLogger(__name__)

SOURCE_RATE = 24_000  # what the endpoint's "pcm" format is defined to be
CONNECT_TIMEOUT_S = 10.0
ERROR_SNIPPET_BYTES = 512


class OpenAITextToSpeech:
    name = "openai"

    def __init__(self, config: OpenAIConfig) -> None:
        self._model = config.tts_model
        self._voice = config.tts_voice
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        # One client per engine: every sentence of every call reuses the warm connections.
        self._http = httpx.AsyncClient(
            base_url=config.base_url.strip().rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(config.timeout_s, connect=min(CONNECT_TIMEOUT_S, config.timeout_s)),
        )

    async def synthesize(self, text: str, sample_rate: int) -> AsyncIterator[bytes]:
        if not text.strip():
            return
        body = {
            "model": self._model,
            "voice": self._voice,
            "input": text,
            "response_format": "pcm",
        }
        resampler = Resampler(SOURCE_RATE, sample_rate)
        carry = b""
        try:
            # Leaving this block early (the caller barged in) closes the response mid-body, which
            # drops the connection and stops the server synthesising the rest.
            async with self._http.stream("POST", "audio/speech", json=body) as response:
                if not response.is_success:
                    await _log_failure(response)
                    raise TtsError(f"speech endpoint returned {response.status_code}")
                async for chunk in response.aiter_bytes():
                    data = carry + chunk
                    cut = len(data) - len(data) % 2
                    carry = data[cut:]
                    if cut and (pcm := resampler.process(data[:cut])):
                        yield pcm
            if tail := resampler.flush():
                yield tail
        except httpx.TimeoutException:
            raise TtsError("speech endpoint timed out") from None
        except httpx.HTTPError as exc:
            raise TtsError(f"speech endpoint unreachable ({type(exc).__name__})") from None

    async def aclose(self) -> None:
        await self._http.aclose()


async def _log_failure(response: httpx.Response) -> None:
    snippet = b""
    async for chunk in response.aiter_bytes():
        snippet += chunk
        if len(snippet) >= ERROR_SNIPPET_BYTES:
            break
    # The error body can quote the input text, so it goes where content logging decides.
    log.warning(
        "speech endpoint returned %d", response.status_code,
        extra={"text": snippet[:ERROR_SNIPPET_BYTES].decode(errors="replace")},
    )
