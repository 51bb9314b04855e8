"""Digit collection on real calls: the agent asks for a number, the caller keys it (RFC 4733 events from sipp's
capture, from the test's own RTP socket and from baresip; SIP INFO from sipp) or says it (a neural voice,
heard by Whisper)."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fakes.models import ToolCallingModel
from tests.pipeline.conftest import ScriptedStt
from tests.sip_calls.conftest import (
    DTMF_1_PCAP,
    WAIT_FOR_BYE,
    ServerFactory,
    SipServer,
    agent_said,
    caller_audio,
    eventually,
    fragment,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from tests.sip_calls.test_baresip import baresip_home, console, running_baresip, with_console
from tests.speech import neural, silence, write_wav
from voicegate.internal.audio.dtmf import DtmfSender
from voicegate.internal.audio.g711 import ulaw_encode
from voicegate.internal.audio.rtp import RtpPacket
from voicegate.internal.config import Config
from voicegate.internal.config.telephony import DigitFormConfig
from voicegate.internal.session import Session
from voicegate.internal.sip.voice.call import SIP_CALL_ID
from voicegate.internal.stt.whisper import WhisperSpeechToText
from voicegate.internal.telephony.collection import DigitCollection

pytestmark = pytest.mark.slow

ACCOUNT_PROMPT = "Please enter your account number followed by hash."
FORMS = {
    "account": DigitFormConfig(prompt=ACCOUNT_PROMPT, min_digits=5, max_digits=8),
    "choice": DigitFormConfig(prompt="Press one for sales.", min_digits=1, max_digits=1, input="keys"),
    "extension": DigitFormConfig(prompt="Enter the extension.", min_digits=1, max_digits=4),
}
REQUEST = "i want to pay my bill"


def digits_config(tmp_path: Path) -> Config:
    config = sip_calls_config(tmp_path, symmetric_rtp=False)
    config.digits.forms = FORMS
    return config


def asking(form: str) -> ToolCallingModel:
    """An agent that answers the caller's first turn by collecting `form`, then reads the result back."""
    return ToolCallingModel([("collect_digits", {"form": form})],
                            lambda r: f"Got {r['digits']}." if r.get("ok") else f"No entry, {r['reason']}.")


async def collecting(server: SipServer) -> Session:
    """The call, once the agent is collecting digits (its prompt is under way)."""
    (session,) = await server.wait_live()
    await eventually(lambda: session.pipeline is not None and isinstance(session.pipeline.capture, DigitCollection),
                     30, "the agent to start collecting digits")
    return session


def tool_result(session: Session) -> dict[str, Any]:
    (message,) = [m for m in session.conversation.history if m.role == "tool"]
    return json.loads(message.content)  # type: ignore[no-any-return]


async def press(sock: socket.socket, port: int, keys: str, ssrc: int, state: dict[str, int]) -> None:
    """RFC 4733 events for `keys` from the test's own socket, paced like a phone: 20 ms packets, a gap
    between presses; sequence numbers and timestamps carry on in `state`."""
    sender = DtmfSender()
    for key in keys:
        for index, event in enumerate(sender.events(key)):
            packet = RtpPacket(payload_type=101, sequence=state["seq"] & 0xFFFF, timestamp=state["ts"], ssrc=ssrc,
                               payload=event.serialize(), marker=index == 0)
            sock.sendto(packet.serialize(), ("127.0.0.1", port))
            state["seq"] += 1
            await asyncio.sleep(0.02)
        state["ts"] += 1600
        await asyncio.sleep(0.15)


