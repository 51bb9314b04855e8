"""RFC 3261 section 17 state machines with fast timers and a fake transport (no sockets)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from tests.sip.conftest import eventually
from voicegate.internal.sip import (
    Address,
    SipRequest,
    SipResponse,
    TimerSettings,
    TransactionLayer,
    make_response,
    parse,
)
from voicegate.internal.sip.transaction import ServerTransaction
from voicegate.internal.sip.transport import ErrorHandler

FAST = TimerSettings(t1=0.01, t2=0.04, t4=0.05, timer_d=0.1)
UDP = Address("192.0.2.5", 5060, "udp")
TCP = Address("192.0.2.5", 40000, "tcp")


@dataclass
class FakeSender:
    requests: list[SipRequest] = field(default_factory=list)
    responses: list[SipResponse] = field(default_factory=list)
    fail: bool = False

    def send_request(self, request: SipRequest, dest: Address, on_error: ErrorHandler | None = None) -> None:
        if self.fail and on_error is not None:
            on_error(OSError("unreachable"))
            return
        self.requests.append(request)

    def send_response(self, response: SipResponse, source: Address) -> None:
        self.responses.append(response)

    def statuses(self) -> list[int]:
        return [r.status for r in self.responses]


@dataclass
class FakeUser:
    requests: list[tuple[SipRequest, ServerTransaction | None]] = field(default_factory=list)
    stray: list[SipResponse] = field(default_factory=list)

    def on_request(self, request: SipRequest, transaction: ServerTransaction | None, source: Address) -> None:
        self.requests.append((request, transaction))

    def on_stray_response(self, response: SipResponse, source: Address) -> None:
        self.stray.append(response)


def request(
    method: str = "INVITE", branch: str = "z9hG4bK-1", cseq_method: str | None = None, to_tag: str = ""
) -> SipRequest:
    to = "<sip:b@example.com>" + (f";tag={to_tag}" if to_tag else "")
    data = (
        f"{method} sip:b@example.com SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.5:5060;branch={branch}\r\n"
        f"From: <sip:a@example.com>;tag=ft\r\nTo: {to}\r\nCall-ID: call-1\r\nCSeq: 7 {cseq_method or method}\r\n"
        "Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    parsed = parse(data)
    assert isinstance(parsed, SipRequest)
    return parsed


def layer() -> tuple[TransactionLayer, FakeSender, FakeUser]:
    sender, user = FakeSender(), FakeUser()
    return TransactionLayer(sender, user, FAST), sender, user


async def test_invite_server_sends_100_at_once_and_absorbs_retransmissions() -> None:
    transactions, sender, user = layer()
    transactions.receive(request(), UDP)
    assert sender.statuses() == [100] and len(user.requests) == 1
    transactions.receive(request(), UDP)
    transactions.receive(request(), UDP)
    assert len(user.requests) == 1  # a retransmitted INVITE never reaches the TU twice
    assert sender.statuses() == [100, 100, 100]  # the last provisional is replayed each time


async def test_invite_server_replays_the_latest_provisional() -> None:
    transactions, sender, user = layer()
    transactions.receive(request(), UDP)
    txn = user.requests[0][1]
    assert txn is not None
    txn.respond(make_response(txn.request, 180, "Ringing", to_tag="x"))
    transactions.receive(request(), UDP)
    assert sender.statuses() == [100, 180, 180]


async def test_invite_server_retransmits_non_2xx_until_ack_then_absorbs_it() -> None:
    transactions, sender, user = layer()
    transactions.receive(request(), UDP)
    txn = user.requests[0][1]
    assert txn is not None
    txn.respond(make_response(txn.request, 486, "Busy Here", to_tag="x"))
    await eventually(lambda: sender.statuses().count(486) >= 3, what="Timer G retransmissions")
    transactions.receive(request("ACK", cseq_method="ACK", to_tag="x"), UDP)
    assert txn.state == "confirmed"
    sent = len(sender.responses)
    assert len(user.requests) == 1  # the ACK for a non-2xx belongs to the transaction, not the TU
    await txn.done.wait()  # Timer I
    assert len(sender.responses) == sent


async def test_invite_server_gives_up_waiting_for_ack_with_timer_h() -> None:
    transactions, sender, user = layer()
    transactions.receive(request(), UDP)
    txn = user.requests[0][1]
    assert txn is not None
    txn.respond(make_response(txn.request, 603, "Decline", to_tag="x"))
    await asyncio.wait_for(txn.done.wait(), 30)
    assert txn.state == "terminated" and transactions.counts == (0, 0)
    assert sender.statuses().count(603) >= 5  # T1, 2T1, 4T1, T2, T2, ... within 64*T1


async def test_invite_server_over_tcp_does_not_retransmit() -> None:
    transactions, sender, user = layer()
    transactions.receive(request(), TCP)
    txn = user.requests[0][1]
    assert txn is not None
    txn.respond(make_response(txn.request, 486, "Busy Here", to_tag="x"))
    await asyncio.sleep(0.2)
    assert sender.statuses() == [100, 486]
    transactions.receive(request("ACK", cseq_method="ACK", to_tag="x"), TCP)
    await asyncio.wait_for(txn.done.wait(), 30)  # Timer I is zero on a reliable transport


async def test_invite_server_2xx_is_accepted_and_acks_for_2xx_go_to_the_tu() -> None:
    transactions, sender, user = layer()
    transactions.receive(request(), UDP)
    txn = user.requests[0][1]
    assert txn is not None
    ok = make_response(txn.request, 200, "OK", to_tag="x")
    txn.respond(ok)
    assert txn.state == "accepted"
    transactions.receive(request(), UDP)  # retransmitted INVITE after the 2xx: absorbed (RFC 6026)
    assert len(user.requests) == 1 and sender.statuses() == [100, 200]
    txn.respond(ok)  # the UAS core retransmitting its 2xx goes out through the transaction
    assert sender.statuses() == [100, 200, 200]
    transactions.receive(request("ACK", branch="z9hG4bK-ack", cseq_method="ACK", to_tag="x"), UDP)
    assert user.requests[-1][1] is None and user.requests[-1][0].method == "ACK"
    await asyncio.wait_for(txn.done.wait(), 30)  # Timer L


async def test_non_invite_server_replays_final_response_until_timer_j() -> None:
    transactions, sender, user = layer()
    transactions.receive(request("BYE"), UDP)
    txn = user.requests[0][1]
    assert txn is not None
    transactions.receive(request("BYE"), UDP)  # before any response: nothing to replay
    assert sender.responses == []
    txn.respond(make_response(txn.request, 200, "OK"))
    transactions.receive(request("BYE"), UDP)
    assert sender.statuses() == [200, 200] and len(user.requests) == 1
    await asyncio.wait_for(txn.done.wait(), 30)
    transactions.receive(request("BYE"), UDP)  # after Timer J it is a new request again
    assert len(user.requests) == 2


async def test_invite_client_retransmits_with_timer_a_and_times_out_with_timer_b() -> None:
    transactions, sender, _ = layer()
    invite = request(branch="z9hG4bK-client")
    txn = transactions.send_request(invite, UDP)
    response = await asyncio.wait_for(txn.next_response(), 30)
    assert response.status == 408 and txn.state == "terminated"
    assert 3 <= len(sender.requests) <= 8  # 1 + retransmissions at T1, 2T1, 4T1 ... within 64*T1


async def test_invite_client_acks_non_2xx_itself_and_hides_retransmissions() -> None:
    transactions, sender, user = layer()
    invite = request(branch="z9hG4bK-client")
    txn = transactions.send_request(invite, UDP)
    transactions.receive(make_response(invite, 180, "Ringing", to_tag="r"), UDP)
    assert (await txn.next_response()).status == 180
    sent = len(sender.requests)
    await asyncio.sleep(0.1)
    assert len(sender.requests) == sent  # a provisional stops Timer A
    busy = make_response(invite, 486, "Busy Here", to_tag="r")
    transactions.receive(busy, UDP)
    assert (await txn.next_response()).status == 486
    ack = sender.requests[-1]
    assert ack.method == "ACK" and ack.top_via.branch == "z9hG4bK-client" and ack.to_tag == "r"
    assert ack.cseq == (7, "ACK") and ack.uri == invite.uri
    transactions.receive(busy, UDP)  # retransmitted 486: ACK again, TU not told twice
    assert sender.requests[-1].method == "ACK" and txn.responses.empty()
    await asyncio.wait_for(txn.done.wait(), 30)  # Timer D
    assert user.stray == []


async def test_invite_client_passes_retransmitted_2xx_to_the_tu() -> None:
    transactions, _, _ = layer()
    invite = request(branch="z9hG4bK-client")
    txn = transactions.send_request(invite, UDP)
    ok = make_response(invite, 200, "OK", to_tag="r")
    transactions.receive(ok, UDP)
    transactions.receive(ok, UDP)
    assert [(await txn.next_response()).status for _ in range(2)] == [200, 200]
    assert txn.state == "accepted"


async def test_non_invite_client_timer_e_caps_at_t2_and_timer_f_times_out() -> None:
    transactions, sender, _ = layer()
    txn = transactions.send_request(request("BYE", branch="z9hG4bK-bye"), UDP)
    response = await asyncio.wait_for(txn.final_response(), 30)
    assert response.status == 408
    # 64*T1 = 0.64 s with intervals 0.01, 0.02, 0.04, 0.04, ... gives well over 6 sends.
    assert len(sender.requests) >= 6


async def test_non_invite_client_completes_on_final_response() -> None:
    transactions, sender, _ = layer()
    bye = request("BYE", branch="z9hG4bK-bye")
    txn = transactions.send_request(bye, TCP)
    transactions.receive(make_response(bye, 200, "OK"), TCP)
    assert (await txn.final_response()).status == 200
    await asyncio.wait_for(txn.done.wait(), 30)
    assert len(sender.requests) == 1  # no retransmission over TCP


async def test_transport_error_reaches_the_tu_as_503() -> None:
    transactions, sender, _ = layer()
    sender.fail = True
    txn = transactions.send_request(request("OPTIONS", branch="z9hG4bK-o"), TCP)
    assert (await txn.final_response()).status == 503
    assert txn.state == "terminated"


async def test_cancel_matches_its_invite_by_branch() -> None:
    transactions, _, user = layer()
    transactions.receive(request(branch="z9hG4bK-c"), UDP)
    transactions.receive(request("CANCEL", branch="z9hG4bK-c"), UDP)
    cancel, cancel_txn = user.requests[1]
    assert cancel.method == "CANCEL" and cancel_txn is not None
    assert transactions.find_invite_server(cancel) is user.requests[0][1]
    assert transactions.find_invite_server(request("CANCEL", branch="z9hG4bK-other")) is None


async def test_responses_without_a_transaction_are_stray() -> None:
    transactions, _, user = layer()
    transactions.receive(make_response(request(branch="z9hG4bK-none"), 200, "OK", to_tag="t"), UDP)
    assert len(user.stray) == 1


@pytest.mark.parametrize("branch", ["1234", "z9hG4bk-lowercase-is-not-the-cookie"])
async def test_rfc_2543_peers_are_matched_without_a_magic_cookie(branch: str) -> None:
    transactions, sender, user = layer()
    transactions.receive(request(branch=branch), UDP)
    transactions.receive(request(branch=branch), UDP)
    assert len(user.requests) == 1 and sender.statuses() == [100, 100]


async def test_a_bare_magic_cookie_branch_names_no_transaction() -> None:
    # RFC 4475 3.2.1: "branch=z9hG4bK" alone; matched the RFC 2543 way, so a different request with
    # the same empty identifier is a request of its own, and a real retransmission is still absorbed.
    transactions, _, user = layer()
    first = request(method="OPTIONS", branch="z9hG4bK")
    transactions.receive(first, UDP)
    transactions.receive(request(method="OPTIONS", branch="z9hG4bK"), UDP)
    other = request(method="OPTIONS", branch="z9hG4bK")
    other.headers.set("CSeq", "8 OPTIONS")
    transactions.receive(other, UDP)
    assert [r.cseq[0] for r, _ in user.requests] == [7, 8]
