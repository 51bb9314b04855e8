"""sip.early_media through the whole server: the caller hears the greeting before the call is answered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from internal.audio.g711 import ulaw_decode
from tests.sip_calls.conftest import (
    REPLY_PHRASES,
    RtpCapture,
    ServerFactory,
    caller_bye,
    eventually,
    loud_part,
    render,
    run_sipp,
    sip_calls_config,
)
from tests.speech import transcribe

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
