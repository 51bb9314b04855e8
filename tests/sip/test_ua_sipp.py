"""The user agent against a real SIP peer: sipp calling it, and it calling sipp, on 127.0.0.1."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.sip.conftest import SCENARIOS, RecordingHandler, UaFactory, eventually, free_port, run_sipp
from voicegate.internal.sip import CallFailed, Rejection, build_offer

pytestmark = pytest.mark.slow

PCMU_OFFER = "m=audio [media_port] RTP/AVP 0 101\n      a=rtpmap:0 PCMU/8000\n      a=rtpmap:101 telephone-event/8000"
G729_OFFER = "m=audio [media_port] RTP/AVP 18\n      a=rtpmap:18 G729/8000"
BYE_TAIL = """<pause milliseconds="200"/>
  <send retrans="500">
    <![CDATA[

      BYE [next_url] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: "Sam" <sip:+15551234567@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: <sip:agent@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 3 BYE
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
  <recv response="200"/>"""


def render(tmp_path: Path, template: str, **values: str) -> Path:
    """A copy of a scenario template with its placeholders replaced (sipp cannot template these)."""
    text = (SCENARIOS / template).read_text()
    defaults = {"EXTRA_HEADER": "X-Test: 1", "OFFER_MEDIA": PCMU_OFFER, "EXPECTED_REGEXP": "SIP/2.0"}
    for key, value in {**defaults, **values}.items():
        text = text.replace(key, value)
    path = tmp_path / f"rendered_{template}"
    path.write_text(text)
    return path


def target(ua: object) -> str:
    return f"127.0.0.1:{ua.local_address().port}"  # type: ignore[attr-defined]


@pytest.mark.parametrize("transport", ["u1", "t1"])
async def test_call_is_answered_confirmed_and_ended_by_bye(make_ua: UaFactory, tmp_path: Path, transport: str) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    (await run_sipp(tmp_path, "uac_call.xml", target(ua), transport=transport)).check()
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")
    assert len(handler.answered) == 1 and len(handler.confirmed_dialogs) == 1
    call = handler.answered[0]
    assert call.source.transport == ("udp" if transport == "u1" else "tcp")
    assert call.offer is not None and call.offer.media[0].formats == ["8", "0", "101"]
    assert call.identity.is_anonymous and call.identity.reason == "untrusted source"
    assert ua.dialogs == []


async def test_trusted_peer_call_carries_the_callers_number(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, trusted_peers=["127.0.0.0/8"])
    (await run_sipp(tmp_path, "uac_call.xml", target(ua))).check()
    assert handler.answered[0].identity.resource_id == "sip:+15551234567"


@pytest.mark.parametrize("transport", ["u1", "t1"])
async def test_cancel_while_ringing_gets_487(make_ua: UaFactory, tmp_path: Path, transport: str) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, ring_ms=5000)
    (await run_sipp(tmp_path, "uac_cancel.xml", target(ua), transport=transport)).check()
    assert handler.answered == []  # cancelled during ringing: the handler never had to answer
    assert handler.endings == []
    await eventually(lambda: ua.dialogs == [], what="no dialogs left")


async def test_cancel_while_answering_ends_the_call_as_cancelled(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler(answer_delay=10)
    ua = await make_ua(handler, ring_ms=1)
    (await run_sipp(tmp_path, "uac_cancel.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["cancelled"], what="ended(cancelled)")


async def test_options_lists_what_we_support(make_ua: UaFactory, tmp_path: Path) -> None:
    ua = await make_ua(RecordingHandler())
    scenario = render(
        tmp_path, "out_of_dialog.xml", METHOD="OPTIONS", CSEQ_LINE="CSeq: 1 OPTIONS", EXPECTED_STATUS="200",
        EXPECTED_REGEXP="Allow: INVITE, ACK, BYE, CANCEL, OPTIONS, INFO, UPDATE, PRACK, NOTIFY"
                        ".*Accept: application/sdp",
    )
    (await run_sipp(tmp_path, scenario, target(ua))).check()


async def test_unsupported_method_gets_405_with_allow(make_ua: UaFactory, tmp_path: Path) -> None:
    ua = await make_ua(RecordingHandler())
    scenario = render(
        tmp_path, "out_of_dialog.xml", METHOD="SUBSCRIBE", CSEQ_LINE="CSeq: 1 SUBSCRIBE", EXPECTED_STATUS="405",
        EXTRA_HEADER="Event: presence", EXPECTED_REGEXP="Allow: INVITE",
    )
    (await run_sipp(tmp_path, scenario, target(ua))).check()


async def test_malformed_request_gets_400_with_the_reason(make_ua: UaFactory, tmp_path: Path) -> None:
    ua = await make_ua(RecordingHandler())
    scenario = render(
        tmp_path, "out_of_dialog.xml", METHOD="OPTIONS", CSEQ_LINE="CSeq: 1 OPTIONS", EXPECTED_STATUS="400",
        EXTRA_HEADER="Route: <sip:proxy.example.com;lr", EXPECTED_REGEXP="400 Bad Request .bad Route: ",
    )
    (await run_sipp(tmp_path, scenario, target(ua))).check()


async def test_oversized_datagram_is_refused_with_513(make_ua: UaFactory, tmp_path: Path) -> None:
    ua = await make_ua(RecordingHandler(), max_message_bytes=1024)
    scenario = render(
        tmp_path, "out_of_dialog.xml", METHOD="OPTIONS", CSEQ_LINE="CSeq: 1 OPTIONS", EXPECTED_STATUS="513",
        EXTRA_HEADER="X-Padding: " + "x" * 2000,
    )
    (await run_sipp(tmp_path, scenario, target(ua))).check()


async def test_offer_without_a_common_codec_gets_488(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    scenario = render(tmp_path, "uac_expect_final.xml", EXPECTED_STATUS="488", OFFER_MEDIA=G729_OFFER)
    (await run_sipp(tmp_path, scenario, target(ua))).check()
    await eventually(lambda: handler.reasons == ["no common codec"], what="ended(no common codec)")


async def test_admission_rejection_gets_503_with_retry_after(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler(rejection=Rejection(503, "Service Unavailable", {"Retry-After": "7"}))
    ua = await make_ua(handler)
    scenario = render(tmp_path, "uac_expect_final.xml", EXPECTED_STATUS="503", EXPECTED_REGEXP="Retry-After: 7")
    (await run_sipp(tmp_path, scenario, target(ua))).check()
    assert len(handler.admitted) == 1 and handler.answered == [] and handler.endings == []


async def test_unsupported_require_gets_420(make_ua: UaFactory, tmp_path: Path) -> None:
    ua = await make_ua(RecordingHandler())
    scenario = render(
        tmp_path, "uac_expect_final.xml", EXPECTED_STATUS="420", EXTRA_HEADER="Require: 100rel, foo",
        EXPECTED_REGEXP="Unsupported: foo\r",  # 100rel we support; only foo is unknown
    )
    (await run_sipp(tmp_path, scenario, target(ua))).check()


async def test_retransmitted_invite_creates_one_call(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler(answer_delay=1.0)
    ua = await make_ua(handler)
    (await run_sipp(tmp_path, "uac_retransmit.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")
    assert len(handler.admitted) == 1 and len(handler.answered) == 1


@pytest.mark.parametrize("transport", ["u1", "t1"])
async def test_server_side_hangup_sends_bye(make_ua: UaFactory, tmp_path: Path, transport: str) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    sipp = asyncio.create_task(run_sipp(tmp_path, "uac_wait_bye.xml", target(ua), transport=transport))
    await eventually(lambda: len(handler.confirmed_dialogs) == 1, what="confirmed")
    await ua.hangup(handler.confirmed_dialogs[0])
    (await sipp).check()
    assert handler.reasons == ["hangup"]


async def test_digest_challenge_with_the_right_password_is_answered(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler()
    # sipp answers only the first challenge and knows only MD5.
    ua = await make_ua(
        handler, auth={"enabled": True, "users": {"alice": "s3cret"}, "realm": "voicegate.test"},
        digest_algorithms=("MD5", "SHA-256"),
    )
    scenario = render(
        tmp_path, "uac_auth.xml", USERNAME="alice", PASSWORD="s3cret", FINAL_STATUS="200", ACK_BRANCH="[branch]",
        **{"<!-- TAIL -->": BYE_TAIL},
    )
    (await run_sipp(tmp_path, scenario, target(ua))).check()
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")
    identity = handler.answered[0].identity
    assert identity.resource_id == "sip:alice" and identity.reason == "digest authenticated"  # the account


async def test_digest_challenge_with_a_wrong_password_gets_403(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, auth={"enabled": True, "users": {"alice": "s3cret"}}, digest_algorithms=("MD5",))
    scenario = render(
        tmp_path, "uac_auth.xml", USERNAME="alice", PASSWORD="guess", FINAL_STATUS="403",
        ACK_BRANCH="z9hG4bK-auth2-[call_id]",
    )
    (await run_sipp(tmp_path, scenario, target(ua))).check()
    assert handler.admitted == []


# ---- the UA as caller -----------------------------------------------------------------------------


async def start_uas(tmp_path: Path, scenario: str, transport: str = "u1") -> tuple[asyncio.Task[object], int]:
    port = free_port()
    task: asyncio.Task[object] = asyncio.create_task(
        run_sipp(tmp_path, scenario, None, local_port=port, transport=transport)
    )
    await asyncio.sleep(0.5)  # let sipp bind before we call it
    return task, port


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_outbound_call_is_answered_and_hung_up(make_ua: UaFactory, tmp_path: Path, transport: str) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    sipp, port = await start_uas(tmp_path, "uas_answer.xml", "u1" if transport == "udp" else "t1")
    suffix = ";transport=tcp" if transport == "tcp" else ""
    call = await ua.call(f"sip:callee@127.0.0.1:{port}{suffix}", build_offer("127.0.0.1", 40002), timeout_s=20)
    assert call.answer is not None and call.answer.media[0].formats == ["8", "101"]
    assert call.dialog.state == "confirmed" and call.dialog.is_caller
    await ua.hangup(call.dialog)
    result = await sipp
    result.check()  # type: ignore[attr-defined]
    assert handler.reasons == ["hangup"]


async def test_outbound_call_to_a_busy_callee_fails_with_486(make_ua: UaFactory, tmp_path: Path) -> None:
    ua = await make_ua(RecordingHandler())
    sipp, port = await start_uas(tmp_path, "uas_busy.xml")
    with pytest.raises(CallFailed) as failed:
        await ua.call(f"sip:callee@127.0.0.1:{port}", build_offer("127.0.0.1", 40002), timeout_s=20)
    assert failed.value.status == 486
    (await sipp).check()  # type: ignore[attr-defined]  # sipp saw the ACK for the 486


async def test_outbound_call_timeout_cancels_the_invite(make_ua: UaFactory, tmp_path: Path) -> None:
    ua = await make_ua(RecordingHandler())
    sipp, port = await start_uas(tmp_path, "uas_ring_forever.xml")
    with pytest.raises(CallFailed) as failed:
        await ua.call(f"sip:callee@127.0.0.1:{port}", build_offer("127.0.0.1", 40002), timeout_s=1.5)
    assert failed.value.status == 408
    (await sipp).check()  # type: ignore[attr-defined]  # sipp got the CANCEL and our ACK for its 487
