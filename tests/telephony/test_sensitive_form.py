"""A sensitive digit form's entry never reaches the model in clear: the model gets it masked, so nothing it
says (spoken, recorded, in the transcript events, remembered) can hold the digits; a tool in this process
that needs them reads them from the call. A real pipeline (espeak, the VAD), with a scripted model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.models import ToolCallingModel
from tests.pipeline.conftest import PipelineFactory, ScriptedStt, config, make_pipeline  # noqa: F401 (fixtures)
from voicegate.internal.config.telephony import DigitFormConfig
from voicegate.internal.conversation.form_digits import form_entry, masked
from voicegate.internal.llm.base import ChatRequest
from voicegate.internal.pipeline.events import TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.telephony.collection import DigitCollection
from voicegate.internal.telephony.digit_tool import register_digits_tool
from voicegate.internal.tools.registry import ToolRegistry, register_end_call
from voicegate.server.providers import call_control

pytestmark = pytest.mark.slow

CARD = "4539578763621486"
PIN = "7302"


def model_text(requests: list[ChatRequest]) -> str:
    """Everything the model was handed: system context, the conversation, tool results."""
    return "\n".join(request.system + json.dumps([(m.role, m.content) for m in request.messages], ensure_ascii=False)
                     for request in requests)


async def run_form(make: PipelineFactory, cfg: Any, form: DigitFormConfig, keys: str) -> tuple[
        VoicePipeline, ToolCallingModel, list[Any]]:
    cfg.digits.forms = {"secret": form}
    registry = ToolRegistry()
    register_end_call(registry)
    register_digits_tool(registry, cfg.digits, control_of=call_control)
    # The model reads back whatever it was told, and is asked about it again in the next turn.
    model = ToolCallingModel([("collect_digits", {"form": "secret"})],
                             lambda result: f"Thanks, I have {result.get('digits')}.", reply="It is on file.")
    pipeline, sink = make(stt=ScriptedStt([]), model=model, tools=registry)  # the caller types and keys
    pipeline.session.pipeline = pipeline  # type: ignore[attr-defined]  # as the gateway does
    async with LocalCall(pipeline) as call:
        pipeline.submit_text("I want to pay my bill.")
        for _ in range(50 * 30):
            if isinstance(pipeline.capture, DigitCollection) and pipeline.capture.entry is not None:
                break
            await call.ticks_later(1)
        for key in keys:
            pipeline.push_dtmf(key)
            await call.ticks_later(3)
        await call.wait_agent_quiet(600, timeout_s=60)
        pipeline.submit_text("Which number did I give you?")
        await call.ticks_later(5)
        await call.wait_agent_quiet(600, timeout_s=60)
    return pipeline, model, sink.events


async def test_a_sensitive_cards_digits_never_reach_the_model_nor_the_transcript(
        make_pipeline: PipelineFactory, config: Any) -> None:  # noqa: F811
    form = DigitFormConfig(prompt="Please key in your card number.", min_digits=16, max_digits=16, terminator=None,
                           input="keys", sensitive=True)
    pipeline, model, events = await run_form(make_pipeline, config, form, CARD)
    (result,) = model.results
    assert result["ok"] and result["masked"] and result["digits"] == "\u2022" * 12 + "1486"
    assert len(model.requests) == 3  # the turn, the tool's result, the next turn
    assert CARD not in model_text(model.requests) and CARD[:12] not in model_text(model.requests)
    said = [e.text for e in events if isinstance(e, TranscriptEvent)]
    assert any("Thanks, I have" in text for text in said)
    assert CARD not in json.dumps([e.model_dump() for e in events])
    assert CARD not in json.dumps([(m.role, m.content) for m in pipeline.session.conversation.recent_history()])
    assert form_entry(pipeline.session.slots, "secret") == CARD  # a built-in tool gets the value


async def test_a_sensitive_pin_is_masked_whole(
        make_pipeline: PipelineFactory, config: Any) -> None:  # noqa: F811
    form = DigitFormConfig(prompt="Please key in your PIN.", min_digits=4, max_digits=4, terminator=None,
                           input="keys", sensitive=True)
    _, model, events = await run_form(make_pipeline, config, form, PIN)
    assert model.results[0]["digits"] == "\u2022" * 4  # its last four would be all of it
    assert PIN not in model_text(model.requests)
    assert PIN not in json.dumps([e.model_dump() for e in events])


async def test_a_form_that_is_not_sensitive_gives_the_model_the_digits(
        make_pipeline: PipelineFactory, config: Any) -> None:  # noqa: F811
    form = DigitFormConfig(prompt="Please key in your extension.", min_digits=4, max_digits=4, terminator=None,
                           input="keys", sensitive=False)
    _, model, _ = await run_form(make_pipeline, config, form, PIN)
    assert model.results[0] == {"ok": True, "digits": PIN, "via": "keys", "attempts": 1}


def test_the_mask_shows_the_last_four_of_a_long_entry_only() -> None:
    assert masked(CARD) == "\u2022" * 12 + "1486"
    assert masked("1234567890") == "\u2022" * 6 + "7890"
    assert masked("123456789") == "\u2022" * 9
    assert masked(PIN) == "\u2022" * 4
