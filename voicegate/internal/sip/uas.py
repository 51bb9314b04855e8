"""The answering side of a call (RFC 3261 section 13.3): from INVITE to confirmed, and re-INVITEs.

Order of an inbound INVITE, cheapest refusal first:
  rate limit (503) -> digest auth (401/403) -> SDP readable (400/415) -> session timer (422) ->
  180 + ring_ms -> handler.admit (its Rejection) -> handler.answer (488 / CallRejected / 500) ->
  [sip.early_media: 183 with our answer, handler.early_media, ring_ms] -> 200 OK ->
  wait for ACK (retransmit the 200; none in 64*T1 -> BYE) -> session timer armed -> handler.confirmed.
A 1xx goes reliably (RFC 3262, reliable.py) when the caller asks for 100rel; the flow waits for its PRACK.
Wrong credentials get 403 (not another 401): a client that answered a challenge wrongly will not do
better with a new nonce, and 403 ends its retries.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from typing import Literal

from voicegate.internal.sip.caller import is_trusted, resolve_sip_identity
from voicegate.internal.sip.calls import CallLeg
from voicegate.internal.sip.core import UaCore
from voicegate.internal.sip.dialog import Dialog, DialogError
from voicegate.internal.sip.handler import CallRejected, IncomingCall
from voicegate.internal.sip.message import SipRequest, SipResponse
from voicegate.internal.sip.reliable import ReliableProvisionals, caller_supports, should_send_reliably
from voicegate.internal.sip.sdp import SdpError, SessionDescription
from voicegate.internal.sip.session_refresh import SessionRefresh
from voicegate.internal.sip.session_timer import TooSmall, UasDecision, peer_allows_update
from voicegate.internal.sip.stack import ALLOWED_METHODS, SUPPORTED_OPTIONS, HeaderItems, new_tag
from voicegate.internal.sip.transaction import InviteServerTransaction, ServerTransaction
from voicegate.internal.sip.transport import Address
from voicegate.internal.sip.update import answer_offer, apply_refresh, negotiate_refresh, sdp_warning

log = logging.getLogger(__name__)
SDP = "application/sdp"
ProvisionalOutcome = Literal["sent", "acknowledged", "unacknowledged"]


def capability_headers() -> dict[str, str]:
    return {"Allow": ", ".join(ALLOWED_METHODS), "Supported": ", ".join(SUPPORTED_OPTIONS)}


def _offer_of(request: SipRequest) -> SessionDescription | None:
    """The SDP in a request body, None without a body; SdpError when it is not readable."""
    if not request.body:
        return None
    return SessionDescription.parse(request.body)


class InboundInvite:
    """One new INVITE, driven by a task of its own so slow handlers never block the stack."""

    def __init__(self, ua: UaCore, request: SipRequest, txn: InviteServerTransaction, source: Address) -> None:
        self.ua = ua
        self.request = request
        self.txn = txn
        self.source = source
        self.tag = new_tag()
        self.timer: UasDecision = UasDecision(None, {})

    def _respond(self, status: int, reason: str, headers: HeaderItems | None = None,
                 body: bytes = b"", content_type: str | None = None) -> SipResponse:
        items: list[tuple[str, str]] = (list(headers.items()) if isinstance(headers, Mapping)
                                        else [(name, value) for name, value in headers or []])
        if 100 < status < 300:
            # 12.1.1: a response that establishes a dialog copies every Record-Route value, in order,
            # so the caller's in-dialog requests (ACK, BYE) take the same proxies ours do.
            items = [("Record-Route", v) for v in self.request.headers.get_all("Record-Route")] + items
        response = self.ua.stack.response(
            self.request, status, reason, items, body, to_tag=self.tag, content_type=content_type
        )
        self.txn.respond(response)
        return response

    def _authenticate(self) -> tuple[bool, str | None]:
        """(may proceed, authenticated username). Responds itself when it may not proceed."""
        auth = self.ua.authenticator
        if auth is None or is_trusted(self.source.host, self.ua.trusted_peers_for(self.source.transport)):
            return True, None
        header = self.request.headers.get("Authorization")
        if header is None:
            self._respond(401, "Unauthorized", _challenge_headers(auth.challenges(bind=self.source.host)))
            return False, None
        result = auth.verify(header, self.request.method, self.request.uri, bind=self.source.host)
        if result.status == "ok":
            return True, result.username
        if result.status == "stale":
            self._respond(401, "Unauthorized", _challenge_headers(auth.challenges(stale=True, bind=self.source.host)))
        else:
            log.info("sip digest refused", extra={"sip_reason": result.reason, "sip_source": self.source.host})
            self._respond(403, "Forbidden")
        return False, None

    async def run(self) -> None:
        ua, request = self.ua, self.request
        if self.txn.final_sent:
            return  # a CANCEL (or shutdown) got here before this task first ran
        decision = ua.limiter.take(self.source.host)
        if not decision.allowed:
            self._respond(503, "Service Unavailable", {"Retry-After": str(decision.retry_after_s)})
            return
        allowed, username = self._authenticate()
        if not allowed:
            return
        try:
            offer = _offer_of(request)
            dialog = Dialog.for_uas(request, self.tag, self.source)
            timer = negotiate_refresh(ua, request)  # SessionTimerError is a ValueError
        except (SdpError, DialogError, ValueError) as exc:
            self._respond(400, f"Bad Request ({exc})")
            return
        if isinstance(timer, TooSmall):
            self._respond(422, "Session Interval Too Small", timer.headers())
            return
        self.timer = timer
        identity = resolve_sip_identity(
            request, self.source.host, trusted_peers=ua.trusted_peers_for(self.source.transport),
            authenticated_user=username, region=ua.config.default_region, shared_numbers=ua.shared_numbers,
        )
        log.info("sip incoming call", extra={"sip_call_id": request.call_id, "sip_identity": identity.reason})
        call = IncomingCall(request.call_id, request, self.source, identity, offer)
        dialog.remote_sdp = offer
        leg = CallLeg(dialog, invite_txn=self.txn, task=asyncio.current_task())  # type: ignore[arg-type]
        leg.session_timer = SessionRefresh(ua, leg, peer_allows_update=peer_allows_update(request.headers))
        if caller_supports(request):
            leg.reliable = ReliableProvisionals(self.txn, ua.stack.timers)
        ua.calls.add(leg)
        try:
            await self._answer(call, leg)
        finally:
            leg.task = None
            if not leg.announced:
                ua.calls.remove(leg)

    async def _answer(self, call: IncomingCall, leg: CallLeg) -> None:
        ua, dialog = self.ua, leg.dialog
        contact = ua.stack.contact(self.source.transport, self.source.host, secure=dialog.secure)
        early = ua.config.early_media and call.offer is not None  # an offerless INVITE has nothing to answer yet
        if ua.config.ring_ms > 0 and not early:
            if await self._provisional(leg, 180, "Ringing", contact) == "unacknowledged":
                return
            await asyncio.sleep(ua.config.ring_ms / 1000)
        try:
            rejection = ua.handler.admit(call)
        except Exception:
            log.exception("sip handler.admit failed")
            self._respond(500, "Server Internal Error")
            return
        if rejection is not None:
            self._respond(rejection.status, rejection.reason, rejection.headers)
            return
        leg.announced = True
        try:
            answer = await ua.handler.answer(call, dialog)
        except SdpError as exc:
            self._respond(488, "Not Acceptable Here", sdp_warning(exc))
            await ua.calls.end(leg, "no common codec")
            return
        except CallRejected as rejected:
            self._respond(rejected.status, rejected.reason, rejected.headers)
            await ua.calls.end(leg, "rejected")
            return
        except Exception:
            log.exception("sip handler.answer failed")
            self._respond(500, "Server Internal Error")
            await ua.calls.end(leg, "error")
            return
        dialog.local_sdp = answer
        body = answer.serialise()
        if early:
            outcome = await self._provisional(leg, 183, "Session Progress", contact, body)
            if outcome == "unacknowledged":
                await ua.calls.end(leg, "no prack")
                return
            if outcome == "acknowledged":
                body = b""  # RFC 6337 3.1: the answer went reliably in the 183; the 2xx repeats no SDP
            await _start_early_media(ua, dialog)
            await asyncio.sleep(ua.config.ring_ms / 1000)
        dialog.state = "confirmed"  # 12.1.1: a 2xx confirms the dialog on our side
        headers = {"Contact": contact, **capability_headers(), **self.timer.response_headers}
        response = self._respond(200, "OK", headers, body, content_type=SDP if body else None)
        if await await_ack(ua, leg, response, self.source, self.request.cseq[0]):
            leg.task = None  # the INVITE is done: a re-INVITE may come while confirmed() runs
            apply_refresh(leg, self.timer)
            try:
                await ua.handler.confirmed(dialog)
            except Exception:
                log.exception("sip handler.confirmed failed")

    async def _provisional(self, leg: CallLeg, status: int, reason: str, contact: str,
                           sdp: bytes = b"") -> ProvisionalOutcome:
        """A 1xx, reliable when the caller asked for 100rel; "unacknowledged" (and a 500 sent) when
        its PRACK never came."""
        headers = {"Contact": contact}
        reliable = leg.reliable if should_send_reliably(self.request, carries_sdp=bool(sdp)) else None
        if reliable is not None:
            headers.update(reliable.headers())
        response = self._respond(status, reason, headers, sdp, content_type=SDP if sdp else None)
        if reliable is None:
            return "sent"
        if await reliable.deliver(response):
            return "acknowledged"
        if not self.txn.final_sent:
            log.info("sip no PRACK for a reliable provisional", extra={"sip_call_id": self.request.call_id})
            self._respond(500, "Server Internal Error (no PRACK)")
        return "unacknowledged"


async def _start_early_media(ua: UaCore, dialog: Dialog) -> None:
    """The handler's optional `early_media(dialog)`: media (and the greeting) before the 200."""
    start = getattr(ua.handler, "early_media", None)
    if start is None:
        return
    try:
        await start(dialog)
    except Exception:
        log.exception("sip handler.early_media failed")


