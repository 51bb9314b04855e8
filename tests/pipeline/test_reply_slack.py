"""A reply tells the speech engine how soon each sentence is needed (tts/base.py SLACK_S): the first at once,
the next after the audio still queued ahead of it, so an engine with a queue serves first sentences first."""

from __future__ import annotations

from collections.abc import AsyncIterator

from voicegate.internal.pipeline.playout import Playout
from voicegate.internal.pipeline.reply import speak_text
from voicegate.internal.tts.base import SLACK_S


class SlackRecorder:
    """A real engine's interface: one second of PCM per sentence, noting the slack it was asked with."""

    name = "recorder"

    def __init__(self) -> None:
        self.slack: list[float] = []

    async def synthesize(self, text: str, sample_rate: int) -> AsyncIterator[bytes]:
        self.slack.append(SLACK_S.get())
        yield bytes(2 * sample_rate)

    async def aclose(self) -> None:
        return None


async def test_the_first_sentence_is_needed_now_and_the_next_after_the_audio_ahead_of_it() -> None:
    playout, tts = Playout(sample_rate=8000), SlackRecorder()
    await speak_text("First sentence.", tts, playout, lambda: None)
    await speak_text("Second sentence.", tts, playout, lambda: None)
    for _ in range(25):  # half a second of the first two plays
        playout.pull()
    await speak_text("Third sentence.", tts, playout, lambda: None)
    assert tts.slack == [0.0, 1.0, 1.5]
