"""User agent behaviour driven by a hand-written UDP peer and by a second UserAgent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.sip.conftest import OFFER, RawPeer, RecordingHandler, UaFactory, eventually, sip_text
from voicegate.internal.sip import CallFailed, SessionDescription, TimerSettings, UserAgent, build_offer

FAST = TimerSettings(t1=0.05, t2=0.2, t4=0.2, timer_d=0.5)


@pytest.fixture
async def peer() -> AsyncIterator[RawPeer]:
    opened = await RawPeer.open()
    yield opened
    opened.close()


async def establish(peer: RawPeer, ua: UserAgent, call_id: str = "call-1") -> str:
    """INVITE -> 200 -> ACK; returns the UA's To tag."""
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, call_id=call_id, body=OFFER), port)
    ok = await peer.response(200)
    tag = ok.to_tag
    assert tag
    peer.send(sip_text("ACK", peer.port, port, call_id=call_id, to_tag=tag, branch="z9hG4bK-ack1"), port)
    return tag


async def test_missing_ack_retransmits_200_then_sends_bye(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, timers=FAST)
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, body=OFFER), port)
    oks = 0
    while True:
        message = await peer.receive()
        if getattr(message, "status", None) == 200:
            oks += 1
        if getattr(message, "method", None) == "BYE":
            break
    assert oks >= 3  # 200 retransmitted (T1 doubling to T2) until 64*T1 passed without ACK
    assert handler.reasons == ["ack timeout"] and handler.confirmed_dialogs == []


async def test_reinvite_for_hold_is_answered_recvonly(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    port = ua.local_address().port
    tag = await establish(peer, ua)
    await eventually(lambda: len(handler.confirmed_dialogs) == 1, what="confirmed")
    hold = OFFER + "a=sendonly\r\n"
    peer.send(sip_text("INVITE", peer.port, port, cseq=2, to_tag=tag, body=hold), port)
    ok = await peer.response(200)
    answer = SessionDescription.parse(ok.body)
    assert answer.media[0].direction == "recvonly" and ok.headers.get("Contact")
    peer.send(sip_text("ACK", peer.port, port, cseq=2, to_tag=tag, branch="z9hG4bK-ack2"), port)
    assert len(handler.reinvites) == 1
    dialog = handler.confirmed_dialogs[0]
    assert dialog.remote_sdp is not None and dialog.remote_sdp.media[0].direction == "sendonly"
    peer.send(sip_text("BYE", peer.port, port, cseq=3, to_tag=tag), port)
    await peer.response(200)
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")


async def test_reinvite_without_common_codec_gets_488_and_keeps_the_call(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    port = ua.local_address().port
    tag = await establish(peer, ua)
    g729 = OFFER.replace("RTP/AVP 0 101", "RTP/AVP 18").replace("a=rtpmap:0 PCMU/8000", "a=rtpmap:18 G729/8000")
    peer.send(sip_text("INVITE", peer.port, port, cseq=2, to_tag=tag, body=g729), port)
    await peer.response(488)
    assert len(ua.dialogs) == 1 and handler.endings == []


@pytest.mark.parametrize("method", ["BYE", "INFO", "CANCEL"])
async def test_requests_for_unknown_dialogs_get_481(make_ua: UaFactory, peer: RawPeer, method: str) -> None:
    ua = await make_ua(RecordingHandler())
    port = ua.local_address().port
    peer.send(sip_text(method, peer.port, port, to_tag="nope" if method != "CANCEL" else ""), port)
    await peer.response(481)


async def test_ack_for_an_unknown_dialog_is_never_answered(make_ua: UaFactory, peer: RawPeer) -> None:
    ua = await make_ua(RecordingHandler())
    port = ua.local_address().port
    peer.send(sip_text("ACK", peer.port, port, to_tag="nope"), port)
    peer.send(sip_text("OPTIONS", peer.port, port, cseq=2), port)
    first = await peer.receive()
    assert getattr(first, "status", None) == 200 and first.cseq == (2, "OPTIONS")


@pytest.mark.parametrize(
    ("kwargs", "status", "header"),
    [
        ({"uri": "mailto:agent@example.com"}, 416, None),
        ({"version": "SIP/3.0"}, 505, None),
        ({"body": "hello", "content_type": "text/plain"}, 415, ("Accept", "application/sdp")),
        ({"extra": ("Require: precondition",)}, 420, ("Unsupported", "precondition")),
        ({"to_tag": "unknown", "body": OFFER}, 481, None),
    ],
)
async def test_invites_we_cannot_take_are_refused_per_rfc_3261_8_2(
    make_ua: UaFactory, peer: RawPeer, kwargs: dict[str, object], status: int, header: tuple[str, str] | None
) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, **kwargs), port)  # type: ignore[arg-type]
    response = await peer.response(status)
    if header:
        assert response.headers.get(header[0]) == header[1]
    assert handler.admitted == []


async def test_new_invites_are_rate_limited_per_source(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, invite_rate_per_min=1)
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, call_id="first", body=OFFER), port)
    await peer.response(200)
    peer.send(sip_text("INVITE", peer.port, port, call_id="second", branch="z9hG4bK-2", body=OFFER), port)
    busy = await peer.response(503)
    assert int(busy.headers.get("Retry-After") or "0") >= 1
    assert len(handler.admitted) == 1


async def test_same_invite_by_another_path_is_a_merged_request(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler(answer_delay=2)
    ua = await make_ua(handler)
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, body=OFFER), port)
    await peer.response(100)
    peer.send(sip_text("INVITE", peer.port, port, branch="z9hG4bK-other-path", body=OFFER), port)
    await peer.response(482)
    assert len(handler.admitted) == 1


