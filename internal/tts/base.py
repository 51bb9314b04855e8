"""Text-to-speech behind one small interface: text in, PCM16 mono chunks out, as they are made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol


class TtsError(Exception):
    """Synthesis failed for this text; the pipeline skips it and goes on."""


class TextToSpeech(Protocol):
    name: str

    def synthesize(self, text: str, sample_rate: int, due_s: float = 0.0) -> AsyncIterator[bytes]:
        """PCM16 mono chunks at `sample_rate`, any chunk length. Cancelling the iteration stops the work.

        `due_s`: how soon the caller will need this audio (0: now, a reply's first sentence; later
        sentences have the audio already queued before them). A provider whose workers are shared by
        many calls serves the earliest due first; others may ignore it."""

    async def aclose(self) -> None: ...
