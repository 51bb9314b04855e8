"""voicegate phones out: POST /calls and `voicegate call`, against sipp playing the callee."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.sip_calls.conftest import (
    CALLER_PHRASES,
    WAIT_FOR_BYE,
    RtpCapture,
    SippResult,
    agent_said,
    eventually,
    fragment,
    free_port,
    outbound_cli_config,
    render,
    run_sipp,
    sip_calls_config,
    udp_port_free,
)
from voicegate.internal.config import Config
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.provider import ChangeContext
from voicegate.internal.tts.espeak import EspeakTextToSpeech
from voicegate.server.app import create_gateway_application

pytestmark = pytest.mark.slow

API_KEY = "test-api-key-0123456789"
GREETING_OUTGOING = "This is an outgoing call."
OUR_OFFER = "m=audio [0-9]+ RTP/AVP 0 8 101"  # PCMU, PCMA and telephone-event, in sip.codecs order


async def start_callee(directory: Path, scenario: Path) -> tuple[asyncio.Task[SippResult], int]:
    """sipp as the callee on a free port; returns once it listens."""
    port = free_port()
    task = asyncio.create_task(run_sipp(directory, scenario, None, local_port=port))
    await eventually(lambda: not udp_port_free(port) or task.done(), what="sipp to listen")
    return task, port


def answering(directory: Path, capture: RtpCapture, ending: str) -> Path:
    return render(directory, "uas_answer.xml", ending=ending, media_port=capture.port, OFFER_REGEXP=OUR_OFFER)


def outbound_config(tmp_path: Path, **server: Any) -> Config:
    config = sip_calls_config(tmp_path, symmetric_rtp=False)
    config.pipeline.greeting_outgoing = GREETING_OUTGOING
    config.server.api_key = API_KEY
    for key, value in server.items():
        setattr(config.server, key, value)
    return config


AUTH = {"X-API-Key": API_KEY}


async def test_calls_route_is_never_open(tmp_path: Path) -> None:
    body = {"to": "sip:alice@127.0.0.1:5999"}
    closed = create_gateway_application(sip_calls_config(tmp_path / "a"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=closed), base_url="http://voicegate") as client:
        refused = await client.post("/calls", json=body, headers=AUTH)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "outbound_calls_disabled"
        assert "server.api_key" in refused.json()["error"]["message"]
    keyed = create_gateway_application(outbound_config(tmp_path / "b"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=keyed), base_url="http://voicegate") as client:
        for headers in ({}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}):
            response = await client.post("/calls", json=body, headers=headers)
            assert response.status_code == 401, headers
            assert response.headers["WWW-Authenticate"] == "Bearer"
        # Without the key, a bad body is not worth validating: 401 first, never a 422 that describes the
        # schema. The same for a transfer.
        for path in ("/calls", "/calls/some-call/transfer"):
            for bad in ({"to": 5, "extra": True}, {}):
                response = await client.post(path, json=bad)
                assert response.status_code == 401, (path, bad, response.text)
        authorised = await client.post("/calls", json={"to": 5}, headers=AUTH)
        assert authorised.status_code == 422  # with the key, the body is checked


async def test_post_calls_connects_and_the_callee_hears_the_outgoing_greeting(
        http_server: Any, capture: RtpCapture, tmp_path: Path) -> None:
    server, client = await http_server(outbound_config(tmp_path))
    callee, port = await start_callee(tmp_path, answering(tmp_path, capture, WAIT_FOR_BYE))
    response = await client.post("/calls", json={"to": f"sip:+15557654321@127.0.0.1:{port}"}, headers=AUTH)
    assert response.status_code == 201, response.text
    placed = response.json()
    session = server.sessions.get(placed["session_id"])
    assert session is not None and placed["call_id"].endswith("@voicegate")
    # We chose the number, not who answers it: by default (sip.outbound_memory = "none") nobody's memory.
    assert session.identity.is_anonymous and session.identity.reason == "outbound call"
    entries = await agent_said(session)
    await server.hang_up(session)  # voicegate's BYE
    (await callee).check()  # the callee saw our offer (OUR_OFFER), the ACK and the BYE
    assert entries[0].text == GREETING_OUTGOING
    assert await capture.played(GREETING_OUTGOING, server.tts) > 0.9
    await eventually(lambda: server.gateway.sip_calls.calls == {}, what="the call released")


async def test_an_outbound_call_uses_the_dialled_numbers_memory_only_when_configured(
        http_server: Any, capture: RtpCapture, tmp_path: Path) -> None:
    config = outbound_config(tmp_path)
    config.memory.enabled = True
    config.memory.provider = "memory"
    config.memory.embedding = "none"
    server, client = await http_server(config)
    runtime = server.gateway.memory
    owner = runtime.owner_key(CallerIdentity("sip", "+15557654321"))
    await runtime.edit(owner, "memory", "append", content="- The caller's name is Sam.", context=ChangeContext("api"))

    async def place(directory: Path) -> Any:
        directory.mkdir()
        callee, port = await start_callee(directory, answering(directory, capture, WAIT_FOR_BYE))
        response = await client.post("/calls", json={"to": f"sip:5557654321@127.0.0.1:{port}"}, headers=AUTH)
        assert response.status_code == 201, response.text
        session = server.sessions.get(response.json()["session_id"])
        assert session is not None
        await agent_said(session)
        await server.hang_up(session)
        (await callee).check()
        await server.gateway.session_memory.drain(30)
        return session

    answered = await place(tmp_path / "none")
    assert answered.identity.is_anonymous and answered.identity.reason == "outbound call"
    assert answered.conversation.memory == ""  # whoever picked up heard nothing about Sam
    assert (await runtime.latest(owner))["memory"].revision == 1  # and the call wrote nothing

    config.sip.outbound_memory = "dialled"
    answered = await place(tmp_path / "dialled")
    assert answered.identity.resource_id == "sip:+15557654321"  # national target, normalised
    assert "Sam" in answered.conversation.memory


async def test_post_calls_with_its_own_greeting(http_server: Any, capture: RtpCapture, tmp_path: Path) -> None:
    server, client = await http_server(outbound_config(tmp_path))
    invalid = await client.post("/calls", json={"to": "bob@example.com"}, headers=AUTH)
    assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "invalid_target"
    callee, port = await start_callee(tmp_path, answering(tmp_path, capture, WAIT_FOR_BYE))
    response = await client.post("/calls", json={"to": f"sip:bob@127.0.0.1:{port}", "greeting": "Hello world."},
                                 headers={"Authorization": f"Bearer {API_KEY}"})
    assert response.status_code == 201, response.text
    session = server.sessions.get(response.json()["session_id"])
    assert session is not None and session.identity.is_anonymous
    await agent_said(session)
    await server.hang_up(session)
    (await callee).check()
    assert "hello world" in capture.heard()


async def test_busy_callee_gives_502_with_the_sip_status(http_server: Any, tmp_path: Path) -> None:
    server, client = await http_server(outbound_config(tmp_path))
    busy = render(tmp_path, "uas_refuse.xml", FINAL_STATUS="486", FINAL_REASON="Busy Here")
    callee, port = await start_callee(tmp_path, busy)
    response = await client.post("/calls", json={"to": f"sip:alice@127.0.0.1:{port}"}, headers=AUTH)
    assert response.status_code == 502
    error = response.json()["error"]
    assert (error["code"], error["sip_status"], error["sip_reason"]) == ("call_failed", 486, "Busy Here")
    assert "486" in error["message"]
    (await callee).check()  # and it got our ACK for its 486
    assert server.gateway.sip_calls.calls == {} and len(server.sessions) == 0


async def test_unanswered_call_is_cancelled_and_gives_504(http_server: Any, tmp_path: Path) -> None:
    config = outbound_config(tmp_path)
    config.sip.outbound.timeout_s = 1.5
    server, client = await http_server(config)
    callee, port = await start_callee(tmp_path, render(tmp_path, "uas_ring_forever.xml"))
    response = await client.post("/calls", json={"to": f"sip:alice@127.0.0.1:{port}"}, headers=AUTH)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "no_answer"
    (await callee).check()  # it got our CANCEL, and our ACK for its 487
    assert server.gateway.sip_calls.calls == {}


async def test_full_server_gives_503(http_server: Any, tmp_path: Path) -> None:
    server, client = await http_server(outbound_config(tmp_path, max_sessions=1))
    elsewhere = server.sessions.create(CallerIdentity.anonymous(), "webrtc")  # the one slot is taken
    response = await client.post("/calls", json={"to": "sip:alice@127.0.0.1:5999"}, headers=AUTH)
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "at_capacity"
    await server.sessions.end(elsewhere, "test")


async def test_a_node_whose_admission_is_full_gives_503_with_the_reason(http_server: Any, tmp_path: Path) -> None:
    config = outbound_config(tmp_path)
    # One core at the 0.75 target, every call half a core (fixed): the live call below fills the node.
    config.admission.cores, config.admission.call_cost, config.admission.measure_cost = 1, 0.5, False
    config.admission.retry_after_s = 9
    config.telemetry.metrics = True
    server, client = await http_server(config)
    elsewhere = server.sessions.create(CallerIdentity.anonymous(), "webrtc")
    response = await client.post("/calls", json={"to": "sip:alice@127.0.0.1:5999"}, headers=AUTH)
    assert response.status_code == 503 and response.headers["Retry-After"] == "9"
    error = response.json()["error"]
    assert error["code"] == "at_capacity" and error["reason"] == "capacity"
    assert "estimated load 1.00 over 0.75" in error["message"]
    assert 'voicegate_calls_refused_total{reason="capacity",transport="sip"} 1' in server.gateway.telemetry.prometheus()
    await server.sessions.end(elsewhere, "test")


# ---- voicegate call ---------------------------------------------------------------------------------


def cli_config_file(tmp_path: Path) -> Path:
    phrases = ", ".join(f'"{p}"' for p in CALLER_PHRASES)
    return outbound_cli_config(tmp_path, GREETING_OUTGOING, f"""[stt]
