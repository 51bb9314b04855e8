"""Idle callers on real phone calls (sipp): a silent caller is asked whether they are there, then told goodbye and
hung up on (a BYE); a caller who speaks after the prompt keeps the call; a digit form is never interrupted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.sip_calls.conftest import (
    WAIT_FOR_BYE,
    RtpCapture,
    ServerFactory,
    agent_said,
    caller_audio,
    eventually,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from tests.sip_calls.test_digits import FORMS, REQUEST, asking, collecting
from voicegate.internal.audio.g711 import ulaw_encode
from voicegate.internal.config import Config
from voicegate.internal.telephony.collection import DigitCollection

pytestmark = pytest.mark.slow

PROMPT = "Are you still there?"
GOODBYE = "Nobody seems to be there, so goodbye for now."  # one sentence, as `played` compares sentences


def idle_config(tmp_path: Path, prompt_s: float = 1.0, hangup_s: float = 1.0) -> Config:
    config = sip_calls_config(tmp_path, symmetric_rtp=False)
    config.pipeline.idle_prompt_s = prompt_s
    config.pipeline.idle_hangup_s = hangup_s
    config.pipeline.idle_goodbye = GOODBYE
    return config


def silent_caller(directory: Path) -> str:
    """sipp's media for a caller whose line is open and says nothing: G.711 silence, looped until the BYE."""
    path = directory / "silence.pcmu"
    path.write_bytes(ulaw_encode(bytes(8000 * 2)))
    return f'<nop><action><exec rtp_stream="{path},-1,0"/></action></nop>'


def idle_steps(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.detail["step"] for r in caplog.records if r.getMessage() == "sip call idle"]  # type: ignore[attr-defined]


async def test_a_silent_caller_is_prompted_then_told_goodbye_and_hung_up_on(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    server = await make_server(config=idle_config(tmp_path))
    scenario = render(tmp_path, media=silent_caller(tmp_path), ending=WAIT_FOR_BYE, media_port=capture.port)
    (await run_sipp(tmp_path, scenario, server.target)).check()  # sipp's scenario ends with our BYE
    (session,) = await server.wait_ended()
    assert session.end_reason == "agent ended the call"
    assert idle_steps(caplog) == ["prompt", "goodbye"]
    assert await capture.played(PROMPT, server.tts) > 0.9
    assert await capture.played(GOODBYE, server.tts) > 0.9  # the whole goodbye, before the BYE
    # Neither line is the agent's answer to anything: nothing in the history or the transcript.
    assert session.conversation.history == []
    assert [e for e in session.conversation.transcript.entries() if e.role == "agent"] == []


async def test_a_caller_who_speaks_after_the_prompt_keeps_the_call(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    server = await make_server(config=idle_config(tmp_path, prompt_s=1.0, hangup_s=4.0))
    # Quiet for 3.5 s (the prompt comes after 1 s and lasts about a second), then "say hello world".
    audio = caller_audio(tmp_path, "say hello world", lead_ms=3500)
    scenario = render(tmp_path, media=stream(audio), ending=WAIT_FOR_BYE, media_port=capture.port)
    caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    (session,) = await server.wait_live()
    await eventually(lambda: idle_steps(caplog) == ["prompt"], 30, "the idle prompt")
    await agent_said(session, "Hello world.")
    assert not session.ended
    assert "goodbye" not in idle_steps(caplog)
    # The caller's turn is answered as usual; the prompt is not in the model's history.
    assert [m.content for m in session.conversation.history if m.role == "assistant"] == ["Hello world."]
    await server.hang_up(session)
    (await caller).check()
    assert await capture.played(PROMPT, server.tts) > 0.9


async def test_no_idle_prompt_while_a_digit_form_waits_for_keys(
        make_server: ServerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    config = idle_config(tmp_path, prompt_s=0.5, hangup_s=0.5)
    config.digits.forms = FORMS
    server = await make_server(stt=ScriptedStt([REQUEST]), config=config, model=asking("account"))
    scenario = render(tmp_path, media=stream(caller_audio(tmp_path, REQUEST)), ending=WAIT_FOR_BYE)
    caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    session = await collecting(server)
    await asyncio.sleep(3.0)  # six idle periods of silence while the form waits for keys
    assert isinstance(session.pipeline.capture, DigitCollection)  # type: ignore[union-attr]
    assert idle_steps(caplog) == []
    assert not session.ended
    await server.hang_up(session)
    (await caller).check()
