"""Recordings over HTTP and by keypad: GET/DELETE /calls/{id}/recording with the API key, the caller's
erasure over the admin route naming the file, consent by key 1 and an opt-out by key, all with sipp as
the caller and the whole app (routes included) in the test's loop."""

from __future__ import annotations

import asyncio
import io
import json
import wave
from pathlib import Path
from typing import Any

from tests.sip_calls.conftest import (
    CALLER,
    DTMF_1_PCAP,
    WAIT_FOR_BYE,
    agent_said,
    caller_audio,
    eventually,
    fragment,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from voicegate.internal.config import Config
from voicegate.internal.session import Session
from voicegate.internal.sip.voice.call import SIP_CALL_ID

API_KEY = "recordings-test-key-0123456789"
AUTH = {"X-API-Key": API_KEY}


def recorded_config(tmp_path: Path, consent: str) -> Config:
    config = sip_calls_config(tmp_path, trusted_peers=["127.0.0.1/32"])
    config.server.api_key = API_KEY
    config.recording.enabled = True
    config.recording.consent = consent  # type: ignore[assignment]
    config.memory.enabled = True
    config.memory.provider = "memory"
    return config


async def keypad_call(server: Any, tmp_path: Path, agent_says: str) -> Session:
    """sipp presses 1 (RFC 4733) and waits; once the agent has said `agent_says`, voicegate hangs up."""
    scenario = render(tmp_path, media=fragment("dtmf_pcap", PCAP_FILE=DTMF_1_PCAP), ending=WAIT_FOR_BYE,
                      answer_regexp="telephone-event/8000")
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    (session,) = await server.wait_live()
    await agent_said(session, agent_says)
    await server.hang_up(session)
    (await sipp).check()
    return session  # type: ignore[no-any-return]


async def finished(config: Config, session_id: str) -> dict[str, Any]:
    sidecar = config.data_dir / "recordings" / f"{session_id}.json"
    await eventually(lambda: sidecar.exists() and json.loads(sidecar.read_text())["ended_at"] is not None, 20,
                     "the recording to be finished")
    return dict(json.loads(sidecar.read_text()))


async def test_the_recording_is_served_with_the_api_key_and_the_callers_erasure_names_and_removes_it(
        http_server: Any, tmp_path: Path) -> None:
    config = recorded_config(tmp_path, "announce")
    server, client = await http_server(config, ["what time is it"])
    audio = caller_audio(tmp_path, "what time is it", lead_ms=5000)
    scenario = render(tmp_path, media=stream(audio), ending=WAIT_FOR_BYE)
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, server.target, timeout=60))
    (session,) = await server.wait_live()
    await eventually(lambda: SIP_CALL_ID in session.slots, 20, "media to start")
    call_id = session.slots.get(SIP_CALL_ID)
    live = await client.get(f"/calls/{session.id}/recording", headers=AUTH)
    assert live.status_code == 409 and live.json()["error"]["code"] == "recording_in_progress"
    await agent_said(session, "It's", timeout=60)  # the local agent tells the time
    await server.hang_up(session)
    (await sipp).check()
    info = await finished(config, session.id)
    assert info["consent"] == "announced" and info["call_id"] == call_id

    for name in (session.id, call_id):  # by session id or by SIP Call-ID
        response = await client.get(f"/calls/{name}/recording", headers=AUTH)
        assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
        assert f'filename="{session.id}.wav"' in response.headers["content-disposition"]
        with wave.open(io.BytesIO(response.content)) as wav:
            assert wav.getnchannels() == 2 and wav.getframerate() == 8000 and wav.getnframes() > 8000 * 3
    refused = await client.get(f"/calls/{session.id}/recording", headers={"X-API-Key": "wrong"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    unknown = await client.get("/calls/0123456789abcdef01234567/recording", headers=AUTH)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "recording_not_found"
    metrics = server.gateway.telemetry.prometheus()
    assert 'voicegate_recordings_total{consent="announced",format="wav"} 1' in metrics
    assert f"voicegate_recording_bytes_total {info['bytes']}" in metrics

    erased = await client.delete(f"/api/admin/memory/sip:{CALLER}", headers=AUTH)
    assert erased.status_code == 200, erased.text
    assert erased.json()["recordings"] == [f"{session.id}.wav"]
    assert erased.json()["removed"]["call recordings (files)"] == 1
    gone = await client.get(f"/calls/{session.id}/recording", headers=AUTH)
    assert gone.status_code == 404
    assert list((config.data_dir / "recordings").iterdir()) == []


async def test_routes_are_closed_without_an_api_key_and_delete_removes_one_recording(
        http_server: Any, tmp_path: Path) -> None:
    config = recorded_config(tmp_path, "none")
    config.server.api_key = ""
    server, client = await http_server(config)
    response = await client.get("/calls/anything/recording")
    assert response.status_code == 403 and response.json()["error"]["code"] == "recordings_api_disabled"
    config = recorded_config(tmp_path / "keyed", "none")  # a second server, on ports of its own
    server, client = await http_server(config)
    session = await keypad_call(server, tmp_path, "You pressed 1")
    await finished(config, session.id)
    deleted = await client.delete(f"/calls/{session.id}/recording", headers=AUTH)
    assert deleted.status_code == 200 and deleted.json() == {"deleted": [f"{session.id}.wav"]}
    assert (await client.delete(f"/calls/{session.id}/recording", headers=AUTH)).status_code == 404


async def test_key_one_gives_consent_and_an_opt_out_key_deletes_what_was_recorded(
        http_server: Any, tmp_path: Path) -> None:
    config = recorded_config(tmp_path, "ask")
    server, _ = await http_server(config)
    session = await keypad_call(server, tmp_path, config.recording.granted_reply)
    assert (await finished(config, session.id))["consent"] == "granted"

    config = recorded_config(tmp_path / "second", "announce")
    config.recording.opt_out_key = "1"
    server, _ = await http_server(config)
    await keypad_call(server, tmp_path, "stopped recording")
    await server.wait_ended()
    directory = config.data_dir / "recordings"
    await eventually(lambda: list(directory.iterdir()) == [], 20, "the opted-out recording to be deleted")
