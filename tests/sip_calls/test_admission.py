"""Admission control over SIP ([admission], docs/scaling.md): a node configured to be full after one call
refuses the next INVITE with 503 + Retry-After (or, with busy = "message", answers it, says that all lines
are busy and hangs up) while the call it admitted keeps getting answers; each refusal is in /metrics with
its reason, and /health shows what the node thinks it can serve."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.sip_calls.conftest import (
    WAIT_FOR_BYE,
    RtpCapture,
    ServerFactory,
    agent_said,
    caller_audio,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from voicegate.internal.config import Config

pytestmark = pytest.mark.slow

REFUSED = 'voicegate_calls_refused_total{reason="capacity",transport="sip"} 1'


def one_call_node(tmp_path: Path) -> Config:
    """A node whose admission holds one call: every call costs half a core (fixed, not measured) and the
    node has one core at the 0.75 target, so a second call would take it to 1.0."""
    config = sip_calls_config(tmp_path)
    config.admission.cores = 1
    config.admission.call_cost = 0.5
    config.admission.measure_cost = False
    config.telemetry.metrics = True
    return config


def directories(tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    return first, second


async def test_a_full_node_refuses_the_next_invite_with_503_and_retry_after_while_its_call_goes_on(
        make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(config=one_call_node(tmp_path))
    first_dir, second_dir = directories(tmp_path)
    # The admitted caller speaks long after its call was answered: its answer comes while the node refuses.
    audio = caller_audio(first_dir, "say hello world", lead_ms=6000)
    first = asyncio.create_task(run_sipp(first_dir, render(first_dir, media=stream(audio), ending=WAIT_FOR_BYE),
                                         server.target, timeout=120))
    (session,) = await server.wait_live()
    health = (await server.gateway.health())["components"]["admission"]
    assert (health["enabled"], health["capacity"], health["calls"], health["call_cost"]) == (True, 1, 1, 0.5)
    refused = render(second_dir, "uac_refused.xml", EXPECTED_STATUS="503", EXPECTED_REGEXP="Retry-After: 5")
    (await run_sipp(second_dir, refused, server.target)).check()
    await agent_said(session, "Hello world.")  # the admitted call is still served
    assert len(server.sessions) == 1 and not session.ended
    assert REFUSED in server.gateway.telemetry.prometheus()
    assert (await server.gateway.health())["components"]["admission"]["refused"] == 1
    await server.hang_up(session)
    (await first).check()


async def test_admission_off_takes_the_call_the_same_node_would_refuse(
        make_server: ServerFactory, tmp_path: Path) -> None:
    config = one_call_node(tmp_path)
    config.admission.enabled = False
    server = await make_server(config=config)
    first_dir, second_dir = directories(tmp_path)
    first = asyncio.create_task(run_sipp(first_dir, render(first_dir, ending=WAIT_FOR_BYE), server.target))
    second = asyncio.create_task(run_sipp(second_dir, render(second_dir, ending=WAIT_FOR_BYE), server.target))
    sessions = await server.wait_live(2)
    for session in sessions:
        await server.hang_up(session)
    (await first).check()
    (await second).check()
    assert "voicegate_calls_refused_total" not in server.gateway.telemetry.prometheus()


async def test_in_busy_message_mode_the_refused_caller_hears_that_the_lines_are_busy_then_our_bye(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path) -> None:
    config = one_call_node(tmp_path)
    config.admission.busy = "message"
    config.sip.symmetric_rtp = False  # our media goes where the SDP says: the capture
    server = await make_server(config=config)
    first_dir, second_dir = directories(tmp_path)
    first = asyncio.create_task(run_sipp(first_dir, render(first_dir, ending=WAIT_FOR_BYE), server.target))
    (session,) = await server.wait_live()
    busy = render(second_dir, ending=WAIT_FOR_BYE, media_port=capture.port)
    (await run_sipp(second_dir, busy, server.target, timeout=60)).check()  # answered, then our BYE
    assert await capture.played(config.admission.busy_message, server.tts) > 0.9
    assert len(server.sessions) == 1  # the busy caller never had a session
    assert server.gateway.sip_calls.busy_line.told == 1
    assert REFUSED in server.gateway.telemetry.prometheus()
    await server.hang_up(session)
    (await first).check()
    assert server.gateway.sip_calls.calls == {}
