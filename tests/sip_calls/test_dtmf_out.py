"""Key presses out, into another IVR: RFC 4733 events we decode from the wire, SIP INFO when the callee did not
negotiate telephone-event, and the agent's `send_dtmf` heard by baresip."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.models import ToolCallingModel
from tests.pipeline.conftest import ScriptedStt
from tests.sip_calls.conftest import (
    PCMU_ONLY_ANSWER,
    WAIT_FOR_BYE,
    RtpCapture,
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
from tests.sip_calls.test_outbound import API_KEY, AUTH, OUR_OFFER, outbound_config, start_callee
from tests.speech import speak, write_wav
from voicegate.internal.audio.dtmf import END_REPEATS, DtmfReceiver, TelephoneEvent

pytestmark = pytest.mark.slow


async def answered_call(client: Any, port: int) -> dict[str, Any]:
    response = await client.post("/calls", json={"to": f"sip:ivr@127.0.0.1:{port}"}, headers=AUTH)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_post_dtmf_sends_rfc4733_events_that_decode_to_the_keys(
        http_server: Any, capture: RtpCapture, tmp_path: Path) -> None:
    server, client = await http_server(outbound_config(tmp_path))
    scenario = render(tmp_path, "uas_answer.xml", ending=WAIT_FOR_BYE, media_port=capture.port, OFFER_REGEXP=OUR_OFFER)
    callee, port = await start_callee(tmp_path, scenario)
    placed = await answered_call(client, port)
    path = f"/calls/{placed['call_id']}/dtmf"
    invalid = await client.post(path, json={"digits": "12x"}, headers=AUTH)
    assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "invalid_digits"
    assert (await client.post("/calls/nope/dtmf", json={"digits": "1"}, headers=AUTH)).status_code == 404
    assert (await client.post(path, json={"digits": "1"})).status_code == 401
    response = await client.post(path, json={"digits": "12#"}, headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.json() == {"session_id": placed["session_id"], "call_id": placed["call_id"], "digits": "12#",
                               "method": "rfc4733"}
    session = server.sessions.get(placed["session_id"])
    await server.hang_up(session)
    (await callee).check()

    events = [p for p in capture.packets((101,))]
    audio = capture.packets((0,))
    assert {p.ssrc for p in events} == {audio[0].ssrc}  # one stream: the events are part of the call's RTP
    receiver = DtmfReceiver()
    assert [d for p in events for d in receiver.feed(p)] == ["1", "2", "#"]
    presses = [list(group) for _, group in itertools.groupby(events, key=lambda p: p.timestamp)]
    assert len(presses) == 3
    for press, key in zip(presses, "12#", strict=True):
        payloads = [TelephoneEvent.parse(p.payload) for p in press]
        assert [p.marker for p in press] == [True] + [False] * (len(press) - 1)  # the marker on the first only
        assert {e.digit for e in payloads} == {key}
        durations = [e.duration for e in payloads]
        assert durations == sorted(durations) and durations[0] > 0  # growing while the key is held
        ends = [e for e in payloads if e.end]
        assert len(ends) == END_REPEATS and payloads[-END_REPEATS:] == ends  # the end, sent three times
        assert len(set(ends)) == 1  # ... the same packet each time (one duration)
        sequences = [p.sequence for p in press]
        assert all((b - a) % 65536 == 1 for a, b in itertools.pairwise(sequences))
    assert presses[0][0].timestamp < presses[1][0].timestamp < presses[2][0].timestamp  # each its own start


async def test_without_telephone_event_the_keys_go_as_sip_info(
        http_server: Any, capture: RtpCapture, tmp_path: Path) -> None:
    server, client = await http_server(outbound_config(tmp_path))
    infos = fragment("receive_info", INFO_SIGNAL="7") + fragment("receive_info", INFO_SIGNAL="#")
    scenario = render(tmp_path, "uas_answer.xml", ending=infos + fragment(WAIT_FOR_BYE), media_port=capture.port,
                      OFFER_REGEXP=OUR_OFFER, ANSWER_MEDIA=PCMU_ONLY_ANSWER)
    callee, port = await start_callee(tmp_path, scenario)
    placed = await answered_call(client, port)
    response = await client.post(f"/calls/{placed['session_id']}/dtmf", json={"digits": "7#"},
                                 headers={"Authorization": f"Bearer {API_KEY}"})
    assert response.status_code == 200, response.text
    assert response.json()["method"] == "info"
    await server.hang_up(server.sessions.get(placed["session_id"]))
    (await callee).check()  # sipp saw both INFOs, in order, with their Signal lines
    assert capture.packets((101,)) == []


def ivr_home(directory: Path, prompt: str) -> tuple[Path, int, int]:
    """baresip as a company's phone menu: answers by itself and says `prompt`; (home, SIP port, console port)."""
    speech = bytes(8000) + speak(prompt, 8000) + bytes(16000 * 15)
    home = baresip_home(directory, write_wav(directory / "ivr.wav", speech, 8000))
    (home / "accounts").write_text("<sip:ivr@127.0.0.1>;answermode=auto;regint=0\n")
    listen = next(line for line in (home / "config").read_text().splitlines() if line.startswith("sip_listen"))
    return home, int(listen.rsplit(":", 1)[1]), with_console(home)


