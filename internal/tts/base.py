"""Text-to-speech behind one small interface: text in, PCM16 mono chunks out, as they are made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol


class TtsError(Exception):
    """Synthesis failed for this text; the pipeline skips it and goes on."""


class TextToSpeech(Protocol):
    name: str

    def synthesize(self, text: str, sample_rate: int) -> AsyncIterator[bytes]:
        """PCM16 mono chunks at `sample_rate`, any chunk length. Cancelling the iteration stops the work."""

    async def aclose(self) -> None: ...
