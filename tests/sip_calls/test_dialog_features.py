"""Dialog features through the whole server: early media, the offerless re-INVITE, session-timer expiry."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.sip_calls.conftest import (
    REPLY_PHRASES,
    RtpCapture,
    ServerFactory,
    caller_bye,
    eventually,
    fragment,
    loud_part,
    render,
    run_sipp,
    sip_calls_config,
)
from tests.speech import transcribe
from voicegate.internal.audio.g711 import ulaw_decode

pytestmark = pytest.mark.slow

SESSION_PROGRESS = """<recv response="183">
    <action>
      <ereg regexp="m=audio [0-9]+ RTP/AVP 0" search_in="body" check_it="true" assign_to="early"/>
    </action>
  </recv>"""


async def test_early_media_plays_the_greeting_before_the_200(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path) -> None:
    config = sip_calls_config(tmp_path, early_media=True, ring_ms=4000, symmetric_rtp=False)
    config.pipeline.greeting = "Hello world."
    server = await make_server(config=config)
    scenario = render(tmp_path, ending=caller_bye(500), media_port=capture.port,
                      answer_regexp="m=audio [0-9]+ RTP/AVP 0")
    # The 180 the template allows becomes the 183 this call must get.
    text = scenario.read_text().replace('<recv response="180" optional="true"/>', SESSION_PROGRESS)
    scenario.write_text(text.replace('<Reference variables="answer"/>', '<Reference variables="answer,early"/>'))
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    ua = server.gateway.sip

    def invite_answered() -> bool:
        return any(leg.invite_txn is not None and leg.invite_txn.final_sent for leg in ua.calls.legs())

    await eventually(lambda: bool(ua.calls.legs()), what="the INVITE arrived")
    heard_before_200 = 0
    while not invite_answered() and not sipp.done():
        heard_before_200 = len(capture.received)
        await asyncio.sleep(0.02)
    (await sipp).check()  # 183 with SDP, then 200 with SDP, ACK, BYE
    await server.wait_ended()
    early = b"".join(ulaw_decode(r.packet.payload) for r in capture.received[:heard_before_200]
                     if r.packet.payload_type == 0)
    speech = loud_part(early)
    assert len(speech) > 8000 * 2 // 2, "less than half a second of audible audio before the 200"
    assert "hello world" in transcribe(speech, 8000, REPLY_PHRASES)


async def test_offerless_reinvite_moves_our_audio_to_the_port_the_ack_answers_with(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path) -> None:
    config = sip_calls_config(tmp_path, symmetric_rtp=False)
    config.pipeline.greeting = "Hello world."
    server = await make_server(config=config)
    # The INVITE offers sipp's own media port; only the ACK's answer names the port we listen on.
    media = fragment("offerless_reinvite", ANSWER_PORT=capture.port)
    scenario = render(tmp_path, media=media, ending=caller_bye(2500))
    (await run_sipp(tmp_path, scenario, server.target)).check()  # the 200 offered SDP
    (session,) = await server.wait_ended()
    assert session.end_reason == "sip bye"
    speech = loud_part(capture.pcm())
    assert len(speech) > 8000 * 2 * 3 // 10, "the greeting did not follow the answer in the ACK"


async def test_caller_that_never_refreshes_its_session_timer_is_hung_up(
        make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(min_se_s=2)
    scenario = render(tmp_path, ending="wait_for_bye",
                      extra_header="Supported: timer\n      Session-Expires: 3;refresher=uac")
    started = asyncio.get_running_loop().time()
    (await run_sipp(tmp_path, scenario, server.target)).check()  # our BYE came and was answered
    (session,) = await server.wait_ended()
    assert session.end_reason == "sip session expired"
    assert asyncio.get_running_loop().time() - started >= 1.5  # 3 s - min(32, 3/3): not at once
