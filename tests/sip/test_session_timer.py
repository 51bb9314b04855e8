"""RFC 4028 session-timer policy and RFC 3262 RAck parsing, without sockets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from voicegate.internal.config.sections import SipConfig
from voicegate.internal.sip.headers import Headers
from voicegate.internal.sip.reliable import RAck
from voicegate.internal.sip.session_timer import (
    SessionExpires,
    SessionTimer,
    SessionTimerError,
    TooSmall,
    UasDecision,
    negotiate_as_uas,
    peer_allows_update,
    retry_after_422,
    timer_from_uac_response,
    uac_request_headers,
)


def headers(**values: str) -> Headers:
    return Headers((name.replace("_", "-"), value) for name, value in values.items())


def uas(request: Headers, session_expires_s: int = 1800, min_se_s: int = 90) -> UasDecision | TooSmall:
    return negotiate_as_uas(request, session_expires_s=session_expires_s, min_se_s=min_se_s)


def test_session_expires_parses_delta_and_refresher_and_serialises_back() -> None:
    parsed = SessionExpires.parse("1800 ; refresher=UAC")
    assert parsed == SessionExpires(1800, "uac")
    assert parsed.serialise() == "1800;refresher=uac"
    assert SessionExpires.parse("90").serialise() == "90"


@pytest.mark.parametrize("value", ["", "soon", "-5", "0", "90;refresher=proxy"])
def test_unreadable_session_expires_is_an_error_naming_the_value(value: str) -> None:
    with pytest.raises(SessionTimerError, match=r"Session-Expires|refresher"):
        SessionExpires.parse(value)


def test_refresh_at_half_the_interval_and_bye_before_it_ends() -> None:
    assert SessionTimer(1800, we_refresh=True).refresh_after_s == 900
    assert SessionTimer(1800, we_refresh=False).expire_after_s == 1800 - 32  # min(32, 600)
    assert SessionTimer(90, we_refresh=False).expire_after_s == 60  # min(32, 30)


def test_caller_asking_below_our_min_se_gets_422_with_our_min_se() -> None:
    decision = uas(headers(Supported="timer", Session_Expires="60"))
    assert decision == TooSmall(90)
    assert decision.headers() == {"Min-SE": "90"}


def test_caller_that_chose_itself_as_refresher_refreshes() -> None:
    decision = uas(headers(Supported="timer", Session_Expires="600;refresher=uac"))
    assert isinstance(decision, UasDecision)
    assert decision.timer == SessionTimer(600, we_refresh=False)
    assert decision.response_headers == {"Session-Expires": "600;refresher=uac", "Require": "timer"}


def test_when_the_caller_leaves_the_choice_we_refresh_and_shorten_to_our_interval() -> None:
    decision = uas(headers(Supported="timer", Session_Expires="7200"), session_expires_s=1800)
    assert isinstance(decision, UasDecision)
    assert decision.timer == SessionTimer(1800, we_refresh=True)
    assert decision.response_headers["Session-Expires"] == "1800;refresher=uas"


def test_we_never_shorten_below_the_min_se_the_caller_names() -> None:
    decision = uas(headers(Supported="timer", Session_Expires="7200", Min_SE="3600"), session_expires_s=1800)
    assert isinstance(decision, UasDecision) and decision.timer == SessionTimer(3600, we_refresh=True)


def test_caller_without_timer_support_gets_a_timer_we_refresh_and_no_require() -> None:
    decision = uas(headers(), session_expires_s=1800)
    assert isinstance(decision, UasDecision)
    assert decision.timer == SessionTimer(1800, we_refresh=True)
    assert decision.response_headers == {"Session-Expires": "1800;refresher=uas"}


def test_proxy_inserted_short_interval_is_raised_not_refused() -> None:
    # No Supported: timer means the caller could not retry after a 422.
    decision = uas(headers(Session_Expires="30;refresher=uac"))
    assert isinstance(decision, UasDecision) and decision.timer == SessionTimer(90, we_refresh=True)


def test_timers_off_means_no_timer_unless_the_caller_asks_for_one() -> None:
    assert uas(headers(Supported="timer"), session_expires_s=0) == UasDecision(None, {})
    asked = uas(headers(Supported="timer", Session_Expires="300;refresher=uac"), session_expires_s=0)
    assert isinstance(asked, UasDecision) and asked.timer == SessionTimer(300, we_refresh=False)


def test_our_invite_asks_for_the_configured_interval_or_nothing_when_off() -> None:
    assert uac_request_headers(1800, 90) == {"Session-Expires": "1800", "Min-SE": "90"}
    assert uac_request_headers(600, 90, refresher="uac") == {"Session-Expires": "600;refresher=uac", "Min-SE": "90"}
    assert uac_request_headers(0, 90) == {}


def test_422_retry_asks_for_the_named_min_se_and_never_loops() -> None:
    assert retry_after_422(headers(Min_SE="1200"), 600) == 1200
    assert retry_after_422(headers(Min_SE="600"), 600) is None
    assert retry_after_422(headers(), 600) is None


def test_2xx_to_our_request_names_the_refresher_relative_to_us() -> None:
    assert timer_from_uac_response(headers(Session_Expires="900;refresher=uac")) == SessionTimer(900, True)
    assert timer_from_uac_response(headers(Session_Expires="900;refresher=uas")) == SessionTimer(900, False)
    assert timer_from_uac_response(headers(Session_Expires="900")) == SessionTimer(900, True)
    assert timer_from_uac_response(headers()) is None


def test_update_is_used_only_when_the_peer_allows_it() -> None:
    assert peer_allows_update(headers(Allow="INVITE, ACK, update, BYE"))
    assert not peer_allows_update(headers(Allow="INVITE, ACK, BYE"))


def test_rack_parses_rseq_cseq_and_method() -> None:
    assert RAck.parse("776656 1 INVITE") == RAck(776656, 1, "INVITE")
    assert RAck.parse("1 INVITE") is None
    assert RAck.parse("x 1 INVITE") is None


def test_session_expires_below_min_se_is_a_config_error_naming_both_keys() -> None:
    message = r"session_expires_s \(60\) must be 0 \(off\) or at least min_se_s \(90\)"
    with pytest.raises(ValidationError, match=message):
        SipConfig(session_expires_s=60)
    assert SipConfig(session_expires_s=0).session_expires_s == 0
    with pytest.raises(ValidationError, match="min_se_s"):
        SipConfig(min_se_s=0)
