"""Which answer a request gets before any call flow runs: method (405/501), Accept (406), and an
RFC 2543 caller (no From tag) that still gets a whole call, hang-up included."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.sip.conftest import OFFER, RawPeer, RecordingHandler, UaFactory, eventually, sip_text
from voicegate.internal.sip import TimerSettings
from voicegate.internal.sip.capabilities import KNOWN_METHODS, accepts, method_refusal
from voicegate.internal.sip.headers import Headers
from voicegate.internal.sip.stack import ALLOWED_METHODS

FAST = TimerSettings(t1=0.05, t2=0.2, t4=0.2, timer_d=0.5)


@pytest.fixture
async def peer() -> AsyncIterator[RawPeer]:
    opened = await RawPeer.open()
    yield opened
    opened.close()


def test_known_methods_we_do_not_allow_get_405_and_unknown_ones_501() -> None:
    assert method_refusal("INVITE", ALLOWED_METHODS) is None
    assert method_refusal("REGISTER", ALLOWED_METHODS) == (405, "Method Not Allowed")
    assert method_refusal("NEWMETHOD", ALLOWED_METHODS) == (501, "Not Implemented")
    assert method_refusal("invite", ALLOWED_METHODS) == (501, "Not Implemented")  # names are case-sensitive
    assert set(ALLOWED_METHODS) <= KNOWN_METHODS


@pytest.mark.parametrize(
    ("accept", "ok"),
    [
        (None, True),
        ("application/sdp", True),
        ("text/plain, application/sdp;level=1", True),
        ("application/*", True),
        ("*/*", True),
        ("text/nobodyKnowsThis", False),
        ("application/sdp;q=0, text/plain", False),
        ("", False),  # RFC 3261 20.1: an empty Accept accepts nothing
    ],
)
def test_accept_decides_whether_sdp_may_be_sent(accept: str | None, ok: bool) -> None:
    headers = Headers([("Accept", accept)] if accept is not None else [])
    assert accepts(headers, "application/sdp") is ok


async def test_invite_refusing_sdp_in_accept_gets_406_and_no_call(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, body=OFFER, extra=("Accept: text/html",)), port)
    refused = await peer.response(406)
    assert (refused.headers.get("Warning") or "").startswith("399 ")
    assert handler.admitted == []


async def test_unknown_method_gets_501_with_allow(make_ua: UaFactory, peer: RawPeer) -> None:
    ua = await make_ua(RecordingHandler())
    port = ua.local_address().port
    peer.send(sip_text("FROBNICATE", peer.port, port), port)
    refused = await peer.response(501)
    assert refused.headers.get("Allow") == ", ".join(ALLOWED_METHODS)


def _rfc2543(method: str, peer_port: int, ua_port: int, *, to_tag: str = "", cseq: int = 1, body: str = "") -> bytes:
    """A request the RFC 2543 way: no From tag, no branch cookie, no Contact, no Max-Forwards."""
    to = f"<sip:agent@127.0.0.1:{ua_port}>" + (f";tag={to_tag}" if to_tag else "")
    lines = [
        f"{method} sip:agent@127.0.0.1:{ua_port} SIP/2.0",
        f"Via: SIP/2.0/UDP 127.0.0.1:{peer_port}",
        f"From: <sip:old@127.0.0.1:{peer_port}>",
        f"To: {to}",
        "Call-ID: rfc2543-call",
        f"CSeq: {cseq} {method}",
    ]
    if body:
        lines.append("Content-Type: application/sdp")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()


async def test_rfc_2543_caller_without_from_tag_is_answered_and_can_hang_up(
    make_ua: UaFactory, peer: RawPeer
) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, timers=FAST)
    port = ua.local_address().port
    peer.send(_rfc2543("INVITE", peer.port, port, body=OFFER), port)
    ok = await peer.response(200)
    tag = ok.to_tag
    assert tag and ok.from_tag is None  # our To tag is added; we invent none for the caller
    peer.send(_rfc2543("ACK", peer.port, port, to_tag=tag), port)
    await eventually(lambda: len(handler.confirmed_dialogs) == 1, what="confirmed")
    assert handler.confirmed_dialogs[0].remote_tag == ""
    peer.send(_rfc2543("BYE", peer.port, port, to_tag=tag, cseq=2), port)
    await peer.response(200)
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")


async def test_we_hang_up_an_rfc_2543_caller_without_inventing_its_tag(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, timers=FAST)
    port = ua.local_address().port
    peer.send(_rfc2543("INVITE", peer.port, port, body=OFFER), port)
    tag = (await peer.response(200)).to_tag
    assert tag
    peer.send(_rfc2543("ACK", peer.port, port, to_tag=tag), port)
    await eventually(lambda: len(handler.confirmed_dialogs) == 1, what="confirmed")
    await ua.hangup(handler.confirmed_dialogs[0])
    bye = await peer.request("BYE")
    assert bye.to_tag is None and bye.from_tag == tag  # to the From URI: the INVITE had no Contact
