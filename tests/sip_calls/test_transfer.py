"""Call transfer (REFER, RFC 3515) against sipp playing the caller's phone: it calls voicegate, gets our
REFER, answers it and reports the new call's progress in NOTIFY sipfrag bodies."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.sip_calls.conftest import (
    WAIT_FOR_BYE,
    SipServer,
    agent_said,
    caller_audio,
    caller_bye,
    eventually,
    fragment,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from voicegate.internal.config import Config
from voicegate.internal.conversation.actions import ACTIONS
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.session import Session
from voicegate.internal.sip.voice.call import SIP_CALL_ID
from voicegate.internal.sip.voice.transfer import TRANSFER_STATE, TRANSFERRED, failure_message

pytestmark = pytest.mark.slow

API_KEY = "test-api-key-0123456789"
AUTH = {"X-API-Key": API_KEY}
SALES = "sip:sales@127.0.0.1:5999"
TARGETS = {"sales": SALES, "front desk": "tel:+15550001111"}
TRYING, OK, BUSY = "SIP/2.0 100 Trying", "SIP/2.0 200 OK", "SIP/2.0 486 Busy Here"
ACTIVE, TERMINATED = "active;expires=60", "terminated;reason=noresource"


def untasked(actions: list[dict[str, str]]) -> list[dict[str, str]]:
    """The call's actions without their task ids (random; the task ledger's key: tests/memory/test_task_ledger.py)."""
    return [{key: value for key, value in action.items() if key != "task"} for action in actions]


def transfer_config(tmp_path: Path, targets: dict[str, str] | None = None, **sip: Any) -> Config:
    config = sip_calls_config(tmp_path, transfer_targets=TARGETS if targets is None else targets, **sip)
    config.server.api_key = API_KEY
    return config


FROM_REFER = "To:[$voicegate]"  # the From of voicegate's REFER, captured by fragments/refer_accept.xml
FROM_ANSWER = "To: <sip:agent@[remote_ip]:[remote_port]>[peer_tag_param]"  # voicegate's tag from its 200


def notify(cseq: int, frag: str, state: str, *, to: str = FROM_REFER, answer: int = 200) -> str:
    return fragment("notify", NOTIFY_CSEQ=cseq, FRAG_LINE=frag, SUB_STATE=state, NOTIFY_TO=to, NOTIFY_ANSWER=answer)


def transferred_caller(directory: Path, *, final: str, media: str = "", ending: str = WAIT_FOR_BYE) -> Path:
    """A caller whose phone accepts our REFER to sales, then reports 100 Trying and `final`."""
    steps = (fragment("refer_accept", REFER_TO_REGEXP=f"Refer-To: &lt;{SALES}&gt;")
             + notify(2, TRYING, ACTIVE) + notify(3, final, TERMINATED))
    return render(directory, media=media + steps, ending=ending)


async def established(server: SipServer) -> Session:
    """The one call, once ACKed and its media started (from then on it can be transferred)."""
    (session,) = await server.wait_live()
    await eventually(lambda: SIP_CALL_ID in session.slots, what="the call's media to start")
    return session


async def test_a_transfer_the_phone_completes_ends_our_leg_with_bye(http_server: Any, tmp_path: Path) -> None:
    server, client = await http_server(transfer_config(tmp_path))
    caller = asyncio.create_task(run_sipp(tmp_path, transferred_caller(tmp_path, final=OK), server.target))
    session = await established(server)
    response = await client.post(f"/calls/{session.id}/transfer", json={"target": "Sales"}, headers=AUTH)
    assert response.status_code == 202, response.text
    assert response.json() == {"session_id": session.id, "call_id": session.slots.get(SIP_CALL_ID),
                               "target": "sales", "mode": "cold", "status": "accepted"}
    # sipp saw the REFER (Refer-To sales, a Referred-By), our 200 to each NOTIFY, then our BYE.
    (await caller).check()
    (ended,) = await server.wait_ended()
    assert ended is session and ended.end_reason == TRANSFERRED
    state = session.slots.get(TRANSFER_STATE)
    assert (state.phase, state.status) == ("succeeded", 200)
    # The call's ledger of what the agent did (recalled on a later call): the target's name and outcome.
    assert untasked(session.slots.get(ACTIONS)) == [{"action": "transfer", "target": "sales", "status": "succeeded"}]


async def test_a_busy_target_is_announced_and_the_call_carries_on(http_server: Any, tmp_path: Path) -> None:
    server, client = await http_server(transfer_config(tmp_path))
    scenario = transferred_caller(tmp_path, final=BUSY, ending=caller_bye(8000))
    caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    session = await established(server)
    response = await client.post(f"/calls/{session.slots.get(SIP_CALL_ID)}/transfer", json={"target": SALES},
                                 headers=AUTH)
    assert response.status_code == 202, response.text
    await agent_said(session, failure_message("sales"))
    assert not session.ended and server.ended == []  # still on the line with the agent
    assert (session.slots.get(TRANSFER_STATE).phase, session.slots.get(TRANSFER_STATE).status) == ("failed", 486)
    assert untasked(session.slots.get(ACTIONS)) == [{"action": "transfer", "target": "sales", "status": "failed"}]
    (await caller).check()  # then the caller hangs up: the call had carried on
    (ended,) = await server.wait_ended()
    assert ended.end_reason == "sip bye"


async def test_a_refused_refer_is_502_and_the_caller_is_told(http_server: Any, tmp_path: Path) -> None:
    server, client = await http_server(transfer_config(tmp_path))
    scenario = render(tmp_path, media=fragment("refer_refuse", REFUSE_STATUS="403 Forbidden"), ending=caller_bye(8000))
    caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    session = await established(server)
    response = await client.post(f"/calls/{session.id}/transfer", json={"target": "sales"}, headers=AUTH)
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert (error["code"], error["sip_status"], error["sip_reason"]) == ("transfer_refused", 403, "Forbidden")
    await agent_said(session, failure_message("sales"))
    assert not session.ended
    (await caller).check()
    assert (await server.wait_ended())[0].end_reason == "sip bye"


async def test_transfer_requests_voicegate_cannot_honour_get_clear_errors(http_server: Any, tmp_path: Path) -> None:
    server, client = await http_server(transfer_config(tmp_path))
    # Answered but not yet ACKed: the call is not established, so there is nothing to transfer yet.
    scenario = render(tmp_path, "uac_slow_ack.xml", ending=caller_bye(1000), ACK_DELAY_MS=6000)
    caller = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    await eventually(lambda: len(server.sessions) == 1, what="the answered call's session")
    session = server.sessions.sessions()[0]
    assert server.answered() == 0
    path = f"/calls/{session.id}/transfer"

    async def post(url: str, body: dict[str, Any], headers: dict[str, str] = AUTH) -> tuple[int, str]:
        response = await client.post(url, json=body, headers=headers)
        return response.status_code, response.json()["error"]["code"]

    assert await post(path, {"target": "sales"}, {}) == (401, "unauthorized")
    assert await post("/calls/no-such-call/transfer", {"target": "sales"}) == (404, "call_not_found")
    assert await post(path, {"target": "sip:evil@198.51.100.9"}) == (403, "target_not_allowed")
    assert await post(path, {"target": "marketing"}) == (403, "target_not_allowed")
    assert await post(path, {}) == (422, "invalid_request")
    assert await post(path, {"target": "sales"}) == (409, "not_transferable")  # no ACK yet
    webrtc = await server.gateway.open_session(CallerIdentity.anonymous("test"), "webrtc")
    assert await post(f"/calls/{webrtc.id}/transfer", {"target": "sales"}) == (409, "not_transferable")
    await server.sessions.end(webrtc, "test done")
    (await caller).check()


async def test_transfers_are_off_without_targets(http_server: Any, tmp_path: Path) -> None:
    server, client = await http_server(transfer_config(tmp_path, targets={}))
    # A NOTIFY about a transfer nobody asked for is answered 481, and the call goes on.
    stray = notify(2, OK, TERMINATED, to=FROM_ANSWER, answer=481)
    caller = asyncio.create_task(run_sipp(tmp_path, render(tmp_path, media=stray, ending=caller_bye(3000)),
                                          server.target))
    session = await established(server)
    response = await client.post(f"/calls/{session.id}/transfer", json={"target": "sales"}, headers=AUTH)
    assert response.status_code == 403 and response.json()["error"]["code"] == "transfer_disabled"
    assert "transfer_call" not in server.gateway.tools
    (await caller).check()


async def test_caller_asking_the_local_agent_for_sales_is_transferred(http_server: Any, tmp_path: Path) -> None:
    server, _ = await http_server(transfer_config(tmp_path), finals=["transfer me to sales"])
    media = stream(caller_audio(tmp_path, "transfer me to sales"))
    caller = asyncio.create_task(run_sipp(tmp_path, transferred_caller(tmp_path, final=OK, media=media),
                                          server.target))
    session = await established(server)
    (await caller).check()  # the agent's tool sent the REFER; the phone reported 200; we sent BYE
    (ended,) = await server.wait_ended()
    assert ended.end_reason == TRANSFERRED
    said = [(e.role, e.text) for e in session.conversation.transcript.entries()]
    assert ("user", "transfer me to sales") in said
    calls = [c for m in session.conversation.history for c in m.tool_calls]
    assert [(c.name, c.arguments) for c in calls] == [("transfer_call", {"target": "sales"})]
    assert session.slots.get(TRANSFER_STATE).target == "sales"


async def test_a_phone_hanging_up_mid_transfer_just_ends_the_call(http_server: Any, tmp_path: Path) -> None:
    server, client = await http_server(transfer_config(tmp_path))
    steps = fragment("refer_accept", REFER_TO_REGEXP=f"Refer-To: &lt;{SALES}&gt;") + notify(2, TRYING, ACTIVE)
    caller = asyncio.create_task(run_sipp(tmp_path, render(tmp_path, media=steps, ending=caller_bye(500)),
                                          server.target))
    session = await established(server)
    response = await client.post(f"/calls/{session.id}/transfer", json={"target": "sales"}, headers=AUTH)
    assert response.status_code == 202, response.text
    (await caller).check()  # 202, NOTIFY 100 answered, then the phone's own BYE
    (ended,) = await server.wait_ended()
    assert ended.end_reason == "sip bye"
    await eventually(lambda: session.slots.get(TRANSFER_STATE).phase == "ended", what="the transfer to give up")
    assert not any(failure_message("sales") in e.text for e in session.conversation.transcript.entries())
