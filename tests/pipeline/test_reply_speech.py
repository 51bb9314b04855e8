"""How a reply asks for its sentences' speech: the first is due at once, each later one when the audio
queued before it runs out (a shared voice serves the most urgent sentence first: tests/providers/
test_due_order.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from internal.pipeline.playout import Playout
from internal.pipeline.reply import speak_text


class RecordingVoice:
    name = "recording"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.asked: list[tuple[str, float]] = []

    async def synthesize(self, text: str, sample_rate: int, due_s: float = 0.0) -> AsyncIterator[bytes]:
        self.asked.append((text, due_s))
        yield bytes(int(sample_rate * self.seconds) * 2)

    async def aclose(self) -> None:
        return None


async def test_later_sentences_are_due_when_the_audio_before_them_runs_out() -> None:
    playout, voice = Playout(8000), RecordingVoice(1.5)
    for text in ("First.", "Second.", "Third."):
        await speak_text(text, voice, playout, lambda: None)
    assert [due for _, due in voice.asked] == pytest.approx([0.0, 1.5, 3.0])
    for _ in range(50):  # one second of it plays
        playout.pull()
    await speak_text("Fourth.", voice, playout, lambda: None)
    assert voice.asked[-1][1] == pytest.approx(3.5)
