"""Speech-to-text behind one small interface.

The pipeline's VAD decides where utterances start and end. A provider that transcribes whole
utterances (pocketsphinx, OpenAI) gets the speech frames and `end_of_speech()`; a streaming provider
(Deepgram) sets `continuous = True` and gets every frame, and may finalise on its own endpointing.

A provider that hears each utterance in the context of the whole turn (Whisper: the turn's audio is
decoded again at each pause, so a sentence split by a pause is recognised as one sentence) marks its
finals `whole_turn`: the text replaces what the turn held so far. `new_turn()` tells a stream the
caller has started a new turn; providers that hear utterances one by one ignore it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SpeechEvidence:
    """How sure the recogniser is that a final's audio held speech (Whisper's own scores for the decode).

    Over the agent these separate a caller's words from what Whisper makes up out of a breath or a cough
    (internal/turn/bargein.py `classify_overlap`)."""

    no_speech_prob: float  # P(no speech) from the decode's first step
    avg_logprob: float  # mean log-probability of the words it chose


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    final: bool
    confidence: float | None = None  # 0-1 when the engine reports one
    whole_turn: bool = False  # the text of the whole turn so far, not only of the latest utterance
    overloaded: bool = False  # no text because the engine was too busy to decode it in time (load shed)
    # No text because a later final of the same turn covers this utterance's audio (its decode was
    # withdrawn before it ran): nothing to say or do for it, the next final follows.
    superseded: bool = False
    # P(the caller's turn is finished) from the recogniser's own end-of-turn head (Whisper's phone-band
    # head on its encoder states, internal/stt/phone_turn.py), for the audio this final heard. None: none.
    end_of_turn: float | None = None
    evidence: SpeechEvidence | None = None  # the decode's own scores, when the engine gives them


class SttError(Exception):
    """The engine failed for this utterance; the call goes on."""


class SttStream(Protocol):
    continuous: bool

    def push(self, pcm: bytes) -> None:
        """Queue 20 ms of PCM16 mono at the stream's rate. Never blocks, never raises."""

    def end_of_speech(self) -> None:
        """The VAD ended an utterance: produce its final transcript (possibly empty)."""

    def new_turn(self) -> None:
        """The caller starts a new turn: what they said before is no longer part of it."""

    def results(self) -> AsyncIterator[Transcript]:
        """Partial and final transcripts, in order, until the stream is closed."""

    async def aclose(self) -> None: ...


class SpeechToText(Protocol):
    name: str

    def open(self, sample_rate: int) -> SttStream:
        """A stream for one call at `sample_rate` (8000 or 16000)."""

    async def aclose(self) -> None:
        """Release shared resources (worker pools, connections)."""
