"""Asking the end-of-turn model (Smart Turn) about the caller's latest silence.

The owner numbers the caller's silences; a question is about one of them, and a newer question cancels an
older one still out. The model hears the turn's audio up to the end of its last word plus a little of the
silence after it (END_OF_TURN_SILENCE_MS), with long inner pauses shortened (smart_turn.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from voicegate.internal.turn.ports import EndOfTurnModel
from voicegate.internal.turn.settings import FRAME_MS
from voicegate.internal.turn.smart_turn import without_long_pauses

log = logging.getLogger(__name__)

TURN_AUDIO_FRAMES = 400  # 8 s of 20 ms frames: what the end-of-turn model hears
# The silence after the last word that the model hears. Measured on a neural voice: past ~150 ms of
# silence, unfinished sentences start to sound "complete".
END_OF_TURN_SILENCE_MS = 100


def model_audio(frames: list[tuple[bytes, bool]], offset_frames: int) -> bytes:
    """What the model hears of the turn's frames: the VAD's offset (the silence it waited out before ending
    the utterance) trimmed to END_OF_TURN_SILENCE_MS, long inner pauses shortened."""
    extra = max(0, offset_frames - END_OF_TURN_SILENCE_MS // FRAME_MS)
    return without_long_pauses(frames[:len(frames) - extra] if extra else frames)


class ModelQuestions:
    """One question to the end-of-turn model at a time. `answer(silence, probability)` gets each answer
    (None: the model failed or its pool was full, and the words decide); `stage` its latency."""

    def __init__(self, model: EndOfTurnModel, sample_rate: int, answer: Callable[[int, float | None], None],
                 stage: Callable[[str, float], None]) -> None:
        self.model = model
        self.sample_rate = sample_rate
        self._answer = answer
        self._stage = stage
        self._task: asyncio.Task[None] | None = None

    @property
    def out(self) -> bool:
        """A question is still unanswered."""
        return self._task is not None and not self._task.done()

    def ask(self, silence: int, audio: bytes) -> None:
        self.close()
        self._task = asyncio.create_task(self._ask(silence, audio), name="end-of-turn")

    async def _ask(self, silence: int, audio: bytes) -> None:
        loop = asyncio.get_running_loop()
        asked = loop.time()
        try:
            probability = await self.model.predict(audio, self.sample_rate)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("end-of-turn model failed; the words decide this turn")
            probability = None
        if probability is not None:  # None: failed, or the model's pool was full
            self._stage("end_of_turn_model", (loop.time() - asked) * 1000.0)
        self._answer(silence, probability)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
