"""Session timers, UPDATE, offerless re-INVITE, early media and 100rel/PRACK against a real sipp.

Intervals are a few seconds (sip.min_se_s lowered to 2) so refreshes and expiries happen within a
test; each scenario outlasts the interval at least once, so a timer that was not refreshed would
have ended the call and failed the scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.sip.conftest import SCENARIOS, RecordingHandler, UaFactory, eventually, free_port, run_sipp
from voicegate.internal.sip import CallFailed, Dialog, SessionDescription, TimerSettings, build_offer

pytestmark = pytest.mark.slow

SHORT_TIMERS = {"min_se_s": 2}


@dataclass
class EarlyMediaHandler(RecordingHandler):
    """Also records the optional callbacks: early media started, an answer that came in an ACK."""

    early: list[tuple[Dialog, float]] = field(default_factory=list)
    confirmed_at: list[float] = field(default_factory=list)
    acked_answers: list[SessionDescription] = field(default_factory=list)

    async def early_media(self, dialog: Dialog) -> None:
        self.early.append((dialog, time.monotonic()))

    async def confirmed(self, dialog: Dialog) -> None:
        self.confirmed_at.append(time.monotonic())
        await super().confirmed(dialog)

    async def answer_in_ack(self, dialog: Dialog, answer: SessionDescription) -> None:
        self.acked_answers.append(answer)


def target(ua: object) -> str:
    return f"127.0.0.1:{ua.local_address().port}"  # type: ignore[attr-defined]


def rendered(tmp_path: Path, template: str, **values: str) -> Path:
    text = (SCENARIOS / template).read_text()
    for key, value in values.items():
        text = text.replace(key, value)
    path = tmp_path / f"rendered_{template}"
    path.write_text(text)
    return path


# ---- the UA answering: timers it negotiates, refreshes it takes or sends ---------------------------


async def test_callers_refresh_by_reinvite_and_update_keep_the_call_past_its_interval(
    make_ua: UaFactory, tmp_path: Path
) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, **SHORT_TIMERS)
    started = time.monotonic()
    (await run_sipp(tmp_path, "uac_timer_peer_refreshes.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")
    assert time.monotonic() - started > 5  # past the 4 s an unrefreshed 6 s session lasts: the refreshes kept it
    assert len(handler.reinvites) == 1  # the refresh re-INVITE carried SDP; the UPDATE did not ask


@pytest.mark.parametrize("method", ["update", "invite"])
async def test_we_refresh_when_the_caller_leaves_it_to_us(make_ua: UaFactory, tmp_path: Path, method: str) -> None:
    # The caller allows UPDATE in one case (a body-less refresh) and not in the other (re-INVITE with our SDP).
    handler = RecordingHandler()
    ua = await make_ua(handler, **SHORT_TIMERS)
    (await run_sipp(tmp_path, f"uac_timer_we_refresh_{method}.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")


async def test_refresh_answered_481_makes_us_hang_up(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, **SHORT_TIMERS)
    (await run_sipp(tmp_path, "uac_timer_refresh_481.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["session refresh failed"], what="ended(session refresh failed)")


async def test_refresh_nobody_answers_makes_us_hang_up(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler()
    fast = TimerSettings(t1=0.05, t2=0.4, t4=0.5, timer_d=1.0)  # the UPDATE transaction times out in 3.2 s
    ua = await make_ua(handler, timers=fast, **SHORT_TIMERS)
    (await run_sipp(tmp_path, "uac_timer_refresh_unanswered.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["session refresh failed"], what="ended(session refresh failed)")


async def test_caller_that_never_refreshes_is_hung_up_before_the_interval_ends(
    make_ua: UaFactory, tmp_path: Path
) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, **SHORT_TIMERS)
    (await run_sipp(tmp_path, "uac_timer_expires.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["session expired"], what="ended(session expired)")
    dialog = handler.confirmed_dialogs[0]
    assert dialog.state == "terminated"


async def test_session_expires_below_our_min_se_gets_422_naming_it(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, min_se_s=5, session_expires_s=60)
    scenario = rendered(
        tmp_path, "uac_expect_final.xml", EXPECTED_STATUS="422", EXPECTED_REGEXP="Min-SE: 5",
        EXTRA_HEADER="Supported: timer\n      Session-Expires: 2",
        OFFER_MEDIA="m=audio [media_port] RTP/AVP 0\n      a=rtpmap:0 PCMU/8000",
    )
    (await run_sipp(tmp_path, scenario, target(ua))).check()
    assert handler.admitted == []  # refused before ringing or admission


# ---- the UA calling: 422 retry, then it refreshes ------------------------------------------------


async def test_outbound_422_is_retried_with_the_named_min_se_and_we_refresh(
    make_ua: UaFactory, tmp_path: Path
) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, min_se_s=2, session_expires_s=2)
    port = free_port()
    sipp = asyncio.create_task(run_sipp(tmp_path, "uas_timer_422.xml", None, local_port=port))
    await asyncio.sleep(0.5)  # let sipp bind before we call it
    call = await ua.call(f"sip:callee@127.0.0.1:{port}", build_offer("127.0.0.1", 40002), timeout_s=20)
    leg = ua.calls.get(call.dialog)
    assert leg is not None and leg.session_timer is not None
    assert leg.session_timer.timer is not None and leg.session_timer.timer.interval_s == 3
    await eventually(lambda: leg.session_timer is not None and leg.session_timer.refreshes_sent >= 1,
                     what="our refresh UPDATE answered")
    await ua.hangup(call.dialog)
    (await sipp).check()
    assert handler.reasons == ["hangup"]


# ---- UPDATE with SDP and the offerless re-INVITE ---------------------------------------------------


async def test_update_with_sdp_is_answered_in_its_200(make_ua: UaFactory, tmp_path: Path) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler)
    (await run_sipp(tmp_path, "uac_update_with_sdp.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")
    assert len(handler.reinvites) == 1
    offer = handler.reinvites[0]
    assert offer is not None and offer.media[0].direction == "sendonly"


async def test_reinvite_without_sdp_gets_our_offer_and_takes_the_answer_from_the_ack(
    make_ua: UaFactory, tmp_path: Path
) -> None:
    handler = EarlyMediaHandler()
    ua = await make_ua(handler)
    (await run_sipp(tmp_path, "uac_reinvite_without_sdp.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")
    assert handler.reinvites == []  # our media did not change: the handler was not asked for an answer
    assert len(handler.acked_answers) == 1 and handler.acked_answers[0].media[0].direction == "recvonly"
    assert handler.confirmed_dialogs[0].remote_sdp is handler.acked_answers[0]


# ---- early media and reliable provisionals ---------------------------------------------------------


async def test_early_media_sends_183_with_sdp_and_starts_media_before_the_200(
    make_ua: UaFactory, tmp_path: Path
) -> None:
    handler = EarlyMediaHandler()
    ua = await make_ua(handler, early_media=True, ring_ms=800)
    (await run_sipp(tmp_path, "uac_early_media.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")
    assert len(handler.early) == 1 and len(handler.confirmed_at) == 1
    assert handler.confirmed_at[0] - handler.early[0][1] >= 0.7  # ring_ms of early media before the 200


async def test_required_100rel_makes_the_183_reliable_and_its_prack_gets_200(
    make_ua: UaFactory, tmp_path: Path
) -> None:
    handler = EarlyMediaHandler()
    ua = await make_ua(handler, early_media=True, ring_ms=200)
    (await run_sipp(tmp_path, "uac_100rel_prack.xml", target(ua))).check()
    await eventually(lambda: handler.reasons == ["bye"], what="ended(bye)")
    assert len(handler.early) == 1


async def test_reliable_183_without_prack_is_retransmitted_then_given_up_with_500(
    make_ua: UaFactory, tmp_path: Path
) -> None:
    handler = EarlyMediaHandler()
    timers = TimerSettings(t1=0.05, t2=0.4, t4=0.5, timer_d=1.0)  # 64*T1 = 3.2 s
    ua = await make_ua(handler, timers=timers, early_media=True)
    result = await run_sipp(tmp_path, "uac_100rel_no_prack.xml", target(ua))
    result.check()
    assert result.output.count("SIP/2.0 183 Session Progress") >= 4  # T1, 2*T1, 4*T1... until we gave up
    await eventually(lambda: handler.reasons == ["no prack"], what="ended(no prack)")
    assert handler.early == [] and handler.confirmed_at == []


async def test_call_to_a_peer_refusing_with_422_and_no_min_se_fails(make_ua: UaFactory, tmp_path: Path) -> None:
    ua = await make_ua(RecordingHandler(), min_se_s=2, session_expires_s=2)
    port = free_port()
    scenario = rendered(tmp_path, "uas_timer_422.xml", **{"Min-SE: 3": "X-No-Min-SE: 1"})
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, None, local_port=port, timeout=12))
    await asyncio.sleep(0.5)
    with pytest.raises(CallFailed) as failed:
        await ua.call(f"sip:callee@127.0.0.1:{port}", build_offer("127.0.0.1", 40002), timeout_s=5)
    assert failed.value.status == 422  # nothing larger to ask for: retrying would loop
    sipp.cancel()  # it waits for a retry that never comes; cancelling kills it
    with contextlib.suppress(asyncio.CancelledError):
        await sipp
