"""The detection runtime on real speech and a real recogniser: the greeting is transcribed while it runs, and
a recording's words decide before its length would."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.speech import neural, silence
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.stt.whisper import WhisperSpeechToText
from voicegate.internal.telephony.amd import AmdSettings, AnsweringMachineClassifier
from voicegate.internal.telephony.answering_machine import MachineListener

pytestmark = pytest.mark.slow


class FrameClock:
    """Audio time: 20 ms per frame fed, whatever the wall clock does."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def listen(listener: MachineListener, clock: FrameClock, pcm: bytes) -> None:
    for index in range(len(pcm) // 320):
        clock.now += 0.02
        listener.audio(pcm[index * 320:(index + 1) * 320], True)
        probe = listener.probe
        if probe is not None and not probe.done():
            await asyncio.wait_for(asyncio.shield(probe), 30)  # a recogniser as fast as the audio
        if listener.classifier.decision is not None:
            return


async def test_a_recordings_words_heard_by_whisper_decide_while_its_greeting_runs(tmp_path: Path) -> None:
    (greeting,) = neural(["Hi, you've reached Sam. I can't take your call right now. Please leave a message "
                          "after the tone."], 8000)
    whisper = WhisperSpeechToText(WhisperConfig(workers=1), tmp_path / "models")
    try:
        settings = AmdSettings()
        classifier = AnsweringMachineClassifier(settings, 8000, words_expected=True)
        clock = FrameClock()
        listener = MachineListener(classifier, whisper, clock)
        await listen(listener, clock, silence(500, 8000) + greeting + silence(3000, 8000))
    finally:
        await whisper.aclose()
    decision = classifier.decision
    assert decision is not None and (decision.result, decision.reason) == ("machine", "words"), decision
    assert decision.greeting_ms < settings.words_greeting_ms  # sooner than its length alone would allow
