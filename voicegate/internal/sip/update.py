"""UPDATE (RFC 3311) and PRACK (RFC 3262) arriving inside a dialog.

UPDATE changes the session without touching the dialog's INVITE state: a body-less UPDATE is a
session-timer refresh (RFC 4028), one with SDP is an offer we answer in its 200, exactly like a
re-INVITE but with no ACK to wait for. PRACK acknowledges one of our reliable provisionals.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from voicegate.internal.sip.calls import CallLeg
from voicegate.internal.sip.core import UaCore
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.handler import CallRejected
from voicegate.internal.sip.message import SipRequest
from voicegate.internal.sip.sdp import SdpError, SessionDescription
from voicegate.internal.sip.session_timer import SessionTimerError, TooSmall, UasDecision, negotiate_as_uas
from voicegate.internal.sip.stack import ALLOWED_METHODS, SUPPORTED_OPTIONS
from voicegate.internal.sip.transaction import ServerTransaction
from voicegate.internal.sip.transport import Address
from voicegate.internal.sip_grammar.syntax import quote

log = logging.getLogger(__name__)
SDP = "application/sdp"


def negotiate_refresh(ua: UaCore, request: SipRequest) -> UasDecision | TooSmall:
    """The session timer our 2xx to this INVITE/re-INVITE/UPDATE sets (SessionTimerError if unreadable)."""
    return negotiate_as_uas(request.headers, session_expires_s=ua.config.session_expires_s,
                            min_se_s=ua.config.min_se_s)


def apply_refresh(leg: CallLeg, decision: UasDecision) -> None:
    """A 2xx we sent to a refresh re-arms the timer (whoever refreshes next)."""
    if leg.session_timer is not None:
        leg.session_timer.arm(decision.timer)


def sdp_warning(exc: Exception) -> dict[str, str]:
    """RFC 3261 20.43 code 304 ("media type not available") with our reason, for 488 responses; SRTP
    refusals carry their own code (302 incompatible transport protocol, 399 SRTP required)."""
    return {"Warning": f"{getattr(exc, 'warning_code', 304)} voicegate {quote(str(exc))}"}


async def answer_offer(ua: UaCore, dialog: Dialog, offer: SessionDescription | None,
                       respond: Callable[..., object]) -> SessionDescription | None:
    """The handler's answer to an offer in a dialog (re-INVITE or UPDATE), or None once a refusal
    has been sent: 488 for media we cannot use, the handler's own rejection, 500 if it failed."""
    try:
        return await ua.handler.reinvite(dialog, offer)
    except SdpError as exc:
        respond(488, "Not Acceptable Here", sdp_warning(exc))
    except CallRejected as rejected:
        respond(rejected.status, rejected.reason, rejected.headers)
    except Exception:
        log.exception("sip handler.reinvite failed")
        respond(500, "Server Internal Error")
    return None


async def handle_update(ua: UaCore, leg: CallLeg, request: SipRequest, txn: ServerTransaction,
                        source: Address) -> None:
    dialog = leg.dialog

    def respond(status: int, reason: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        txn.respond(ua.stack.response(request, status, reason, headers, body, content_type=SDP if body else None))

    try:
        decision = negotiate_refresh(ua, request)
        offer = SessionDescription.parse(request.body) if request.body else None
    except (SessionTimerError, SdpError) as exc:
        respond(400, f"Bad Request ({exc})")
        return
    if isinstance(decision, TooSmall):
        respond(422, "Session Interval Too Small", decision.headers())
        return
    answer: SessionDescription | None = None
    if offer is not None:
        if leg.reinvite_busy:
            # RFC 3311 5.2: an offer while one of ours (or a re-INVITE's) is pending gets 500 + Retry-After.
            respond(500, "Server Internal Error", {"Retry-After": str(random.randint(0, 10))})
            return
        leg.reinvite_busy = True
        try:
            answer = await answer_offer(ua, dialog, offer, respond)
        finally:
            leg.reinvite_busy = False
        if answer is None:
            return
        dialog.local_sdp, dialog.remote_sdp = answer, offer
    dialog.refresh_target(request)  # RFC 3311 5.2: UPDATE is a target refresh request
    headers = {"Contact": ua.stack.contact(source.transport, source.host, secure=dialog.secure),
               "Allow": ", ".join(ALLOWED_METHODS), "Supported": ", ".join(SUPPORTED_OPTIONS),
               **decision.response_headers}
    respond(200, "OK", headers, answer.serialise() if answer is not None else b"")
    apply_refresh(leg, decision)


def handle_prack(ua: UaCore, leg: CallLeg, request: SipRequest, txn: ServerTransaction) -> None:
    """RFC 3262 3: 200 for the PRACK of our outstanding reliable 1xx, 481 for any other."""
    if leg.reliable is not None and leg.reliable.on_prack(request):
        txn.respond(ua.stack.response(request, 200, "OK"))
    else:
        txn.respond(ua.stack.response(request, 481, "Call/Transaction Does Not Exist"))
