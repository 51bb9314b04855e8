"""Thinking cues on real phone calls (sipp), with a tool that takes 3 s on a real MCP server process
(tests/tools/mcp_server.py `archive_lookup`) and the model behind the OpenAI wire protocol (tests/fakes).

The silence the caller hears is measured on the wire: from the turn's release (the `release` line of the call's
log) to the first loud RTP packet voicegate sends. Without a cue that is the tool's 3 s and more; with one it is
the cue's own delay (docs/performance.md, "Thinking cues")."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.pipeline.conftest import ScriptedStt
from tests.sip_calls.conftest import (
    WAIT_FOR_BYE,
    RtpCapture,
    ServerFactory,
    agent_said,
    best_match_at,
    caller_audio,
    loud_part,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from tests.tools.test_mcp import SERVER
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.session import Session
from voicegate.internal.tts.base import TextToSpeech

pytestmark = pytest.mark.slow

ANSWER = "It was delivered last March."
LOUD_DBFS = -45.0


@dataclass
class ToolCall:
    session: Session
    gap_s: float  # release -> first loud packet voicegate sent
    cues: list[dict[str, object]]
    capture: RtpCapture
    tts: TextToSpeech


async def reference(tts: TextToSpeech, text: str) -> bytes:
    """`text` as the server's TTS says it, through G.711 and cut to its loud part, to find in what was sent."""
    pcm = b"".join([chunk async for chunk in tts.synthesize(text, 8000)])
    return loud_part(ulaw_decode(ulaw_encode(pcm)), margin_ms=0)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-test") as server:
        yield server


def first_loud_after(capture: RtpCapture, after_loop_time: float) -> float:
    for received in capture.received:
        if received.at < after_loop_time or received.packet.payload_type != 0:
            continue
        samples = np.frombuffer(ulaw_decode(received.packet.payload), dtype=np.int16).astype(np.float64)
        energy = float(np.mean(samples * samples))
        if energy > 0 and 10 * np.log10(energy / 32768**2) > LOUD_DBFS:
            return received.at
    raise AssertionError("voicegate sent nothing audible after the release")


async def a_call(make_server: ServerFactory, capture: RtpCapture, fake: FakeOpenAI, tmp_path: Path,
                              caplog: pytest.LogCaptureFixture, *, cue: str, slow_tools: list[str],
                              tool: bool = True) -> ToolCall:
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    config = sip_calls_config(tmp_path, symmetric_rtp=False)
    config.llm.provider = "openai"
    config.openai.base_url = fake.url + "/v1"
    config.openai.api_key = "sk-test"
    config.pipeline.thinking_cue = cue  # type: ignore[assignment]
    config.pipeline.thinking_cue_after_ms = 700
    config.pipeline.thinking_phrases = ["One moment."]
    config.mcp = config.mcp.model_validate({"servers": [{
        "name": "orders", "command": sys.executable, "args": [str(SERVER), "stdio"], "tools": ["archive_lookup"],
        "slow_tools": slow_tools, "require_identity": "none"}]})
    if tool:
        fake.script_tool_call("orders__archive_lookup", {"order_id": "ZQ-4471"})
    fake.script_reply(ANSWER)
    server = await make_server(stt=ScriptedStt(["where is my old order"]), config=config)
    scenario = render(tmp_path, media=stream(caller_audio(tmp_path, "what time is it")), ending=WAIT_FOR_BYE,
                      media_port=capture.port)
    caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    (session,) = await server.wait_live()
    await agent_said(session, ANSWER, timeout=60)
    await server.hang_up(session)
    (await caller).check()
    (release,) = [r for r in caplog.records if r.getMessage() == "sip call release"]
    loop = asyncio.get_running_loop()
    released_at = release.created - (time.time() - loop.time())  # the log's wall time on the loop's clock
    gap = first_loud_after(capture, released_at) - released_at
    cues = [r.detail for r in caplog.records if r.getMessage() == "sip call thinking"]  # type: ignore[attr-defined]
    print(f"thinking_cue={cue} slow_tools={slow_tools} tool={tool}: silence after the release {gap * 1000:.0f} ms")
    return ToolCall(session, gap, cues, capture, server.tts)


def assistant_lines(session: Session) -> list[str]:
    return [m.content for m in session.conversation.history if m.role == "assistant" and m.content]


async def test_a_slow_tool_gets_a_cue_at_once_and_the_answer_follows_it(
        make_server: ServerFactory, capture: RtpCapture, fake: FakeOpenAI, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    call = await a_call(make_server, capture, fake, tmp_path, caplog, cue="phrases",
                                      slow_tools=["archive_lookup"])
    assert [(c["reason"], c["text"]) for c in call.cues] == [("slow_tool", "One moment.")]
    assert call.gap_s < 2.5  # the cue, not the 3 s tool, ends the silence (generous for a loaded machine)
    # The cue is heard whole, then the answer; and it is no part of the agent's answer anywhere.
    sent = call.capture.pcm()
    cue_score, cue_at = best_match_at(sent, await reference(call.tts, "One moment."))
    answer_score, answer_at = best_match_at(sent, await reference(call.tts, ANSWER))
    assert cue_score > 0.9 and answer_score > 0.9 and cue_at < answer_at
    assert assistant_lines(call.session) == [ANSWER]
    agent = [e.text for e in call.session.conversation.transcript.entries() if e.role == "agent"]
    assert agent == [ANSWER]


async def test_an_undeclared_3s_tool_gets_a_cue_after_the_configured_time(
        make_server: ServerFactory, capture: RtpCapture, fake: FakeOpenAI, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    call = await a_call(make_server, capture, fake, tmp_path, caplog, cue="sound", slow_tools=[])
    assert [(c["reason"], c["cue"]) for c in call.cues] == [("late", "sound")]
    assert call.gap_s < 2.5
    assert assistant_lines(call.session) == [ANSWER]


async def test_without_a_cue_the_caller_hears_the_whole_tool_in_silence(
        make_server: ServerFactory, capture: RtpCapture, fake: FakeOpenAI, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    call = await a_call(make_server, capture, fake, tmp_path, caplog, cue="off", slow_tools=[])
    assert call.cues == []
    assert call.gap_s > 1.5  # the baseline (the tool started with the reply prepared before the release)


async def test_a_fast_answer_gets_no_cue(
        make_server: ServerFactory, capture: RtpCapture, fake: FakeOpenAI, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    call = await a_call(make_server, capture, fake, tmp_path, caplog, cue="phrases", slow_tools=[],
                                      tool=False)
    assert call.cues == []
    assert best_match_at(call.capture.pcm(), await reference(call.tts, "One moment."))[0] < 0.5
