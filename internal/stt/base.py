"""Speech-to-text behind one small interface.

The pipeline's VAD decides where utterances start and end. A provider that transcribes whole
utterances (pocketsphinx, OpenAI) gets the speech frames and `end_of_speech()`; a streaming provider
(Deepgram) sets `continuous = True` and gets every frame, and may finalise on its own endpointing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    final: bool
    confidence: float | None = None  # 0-1 when the engine reports one


class SttError(Exception):
    """The engine failed for this utterance; the call goes on."""


class SttStream(Protocol):
    continuous: bool

    def push(self, pcm: bytes) -> None:
        """Queue 20 ms of PCM16 mono at the stream's rate. Never blocks, never raises."""

    def end_of_speech(self) -> None:
        """The VAD ended an utterance: produce its final transcript (possibly empty)."""

    def results(self) -> AsyncIterator[Transcript]:
        """Partial and final transcripts, in order, until the stream is closed."""

    async def aclose(self) -> None: ...


class SpeechToText(Protocol):
    name: str

    def open(self, sample_rate: int) -> SttStream:
        """A stream for one call at `sample_rate` (8000 or 16000)."""

    async def aclose(self) -> None:
        """Release shared resources (worker pools, connections)."""
