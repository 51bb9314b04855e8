"""Answering-machine detection on real outbound calls: a sipp callee plays a voicemail greeting and its beep,
and what voicegate sends after the beep is heard by Whisper; a person's "Hello?" gets the greeting."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.sip_calls.conftest import (
    WAIT_FOR_BYE,
    RtpCapture,
    fragment,
    loud_part,
    render,
    stream,
)
from tests.sip_calls.test_outbound import AUTH, OUR_OFFER, outbound_config, start_callee, voicegate_call
from tests.speech import neural, silence, tone
from voicegate.internal.audio.g711 import ulaw_encode
from voicegate.internal.stt.whisper import WhisperSpeechToText
from voicegate.internal.telephony.answering_machine import AMD, AMD_MESSAGE_AT, AmdRun

pytestmark = pytest.mark.slow

GREETING = "Hi, you've reached Sam. I can't take your call right now. Please leave a message after the tone."
MESSAGE = "Hello Sam, this is the pharmacy calling about your appointment tomorrow. Please call us back."
BEEP_HZ = 1000.0


def answering_machine(directory: Path, capture: RtpCapture) -> Path:
    """sipp as a voicemail box: answers, plays the greeting and its beep, then records (waits for our BYE)."""
    (greeting,) = neural([GREETING], 8000)
    pcm = silence(500, 8000) + greeting + silence(400, 8000) + tone(500, 8000, -14.0, BEEP_HZ) + silence(15000, 8000)
    audio = directory / "voicemail.pcmu"
    audio.write_bytes(ulaw_encode(pcm))
    return render(directory, "uas_answer.xml", ending=stream(audio) + fragment(WAIT_FOR_BYE),
                  media_port=capture.port, OFFER_REGEXP=OUR_OFFER)



async def test_a_message_is_left_after_the_voicemail_beep(
        http_server: Any, capture: RtpCapture, tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    config = outbound_config(tmp_path)
    config.tts.provider = "auto"  # Piper: what Whisper is to hear on the wire
    config.piper.workers = 1
    server, client = await http_server(config)
    callee, port = await start_callee(tmp_path, answering_machine(tmp_path, capture))
    response = await client.post("/calls", json={"to": f"sip:sam@127.0.0.1:{port}", "amd": True,
                                                 "voicemail_message": MESSAGE}, headers=AUTH)
    assert response.status_code == 201, response.text
    amd = response.json()["amd"]
    assert (amd["result"], amd["outcome"]) == ("machine", "leave_message"), amd
    assert 0 < amd["decision_ms"] <= config.amd.max_decision_ms
    (session,) = await server.wait_ended(timeout=90)  # we hang up once the message is left
    (await callee).check()  # and the box got our BYE
    run = session.slots.get(AMD)
    assert isinstance(run, AmdRun) and run.message == "left"
    assert run.beep_end_ms is not None and run.message_ms is not None
    assert 0 <= run.message_ms - run.beep_end_ms <= 1500  # after the beep, not long after it
    # Nothing of ours was loud before the message began (no greeting spoken over the machine's) ...
    started = session.slots.get(AMD_MESSAGE_AT)
    before = b"".join(r.packet.payload for r in capture.received if r.at < started and r.packet.payload_type == 0)
    from voicegate.internal.audio.g711 import ulaw_decode

    assert loud_part(ulaw_decode(before)) == b""
    # ... and what came after it is the message, as the machine recorded it.
    heard = (await whisper.transcribe(loud_part(capture.pcm()), 8000)).lower()
    assert "appointment" in heard and "call us back" in heard, heard
    assert [e.text for e in session.conversation.transcript.entries() if e.role == "agent"] == [MESSAGE]
    metrics = (await client.get("/metrics")).text
    assert 'voicegate_amd_decisions_total{outcome="leave_message",reason=' in metrics, metrics
    assert 'voicegate_amd_decision_ms_count{result="machine"} 1' in metrics


async def test_a_person_saying_hello_gets_the_greeting_voicegate_call(capture: RtpCapture, tmp_path: Path) -> None:
    (hello,) = neural(["Hello?"], 8000)
    audio = tmp_path / "hello.pcmu"
    audio.write_bytes(ulaw_encode(silence(600, 8000) + hello + silence(12000, 8000)))
    scenario = render(tmp_path, "uas_answer.xml", ending=stream(audio) + fragment("callee_bye", HANGUP_MS=9000),
                      media_port=capture.port, OFFER_REGEXP=OUR_OFFER)
    callee, port = await start_callee(tmp_path, scenario)
    code, output = await voicegate_call(tmp_path, f"sip:sam@127.0.0.1:{port}", "--amd", "--greeting", "Hello world.")
    (await callee).check()
    assert code == 0, output
    decided = [line for line in output.splitlines() if line.startswith("answering machine detection:")]
    assert len(decided) == 1 and decided[0].startswith("answering machine detection: human (short greeting, "), output
    assert decided[0].endswith("-> continue")
    assert "  agent: Hello world." in output.splitlines()
    assert "hello world" in capture.heard()
    await asyncio.sleep(0)
