"""Transfer without a network: sipfrag status lines, NOTIFY answers, the outcome rules, the allow-list,
its config validation, the tool's offer and the local agent's "put me through to ..."."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicegate.internal.config import ConfigError, load_config
from voicegate.internal.config.sections import SipConfig
from voicegate.internal.conversation.rolling_summary import RollingSummary
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.base import ChatMessage, ChatRequest, ReplyDelta, ToolCall, Turn
from voicegate.internal.llm.local import LocalAgent
from voicegate.internal.session import Conversation, Session
from voicegate.internal.sip import SipRequest, parse
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.transfer import (
    FragStatus,
    SipfragError,
    TransferBusy,
    TransferSubscriptions,
    await_outcome,
    parse_sipfrag,
    subscription_terminated,
)
from voicegate.internal.sip.voice.transfer import (
    TRANSFERRED,
    CallTransfers,
    TargetNotAllowed,
    register_transfer_tool,
    resolve_target,
)
from voicegate.internal.sip_grammar.uri import NameAddr, SipUri
from voicegate.internal.tools.registry import ToolContext, ToolRegistry

TARGETS = {"sales": "sip:sales@pbx.example", "front desk": "tel:+15550001111"}


# ---- sipfrag ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "expected"), [
    (b"SIP/2.0 100 Trying", FragStatus(100, "Trying")),
    (b"SIP/2.0 200 OK\r\n", FragStatus(200, "OK")),
    (b"\r\nSIP/2.0 486 Busy Here\r\nContent-Length: 0\r\n\r\n", FragStatus(486, "Busy Here")),
    (b"sip/2.0 603 Decline", FragStatus(603, "Decline")),
    (b"SIP/2.0 180", FragStatus(180, "")),
])
def test_a_sipfrag_is_read_by_its_status_line(body: bytes, expected: FragStatus) -> None:
    assert parse_sipfrag(body) == expected


@pytest.mark.parametrize("body", [b"", b"hello", b"SIP/2.0 99 Odd", b"SIP/2.0 1000 Big", b"INVITE sip:a@b SIP/2.0",
                                  b"HTTP/1.1 200 OK", b"\xff\xfe"])
def test_a_body_that_is_no_status_line_is_a_sipfrag_error(body: bytes) -> None:
    with pytest.raises(SipfragError):
        parse_sipfrag(body)


@given(st.integers(100, 699), st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=30))
def test_any_status_line_reads_back(status: int, reason: str) -> None:
    assert parse_sipfrag(f"SIP/2.0 {status} {reason}\r\n".encode()) == FragStatus(status, reason)


def test_subscription_state_terminated_ignores_case_and_parameters() -> None:
    assert subscription_terminated("terminated;reason=noresource")
    assert subscription_terminated("Terminated")
    assert not subscription_terminated("active;expires=60")
    assert not subscription_terminated(None)


# ---- NOTIFY -----------------------------------------------------------------------------------------


def dialog() -> Dialog:
    return Dialog("call-1@test", "ours", "theirs", NameAddr(SipUri("sip", "agent", None, "127.0.0.1")),
                  NameAddr(SipUri("sip", "caller", None, "127.0.0.2")), SipUri("sip", "caller", None, "127.0.0.2"),
                  state="confirmed")


def notify(body: str = "SIP/2.0 100 Trying", *, event: str = "refer", state: str = "active;expires=60",
           content_type: str = "message/sipfrag;version=2.0") -> SipRequest:
    lines = ["NOTIFY sip:agent@127.0.0.1 SIP/2.0", "Via: SIP/2.0/UDP 127.0.0.2:5070;branch=z9hG4bK1",
             "From: <sip:caller@127.0.0.2>;tag=theirs", "To: <sip:agent@127.0.0.1>;tag=ours", "Call-ID: call-1@test",
             "CSeq: 2 NOTIFY", "Max-Forwards: 70", f"Subscription-State: {state}"]
    if event:
        lines.append(f"Event: {event}")
    if body:
        lines.append(f"Content-Type: {content_type}")
    raw = "\r\n".join([*lines, f"Content-Length: {len(body)}", "", body]).encode()
    message = parse(raw)
    assert isinstance(message, SipRequest)
    return message


def test_notifies_are_answered_by_what_they_carry() -> None:
    subscriptions, call = TransferSubscriptions(), dialog()
    assert subscriptions.on_notify(call, notify()) == (481, "Subscription Does Not Exist")  # no REFER of ours
    subscription = subscriptions.open(call)
    assert subscriptions.on_notify(call, notify(event="presence"))[0] == 489
    assert subscriptions.on_notify(call, notify(event=""))[0] == 489
    assert subscriptions.on_notify(call, notify(content_type="text/plain"))[0] == 415
    assert subscriptions.on_notify(call, notify("not a status line"))[0] == 400
    assert subscriptions.on_notify(call, notify(""))[0] == 400  # no body, subscription still active
    assert subscription.updates.empty()  # nothing unreadable reached the transfer
    assert subscriptions.on_notify(call, notify(event="refer;id=3")) == (200, "OK")
    assert subscriptions.on_notify(call, notify("", state="terminated")) == (200, "OK")
    assert subscription.updates.get_nowait() == (FragStatus(100, "Trying"), False)
    assert subscription.updates.get_nowait() == (None, True)
    with pytest.raises(TransferBusy):
        subscriptions.open(call)
    subscriptions.close(subscription)
    assert not subscriptions.active(call)


# ---- the outcome ------------------------------------------------------------------------------------


async def outcome_after(*updates: tuple[FragStatus | None, bool], timeout_s: float = 5.0) -> tuple[bool, str, int]:
    subscriptions, call = TransferSubscriptions(), dialog()
    subscription = subscriptions.open(call)
    for update in updates:
        subscription.updates.put_nowait(update)
    outcome = await await_outcome(call, subscription, timeout_s=timeout_s)
    return outcome.succeeded, outcome.stage, outcome.status


async def test_a_2xx_sipfrag_is_success_and_a_failure_status_is_not() -> None:
    trying = (FragStatus(100, "Trying"), False)
    assert await outcome_after(trying, (FragStatus(180, "Ringing"), False), (FragStatus(200, "OK"), True)) == \
        (True, "notify", 200)
    assert await outcome_after(trying, (FragStatus(486, "Busy Here"), True)) == (False, "notify", 486)
    assert await outcome_after(trying, (FragStatus(503, "Service Unavailable"), False)) == (False, "notify", 503)


async def test_a_subscription_that_ends_without_a_final_status_is_a_failure() -> None:
    assert await outcome_after((FragStatus(100, "Trying"), False), (None, True)) == (False, "notify", 100)
    assert await outcome_after((FragStatus(180, "Ringing"), True)) == (False, "notify", 180)


async def test_no_final_notify_in_time_is_a_timeout() -> None:
    assert await outcome_after((FragStatus(100, "Trying"), False), timeout_s=0.3) == (False, "timeout", 408)


async def test_the_call_ending_stops_the_wait() -> None:
    subscriptions, call = TransferSubscriptions(), dialog()
    subscription = subscriptions.open(call)
    waiting = asyncio.create_task(await_outcome(call, subscription, timeout_s=30))
    await asyncio.sleep(0.05)
    call.state = "terminated"  # the peer's BYE
    outcome = await asyncio.wait_for(waiting, 5)
    assert (outcome.succeeded, outcome.stage) == (False, "ended")


# ---- the allow-list ---------------------------------------------------------------------------------


def test_targets_resolve_by_name_in_any_case_or_by_their_exact_uri() -> None:
    assert resolve_target(TARGETS, "Sales") == ("sales", "sip:sales@pbx.example")
    assert resolve_target(TARGETS, "  Front   Desk ") == ("front desk", "tel:+15550001111")
    assert resolve_target(TARGETS, "tel:+15550001111") == ("front desk", "tel:+15550001111")
    with pytest.raises(TargetNotAllowed, match=r"'sip:evil@198\.51\.100\.9' is not in sip.transfer_targets "
                                               r"\(allowed: front desk, sales\)"):
        resolve_target(TARGETS, "sip:evil@198.51.100.9")
    with pytest.raises(TargetNotAllowed, match="transfers are disabled"):
        resolve_target({}, "sales")


def test_transfer_targets_are_stored_by_lower_case_name() -> None:
    config = SipConfig(transfer_targets={"Sales": " sip:sales@pbx.example ", "Front Desk": "sips:100@pbx.example:5061"})
    assert config.transfer_targets == {"sales": "sip:sales@pbx.example", "front desk": "sips:100@pbx.example:5061"}
    assert SipConfig().transfer_targets == {}  # the default: transfers off


@pytest.mark.parametrize(("toml", "expected"), [
    ("sales = 'http://example.com'", "sip.transfer_targets: transfer target 'sales': 'http://example.com' is not a "
                                     "sip:, sips: or tel: URI"),
    ("sales = 'sip:'", "'sip:' is not a sip:, sips: or tel: URI"),
    ("sales = 'tel:front-desk'", "'tel:front-desk' is not a sip:, sips: or tel: URI"),
    ("'sales!' = 'sip:sales@pbx.example'", "sip.transfer_targets: transfer target name 'sales!': use 1-40 letters"),
    ("Sales = 'sip:a@pbx.example'\nsales = 'sip:b@pbx.example'", "transfer target name 'sales' is given twice"),
])
def test_a_bad_transfer_target_names_the_key_and_the_reason(tmp_path: Path, toml: str, expected: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[sip.transfer_targets]\n{toml}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert expected in str(caught.value)


def test_transfer_timeout_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[sip]\ntransfer_timeout_s = 0\n")
    with pytest.raises(ConfigError, match=r"sip\.transfer_timeout_s: must be > 0"):
        load_config(path)


# ---- the tool and the local agent -------------------------------------------------------------------


def session(transport: str) -> Session:
    return Session(CallerIdentity.anonymous(), transport, Conversation(RollingSummary(None, 1.0)))  # type: ignore[arg-type]


async def _unused_end(session: Session, reason: str) -> None:
    raise AssertionError("no call should end here")


def registry() -> ToolRegistry:
    tools = ToolRegistry()
    register_transfer_tool(tools, CallTransfers(SipConfig(transfer_targets=TARGETS), None, _unused_end))
    return tools


def test_transfer_call_is_offered_on_sip_calls_only_with_the_allowed_names() -> None:
    tools = registry()
    (spec,) = tools.specs(ToolContext("s", None, 1, extras={"session": session("sip")}))
    assert spec.name == "transfer_call"
    assert spec.parameters["properties"]["target"]["enum"] == ["front desk", "sales"]
    assert tools.specs(ToolContext("s", None, 1, extras={"session": session("webrtc")})) == []


async def test_the_tool_refuses_a_target_off_the_list_before_any_signalling() -> None:
    context = ToolContext("s", None, 1, extras={"session": session("sip")})
    result = json.loads(await registry().run(ToolCall("t1", "transfer_call", {"target": "marketing"}), context))
    assert "not in sip.transfer_targets" in result["error"]


async def agent_turn(text: str, tools: ToolRegistry, history: list[ChatMessage] | None = None) -> list[object]:
    context = ToolContext("s", None, 1, extras={"session": session("sip")})
    messages = history if history is not None else [ChatMessage("user", text)]
    request = ChatRequest("s", None, "", messages, Turn(text=text), tools=tools.specs(context))
    return [item async for item in LocalAgent().stream(request)]


@pytest.mark.parametrize(("said", "target"), [
    ("Transfer me to sales.", "sales"),
    ("Could you put me through to the front desk please", "front desk"),
    ("can I speak to someone in sales", "sales"),
])
async def test_the_local_agent_transfers_when_the_caller_names_an_allowed_target(said: str, target: str) -> None:
    (call,) = await agent_turn(said, registry())
    assert isinstance(call, ToolCall) and (call.name, call.arguments) == ("transfer_call", {"target": target})


async def test_the_local_agent_names_the_targets_when_asked_for_someone_else() -> None:
    reply = "".join(d.text for d in await agent_turn("put me through to Bob", registry()) if isinstance(d, ReplyDelta))
    assert reply == "I can put you through to front desk or sales."
    # Talking *to the agent* is not a transfer request.
    reply = "".join(d.text for d in await agent_turn("I want to talk to you about my bill", registry())
                    if isinstance(d, ReplyDelta))
    assert "put you through" not in reply


async def test_the_local_agent_confirms_or_apologises_after_the_tool() -> None:
    call = ToolCall("t1", "transfer_call", {"target": "sales"})
    for result, expected in (({"ok": True, "target": "sales"}, "Putting you through to sales."),
                             ({"error": "the transfer to sales was refused (SIP 403 Forbidden)"},
                              "Sorry, I couldn't do that: the transfer to sales was refused (SIP 403 Forbidden)")):
        history = [ChatMessage("user", "transfer me to sales"), ChatMessage("assistant", "", tool_calls=[call]),
                   ChatMessage("tool", json.dumps(result), tool_call_id="t1")]
        reply = "".join(d.text for d in await agent_turn("transfer me to sales", registry(), history)
                        if isinstance(d, ReplyDelta))
        assert reply == expected


def test_a_transferred_call_has_its_own_outcome_label() -> None:
    from voicegate.server.gateway import call_outcome

    assert call_outcome(TRANSFERRED) == "transferred"
    assert call_outcome("sip bye") == "caller_hangup"