async def test_the_agent_presses_a_key_in_the_menu_it_called_and_baresip_hears_it(
        http_server: Any, tmp_path: Path) -> None:
    config = outbound_config(tmp_path)
    config.pipeline.greeting_outgoing = "Hello."
    model = ToolCallingModel([("send_dtmf", {"digits": "2"})], lambda r: "Billing, please." if r.get("ok") else "No.")
    server, client = await http_server(config, ["press two for billing"], model)
    home, sip_port, console_port = ivr_home(tmp_path, "press two for billing")
    async with running_baresip(home), console(console_port) as ivr:
        placed = await answered_call(client, sip_port)
        session = server.sessions.get(placed["session_id"])
        await agent_said(session, "Billing, please.")
        assert model.results == [{"ok": True, "sent": "2", "method": "rfc4733"}]
        await eventually(lambda: any(e.get("type") == "CALL_DTMF_START" for e in ivr.events), 10,
                         "baresip to report the key")
        keys = [e.get("param") for e in ivr.events if e.get("type") == "CALL_DTMF_START"]
        assert keys == ["2"], ivr.events
        await server.hang_up(session)


FEATURE_CODE = "#9011"  # a blind transfer to an international number, with the PBX's DTMF feature codes on


def pressing(digits: str) -> ToolCallingModel:
    return ToolCallingModel([("send_dtmf", {"digits": digits})],
                            lambda r: "Done." if r.get("ok") else "I cannot press keys on this call.")


async def test_send_dtmf_is_not_offered_on_a_call_voicegate_answered(
        make_server: Any, capture: RtpCapture, tmp_path: Path) -> None:
    model = pressing(FEATURE_CODE)
    server = await make_server(stt=ScriptedStt(["press hash nine zero one one"]), model=model,
                               config=sip_calls_config(tmp_path, symmetric_rtp=False))
    scenario = render(tmp_path, media=stream(caller_audio(tmp_path, "press hash nine zero one one")),
                      ending=WAIT_FOR_BYE, media_port=capture.port)
    caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    (session,) = await server.wait_live()
    await agent_said(session, "I cannot press keys on this call.")
    assert model.results == [{"error": "unknown tool 'send_dtmf'"}]
    assert all("send_dtmf" not in {tool.name for tool in request.tools} for request in model.requests)
    await server.hang_up(session)
    (await caller).check()
    assert capture.packets((101,)) == []  # not one key went out on the line the PBX handed us


async def test_send_dtmf_on_an_answered_call_needs_the_explicit_switch(
        make_server: Any, capture: RtpCapture, tmp_path: Path) -> None:
    model = pressing("2")
    config = sip_calls_config(tmp_path, symmetric_rtp=False, send_dtmf_inbound=True)
    server = await make_server(stt=ScriptedStt(["press two"]), model=model, config=config)
    scenario = render(tmp_path, media=stream(caller_audio(tmp_path, "press two")), ending=WAIT_FOR_BYE,
                      media_port=capture.port)
    caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    (session,) = await server.wait_live()
    await agent_said(session, "Done.")
    assert model.results == [{"ok": True, "sent": "2", "method": "rfc4733"}]
    await server.hang_up(session)
    (await caller).check()
    receiver = DtmfReceiver()
    assert [d for p in capture.packets((101,)) for d in receiver.feed(p)] == ["2"]


