"""What the caller heard the agent say: Whisper on the audio that arrived, one transcription per turn.

The server's transcript says what the agent meant to say; this says what reached the caller's ear
(through the codec, the network, the jitter buffer, and cut where a barge-in cut it). An expectation on
what was said holds only when both agree (docs/evals.md), so a reply garbled or silenced on the way
fails even though the server believes it spoke.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.evals.replies import TurnView
from voicegate.internal.evals.wire import Track

MARGIN_S = 0.3  # around each stretch of speech: Whisper hears a word's onset and tail whole
FRAME_TAIL_S = 0.02  # a run's end is its last loud frame's arrival: the frame itself lasts 20 ms more


class Transcriber(Protocol):
    async def transcribe(self, pcm: bytes, sample_rate: int, caller: object | None = None) -> str: ...

    async def warm_up(self) -> None: ...

    async def aclose(self) -> None: ...


def whisper_for_evals(models_dir: Path) -> Transcriber:
    """The offline recogniser in one worker process (tiny.en from its pinned package, beam 5: the eval
    hears the agent's voice once per turn, so a better search is worth its cost)."""
    from voicegate.internal.stt.whisper import WhisperSpeechToText

    return WhisperSpeechToText(WhisperConfig(workers=1, beam_size=5, shed_after_ms=0), models_dir)


async def hear(views: list[TurnView], heard: Track, ears: Transcriber) -> None:
    """Fill each view's `heard` with Whisper's transcript of the agent's speech in it."""
    for view in views:
        if not view.runs:
            continue
        audio = b"".join(heard.between(run.start - MARGIN_S, run.end + FRAME_TAIL_S + MARGIN_S)
                         for run in view.runs)
        view.heard = (await ears.transcribe(audio, heard.rate)).strip()

