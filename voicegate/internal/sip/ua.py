"""The user agent core: which request gets which answer, and the calls' lifecycle.

    ua = UserAgent(config.sip, handler, timers=TimerSettings())
    await ua.start()                 # binds sip.bind for each of sip.transports
    call = await ua.call("sip:100@pbx.example", offer)   # outbound
    await ua.hangup(call.dialog)
    await ua.shutdown()              # hangs up every call, stops the transports

Requests are checked in RFC 3261 8.2 order (method 405/501, Request-URI scheme 416, Require 420,
Content-Type 415, Accept 406) before being routed to the inbound call flow (`uas.py`), an existing dialog
(BYE, re-INVITE, INFO, UPDATE and PRACK in `update.py`, NOTIFY in `transfer.py`, ACK) or answered here
(OPTIONS, CANCEL). Anything addressed to a dialog we do not know gets 481, except ACK, which is never answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from voicegate.internal.audio.dtmf import EVENT_DIGITS
from voicegate.internal.config.sections import SipConfig
from voicegate.internal.sip.caller import shared_number_set
from voicegate.internal.sip.calls import CallLeg, CallRegistry
from voicegate.internal.sip.capabilities import accepts, method_refusal
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.digest import SERVER_ALGORITHMS, DigestAuthenticator
from voicegate.internal.sip.handler import (
    CallFailed,
    CallHandler,
    CallRejected,
    IncomingCall,
    OutboundCall,
    Rejection,
)
from voicegate.internal.sip.message import SipRequest, SipResponse
from voicegate.internal.sip.registration import Registrations
from voicegate.internal.sip.sdp import SessionDescription
from voicegate.internal.sip.stack import ALLOWED_METHODS, SUPPORTED_OPTIONS, HeaderItems, SipStack
from voicegate.internal.sip.timers import TimerSettings
from voicegate.internal.sip.transaction import InviteServerTransaction, ServerTransaction
from voicegate.internal.sip.transfer import TransferSubscriptions
from voicegate.internal.sip.transport import Address
from voicegate.internal.sip.uac import NO_REALM, OutboundInvite, parse_target
from voicegate.internal.sip.uas import InboundInvite, capability_headers, handle_reinvite, on_ack
from voicegate.internal.sip.update import handle_prack, handle_update
from voicegate.internal.sip_grammar.uri import SipUri, UriError
from voicegate.internal.token_bucket import TokenBucketLimiter

__all__ = [
    "CallFailed",
    "CallHandler",
    "CallRejected",
    "IncomingCall",
    "OutboundCall",
    "Rejection",
    "UserAgent",
]

log = logging.getLogger(__name__)

# Retry-After on the 503s of a closing or draining node: long enough for a dispatcher to pick another node.
DRAIN_RETRY_AFTER_S = "30"


def info_dtmf(request: SipRequest) -> str:
    """The key of a SIP INFO key press (application/dtmf-relay "Signal=5", or application/dtmf "5").

    Phones that do not send RFC 4733 events use this; anything else an INFO carries is ignored.
    """
    kind = (request.content_type or "").lower()
    text = request.body.decode("ascii", errors="replace").strip()
    if kind == "application/dtmf-relay":
        for line in text.splitlines():
            name, _, value = line.partition("=")
            if name.strip().lower() == "signal":
                text = value.strip()
                break
        else:
            return ""
    elif kind != "application/dtmf":
        return ""
    key = text[:1].upper()
    return key if len(text) == 1 and key in EVENT_DIGITS else ""


class UserAgent:
    def __init__(
        self,
        config: SipConfig,
        handler: CallHandler,
        *,
        timers: TimerSettings | None = None,
        nonce_secret: bytes | None = None,
        bind: tuple[str, int] | None = None,
        digest_algorithms: tuple[str, ...] = SERVER_ALGORITHMS,
        shared_numbers: Iterable[str] = (),
    ) -> None:
        """`timers` shortens RFC timers in tests; `bind` overrides sip.bind (e.g. port 0 in tests);
        `digest_algorithms` orders our challenges (put "MD5" first for clients that read only one);
        `shared_numbers` (memory.shared_numbers) are numbers that never identify a caller."""
        self.config = config
        self.shared_numbers = shared_number_set(shared_numbers, config.default_region)
        self.handler = handler
        self.stack = SipStack(config, self, timers, bind)
        self.calls = CallRegistry(handler)
        self.limiter = TokenBucketLimiter(config.invite_rate_per_min)
        self.authenticator: DigestAuthenticator | None = None
        if config.auth.enabled:
            auth = config.auth
            self.authenticator = DigestAuthenticator(
                auth.realm, auth.users, auth.nonce_ttl_s, secret=nonce_secret, algorithms=digest_algorithms
            )
        self.registrations = Registrations(self.stack, config.registrations)
        self.transfers = TransferSubscriptions()  # REFERs we sent, waiting for their NOTIFYs
        self._closing = False
        # Set by the composition root on a graceful drain (server/drain.py): new calls and OPTIONS get 503,
        # so a dispatcher (Kamailio) marks this node down while its live calls carry on.
        self.draining = False
        # A new INVITE refused because this node is draining (metrics: voicegate_calls_refused_total).
        self.on_draining_refusal: Callable[[], None] = lambda: None

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.stack.start()
        self.registrations.start()

    async def shutdown(self, timeout_s: float = 5.0) -> None:
        """Refuse new calls, end every call (BYE for answered ones), remove our registrations, stop the
        transports."""
        self._closing = True
        endings = [self.calls.spawn(self._hangup(leg, "shutdown")) for leg in self.calls.legs()]
        if endings:
            await asyncio.wait(endings, timeout=timeout_s)
        await self.calls.cancel_all()
        await self.registrations.stop(min(timeout_s, 5.0))  # Expires: 0 needs the transports still up
        await self.stack.stop()

    def local_address(self, transport: str = "udp") -> Address:
        """Where we listen (the real port when sip.bind asked for port 0)."""
        return self.stack.transport.local_address(transport)

    @property
    def trusted_peers(self) -> list[str]:
        """sip.trusted_peers plus the registrars we are registered with (docs/sip.md "Registration")."""
        return [*self.config.trusted_peers, *self.registrations.trusted_sources()]

    def trusted_peers_for(self, transport: str) -> list[str]:
        """What a message that arrived over `transport` may be trusted from: sip.trusted_peers, and the
        registrars whose registration went over that same transport."""
        return [*self.config.trusted_peers, *self.registrations.trusted_sources(transport)]

    @property
    def allowed_methods(self) -> tuple[str, ...]:
        """What we answer. REFER only for a handler with a `refer(dialog, request) -> (status, reason)`
        method: a phone that lets itself be transferred (the simulated caller of `voicegate eval`). The
        server's own calls refuse it, since a REFER would make the server dial whomever the caller names."""
        return (*ALLOWED_METHODS, "REFER") if hasattr(self.handler, "refer") else ALLOWED_METHODS

    @property
    def dialogs(self) -> list[Dialog]:
        return [leg.dialog for leg in self.calls.legs()]

    # ---- calls we place or end -------------------------------------------------------------------

    async def call(
        self,
        target: str,
        offer: SessionDescription,
        *,
        timeout_s: float | None = None,
        credentials: tuple[str, str] | None = None,
        from_user: str | None = None,
        proxy: str = "",
    ) -> OutboundCall:
        """Call `target` (sip:user@host[:port][;transport=tcp]); raises CallFailed unless answered.

        Unset arguments come from `sip.outbound` (timeout_s, username/password, from_user, proxy).
        """
        outbound = self.config.outbound
        realm: str | None = None  # None: explicit credentials, for whoever challenges this call
        if credentials is None and outbound.username:
            credentials = (outbound.username, outbound.password)
            # The account's password goes to its provider only: a callee (any host POST /calls names)
            # that challenges must not get a digest of it to crack offline or replay.
            realm = outbound.realm or ("" if (proxy or outbound.proxy) else NO_REALM)
        proxy_text = proxy or outbound.proxy
        proxy_uri: SipUri | None = None
        if proxy_text:
            if not proxy_text.lower().startswith(("sip:", "sips:")):
                proxy_text = "sip:" + proxy_text
            proxy_uri = parse_target(proxy_text)
            proxy_uri.params.setdefault("lr", None)  # we only speak loose routing to an outbound proxy
        invite = OutboundInvite(
            self, parse_target(target), offer, from_user=from_user or outbound.from_user,
            credentials=credentials, proxy=proxy_uri, realm=realm,
        )
        return await invite.run(timeout_s if timeout_s is not None else outbound.timeout_s)

    async def hangup(self, dialog: Dialog) -> None:
        """End a call from our side: BYE (or 480 if not yet answered) and handler.ended("hangup")."""
        leg = self.calls.get(dialog)
        if leg is not None:
            await self._hangup(leg, "hangup")

    async def _hangup(self, leg: CallLeg, reason: str) -> None:
        if leg.ended:
            return
        txn = leg.invite_txn
        if txn is not None and not txn.final_sent:
            status, phrase = (503, "Service Unavailable") if reason == "shutdown" else (480, "Temporarily Unavailable")
            txn.respond(self.stack.response(txn.request, status, phrase, to_tag=leg.dialog.local_tag))
            if leg.task is not None and leg.task is not asyncio.current_task():
                leg.task.cancel()
            await self.calls.end(leg, reason)
            return
        if leg.awaiting_ack is not None:
            # RFC 3261 15: the callee must not BYE before the ACK for its 2xx (or its timeout).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(leg.ack_event.wait(), self.stack.timers.transaction_timeout)
        if leg.ended:
            return
        await self.calls.end(leg, reason)
        await self.stack.request_in_dialog(leg.dialog, "BYE")

    # ---- TransactionUser -------------------------------------------------------------------------

    def on_request(self, request: SipRequest, transaction: ServerTransaction | None, source: Address) -> None:
        if transaction is None:
            leg = self.calls.for_request(request) if request.method == "ACK" else None
            if leg is not None:
                on_ack(leg, request)
            return
        try:
            self._dispatch(request, transaction, source)
        except Exception:
            log.exception("sip request handling failed", extra={"sip_method": request.method})
            if transaction.last_response is None or transaction.last_response.status < 200:
                self._respond(transaction, 500, "Server Internal Error")

    def on_stray_response(self, response: SipResponse, source: Address) -> None:
        """A 2xx retransmitted after our INVITE transaction ended: our ACK was lost, send it again."""
        if not (200 <= response.status < 300 and response.cseq[1] == "INVITE"):
            return
        leg = self.calls.for_response(response)
        if leg is not None and leg.last_ack is not None and leg.ack_dest is not None:
            self.stack.transport.send_request(leg.last_ack, leg.ack_dest)

    def _respond(self, txn: ServerTransaction, status: int, reason: str, headers: HeaderItems | None = None,
                 *, to_tag: str | None = None) -> None:
        txn.respond(self.stack.response(txn.request, status, reason, headers, to_tag=to_tag))

    def _dispatch(self, request: SipRequest, txn: ServerTransaction, source: Address) -> None:
        method = request.method
        if request.version.upper() != "SIP/2.0":
            self._respond(txn, 505, "Version Not Supported")
            return
        allowed = self.allowed_methods
        refusal = method_refusal(method, allowed)  # 405 known, 501 unknown (RFC 3261 8.2.1)
        if refusal is not None:
            self._respond(txn, *refusal, {"Allow": ", ".join(allowed)})
            return
        try:
            uri = request.request_uri
        except UriError:
            self._respond(txn, 400, "Bad Request (bad Request-URI)")
            return
        if not (uri.is_sip or uri.scheme == "tel"):
            self._respond(txn, 416, "Unsupported URI Scheme")
            return
        if uri.scheme == "sips" and source.transport != "tls":
            # RFC 3261 26.2.2: a sips: request must have come over TLS; answering it in the clear would
            # pretend to a security the caller did not get.
            self._respond(txn, 416, "Unsupported URI Scheme (sips: only over TLS)")
            return
        if method != "CANCEL":
            unsupported = [o for o in request.headers.get_list("Require") if o.lower() not in SUPPORTED_OPTIONS]
            if unsupported:
                self._respond(txn, 420, "Bad Extension", {"Unsupported": ", ".join(unsupported)})
                return
        if method == "INVITE" and request.body and request.content_type != "application/sdp":
            self._respond(txn, 415, "Unsupported Media Type", {"Accept": "application/sdp"})
            return
        if method == "INVITE" and not accepts(request.headers, "application/sdp"):
            # 21.4.7 / RFC 4475 3.3.15: our 2xx must carry SDP, which this Accept refuses.
            self._respond(txn, 406, "Not Acceptable", {"Warning": '399 voicegate "answers carry application/sdp"'})
            return
        if method == "OPTIONS" and self.draining and not request.to_tag:  # a dispatcher's probe, not a dialog's
            self._respond(txn, 503, "Service Unavailable (draining)", {"Retry-After": DRAIN_RETRY_AFTER_S})
        elif method == "OPTIONS":
            self._respond(txn, 200, "OK", {**capability_headers(), "Accept": "application/sdp"})
        elif method == "CANCEL":
            self._on_cancel(request, txn)
        elif method == "INVITE":
            self._on_invite(request, txn, source)
        else:  # BYE, INFO, UPDATE, PRACK, NOTIFY (and REFER, see allowed_methods): only inside a dialog
            self._on_in_dialog(request, txn, source)

    def _on_invite(self, request: SipRequest, txn: ServerTransaction, source: Address) -> None:
        assert isinstance(txn, InviteServerTransaction)
        if request.to_tag:
            leg = self.calls.for_request(request)
            if leg is None or leg.ended:
                self._respond(txn, 481, "Call/Transaction Does Not Exist")
            elif not leg.dialog.accept_remote_cseq(request):
                self._respond(txn, 500, "Server Internal Error (CSeq out of order)")
            else:
                self.calls.spawn(handle_reinvite(self, leg, request, txn, source))
            return
        if self._closing or self.draining:
            if self.draining:
                self.on_draining_refusal()
            self._respond(txn, 503, "Service Unavailable", {"Retry-After": DRAIN_RETRY_AFTER_S})
            return
        if self._is_merged(request):
            # 8.2.2.2: the same INVITE reached us twice by different paths (a forking proxy).
            self._respond(txn, 482, "Loop Detected")
            return
        self.calls.spawn(InboundInvite(self, request, txn, source).run())

    def _is_merged(self, request: SipRequest) -> bool:
        key = (request.call_id, request.from_tag or "", request.cseq[0])
        return any(
            (leg.dialog.call_id, leg.dialog.remote_tag, leg.dialog.invite_cseq) == key and not leg.dialog.is_caller
            for leg in self.calls.legs()
        )

    def _on_in_dialog(self, request: SipRequest, txn: ServerTransaction, source: Address) -> None:
        leg = self.calls.for_request(request)
        if leg is None or leg.ended:
            self._respond(txn, 481, "Call/Transaction Does Not Exist")
            return
        if not leg.dialog.accept_remote_cseq(request):
            self._respond(txn, 500, "Server Internal Error (CSeq out of order)")
            return
        if request.method == "UPDATE":
            self.calls.spawn(handle_update(self, leg, request, txn, source))
            return
        if request.method == "PRACK":
            handle_prack(self, leg, request, txn)
            return
        if request.method == "NOTIFY":  # news of a transfer we asked for (transfer.py)
            self._respond(txn, *self.transfers.on_notify(leg.dialog, request))
            return
        if request.method == "REFER":  # only reaches here for a handler that takes transfers
            self._respond(txn, *self.handler.refer(leg.dialog, request))  # type: ignore[attr-defined]
            return
        self._respond(txn, 200, "OK")
        if request.method == "BYE":
            if leg.task is not None:  # BYE before our 2xx was ACKed: stop that flow too
                leg.task.cancel()
            self.calls.end_soon(leg, "bye")
        elif request.method == "INFO":
            digit = info_dtmf(request)
            dtmf = getattr(self.handler, "dtmf", None)  # optional: handlers that want key presses
            if digit and dtmf is not None:
                try:
                    dtmf(leg.dialog, digit)
                except Exception:
                    log.exception("sip handler.dtmf failed")

    def _on_cancel(self, request: SipRequest, txn: ServerTransaction) -> None:
        invite_txn = self.stack.transactions.find_invite_server(request)
        if invite_txn is None:
            self._respond(txn, 481, "Call/Transaction Does Not Exist")
            return
        leg = self.calls.for_invite(invite_txn)
        tag = leg.dialog.local_tag if leg is not None else None
        self._respond(txn, 200, "OK", to_tag=tag)
        if invite_txn.final_sent:
            return  # 9.2: too late, the CANCEL changes nothing
        self._respond(invite_txn, 487, "Request Terminated", to_tag=tag)
        if leg is None:
            return
        if leg.task is not None:
            leg.task.cancel()
        if leg.announced:
            self.calls.end_soon(leg, "cancelled")
        else:
            self.calls.remove(leg)
