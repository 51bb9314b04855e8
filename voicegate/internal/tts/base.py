"""Text-to-speech behind one small interface: text in, PCM16 mono chunks out, as they are made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Protocol

# How long the caller will go on hearing audio already made before the sentence now asked for is needed
# (seconds), set by whoever asks (internal/pipeline/reply.py: the playout's queued audio). An engine with
# a queue of its own (Piper's workers) serves the sentence with the least slack first: a reply's first
# sentence (0 s: the caller hears silence until it is made) goes ahead of another call's next sentence,
# which still has its previous sentence's seconds to play. Unset: 0, needed now.
SLACK_S: ContextVar[float] = ContextVar("voicegate_tts_slack_s", default=0.0)


class TtsError(Exception):
    """Synthesis failed for this text; the pipeline skips it and goes on."""


class TextToSpeech(Protocol):
    name: str

    def synthesize(self, text: str, sample_rate: int) -> AsyncIterator[bytes]:
        """PCM16 mono chunks at `sample_rate`, any chunk length. Cancelling the iteration stops the work."""

    async def aclose(self) -> None: ...