async def test_bye_before_ack_ends_the_call_once(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    port = ua.local_address().port
    peer.send(sip_text("INVITE", peer.port, port, body=OFFER), port)
    tag = (await peer.response(200)).to_tag
    assert tag
    peer.send(sip_text("BYE", peer.port, port, cseq=2, to_tag=tag), port)
    await peer.response(200)
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")
    await asyncio.sleep(0.3)
    assert handler.reasons == ["bye"] and ua.dialogs == []


async def test_in_dialog_options_and_info_get_200(make_ua: UaFactory, peer: RawPeer) -> None:
    ua = await make_ua(RecordingHandler())
    port = ua.local_address().port
    tag = await establish(peer, ua)
    peer.send(sip_text("OPTIONS", peer.port, port, cseq=2, to_tag=tag), port)
    assert (await peer.response(200)).headers.get("Allow")
    peer.send(sip_text("INFO", peer.port, port, cseq=3, to_tag=tag), port)
    await peer.response(200)
    peer.send(sip_text("INFO", peer.port, port, cseq=1, to_tag=tag, branch="z9hG4bK-old"), port)
    await peer.response(500)  # CSeq went backwards


async def test_shutdown_hangs_up_answered_calls_and_refuses_new_ones(make_ua: UaFactory, peer: RawPeer) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    port = ua.local_address().port
    await establish(peer, ua)
    await eventually(lambda: len(handler.confirmed_dialogs) == 1, what="confirmed")

    async def answer_bye() -> None:
        bye = await peer.request("BYE")
        peer.send(
            f"SIP/2.0 200 OK\r\nVia: {bye.headers.get('Via')}\r\nFrom: {bye.headers.get('From')}\r\n"
            f"To: {bye.headers.get('To')}\r\nCall-ID: {bye.call_id}\r\nCSeq: {bye.headers.get('CSeq')}\r\n"
            "Content-Length: 0\r\n\r\n".encode(),
            port,
        )

    answering = asyncio.create_task(answer_bye())
    await ua.shutdown(timeout_s=10)
    await answering
    assert handler.reasons == ["shutdown"]


# ---- two user agents: our UAC against our UAS ------------------------------------------------------


async def test_uac_answers_a_digest_challenge_and_the_uas_sees_the_number(make_ua: UaFactory) -> None:
    callee = RecordingHandler()
    uas = await make_ua(callee, auth={"enabled": True, "users": {"trunk": "pw"}})
    caller = RecordingHandler()
    uac = await make_ua(caller)
    target = f"sip:agent@127.0.0.1:{uas.local_address().port}"
    call = await uac.call(target, build_offer("127.0.0.1", 40010), timeout_s=20, credentials=("trunk", "pw"),
                          from_user="+15551234567")
    assert call.answer is not None
    await eventually(lambda: len(callee.confirmed_dialogs) == 1, what="callee confirmed")
    identity = callee.answered[0].identity
    assert identity.resource_id == "sip:trunk" and identity.reason == "digest authenticated"  # the account
    await uac.hangup(call.dialog)
    await eventually(lambda: callee.reasons == ["bye"], what="callee ended(bye)")
    assert caller.reasons == ["hangup"]


@pytest.mark.parametrize(("realm", "answered"), [("voicegate", True), ("provider.example", False), ("", False)])
async def test_the_configured_account_answers_only_its_providers_realm(
        make_ua: UaFactory, realm: str, answered: bool) -> None:
    """sip.outbound's password is the provider's: a callee that challenges in another realm (any host a
    POST /calls names), or any callee when neither a realm nor a proxy is configured, never gets a
    digest of it to crack or replay."""
    callee = RecordingHandler()
    uas = await make_ua(callee, auth={"enabled": True, "users": {"trunk": "pw"}})  # realm "voicegate"
    uac = await make_ua(RecordingHandler(), outbound={"username": "trunk", "password": "pw", "realm": realm})
    target = f"sip:agent@127.0.0.1:{uas.local_address().port}"
    if answered:
        call = await uac.call(target, build_offer("127.0.0.1", 40010), timeout_s=20)
        assert call.answer is not None
        await uac.hangup(call.dialog)
        return
    with pytest.raises(CallFailed) as failed:
        await uac.call(target, build_offer("127.0.0.1", 40010), timeout_s=20)
    assert failed.value.status == 401 and "withheld" in str(failed.value)
    assert callee.answered == []


@pytest.mark.parametrize(("credentials", "status"), [(None, 401), (("trunk", "wrong"), 403)])
async def test_uac_without_valid_credentials_fails(
    make_ua: UaFactory, credentials: tuple[str, str] | None, status: int
) -> None:
    uas = await make_ua(RecordingHandler(), auth={"enabled": True, "users": {"trunk": "pw"}})
    uac = await make_ua(RecordingHandler())
    with pytest.raises(CallFailed) as failed:
        await uac.call(f"sip:agent@127.0.0.1:{uas.local_address().port}", build_offer("127.0.0.1", 40010),
                       timeout_s=20, credentials=credentials)
    assert failed.value.status == status


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_callee_hangup_reaches_the_callers_handler(make_ua: UaFactory, transport: str) -> None:
    callee, caller = RecordingHandler(), RecordingHandler()
    uas = await make_ua(callee)
    uac = await make_ua(caller)
    call = await uac.call(f"sip:agent@127.0.0.1:{uas.local_address().port};transport={transport}",
                          build_offer("127.0.0.1", 40010), timeout_s=20)
    await eventually(lambda: len(callee.confirmed_dialogs) == 1, what="callee confirmed")
    assert callee.answered[0].source.transport == transport
    await uas.hangup(callee.confirmed_dialogs[0])
    await eventually(lambda: caller.reasons == ["bye"], what="caller ended(bye)")
    assert callee.reasons == ["hangup"] and call.dialog.state == "terminated"
