"""A caller who says a sensitive form's digits instead of keying them: no whole-turn decode shows the
digits unmasked, neither one that comes in after the form has ended (the caller also keyed the number, and
the keys finished the form first) nor the next turn's, which must not be heard together with the form's
words. A real pipeline with the real whole-turn UtteranceStream (workers.py, Whisper's), over a recogniser
that hears tones: each tone stands for the words scripted for its pitch."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

from tests.fakes.models import ToolCallingModel
from tests.pipeline.conftest import PipelineFactory, config, make_pipeline  # noqa: F401 (fixtures)
from tests.speech import silence, tone
from voicegate.internal.config.telephony import DigitFormConfig
from voicegate.internal.conversation.form_digits import digits_in
from voicegate.internal.pipeline.events import TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.stt.workers import UtteranceStream
from voicegate.internal.telephony.collection import DigitCollection
from voicegate.internal.telephony.digit_tool import register_digits_tool
from voicegate.internal.tools.registry import ToolRegistry, register_end_call
from voicegate.server.providers import call_control

pytestmark = pytest.mark.slow

CARD = "4539578763621486"
CARD_WORDS = "four five three nine five seven eight seven six three six two one four eight six"
DIGITS_HZ, YES_HZ = 700.0, 300.0
WORDS = {DIGITS_HZ: CARD_WORDS, YES_HZ: "yes please"}


class ToneRecogniser:
    """Hears the pitch of each 100 ms of voiced audio and writes the words scripted for it, once per tone,
    in order: a whole-turn decode of two utterances writes both. `held` keeps every decode waiting (a busy
    recogniser) until it is set."""

    name = "tones"
    min_utterance_ms = 100
    max_utterance_s = 30
    whole_turn = True

    def __init__(self) -> None:
        self.held = asyncio.Event()
        self.held.set()
        self.heard: list[str] = []

    def open(self, sample_rate: int) -> UtteranceStream:
        return UtteranceStream(self, sample_rate)

    async def transcribe(self, pcm: bytes, sample_rate: int, caller: object | None = None) -> str:
        await self.held.wait()
        samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
        window = sample_rate // 10
        words: list[str] = []
        for start in range(0, len(samples) - window + 1, window):
            part = samples[start:start + window]
            if np.sqrt(np.mean(part ** 2)) < 100:
                continue
            peak = float(np.argmax(np.abs(np.fft.rfft(part)))) * sample_rate / window
            pitch = min(WORDS, key=lambda hz: abs(hz - peak))
            if not words or words[-1] != WORDS[pitch]:
                words.append(WORDS[pitch])
        self.heard.append(" ".join(words))
        return " ".join(words)

    def withdraw(self, caller: object) -> int:
        return 0

    async def aclose(self) -> None:
        return None


def sensitive_card(cfg: Any) -> ToolRegistry:
    cfg.digits.forms = {"card": DigitFormConfig(prompt="Please key in or say your card number.", min_digits=16,
                                                max_digits=16, terminator=None, input="both", sensitive=True)}
    registry = ToolRegistry()
    register_end_call(registry)
    register_digits_tool(registry, cfg.digits, control_of=call_control)
    return registry


async def form_started(call: LocalCall, pipeline: VoicePipeline) -> None:
    for _ in range(50 * 30):
        if isinstance(pipeline.capture, DigitCollection) and pipeline.capture.entry is not None:
            return
        await call.ticks_later(1)
    raise AssertionError("the form never started")


def leaked(pipeline: VoicePipeline, model: ToolCallingModel, events: list[Any]) -> list[str]:
    """Every text the caller's or the model's side shows that holds the card's digits."""
    texts = [e.text for e in events if isinstance(e, TranscriptEvent)]
    texts += [json.dumps([(m.role, m.content) for m in r.messages]) + r.turn.text for r in model.requests]
    texts += [m.content for m in pipeline.session.conversation.recent_history()]
    return [text for text in texts if CARD in digits_in(text)]


async def test_a_decode_of_the_spoken_number_that_comes_after_the_keys_ended_the_form_is_masked(
        make_pipeline: PipelineFactory, config: Any) -> None:  # noqa: F811
    recogniser = ToneRecogniser()
    model = ToolCallingModel([("collect_digits", {"form": "card"})], lambda r: "Thank you.", reply="Okay.")
    pipeline, sink = make_pipeline(stt=recogniser, model=model, tools=sensitive_card(config))
    pipeline.session.pipeline = pipeline  # type: ignore[attr-defined]  # as the gateway does
    async with LocalCall(pipeline) as call:
        pipeline.submit_text("I want to pay my bill.")
        await form_started(call, pipeline)
        recogniser.held.clear()  # the recogniser is busy: the number said aloud is heard late ...
        call.say(tone(1500, hz=DIGITS_HZ) + silence(600))
        await call.wait_caller_done()
        for key in CARD:  # ... after the caller, reading it out, keyed it too
            pipeline.push_dtmf(key)
            await call.ticks_later(2)
        while isinstance(pipeline.capture, DigitCollection) or not model.results:
            await call.ticks_later(1)
        assert model.results[0]["via"] == "keys"  # the keys ended the form
        recogniser.held.set()
        await call.ticks_later(50)
        await call.wait_agent_quiet(600, timeout_s=60)
    assert recogniser.heard == [CARD_WORDS]
    assert model.results[0]["via"] == "keys"
    assert leaked(pipeline, model, sink.events) == []
    shown = [e for e in sink.events if isinstance(e, TranscriptEvent) and e.role == "user" and e.final]
    assert [(e.text, e.masked) for e in shown][-1] == ("[digit entry]", True)


async def test_the_turn_after_a_spoken_number_is_not_heard_together_with_it(
        make_pipeline: PipelineFactory, config: Any) -> None:  # noqa: F811
    recogniser = ToneRecogniser()
    model = ToolCallingModel([("collect_digits", {"form": "card"})], lambda r: "Thank you.", reply="Okay.")
    pipeline, sink = make_pipeline(stt=recogniser, model=model, tools=sensitive_card(config))
    pipeline.session.pipeline = pipeline  # type: ignore[attr-defined]  # as the gateway does
    async with LocalCall(pipeline) as call:
        pipeline.submit_text("I want to pay my bill.")
        await form_started(call, pipeline)
        call.say(tone(1500, hz=DIGITS_HZ) + silence(600))
        await call.wait_caller_done()
        await call.wait_agent_quiet(600, timeout_s=60)
        assert pipeline.capture is None
        call.say(tone(800, hz=YES_HZ) + silence(600))
        await call.wait_caller_done()
        await call.ticks_later(50)
        await call.wait_agent_quiet(600, timeout_s=60)
    assert model.results[0]["via"] == "speech"
    assert recogniser.heard[-1] == "yes please"
    assert [r.turn.text for r in model.requests][-1] == "yes please"
    assert leaked(pipeline, model, sink.events) == []
