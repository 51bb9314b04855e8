"""Warm transfer with two real peers: sipp calls voicegate and asks for sales; voicegate holds it, calls sales
(a second sipp), briefs whoever answers, then bridges the two. Each side sends its own tone once it is
"talking", so who heard whom, and when, is plain from the audio each side received."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.sip_calls.conftest import (
    WAIT_FOR_BYE,
    RtpCapture,
    SipServer,
    agent_said,
    best_match_at,
    caller_bye,
    eventually,
    fragment,
    loud_part,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from tests.sip_calls.test_outbound import start_callee
from tests.speech import speak, tone
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.config import Config
from voicegate.internal.conversation.actions import ACTIONS
from voicegate.internal.session import Session
from voicegate.internal.sip.voice.call import SIP_CALL_ID, MediaRoute
from voicegate.internal.sip.voice.transfer import TRANSFER_STATE, TRANSFERRED
from voicegate.internal.telephony.beep import FilterBank
from voicegate.internal.telephony.leg_media import BridgePort
from voicegate.internal.telephony.warm_transfer import return_message

pytestmark = pytest.mark.slow

CALLER_TONE_HZ, TARGET_TONE_HZ = 500.0, 1300.0
SUMMARY = "Sam wants a refund for order one two three."
API_KEY = "test-api-key-0123456789"


def untasked(actions: list[dict[str, str]]) -> list[dict[str, str]]:
    """The call's actions without their task ids (random; the task ledger's key: tests/memory/test_task_ledger.py)."""
    return [{key: value for key, value in action.items() if key != "task"} for action in actions]


def transfer_config(tmp_path: Path, sales_port: int, **warm: Any) -> Config:
    config = sip_calls_config(tmp_path, symmetric_rtp=False,
                              transfer_targets={"sales": f"sip:sales@127.0.0.1:{sales_port}"})
    config.server.api_key = API_KEY
    for key, value in warm.items():
        setattr(config.warm_transfer, key, value)
    return config


def side(directory: Path, name: str, words: str, quiet_ms: int, hz: float) -> Path:
    """One party's audio for sipp: a little silence, `words`, `quiet_ms` of silence, then its own tone."""
    pcm = bytes(8 * 500 * 2) + speak(words, 8000) + bytes(8 * quiet_ms * 2) + tone(16000, 8000, -20.0, hz)
    path = directory / f"{name}.pcmu"
    path.write_bytes(ulaw_encode(pcm))
    return path


