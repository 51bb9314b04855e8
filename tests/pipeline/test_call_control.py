"""The port a phone flow reaches a call through (internal/pipeline/capture.py `CallControl`): the pipeline
implements it, and the flows in internal/telephony use nothing else of the pipeline."""

from __future__ import annotations

import ast
import inspect

import pytest

from tests.pipeline.conftest import PipelineFactory, ScriptedStt
from voicegate.internal.pipeline.capture import CallControl
from voicegate.internal.telephony import answering_machine, collection, navigation
from voicegate.internal.telephony.collection import DigitCollection


async def test_a_flow_takes_the_input_and_hands_it_back_only_while_it_holds_it(
        make_pipeline: PipelineFactory) -> None:
    pipeline, _ = make_pipeline(stt=ScriptedStt([]))
    call: CallControl = pipeline
    form, inner = DigitCollection(), DigitCollection()
    assert call.take_input(form) is None and pipeline.input is form
    assert call.take_input(inner) is form and pipeline.input is inner  # a flow inside a flow
    call.hand_back_input(form, None)  # no longer the holder: the inner flow keeps the input
    assert pipeline.input is inner
    call.hand_back_input(inner, form)
    assert pipeline.input is form
    call.hand_back_input(form, None)
    assert pipeline.input is call.turn_input is pipeline.turn
    await pipeline.close()


@pytest.mark.parametrize("module", [answering_machine, collection, navigation])
def test_phone_flows_reach_the_call_only_through_the_port(module: object) -> None:
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "voicegate.internal.pipeline.pipeline" not in imported
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not attributes & {"responder", "playout", "capture", "turn"}