def _challenge_headers(challenges: list[str]) -> list[tuple[str, str]]:
    return [("WWW-Authenticate", value) for value in challenges]


async def await_ack(ua: UaCore, leg: CallLeg, response: SipResponse, source: Address, cseq: int) -> bool:
    """13.3.1.4: retransmit our 2xx (T1 doubling to T2) until the ACK; after 64*T1 send BYE."""
    timers = ua.stack.timers
    leg.awaiting_ack = cseq
    leg.ack_event = asyncio.Event()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timers.transaction_timeout
    interval = timers.t1
    while not leg.ack_event.is_set():
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        try:
            await asyncio.wait_for(leg.ack_event.wait(), min(interval, remaining))
        except TimeoutError:
            # Even over TCP: the 2xx is end-to-end and a proxy on the way may be using UDP.
            ua.stack.transport.send_response(response, source)
            interval = min(2 * interval, timers.t2)
    acked = leg.awaiting_ack is None
    leg.awaiting_ack = None
    if acked or leg.ended:
        return acked and not leg.ended
    log.info("sip no ACK for 2xx: hanging up", extra={"sip_call_id": leg.dialog.call_id})
    await ua.calls.end(leg, "ack timeout")
    await ua.stack.request_in_dialog(leg.dialog, "BYE")
    return False