def first_tone_ms(pcm: bytes, hz: float, after_ms: int = 0) -> int | None:
    """Where a steady `hz` tone first sounds in 8 kHz PCM (5 tonal frames in a row), in ms."""
    bank = FilterBank(8000)
    target = int(np.argmin(np.abs(bank.frequencies - hz)))
    run = 0
    for index in range(after_ms // 20, len(pcm) // 320):
        best, share, level = bank.strongest(pcm[index * 320:(index + 1) * 320])
        run = run + 1 if abs(best - target) <= 1 and share > 0.6 and level > -40 else 0
        if run == 5:
            return (index - 4) * 20
    return None


async def heard_at(capture: RtpCapture, text: str, server: SipServer) -> tuple[float, int]:
    """How surely `capture` holds `text` as the server's TTS says it, and where (ms) its last sentence ends."""
    pcm = capture.pcm()
    reference = b"".join([chunk async for chunk in server.tts.synthesize(text, 8000)])
    needle = loud_part(ulaw_decode(ulaw_encode(reference)), margin_ms=0)
    score, offset = best_match_at(pcm, needle)
    return score, (offset + len(needle) // 2) // 8


async def test_the_target_is_briefed_before_the_caller_is_put_through_then_they_hear_each_other(
        make_server: Any, tmp_path: Path) -> None:
    from tests.pipeline.conftest import ScriptedStt

    caller_hears, sales_hears = await RtpCapture.open(), await RtpCapture.open()
    try:
        sales = render(tmp_path, "uas_answer.xml", media_port=sales_hears.port, OFFER_REGEXP="m=audio",
                       ending=stream(side(tmp_path, "sales", "sales, this is alex", 9000, TARGET_TONE_HZ))
                       + fragment(WAIT_FOR_BYE))
        callee, sales_port = await start_callee(tmp_path, sales)
        config = transfer_config(tmp_path, sales_port, default_mode="warm")
        server = await make_server(stt=ScriptedStt(["transfer me to sales"]), config=config)
        audio = side(tmp_path, "caller", "transfer me to sales", 9000, CALLER_TONE_HZ)
        scenario = render(tmp_path, media=stream(audio), ending=caller_bye(26000), media_port=caller_hears.port)
        caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
        (session,) = await server.wait_live()
        session.conversation.summary.text = SUMMARY  # as the rolling summary of a longer call would have it
        await eventually(lambda: _phase(session) == "connected", 60, "the legs to be bridged")
        route = server.gateway.sip_calls.calls[session.slots.get(SIP_CALL_ID)].route  # the caller's leg: typed,
        assert isinstance(route, MediaRoute) and isinstance(route.endpoint, BridgePort)  # now to the other leg
        (await caller).check()  # the caller hung up on the bridged call ...
        (await callee).check()  # ... and voicegate hung up sales in turn
        (ended,) = await server.wait_ended()
        assert ended.end_reason == TRANSFERRED
        assert untasked(session.slots.get(ACTIONS)) == [
            {"action": "transfer", "target": "sales", "status": "succeeded"}]

        briefing = f"Hello, this is the voice assistant with a caller for sales. {SUMMARY} I'm connecting you now."
        score, briefed_ms = await heard_at(sales_hears, briefing, server)
        assert score > 0.9, score
        caller_at_sales = first_tone_ms(sales_hears.pcm(), CALLER_TONE_HZ)
        assert caller_at_sales is not None and caller_at_sales > briefed_ms  # the briefing, then the caller

        hold, held_ms = await heard_at(caller_hears, config.warm_transfer.hold_message, server)
        assert hold > 0.9, hold
        chime = first_tone_ms(caller_hears.pcm(), 660.0, after_ms=held_ms)
        sales_at_caller = first_tone_ms(caller_hears.pcm(), TARGET_TONE_HZ, after_ms=held_ms)
        assert chime is not None and sales_at_caller is not None and chime < sales_at_caller  # music, then sales
        assert first_tone_ms(caller_hears.pcm(), TARGET_TONE_HZ) == sales_at_caller  # never before the hold
        said = [e.text for e in session.conversation.transcript.entries() if e.role == "agent"]
        assert said == ["Putting you through to sales.", config.warm_transfer.hold_message]
    finally:
        caller_hears.close()
        sales_hears.close()


def _phase(session: Session) -> str:
    state = session.slots.get(TRANSFER_STATE)
    return state.phase if state is not None else ""


async def test_a_busy_target_returns_the_caller_to_the_agent(http_server: Any, tmp_path: Path) -> None:
    busy = render(tmp_path, "uas_refuse.xml", FINAL_STATUS="486", FINAL_REASON="Busy Here")
    callee, sales_port = await start_callee(tmp_path, busy)
    server, client = await http_server(transfer_config(tmp_path, sales_port))
    caller = asyncio.create_task(run_sipp(tmp_path, render(tmp_path, ending=caller_bye(14000)), server.target))
    (session,) = await server.wait_live()
    await eventually(lambda: SIP_CALL_ID in session.slots, what="the call's media to start")
    response = await client.post(f"/calls/{session.id}/transfer", json={"target": "sales", "mode": "warm"},
                                 headers={"X-API-Key": API_KEY})
    assert response.status_code == 202, response.text
    assert (response.json()["mode"], response.json()["status"]) == ("warm", "holding")
    again = await client.post(f"/calls/{session.id}/transfer", json={"target": "sales", "mode": "warm"},
                              headers={"X-API-Key": API_KEY})
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_transferable"
    await agent_said(session, return_message(server.config.warm_transfer.return_message, "sales", 486))
    assert "is busy right now" in session.conversation.transcript.entries()[-1].text
    state = session.slots.get(TRANSFER_STATE)
    assert (state.mode, state.phase, state.status) == ("warm", "failed", 486)
    assert not session.ended  # still with the agent
    (await callee).check()
    (await caller).check()
    assert (await server.wait_ended())[0].end_reason == "sip bye"
    assert untasked(session.slots.get(ACTIONS)) == [{"action": "transfer", "target": "sales", "status": "failed"}]


async def test_the_callers_keys_stay_off_the_targets_leg_and_the_bridge_ends_at_its_maximum(
        make_server: Any, tmp_path: Path) -> None:
    from tests.pipeline.conftest import ScriptedStt
    from tests.sip_calls.test_digits import press

    caller_hears, sales_hears = await RtpCapture.open(), await RtpCapture.open()
    try:
        sales = render(tmp_path, "uas_answer.xml", media_port=sales_hears.port, OFFER_REGEXP="m=audio",
                       ending=stream(side(tmp_path, "sales", "sales, this is alex", 500, TARGET_TONE_HZ))
                       + fragment(WAIT_FOR_BYE))
        callee, sales_port = await start_callee(tmp_path, sales)
        config = transfer_config(tmp_path, sales_port, default_mode="warm", max_bridge_s=5.0)
        assert config.warm_transfer.relay_caller_keys is False  # the default
        server = await make_server(stt=ScriptedStt(["transfer me to sales"]), config=config)
        audio = side(tmp_path, "caller", "transfer me to sales", 500, CALLER_TONE_HZ)
        scenario = render(tmp_path, media=stream(audio), ending=WAIT_FOR_BYE, media_port=caller_hears.port)
        caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
        (session,) = await server.wait_live()
        await eventually(lambda: _phase(session) == "connected", 60, "the legs to be bridged")
        bridged_at = asyncio.get_running_loop().time()
        port = server.gateway.sip_calls.calls[session.slots.get(SIP_CALL_ID)].rtp.local_port
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:  # the caller keys a feature code
            await press(sock, port, "#9011", 0x5EED, {"seq": 1000, "ts": 50000})
        (await caller).check()  # voicegate hung both legs up when the bridge's time was up ...
        (await callee).check()
        ended_after = asyncio.get_running_loop().time() - bridged_at
        assert 4.0 <= ended_after <= 12.0, ended_after
        (ended,) = await server.wait_ended()
        assert ended.end_reason == TRANSFERRED
        assert sales_hears.packets((101,)) == []  # ... and the target never got one of the caller's keys
    finally:
        caller_hears.close()
        sales_hears.close()