# The far end of a call voicegate placed is untrusted too (internal/telephony/key_policy.py).
REFUSED = "I cannot press those keys."


async def test_the_agent_cannot_key_a_feature_code_the_far_end_asks_for(http_server: Any, tmp_path: Path) -> None:
    # Whoever answered says "press pound"; the model, talked into it, keys ##900123 (a PBX on our route
    # with feature codes on would transfer the call to 900123 at our cost). It gets a refusal it can read;
    # not one key reaches the line.
    config = outbound_config(tmp_path)
    config.pipeline.greeting_outgoing = "Hello."
    said = "for billing press pound then press nine zero zero one two three"
    model = ToolCallingModel([("send_dtmf", {"digits": "##900123"})],
                             lambda r: "Billing, please." if r.get("ok") else REFUSED)
    server, client = await http_server(config, [said], model)
    home, sip_port, console_port = ivr_home(tmp_path, said)
    async with running_baresip(home), console(console_port) as ivr:
        placed = await answered_call(client, sip_port)
        session = server.sessions.get(placed["session_id"])
        await agent_said(session, REFUSED)
        (result,) = model.results
        assert "nothing was sent" in result["error"] and "twice in a row" in result["error"], result
        assert "send_dtmf" in {tool.name for tool in model.requests[0].tools}  # offered: keys were asked for
        await server.hang_up(session)
    assert not [e for e in ivr.events if e.get("type") == "CALL_DTMF_START"], ivr.events


async def test_send_dtmf_is_not_offered_while_a_person_talks(http_server: Any, tmp_path: Path) -> None:
    config = outbound_config(tmp_path)
    config.pipeline.greeting_outgoing = "Hello."
    said = "this is Dana in billing how can I help you"
    model = pressing("##900123")
    server, client = await http_server(config, [said], model)
    home, sip_port, console_port = ivr_home(tmp_path, said)
    async with running_baresip(home), console(console_port) as ivr:
        placed = await answered_call(client, sip_port)
        session = server.sessions.get(placed["session_id"])
        await agent_said(session, "I cannot press keys on this call.")
        assert model.results == [{"error": "unknown tool 'send_dtmf'"}]
        assert all("send_dtmf" not in {tool.name for tool in request.tools} for request in model.requests)
        await server.hang_up(session)
    assert not [e for e in ivr.events if e.get("type") == "CALL_DTMF_START"], ivr.events


async def test_post_dtmf_may_key_pound_but_not_past_the_calls_cap(
        http_server: Any, capture: RtpCapture, tmp_path: Path) -> None:
    config = outbound_config(tmp_path)
    config.sip.outbound_max_keys = 4
    server, client = await http_server(config)
    scenario = render(tmp_path, "uas_answer.xml", ending=WAIT_FOR_BYE, media_port=capture.port, OFFER_REGEXP=OUR_OFFER)
    callee, port = await start_callee(tmp_path, scenario)
    placed = await answered_call(client, port)
    path = f"/calls/{placed['call_id']}/dtmf"
    sent = await client.post(path, json={"digits": "1##"}, headers=AUTH)  # the deployer's own keys: no key rules
    assert sent.status_code == 200, sent.text
    over = await client.post(path, json={"digits": "23"}, headers=AUTH)
    assert over.status_code == 403, over.text
    assert over.json()["error"]["code"] == "keys_refused" and "at most 4 keys" in over.json()["error"]["message"]
    await server.hang_up(server.sessions.get(placed["session_id"]))
    (await callee).check()
    receiver = DtmfReceiver()
    assert [d for p in capture.packets((101,)) for d in receiver.feed(p)] == ["1", "#", "#"]