async def test_keys_from_rfc4733_events_fill_a_form_after_a_retry(
        make_server: ServerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    server = await make_server(stt=ScriptedStt([REQUEST]), config=digits_config(tmp_path), model=asking("account"))
    scenario = render(tmp_path, media=stream(caller_audio(tmp_path, REQUEST)), ending=WAIT_FOR_BYE)
    caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    session = await collecting(server)
    port = server.gateway.sip_calls.calls[session.slots.get(SIP_CALL_ID)].rtp.local_port
    state = {"seq": random.randrange(1 << 16), "ts": random.randrange(1 << 31)}
    capture = session.pipeline.capture  # type: ignore[union-attr]
    assert isinstance(capture, DigitCollection)
    first = capture.entry
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        await press(sock, port, "12#", 0x5EED, state)  # too short: the retry prompt, then the prompt again
        await eventually(lambda: capture.entry is not None and capture.entry is not first, 30, "the second attempt")
        await press(sock, port, "55512#", 0x5EED, state)
    await agent_said(session, "Got 55512")
    assert tool_result(session) == {"ok": True, "digits": "55512", "via": "keys", "attempts": 2}
    await server.hang_up(session)
    (await caller).check()
    events = [r for r in caplog.records if r.getMessage() == "sip call digits"]
    assert [r.detail for r in events] == [  # type: ignore[attr-defined]
        {"form": "account", "status": "complete", "via": "keys", "length": 5, "attempts": 2}]
    assert "55512" not in str([r.__dict__ for r in events])  # never the digits themselves


async def test_a_key_from_sipps_rfc4733_capture_answers_a_menu(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(stt=ScriptedStt([REQUEST]), config=digits_config(tmp_path), model=asking("choice"))
    media = stream(caller_audio(tmp_path, REQUEST)) + '<pause milliseconds="6000"/>' + fragment(
        "dtmf_pcap", PCAP_FILE=DTMF_1_PCAP)
    caller = asyncio.create_task(run_sipp(tmp_path, render(tmp_path, media=media, ending=WAIT_FOR_BYE),
                                          server.target))
    session = await collecting(server)
    await agent_said(session, "Got 1")
    assert tool_result(session) == {"ok": True, "digits": "1", "via": "keys", "attempts": 1}
    await server.hang_up(session)
    (await caller).check()


async def test_keys_sent_as_sip_info_fill_a_form(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(stt=ScriptedStt([REQUEST]), config=digits_config(tmp_path), model=asking("extension"))
    media = stream(caller_audio(tmp_path, REQUEST)) + '<pause milliseconds="6000"/>' + fragment("dtmf_info")
    caller = asyncio.create_task(run_sipp(tmp_path, render(tmp_path, media=media, ending=WAIT_FOR_BYE),
                                          server.target))
    session = await collecting(server)
    await agent_said(session, "Got 4")  # "4", then "#" ends the entry
    assert tool_result(session) == {"ok": True, "digits": "4", "via": "keys", "attempts": 1}
    await server.hang_up(session)
    (await caller).check()


async def test_baresip_keys_its_account_number(make_server: ServerFactory, tmp_path: Path) -> None:
    from tests.speech import speak

    server = await make_server(stt=ScriptedStt([REQUEST]), config=digits_config(tmp_path), model=asking("account"))
    speech = bytes(16000) + speak(REQUEST, 8000) + bytes(16000 * 20)
    home = baresip_home(tmp_path, write_wav(tmp_path / "caller.wav", speech, 8000))
    console_port = with_console(home)
    async with running_baresip(home, "-e", f"/dial sip:agent@{server.target}") as baresip:
        session = await collecting(server)
        async with console(console_port) as keypad:
            response = await keypad.send("sndcode", "20394#")
            assert response["ok"], response
        await agent_said(session, "Got 20394")
        assert tool_result(session) == {"ok": True, "digits": "20394", "via": "keys", "attempts": 1}
        assert "send DTMF digit: '#'" in baresip.output()
        await server.hang_up(session)



async def test_a_caller_who_says_the_number_is_heard_by_whisper(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    request, number = neural(["I'd like to pay my bill.", "five five five one two"], 8000)
    pcm = silence(400, 8000) + request + silence(9000, 8000) + number + silence(4000, 8000)
    audio = tmp_path / "caller.pcmu"
    audio.write_bytes(ulaw_encode(pcm))
    server = await make_server(stt=whisper, config=digits_config(tmp_path), model=asking("account"))
    caller = asyncio.create_task(run_sipp(tmp_path, render(tmp_path, media=stream(audio), ending=WAIT_FOR_BYE),
                                          server.target))
    session = await collecting(server)
    await agent_said(session, "55512", timeout=60)
    assert tool_result(session) == {"ok": True, "digits": "55512", "via": "speech", "attempts": 1}
    await server.hang_up(session)
    (await caller).check()


def feed_events(subscription: Any) -> list[dict[str, Any]]:
    events = []
    while not subscription.queue.empty():
        events.append(json.loads(subscription.queue.get_nowait()))
    return events


def private_config(tmp_path: Path) -> Config:
    """Digit forms on a recorded call whose events go to the call feed (what evals and operators read)."""
    config = digits_config(tmp_path)
    config.digits.forms = {**FORMS, "account": FORMS["account"].model_copy(update={"sensitive": True})}
    config.server.call_events = True
    config.server.api_key = "digits-feed-api-key-0123456789"
    config.recording.enabled = True
    config.recording.consent = "none"
    return config


def thanking(form: str) -> ToolCallingModel:
    """Collects `form` and does not read the entry back (what the agent says is its own business)."""
    return ToolCallingModel([("collect_digits", {"form": form})], lambda r: "Thank you." if r.get("ok") else "No.")


async def test_keys_typed_into_a_form_are_masked_in_the_call_events_and_a_sensitive_form_pauses_the_recording(
        make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(stt=ScriptedStt([REQUEST]), config=private_config(tmp_path), model=thanking("account"))
    feed = server.gateway.call_feed
    assert feed is not None
    with feed.subscribe() as subscription:
        scenario = render(tmp_path, media=stream(caller_audio(tmp_path, REQUEST)), ending=WAIT_FOR_BYE)
        caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
        session = await collecting(server)
        await asyncio.sleep(1.5)  # well into the prompt, which the recording must not hold
        port = server.gateway.sip_calls.calls[session.slots.get(SIP_CALL_ID)].rtp.local_port
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            await press(sock, port, "55512#", 0x5EED, {"seq": 100, "ts": 8000})
        await agent_said(session, "Thank you.")
        result = tool_result(session)  # a sensitive form: the model gets the entry masked, never the digits
        assert (result["ok"], result["digits"], result["masked"], result["via"]) == (True, "\u2022" * 5, True, "keys")
        assert "55512" not in json.dumps([m.content for m in session.conversation.history])
        await asyncio.sleep(0.5)
        await server.hang_up(session)
        (await caller).check()
        await asyncio.sleep(0.2)
        events = feed_events(subscription)
    keys = [event for event in events if event["type"] == "dtmf"]
    assert len(keys) == 6 and all(event["digit"] == "" and event["masked"] for event in keys)
    assert "55512" not in json.dumps(events)
    (digits,) = [event for event in events if event["type"] == "digits"]
    assert (digits["form"], digits["status"], digits["length"]) == ("account", "complete", 5)
    recording = [event for event in events if event["type"] == "recording"]
    assert [(e["recording"], e["paused"]) for e in recording] == [(True, False), (False, True), (True, False)]

    store = server.gateway.recordings.store
    await eventually(lambda: (info := store.read(session.id)) is not None and info.ended_at is not None, 10,
                     "the recording to be finished")
    with wave.open(str(store.audio_path(store.read(session.id)))) as wav:  # type: ignore[arg-type]
        samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    start, paused, resumed = recording[0]["ts"], recording[1]["ts"], recording[2]["ts"]
    inside = samples[int((paused - start + 0.3) * 8000):int((resumed - start - 0.3) * 8000)]
    assert len(inside) > 8000  # more than a second of the form, the prompt among it ...
    assert not inside.any()  # ... recorded as silence on both channels
    assert samples[:, 1].any()  # the rest of the call is there


async def test_digits_said_into_a_form_are_masked_in_the_call_events(
        make_server: ServerFactory, tmp_path: Path) -> None:
    number = "four two one"  # an extension: at most four digits
    server = await make_server(stt=ScriptedStt([REQUEST, number]), config=private_config(tmp_path),
                               model=thanking("extension"))
    feed = server.gateway.call_feed
    assert feed is not None
    with feed.subscribe() as subscription:
        media = stream(caller_audio(tmp_path, REQUEST)) + '<pause milliseconds="6000"/>' + stream(
            caller_audio(tmp_path, number))
        caller = asyncio.create_task(run_sipp(tmp_path, render(tmp_path, media=media, ending=WAIT_FOR_BYE),
                                              server.target))
        session = await collecting(server)
        await agent_said(session, "Thank you.")
        assert tool_result(session) == {"ok": True, "digits": "421", "via": "speech", "attempts": 1}
        await server.hang_up(session)
        (await caller).check()
        await asyncio.sleep(0.2)
        events = feed_events(subscription)
    said = [(event["text"], event.get("masked")) for event in events
            if event["type"] == "transcript" and event["role"] == "user" and event["final"]]
    assert said == [(REQUEST, False), ("[digit entry]", True)]
    assert number not in json.dumps(events)
    recording = [(e["recording"], e["paused"]) for e in events if e["type"] == "recording"]
    assert recording == [(True, False)]  # "extension" is not a sensitive form: the recording went on
