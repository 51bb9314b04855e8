"""Thinking cues: the decision as a table (internal/pipeline/thinking.py `cue_due`), and on a pipeline driven on a
20 ms clock with espeak-ng speaking: a slow answer is preceded by a cue that stays out of the history, a fast one
is not, and the playout keeps the cue whole and apart from the answer."""

from __future__ import annotations

import pytest

from tests.fakes.models import RecordingModel
from tests.pipeline.conftest import PipelineFactory, ScriptedStt
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.pipeline.playout import Playout
from voicegate.internal.pipeline.thinking import CueMode, CueReason, ThinkingEvent, cue_due, soft_sound


@pytest.mark.parametrize(("mode", "since_ms", "answer", "slow", "cued", "busy", "due"), [
    ("phrases", 699, False, False, False, False, None),  # still within the limit
    ("phrases", 700, False, False, False, False, "late"),
    ("sound", 5000, False, False, False, False, "late"),
    ("phrases", 5000, True, False, False, False, None),  # the answer's audio exists: never a cue, however late
    ("phrases", 0, False, True, False, False, "slow_tool"),  # a slow tool: at once
    ("phrases", 0, True, True, False, False, None),  # ... unless the answer already speaks
    ("phrases", 5000, False, True, True, False, None),  # one cue per reply
    ("phrases", 5000, False, False, False, True, None),  # never over audio already queued
    ("off", 5000, False, True, False, False, None),
])
def test_when_a_cue_is_due(mode: CueMode, since_ms: float, answer: bool, slow: bool, cued: bool, busy: bool,
                           due: CueReason | None) -> None:
    assert cue_due(mode, 700, since_ms, answer_audio=answer, slow_tool=slow, cued=cued, playout_busy=busy) == due


def test_a_cue_is_queued_whole_and_is_never_part_of_what_the_caller_heard() -> None:
    playout = Playout(8000)
    playout.aside(soft_sound(8000))
    segment = playout.begin_segment("Your order shipped.")
    playout.append(segment, bytes(1000))
    playout.end_segment(segment)
    cue_frames = 0
    while (frame := playout.pull()) is not None and playout.last_aside:
        cue_frames += 1
    assert cue_frames == -(-len(soft_sound(8000)) // 320)  # the sound, then the answer: not interleaved
    assert frame is not None and not playout.last_aside
    assert playout.heard_text() == ""  # one frame of the answer: not one whole word yet
    while playout.pull() is not None:
        pass
    assert playout.heard_text() == "Your order shipped."


async def test_a_slow_answer_is_preceded_by_a_cue_that_is_not_in_the_history(make_pipeline: PipelineFactory) -> None:
    model = RecordingModel("Your order shipped on Monday.", delay_s=2.0)
    pipeline, sink = make_pipeline(stt=ScriptedStt([]), model=model, thinking_cue="phrases",
                                   thinking_cue_after_ms=300, thinking_phrases=["One moment."])
    async with LocalCall(pipeline) as call:
        pipeline.submit_text("Where is my order?")
        await call.ticks_later(5)
        await call.wait_agent_quiet(600, timeout_s=60)
    (cue,) = [e for e in sink.events if isinstance(e, ThinkingEvent)]
    assert (cue.reason, cue.cue, cue.text) == ("late", "phrases", "One moment.")
    assert 250 <= cue.after_ms < 2000  # before the model's answer: that is the point of it
    kinds = [e.type for e in sink.events if e.type in ("thinking", "response")]
    assert kinds == ["thinking", "response"]
    history = pipeline.session.conversation.history
    assert [(m.role, m.content) for m in history] == [("user", "Where is my order?"),
                                                      ("assistant", "Your order shipped on Monday.")]
    agent = [e.text for e in pipeline.session.conversation.transcript.entries() if e.role == "agent"]
    assert agent == ["Your order shipped on Monday."]


async def test_a_fast_answer_gets_no_cue(make_pipeline: PipelineFactory) -> None:
    pipeline, sink = make_pipeline(stt=ScriptedStt([]), model=RecordingModel("Hello there."), thinking_cue="sound",
                                   thinking_cue_after_ms=3000)
    async with LocalCall(pipeline) as call:
        pipeline.submit_text("Hello.")
        await call.ticks_later(5)
        await call.wait_agent_quiet(600, timeout_s=60)
    assert [e for e in sink.events if isinstance(e, ThinkingEvent)] == []
    assert [e.type for e in sink.events if e.type == "response"] == ["response"]