def on_ack(leg: CallLeg, request: SipRequest) -> None:
    """An ACK for one of our 2xx (matched to its dialog by the UA)."""
    if leg.awaiting_ack is None or request.cseq[0] != leg.awaiting_ack:
        return  # a retransmitted ACK, or one for an older INVITE
    if request.body and leg.dialog.remote_sdp is None:
        try:  # offerless INVITE: the ACK carries the caller's answer
            leg.dialog.remote_sdp = SessionDescription.parse(request.body)
        except SdpError:
            log.info("sip unreadable SDP in ACK", extra={"sip_call_id": request.call_id})
    leg.ack_request = request
    leg.awaiting_ack = None
    leg.ack_event.set()


async def handle_reinvite(ua: UaCore, leg: CallLeg, request: SipRequest, txn: ServerTransaction,
                          source: Address) -> None:
    """14.2: a target refresh / session modification inside an established dialog."""
    dialog = leg.dialog

    def respond(status: int, reason: str, headers: dict[str, str] | None = None, body: bytes = b"") -> SipResponse:
        response = ua.stack.response(request, status, reason, headers, body, content_type=SDP if body else None)
        txn.respond(response)
        return response

    initial_unanswered = leg.invite_txn is not None and not leg.invite_txn.final_sent
    if leg.reinvite_busy or leg.awaiting_ack is not None or initial_unanswered:
        # 14.2: an INVITE while another is unfinished gets 500 with a random Retry-After (0-10 s).
        respond(500, "Server Internal Error", {"Retry-After": str(random.randint(0, 10))})
        return
    try:
        timer = negotiate_refresh(ua, request)
    except ValueError as exc:
        respond(400, f"Bad Request ({exc})")
        return
    if isinstance(timer, TooSmall):
        respond(422, "Session Interval Too Small", timer.headers())
        return
    leg.reinvite_busy = True
    try:
        try:
            offer = _offer_of(request)
        except SdpError as exc:
            respond(488, "Not Acceptable Here", sdp_warning(exc))
            return
        # An offerless re-INVITE (often a session refresh) gets our current SDP as the offer;
        # the answer comes in the ACK. Our media does not change, so the handler is not asked.
        sdp = dialog.local_sdp if offer is None and dialog.local_sdp is not None else None
        if sdp is None:
            sdp = await answer_offer(ua, dialog, offer, respond)
            if sdp is None:
                return
        dialog.refresh_target(request)
        dialog.invite_cseq = request.cseq[0]
        dialog.local_sdp = sdp
        if offer is not None:
            dialog.remote_sdp = offer
        contact = ua.stack.contact(source.transport, source.host, secure=dialog.secure)
        headers = {"Contact": contact, **capability_headers(), **timer.response_headers}
        response = respond(200, "OK", headers, sdp.serialise())
    finally:
        leg.reinvite_busy = False
    if not await await_ack(ua, leg, response, source, request.cseq[0]):
        return
    apply_refresh(leg, timer)
    if offer is None:
        await _apply_answer_in_ack(ua, leg)


async def _apply_answer_in_ack(ua: UaCore, leg: CallLeg) -> None:
    """RFC 3264 5/6: our 200 offered, the ACK answers; the handler's optional `answer_in_ack` applies it."""
    ack = leg.ack_request
    if ack is None or not ack.body:
        log.info("sip ACK to an offerless re-INVITE carried no answer", extra={"sip_call_id": leg.dialog.call_id})
        return
    try:
        answer = SessionDescription.parse(ack.body)
    except SdpError:
        log.info("sip unreadable SDP answer in ACK", extra={"sip_call_id": leg.dialog.call_id})
        return
    leg.dialog.remote_sdp = answer
    apply = getattr(ua.handler, "answer_in_ack", None)
    if apply is None:
        return
    try:
        await apply(leg.dialog, answer)
    except Exception:
        log.exception("sip handler.answer_in_ack failed")
