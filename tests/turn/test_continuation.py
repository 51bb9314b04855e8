"""A caller who goes on after the agent decided they had finished: one answer, to the whole sentence.

These drive the real pipeline on its 20 ms clock with tones for the caller's voice and a scripted
recogniser, so the timing of each case is exact: the turn is released during the caller's pause, and the
caller goes on before the reply plays, just after it began, or only coughs. A prepared reply's
side-effect tools wait for the release.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from tests.fakes.models import RecordingModel
from tests.pipeline.conftest import PipelineFactory, ScriptedStt
from tests.speech import active_ms, silence, tone
from voicegate.internal.llm.base import ChatRequest, ReplyDelta, ToolCall
from voicegate.internal.pipeline.events import ResponseEvent, TranscriptEvent, TurnEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.tools.registry import ToolContext, ToolRegistry

RATE = 16000
FRAME = RATE // 50 * 2
# The text rules release a turn ~0.6 s after the caller's tone ends (300 ms VAD offset, then 300 ms quiet).
FAST_RULES: dict[str, Any] = {"turn_merge_ms": 100, "user_speech_quiet_ms": 300}


def outcomes(events: list[Any]) -> list[str]:
    return [e.outcome for e in events if isinstance(e, TurnEvent)]


def answers(events: list[Any]) -> list[str]:
    return [e.text for e in events if isinstance(e, ResponseEvent) and not e.interrupted]


def user_turns(pipeline: Any) -> list[str]:
    return [m.content for m in pipeline.session.conversation.history if m.role == "user"]


def agent_ms(call: LocalCall, start_ms: int, end_ms: int) -> int:
    """How much agent audio went out between two moments (ms from the call's first tick)."""
    audio = bytes(call.agent_audio)
    return active_ms(audio[start_ms // 20 * FRAME:end_ms // 20 * FRAME], RATE, threshold_dbfs=-60)


async def speak_with_pause(call: LocalCall, first_ms: int, pause_ms: int, second_ms: int) -> int:
    """The caller's two halves; returns the tick the caller's audio starts at."""
    await call.ticks_later(1)
    start = call.ticks
    call.say(silence(200) + tone(first_ms) + silence(pause_ms) + tone(second_ms) + silence(200))
    await call.wait_caller_done()
    await call.wait_agent_quiet(600, timeout_s=20)
    return start


async def test_going_on_before_the_reply_plays_drops_it_silently_and_answers_the_whole_sentence(
        make_pipeline: PipelineFactory) -> None:
    model = RecordingModel("Sure.", delay_s=0.9)  # nothing can play before the caller goes on
    stt = ScriptedStt(["Please send the parcel.", "To my office instead."])
    pipeline, sink = make_pipeline(stt=stt, model=model, **FAST_RULES)
    async with LocalCall(pipeline) as call:
        start = await speak_with_pause(call, 500, 1100, 600)
        continued_at = start * 20 + 200 + 500 + 1100
        assert agent_ms(call, 0, continued_at) == 0  # no reply audio before they went on
    assert outcomes(sink.events).count("continued_before_reply") == 1
    assert answers(sink.events) == ["Sure."]
    assert user_turns(pipeline) == ["Please send the parcel. To my office instead."]
    assert model.requests[-1].turn.text == "Please send the parcel. To my office instead."
    # The dropped reply left nothing: no agent line, no interrupted response.
    agent_lines = [e.text for e in sink.events if isinstance(e, TranscriptEvent) and e.role == "agent"]
    assert agent_lines == ["Sure."]
    assert not [e for e in sink.events if isinstance(e, ResponseEvent) and e.interrupted]


async def test_going_on_just_after_the_reply_began_stops_it_at_once_and_answers_the_whole_sentence(
        make_pipeline: PipelineFactory) -> None:
    model = RecordingModel("Of course, I can send it wherever you like, just tell me where it should go.")
    stt = ScriptedStt(["Please send the parcel.", "To my office instead."])
    pipeline, sink = make_pipeline(stt=stt, model=model, **FAST_RULES)
    async with LocalCall(pipeline) as call:
        await call.ticks_later(1)
        start = call.ticks
        pause_ms = 1500
        call.say(silence(200) + tone(500) + silence(pause_ms) + tone(600) + silence(200))
        await call.wait_caller_done()
        await call.wait_agent_quiet(600, timeout_s=20)
    offset = start * 20
    continued_at = offset + 200 + 500 + pause_ms
    assert agent_ms(call, continued_at - 600, continued_at) > 200  # the reply had begun
    # Stopped within 150 ms of the caller's voice (VAD onset + one frame), silent while they go on.
    assert agent_ms(call, continued_at + 150, continued_at + 600) == 0
    assert outcomes(sink.events).count("continued_after_reply_heard") == 1
    assert user_turns(pipeline) == ["Please send the parcel. To my office instead."]
    assert model.requests[-1].turn.text == "Please send the parcel. To my office instead."
    assert answers(sink.events) == [model.reply]  # once: the reply they cut off is not an answer
    history = [(m.role, m.content) for m in pipeline.session.conversation.history]
    assert history == [("user", "Please send the parcel. To my office instead."), ("assistant", model.reply)]
    log = pipeline.session.conversation.transcript.entries()
    assert log[0].role == "agent" and log[0].interrupted  # what they heard of it stays in the call's log


async def test_a_cough_after_the_release_lets_the_reply_play_on(make_pipeline: PipelineFactory) -> None:
    model = RecordingModel("Sure.", delay_s=0.9)
    stt = ScriptedStt(["Can you send it to my office?", ""])
    pipeline, sink = make_pipeline(stt=stt, model=model, **FAST_RULES)
    async with LocalCall(pipeline) as call:
        await speak_with_pause(call, 500, 900, 200)
    assert answers(sink.events) == ["Sure."]
    assert user_turns(pipeline) == ["Can you send it to my office?"]
    assert "continued_before_reply" not in outcomes(sink.events)


async def test_a_reply_prepared_before_the_release_plays_at_once_when_it_comes(make_pipeline: PipelineFactory) -> None:
    model = RecordingModel("Sure.", delay_s=0.3)
    stt = ScriptedStt(["Where is my parcel?"])
    # The text rules hold this turn ~1 s; the reply is prepared at once and waits, held, for the release.
    pipeline, sink = make_pipeline(stt=stt, model=model, turn_merge_ms=100, user_speech_quiet_ms=1000)
    async with LocalCall(pipeline) as call:
        await speak_with_pause(call, 500, 0, 0)
    assert outcomes(sink.events) == ["prepared_used"]
    assert answers(sink.events) == ["Sure."] and len(model.requests) == 1
    first_audio = [e.ms for e in sink.events if getattr(e, "stage", "") == "first_audio"]
    assert first_audio and first_audio[0] < 200  # the model's 300 ms were spent before the release


class BookingModel:
    """Calls `book` with the caller's words, then confirms: a tool with side effects."""

    name = "booking"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        self.requests.append(request)
        if request.messages[-1].role == "tool":
            yield ReplyDelta("Booked.")
        else:
            yield ToolCall(f"call-{len(self.requests)}", "book", {"what": request.turn.text})

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        return ""

    async def aclose(self) -> None:
        return None


async def test_a_prepared_reply_never_runs_a_side_effect_tool_for_words_that_were_not_the_turn(
        make_pipeline: PipelineFactory) -> None:
    booked: list[str] = []
    looked_up: list[str] = []

    async def book(arguments: dict[str, Any], context: ToolContext) -> str:
        booked.append(arguments["what"])
        return "ok"

    async def look_up(arguments: dict[str, Any], context: ToolContext) -> str:
        looked_up.append("x")
        return "ok"

    tools = ToolRegistry()
    tools.register("book", "Book it.", {"type": "object", "properties": {}}, book)  # side effects by default
    tools.register("look_up", "Read only.", {"type": "object", "properties": {}}, look_up, side_effects=False)
    model = BookingModel()
    stt = ScriptedStt(["Book a table", "for four people on Friday."])
    # A 0.7 s pause is shorter than the text rules' hold (300 ms offset + 600 ms quiet): the reply prepared for
    # "Book a table" is thrown away when the caller goes on, and its tool call never runs.
    pipeline, sink = make_pipeline(stt=stt, model=model, tools=tools, turn_merge_ms=100, user_speech_quiet_ms=600)
    async with LocalCall(pipeline) as call:
        await speak_with_pause(call, 500, 700, 600)
    assert model.requests[0].turn.text == "Book a table"  # it was asked ahead of time...
    assert booked == ["Book a table for four people on Friday."]  # ...but only the whole turn booked anything
    assert "prepared_discarded" in outcomes(sink.events)
    assert tools.has_side_effects(ToolCall("1", "book", {}))
    assert not tools.has_side_effects(ToolCall("2", "look_up", {}))
