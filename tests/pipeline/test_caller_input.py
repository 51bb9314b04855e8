"""A digit form holding the pipeline's caller input: the prompt stops when the caller starts, their words and
keys fill the form, and nothing they do becomes a turn or cuts off the reply that asked."""

from __future__ import annotations

import json

import pytest

from tests.fakes.models import ToolCallingModel
from tests.pipeline.conftest import PipelineFactory, ScriptedStt
from tests.speech import silence, tone
from voicegate.internal.pipeline.events import DtmfEvent, ResponseEvent, TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.telephony.collection import DigitCollection
from voicegate.internal.telephony.digit_tool import register_digits_tool
from voicegate.internal.telephony.events import DigitsEvent
from voicegate.internal.tools.registry import ToolRegistry, register_end_call
from voicegate.server.providers import call_control

pytestmark = pytest.mark.slow

PROMPT = "Please say or key in your five digit account number, then press hash."


def tools_with_digits(config: object) -> ToolRegistry:
    registry = ToolRegistry()
    register_end_call(registry)
    register_digits_tool(registry, config.digits, control_of=call_control)  # type: ignore[attr-defined]
    return registry


async def collecting(call: LocalCall, pipeline: VoicePipeline) -> None:
    for _ in range(50 * 30):
        if isinstance(pipeline.capture, DigitCollection):
            return
        await call.ticks_later(1)
    raise AssertionError(f"the form never started; the model got {pipeline.services.model.results}")  # type: ignore[attr-defined]


async def test_words_over_the_prompt_stop_it_and_fill_the_form_without_a_turn(
        make_pipeline: PipelineFactory, config: object) -> None:
    model = ToolCallingModel([("collect_digits", {"prompt": PROMPT, "min_digits": 5, "max_digits": 5})],
                             lambda result: f"Thanks, I have {result.get('digits')}.")
    stt = ScriptedStt(["i want to pay my bill", "five five five one two"])
    pipeline, sink = make_pipeline(stt=stt, model=model, tools=tools_with_digits(config))
    pipeline.session.pipeline = pipeline  # as the gateway does (the tool finds the call's pipeline there)
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(500) + silence(100))
        await collecting(call, pipeline)
        await call.ticks_later(40)  # the prompt has been playing for a while
        prompt_frames = call.agent_frames
        call.say(tone(900, level_dbfs=-15) + silence(100))  # the caller talks over it
        await call.wait_caller_done()
        await call.wait_agent_quiet(600)
    assert pipeline.capture is None  # released when the form ended
    assert model.results == [{"ok": True, "digits": "55512", "via": "speech", "attempts": 1}]
    assert [r.turn.text for r in model.requests] == ["i want to pay my bill", "i want to pay my bill"]  # no new turn
    assert not [e for e in sink.events if isinstance(e, ResponseEvent) and e.interrupted]  # the reply went on
    (said,) = [e.text for e in sink.events if isinstance(e, TranscriptEvent) and e.role == "agent"]
    assert said.startswith(PROMPT[:20]) and said.endswith("Thanks, I have 55512.")
    # The prompt (~5 s) stopped when the caller began: far fewer frames than it takes to say in full.
    assert prompt_frames < 5 * 50
    (event,) = [e for e in sink.events if isinstance(e, DigitsEvent)]
    assert (event.status, event.via, event.length) == ("complete", "speech", 5)


async def test_keys_during_a_form_fill_it_and_are_never_a_keypad_turn(
        make_pipeline: PipelineFactory, config: object) -> None:
    model = ToolCallingModel([("collect_digits", {"prompt": "Enter your PIN.", "min_digits": 4, "max_digits": 4,
                                                  "input": "keys"})],
                             lambda result: "Got it." if result.get("ok") else "No.")
    pipeline, sink = make_pipeline(stt=ScriptedStt(["check my balance"]), model=model,
                                   tools=tools_with_digits(config))
    pipeline.session.pipeline = pipeline
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(500) + silence(100))
        await collecting(call, pipeline)
        for key in "4321":
            pipeline.push_dtmf(key)
            await call.ticks_later(5)
        await call.wait_agent_quiet(600)
    assert model.results == [{"ok": True, "digits": "4321", "via": "keys", "attempts": 1}]
    assert len(model.requests) == 2  # the turn and its tool result: no "[The caller pressed keypad keys...]"
    assert all("keypad" not in json.dumps(r.turn.text) for r in model.requests)
    # Each key is an event, but which key is never said: a PIN stays out of every event (and the call feed).
    keys = [e for e in sink.events if isinstance(e, DtmfEvent)]
    assert [(e.digit, e.masked) for e in keys] == [("", True)] * 4


async def test_with_forms_only_the_model_cannot_write_its_own_prompt(
        make_pipeline: PipelineFactory, config: object) -> None:
    from voicegate.internal.config.telephony import DigitFormConfig

    digits = config.digits  # type: ignore[attr-defined]
    digits.forms = {"account": DigitFormConfig(prompt="Please enter your account number.", min_digits=5)}
    digits.forms_only = True
    model = ToolCallingModel([("collect_digits", {"prompt": "For security, key in your card number and its CVV.",
                                                  "min_digits": 16, "max_digits": 19})],
                             lambda result: "Sorry." if "error" in result else "Got it.")
    pipeline, sink = make_pipeline(stt=ScriptedStt(["check my balance"]), model=model,
                                   tools=tools_with_digits(config))
    pipeline.session.pipeline = pipeline
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(500) + silence(100))
        await call.wait_caller_done()
        await call.wait_agent_quiet(600)
    (offered,) = [tool for tool in model.requests[0].tools if tool.name == "collect_digits"]
    assert offered.parameters["properties"] == {"form": {"type": "string", "enum": ["account"],
                                                         "description": "a configured form"}}
    assert model.results == [{"error": "only the configured forms may be used: name one (account)"}]
    assert not [e for e in sink.events if isinstance(e, DigitsEvent)]  # no form ran, nothing was asked
    said = [e.text for e in sink.events if isinstance(e, TranscriptEvent) and e.role == "agent"]
    assert said == ["Sorry."]
