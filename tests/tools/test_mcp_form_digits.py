"""Digits a caller keyed into a digit form never reach a tool from an MCP server (a real SDK server
process), whatever the model passes them as; the model is told why."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.tools.test_mcp import mcp_config, started, stdio_server, tool_messages
from voicegate.internal.config.telephony import DigitFormConfig
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.pipeline.events import TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.telephony.collection import DigitCollection

pytestmark = pytest.mark.slow

CARD = "4111111111111111"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-test") as server:
        yield server


async def test_a_forms_entry_is_refused_in_the_arguments_of_an_mcp_tool(tmp_path: Path, fake: FakeOpenAI) -> None:
    calls = tmp_path / "calls.jsonl"
    config = mcp_config(tmp_path, fake, [stdio_server(calls, tools=["lookup_order"])])
    config.digits.forms = {"card": DigitFormConfig(prompt="Please key in your card number.", min_digits=16,
                                                   max_digits=16, input="keys")}
    gateway = await started(config)
    try:
        fake.script_tool_call("collect_digits", {"form": "card"})
        fake.script_tool_call("orders__lookup_order", {"order_id": f"card {CARD[:4]}-{CARD[4:8]} {CARD[8:]}"})
        fake.script_reply("I cannot look that up with your card number.")
        fake.script_tool_call("orders__lookup_order", {"order_id": "ZQ-4471"})  # the next turn: no entry in it
        fake.script_reply("Order ZQ-4471 shipped.")
        session = await gateway.open_session(CallerIdentity("jwt", "alice"), "webrtc")
        sink = CollectingSink()
        pipeline = gateway.new_pipeline(session, 16000, sink)
        async with LocalCall(pipeline) as call:
            pipeline.submit_text("Which order did I pay with my card?")
            for _ in range(50 * 30):
                if isinstance(pipeline.capture, DigitCollection) and pipeline.capture.entry is not None:
                    break
                await call.ticks_later(1)
            for key in CARD:
                pipeline.push_dtmf(key)
                await call.ticks_later(3)
            await call.wait_agent_quiet(600, timeout_s=90)
            pipeline.submit_text("And order ZQ-4471?")
            await call.ticks_later(5)
            await call.wait_agent_quiet(600, timeout_s=90)
        assert gateway.sessions is not None
        await gateway.sessions.end(session, "test over")
    finally:
        await gateway.stop()
    collected, refused, looked_up = tool_messages(fake.requests[-1])  # the whole call's, in order
    assert json.loads(collected) == {"ok": True, "digits": CARD, "via": "keys", "attempts": 1}
    assert "never sent to tools from other servers" in json.loads(refused)["error"]
    assert looked_up.startswith('<tool_result server="orders" tool="lookup_order">')
    said = [e.text for e in sink.events if isinstance(e, TranscriptEvent) and e.role == "agent"]
    assert said[-2:] == ["Please key in your card number. I cannot look that up with your card number.",
                         "Order ZQ-4471 shipped."]
    # The server heard the second lookup only: the card number never left.
    assert [json.loads(line)["arguments"] for line in calls.read_text().splitlines()] == [{"order_id": "ZQ-4471"}]