provider = "pocketsphinx"
[tts]
provider = "espeak"
[pocketsphinx]
phrases = [{phrases}]
workers = 1
""")


async def voicegate_call(tmp_path: Path, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voicegate", "--config", str(cli_config_file(tmp_path)), "call", *args,
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        output, _ = await asyncio.wait_for(process.communicate(), 90)
    except TimeoutError:
        process.kill()
        output, _ = await process.communicate()
    return process.returncode if process.returncode is not None else -1, output.decode(errors="replace")


async def test_voicegate_call_talks_until_the_callee_hangs_up(capture: RtpCapture, tmp_path: Path) -> None:
    scenario = answering(tmp_path, capture, fragment("callee_bye", HANGUP_MS=5000))
    callee, port = await start_callee(tmp_path, scenario)
    code, output = await voicegate_call(tmp_path, f"sip:alice@127.0.0.1:{port}", "--greeting", "Hello world.")
    (await callee).check()
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0].startswith(f"dialling sip:alice@127.0.0.1:{port}")
    assert lines[1].startswith("answered (session ")
    assert "  agent: Hello world." in lines
    assert lines[-1] == "ended: sip bye"
    assert "hello world" in capture.heard()
    assert await capture.played("Hello world.", EspeakTextToSpeech(sip_calls_config(tmp_path).espeak)) > 0.9


async def test_voicegate_call_to_a_busy_callee_exits_1_with_the_status(tmp_path: Path) -> None:
    busy = render(tmp_path, "uas_refuse.xml", FINAL_STATUS="486", FINAL_REASON="Busy Here")
    callee, port = await start_callee(tmp_path, busy)
    code, output = await voicegate_call(tmp_path, f"sip:alice@127.0.0.1:{port}", "--timeout", "20")
    (await callee).check()
    assert code == 1, output
    assert "call failed: SIP 486 Busy Here" in output
