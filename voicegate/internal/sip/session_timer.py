"""Session timers (RFC 4028): the policy, with no I/O, so every rule is testable without a socket.

A session timer keeps a dialog alive only while someone keeps proving it is alive: the *refresher*
sends a re-INVITE or UPDATE every half interval, and if neither side refreshes the dialog dies on its
own. Carriers and SBCs tear down calls that never refresh (livekit/sip PR #494 saw most 15-minute
outbound calls cut), and it is also how we free a call whose caller vanished without a BYE.

Roles in RFC 4028 are named per transaction ("uac" = whoever sent this INVITE/UPDATE), so a negotiated
`SessionTimer` stores the absolute answer instead: `we_refresh`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from voicegate.internal.sip.headers import Headers

Refresher = Literal["uac", "uas"]
# RFC 4028 4: no UA may ask for less than this; our sip.min_se_s may be set lower only for tests.
RFC_MIN_SE_S = 90
# RFC 4028 10: the side that is not the refresher sends BYE this long before the interval ends, so
# a refresh that is late by one slow transaction (up to 32 s over UDP) still saves the call.
MAX_EXPIRY_MARGIN_S = 32.0


class SessionTimerError(ValueError):
    """A Session-Expires or Min-SE header we cannot read."""


@dataclass(frozen=True, slots=True)
class SessionExpires:
    """A Session-Expires header: delta-seconds and the optional refresher parameter."""

    seconds: int
    refresher: Refresher | None = None

    @staticmethod
    def parse(value: str) -> SessionExpires:
        delta, *params = (part.strip() for part in value.split(";"))
        if not delta.isdigit() or int(delta) <= 0:
            raise SessionTimerError(f"Session-Expires is not a positive number of seconds: {value!r}")
        refresher: Refresher | None = None
        for param in params:
            name, _, param_value = param.partition("=")
            if name.strip().lower() == "refresher":
                role = param_value.strip().lower()
                if role not in ("uac", "uas"):
                    raise SessionTimerError(f"refresher must be uac or uas: {value!r}")
                refresher = role  # type: ignore[assignment]
        return SessionExpires(int(delta), refresher)

    def serialise(self) -> str:
        return f"{self.seconds};refresher={self.refresher}" if self.refresher else str(self.seconds)


def _min_se(headers: Headers) -> int:
    value = headers.get("Min-SE")
    if value is None:
        return 0
    delta = value.split(";")[0].strip()
    if not delta.isdigit():
        raise SessionTimerError(f"Min-SE is not a number of seconds: {value!r}")
    return int(delta)


def _supports_timer(headers: Headers) -> bool:
    options = [o.lower() for o in headers.get_list("Supported") + headers.get_list("Require")]
    return "timer" in options


@dataclass(frozen=True, slots=True)
class SessionTimer:
    """A negotiated timer for one dialog: how long a refresh keeps it alive, and who refreshes."""

    interval_s: int
    we_refresh: bool

    @property
    def refresh_after_s(self) -> float:
        """RFC 4028 10: the refresher refreshes half way through the interval."""
        return self.interval_s / 2

    @property
    def expire_after_s(self) -> float:
        """RFC 4028 10: without a refresh, BYE at interval - min(32 s, interval/3)."""
        return self.interval_s - min(MAX_EXPIRY_MARGIN_S, self.interval_s / 3)


@dataclass(frozen=True, slots=True)
class TooSmall:
    """The request asked for less than we accept: answer 422 with this Min-SE."""

    min_se_s: int

    def headers(self) -> dict[str, str]:
        return {"Min-SE": str(self.min_se_s)}


@dataclass(frozen=True, slots=True)
class UasDecision:
    """What our 2xx to an INVITE/UPDATE says about the timer (None: no timer on this dialog)."""

    timer: SessionTimer | None
    response_headers: dict[str, str]


def negotiate_as_uas(request_headers: Headers, *, session_expires_s: int, min_se_s: int) -> UasDecision | TooSmall:
    """RFC 4028 9: our answer to a (re-)INVITE or UPDATE, given sip.session_expires_s and sip.min_se_s.

    We honour a peer's request whenever it makes one (a UA that supports the extension must), even
    with session_expires_s = 0, which only means we never ask for timers ourselves. We lower a long
    interval to ours (never below the Min-SE the request names) and, when the request leaves the
    choice to us, we refresh ourselves: a refresh we send is one we know happens.
    """
    asked_raw = request_headers.get("Session-Expires")
    peer_min = _min_se(request_headers)
    supported = _supports_timer(request_headers)
    if asked_raw is None:
        if session_expires_s <= 0:
            return UasDecision(None, {})
        # The caller did not ask: we may still impose one, refreshing it ourselves (9, last paragraph).
        interval = max(session_expires_s, peer_min)
        refresher: Refresher = "uas"
    else:
        asked = SessionExpires.parse(asked_raw)
        if asked.seconds < min_se_s and supported:
            return TooSmall(max(min_se_s, peer_min))
        # A caller without timer support cannot retry after a 422 (a proxy added the header): raise it.
        interval = max(asked.seconds, min_se_s)
        if session_expires_s > 0:
            interval = max(min(interval, session_expires_s), peer_min, min_se_s)
        # Only a caller that supports timers can be asked to refresh; otherwise it falls to us.
        refresher = (asked.refresher or "uas") if supported else "uas"
    headers = {"Session-Expires": SessionExpires(interval, refresher).serialise()}
    if supported:
        headers["Require"] = "timer"
    return UasDecision(SessionTimer(interval, we_refresh=refresher == "uas"), headers)


def uac_request_headers(session_expires_s: int, min_se_s: int, *, refresher: Refresher | None = None) -> dict[str, str]:
    """RFC 4028 7.1: what our INVITE (or refresh) asks for; empty when timers are off."""
    if session_expires_s <= 0:
        return {}
    return {
        "Session-Expires": SessionExpires(max(session_expires_s, min_se_s), refresher).serialise(),
        "Min-SE": str(min_se_s),
    }


def retry_after_422(response_headers: Headers, asked_s: int) -> int | None:
    """RFC 4028 7.1: the interval to ask for in the retry a 422 calls for (used as Session-Expires and
    Min-SE), or None when the 422 names nothing above what we asked (retrying unchanged would loop)."""
    named = _min_se(response_headers)
    return named if named > asked_s else None


def timer_from_uac_response(response_headers: Headers) -> SessionTimer | None:
    """RFC 4028 7.2: the timer a 2xx to our (re-)INVITE or UPDATE sets; no Session-Expires, no timer."""
    value = response_headers.get("Session-Expires")
    if value is None:
        return None
    agreed = SessionExpires.parse(value)
    # A 2xx without a refresher names nobody; 7.2 makes the UAC (us, for this transaction) refresh.
    return SessionTimer(agreed.seconds, we_refresh=(agreed.refresher or "uac") == "uac")


def peer_allows_update(headers: Headers) -> bool:
    """RFC 4028 9: refresh with UPDATE only when the peer lists it in Allow (it needs no SDP)."""
    return "UPDATE" in (method.upper() for method in headers.get_list("Allow"))
