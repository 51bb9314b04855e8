"""100rel, UPDATE and session timers in the corners sipp scenarios do not reach, with a hand-driven UDP peer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.sip.conftest import OFFER, RawPeer, RecordingHandler, UaFactory, eventually, sip_text


@pytest.fixture
async def peer() -> AsyncIterator[RawPeer]:
    opened = await RawPeer.open()
    yield opened
    opened.close()


async def test_required_100rel_makes_the_180_reliable_and_only_its_own_prack_is_accepted(
    make_ua: UaFactory, peer: RawPeer
) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, ring_ms=300)
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, body=OFFER, extra=("Require: 100rel",)), port)
    ringing = await peer.response(180)
    assert ringing.headers.get("Require") == "100rel"
    rseq = int(ringing.headers.get("RSeq") or "0")
    assert 0 < rseq < 2**31
    tag = ringing.to_tag
    assert tag
    wrong = sip_text("PRACK", peer.port, port, cseq=2, to_tag=tag, extra=(f"RAck: {rseq + 1} 1 INVITE",))
    peer.send(wrong, port)
    await peer.response(481)  # names a provisional we never sent
    right = sip_text("PRACK", peer.port, port, cseq=3, to_tag=tag, extra=(f"RAck: {rseq} 1 INVITE",))
    peer.send(right, port)
    prack_ok = await peer.response(200)
    assert prack_ok.cseq == (3, "PRACK")
    ok = await peer.response(200)
    assert ok.cseq == (1, "INVITE") and ok.body  # the 180 had no SDP, so the 200 carries the answer
    assert "100rel" in (ok.headers.get("Supported") or "") and "PRACK" in (ok.headers.get("Allow") or "")


async def test_without_100rel_the_180_is_an_ordinary_one(make_ua: UaFactory, peer: RawPeer) -> None:
    ua = await make_ua(RecordingHandler(), ring_ms=100)
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, body=OFFER, extra=("Supported: 100rel",)), port)
    ringing = await peer.response(180)
    assert ringing.headers.get("RSeq") is None  # Supported alone makes only a 183 with SDP reliable
    await peer.response(200)


async def test_refresh_update_below_min_se_gets_422_and_the_call_goes_on(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, min_se_s=60, session_expires_s=120)
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, body=OFFER, extra=("Supported: timer",)), port)
    ok = await peer.response(200)
    assert ok.headers.get("Session-Expires") == "120;refresher=uas" and ok.headers.get("Require") == "timer"
    tag = ok.to_tag
    assert tag
    peer.send(sip_text("ACK", peer.port, port, to_tag=tag, branch="z9hG4bK-ack1"), port)
    short = sip_text("UPDATE", peer.port, port, cseq=2, to_tag=tag, extra=("Supported: timer", "Session-Expires: 30"))
    peer.send(short, port)
    refused = await peer.response(422)
    assert refused.headers.get("Min-SE") == "60"
    good = sip_text("UPDATE", peer.port, port, cseq=3, to_tag=tag,
                    extra=("Supported: timer", "Session-Expires: 90;refresher=uac"))
    peer.send(good, port)
    accepted = await peer.response(200)
    assert accepted.headers.get("Session-Expires") == "90;refresher=uac" and not accepted.body
    leg = ua.calls.legs()[0]
    assert leg.session_timer is not None and leg.session_timer.timer is not None
    assert leg.session_timer.timer.interval_s == 90 and not leg.session_timer.timer.we_refresh
    assert handler.reasons == []


async def test_update_for_an_unknown_dialog_gets_481(make_ua: UaFactory, peer: RawPeer) -> None:
    ua = await make_ua(RecordingHandler())
    port = ua.local_address().port
    peer.send(sip_text("UPDATE", peer.port, port, cseq=2, to_tag="nobody"), port)
    response = await peer.response(481)
    assert response.cseq == (2, "UPDATE")


async def test_unreadable_session_expires_gets_400_naming_it(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, body=OFFER, extra=("Session-Expires: soon",)), port)
    refused = await peer.response(400)
    assert "Session-Expires" in refused.reason
    assert handler.admitted == []
    await eventually(lambda: ua.dialogs == [], what="no dialog left")
