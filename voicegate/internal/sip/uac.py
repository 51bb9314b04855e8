"""The calling side (RFC 3261 sections 13.2 and 9.1): INVITE, digest retry, ACK for 2xx, CANCEL.

The INVITE asks for a session timer (RFC 4028, sip.session_expires_s); a 422 makes us ask again with
the Min-SE it names, and the 2xx arms the refresh or expiry (session_refresh.py).

A call that times out or is abandoned by the caller's code is not simply forgotten: a background
task CANCELs it once the callee has sent a provisional response (9.1 forbids it earlier), and if a
200 still slips through it is ACKed and hung up with BYE, so the callee never keeps a ghost call.
"""

from __future__ import annotations

import asyncio
import logging

from voicegate.internal.sip.calls import CallLeg
from voicegate.internal.sip.core import UaCore
from voicegate.internal.sip.dialog import Dialog, DialogError
from voicegate.internal.sip.digest import DigestError, authorization_header, choose_challenge
from voicegate.internal.sip.handler import CallFailed, OutboundCall
from voicegate.internal.sip.headers import Headers
from voicegate.internal.sip.message import SipRequest, SipResponse
from voicegate.internal.sip.sdp import SdpError, SessionDescription
from voicegate.internal.sip.session_refresh import SessionRefresh
from voicegate.internal.sip.session_timer import (
    SessionTimer,
    SessionTimerError,
    peer_allows_update,
    retry_after_422,
    timer_from_uac_response,
    uac_request_headers,
)
from voicegate.internal.sip.stack import ALLOWED_METHODS, RoutingError, new_tag
from voicegate.internal.sip.transaction import ClientTransaction
from voicegate.internal.sip.transport import Address
from voicegate.internal.sip_grammar.uri import NameAddr, SipUri, UriError, sip_uri_with_host

log = logging.getLogger(__name__)
MAX_422_RETRIES = 2  # RFC 4028 7.1: each 422 raises the interval; a third one means a peer that loops


NO_REALM = "\x00none"  # OutboundInvite.realm: the credentials answer nobody


def make_cancel(invite: SipRequest) -> SipRequest:
    """9.1: same Request-URI, Call-ID, From, To, CSeq number and top Via (branch) as the INVITE."""
    headers = Headers()
    headers.add("Via", invite.headers.get_list("Via")[0])
    headers.add("Max-Forwards", "70")
    for name in ("From", "To", "Call-ID"):
        headers.add(name, invite.headers.get(name) or "")
    headers.add("CSeq", f"{invite.cseq[0]} CANCEL")
    for route in invite.headers.get_all("Route"):
        headers.add("Route", route)
    return SipRequest("CANCEL", invite.uri, headers)


def parse_target(target: str) -> SipUri:
    try:
        return sip_uri_with_host(target)
    except UriError as exc:
        raise ValueError(f"{target!r}: {exc}") from exc


class OutboundInvite:
    def __init__(self, ua: UaCore, target: SipUri, offer: SessionDescription, *, from_user: str,
                 credentials: tuple[str, str] | None, proxy: SipUri | None, realm: str | None = None) -> None:
        self.ua = ua
        self.target = target
        self.offer = offer
        self.from_user = from_user
        self.credentials = credentials
        self.proxy = proxy
        # Whose challenges the credentials answer: None anyone's (they were given for this call), "" any
        # realm (the call goes through the provider's proxy), NO_REALM nobody's, else that realm only.
        self.realm = realm
        self.provisional = False
        self.call_id = ua.stack.new_call_id()
        self.from_tag = new_tag()
        self.dest: Address | None = None
        self.invite: SipRequest | None = None
        self.txn: ClientTransaction | None = None
        self.auth: tuple[str, str] | None = None
        self.session_expires_s = ua.config.session_expires_s
        self.min_se_s = ua.config.min_se_s

    def _build(self, cseq: int, dest: Address, auth: tuple[str, str] | None = None) -> SipRequest:
        stack = self.ua.stack
        local_host, _ = stack.transport.advertised(dest.transport, dest.host)
        headers = Headers()
        headers.add("Max-Forwards", "70")
        from_uri = SipUri("sip", self.from_user, None, local_host)
        headers.add("From", str(NameAddr(from_uri, None, {"tag": self.from_tag})))
        headers.add("To", str(NameAddr(self.target.without_headers())))
        headers.add("Call-ID", self.call_id)
        headers.add("CSeq", f"{cseq} INVITE")
        headers.add("Contact", stack.contact(dest.transport, dest.host, self.from_user or "voicegate",
                                             secure=self.target.scheme == "sips"))
        if self.proxy is not None:
            headers.add("Route", f"<{self.proxy}>")
        headers.add("Allow", ", ".join(ALLOWED_METHODS))
        headers.add("Supported", "timer")
        for name, value in uac_request_headers(self.session_expires_s, self.min_se_s).items():
            headers.add(name, value)
        if auth is not None:
            headers.add(*auth)
        request = SipRequest("INVITE", str(self.target.without_headers()), headers)
        request.set_body(self.offer.serialise(), "application/sdp")
        return request

    async def run(self, timeout_s: float) -> OutboundCall:
        stack = self.ua.stack
        try:
            self.dest = await stack.resolve(self.proxy or self.target)
        except RoutingError as exc:
            raise CallFailed(503, f"no route ({exc})") from exc
        self.invite = self._build(1, self.dest)
        self.txn = stack.send_request(self.invite, self.dest)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        retried_auth = False
        retries_422 = 0
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                response = await asyncio.wait_for(self.txn.next_response(), remaining)
                if response.status < 200:
                    self.provisional = True
                elif response.status < 300:
                    return await self._connected(response)
                elif response.status in (401, 407) and self.credentials and not retried_auth:
                    retried_auth = True
                    self._retry_with_credentials(response)
                elif response.status == 422 and retries_422 < MAX_422_RETRIES and self._retry_longer(response):
                    retries_422 += 1
                else:
                    raise CallFailed(response.status, response.reason)
        except TimeoutError:
            self._abandon()
            raise CallFailed(408, "timeout") from None
        except asyncio.CancelledError:
            self._abandon()
            raise

    def _retry_longer(self, response: SipResponse) -> bool:
        """RFC 4028 7.1: after 422, the same INVITE (new CSeq) asking for the Min-SE the 422 names."""
        assert self.invite is not None and self.dest is not None
        interval = retry_after_422(response.headers, self.session_expires_s)
        if interval is None:
            return False
        self.session_expires_s = self.min_se_s = interval
        self.invite = self._build(self.invite.cseq[0] + 1, self.dest, self.auth)
        self.provisional = False
        self.txn = self.ua.stack.send_request(self.invite, self.dest)
        return True

    def _retry_with_credentials(self, response: SipResponse) -> None:
        assert self.invite is not None and self.dest is not None and self.credentials is not None
        proxy_auth = response.status == 407
        challenges = response.headers.get_all("Proxy-Authenticate" if proxy_auth else "WWW-Authenticate")
        try:
            challenge = choose_challenge(challenges)
        except DigestError as exc:
            raise CallFailed(response.status, response.reason) from exc
        offered = challenge.get("realm", "")
        if self.realm == NO_REALM or (self.realm and offered.lower() != self.realm.lower()):
            log.warning("outbound call challenged by a realm the credentials are not for; not answered",
                        extra={"sip_status": response.status, "realm": offered[:64]})
            raise CallFailed(response.status, f"{response.reason} (realm {offered[:64]!r} is not "
                             "sip.outbound.realm: credentials withheld)")
        username, password = self.credentials
        value = authorization_header(
            challenge, method="INVITE", uri=self.invite.uri, username=username, password=password
        )
        name = "Proxy-Authorization" if proxy_auth else "Authorization"
        self.auth = (name, value)
        self.invite = self._build(self.invite.cseq[0] + 1, self.dest, self.auth)
        self.provisional = False
        self.txn = self.ua.stack.send_request(self.invite, self.dest)

    async def _connected(self, response: SipResponse) -> OutboundCall:
        assert self.invite is not None and self.dest is not None and self.txn is not None
        dialog, ack, ack_dest = await self._ack(response)
        try:
            answer = SessionDescription.parse(response.body) if response.body else None
        except SdpError:
            answer = None
        if answer is None:
            # 13.2.2.4: a 2xx without a usable answer to our offer: ACK it, then end the call.
            await self.ua.stack.request_in_dialog(dialog, "BYE")
            raise CallFailed(488, "no usable SDP answer")
        dialog.local_sdp, dialog.remote_sdp = self.offer, answer
        leg = CallLeg(dialog, announced=True, last_ack=ack, ack_dest=ack_dest)
        leg.session_timer = SessionRefresh(self.ua, leg, peer_allows_update=peer_allows_update(response.headers))
        leg.session_timer.arm(_agreed_timer(response))
        self.ua.calls.add(leg)
        self.txn.on_response = lambda late: self._late_2xx(leg, late)
        return OutboundCall(dialog, answer, response)

    async def _ack(self, response: SipResponse) -> tuple[Dialog, SipRequest, Address]:
        assert self.invite is not None and self.dest is not None
        try:
            dialog = Dialog.for_uac(self.invite, response, self.dest)
        except (DialogError, ValueError):
            # No usable Contact or tag: still ACK towards the original target, then give up.
            dialog = Dialog(self.call_id, self.from_tag, response.to_tag or "", self.invite.from_addr,
                            self.invite.to_addr, self.target, is_caller=True, peer=self.dest,
                            local_cseq=self.invite.cseq[0], invite_cseq=self.invite.cseq[0])
        ack = dialog.create_ack(self.invite.cseq[0])
        try:
            ack_dest = await self.ua.stack.dialog_destination(dialog)
        except RoutingError:
            ack_dest = self.dest
        self.ua.stack.send_ack(ack, ack_dest)
        return dialog, ack, ack_dest

    def _late_2xx(self, leg: CallLeg, response: SipResponse) -> None:
        if not 200 <= response.status < 300:
            return
        if response.to_tag == leg.dialog.remote_tag and leg.last_ack is not None and leg.ack_dest is not None:
            self.ua.stack.transport.send_request(leg.last_ack, leg.ack_dest)  # our ACK was lost
        else:
            self.ua.calls.spawn(self._hang_up_fork(response))  # 13.2.2.4: a forked 2xx we do not want

    async def _hang_up_fork(self, response: SipResponse) -> None:
        dialog, _, _ = await self._ack(response)
        await self.ua.stack.request_in_dialog(dialog, "BYE")

    def _abandon(self) -> None:
        self.ua.calls.spawn(self._cleanup())

    async def _cleanup(self) -> None:
        """Make sure an abandoned INVITE ends on the callee's side too."""
        if self.txn is None or self.invite is None or self.dest is None:
            return
        cancelled = False
        if self.provisional:
            self._send_cancel()
            cancelled = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ua.stack.timers.transaction_timeout
        while (remaining := deadline - loop.time()) > 0:
            try:
                response = await asyncio.wait_for(self.txn.next_response(), remaining)
            except TimeoutError:
                return
            if response.status < 200:
                if not cancelled:
                    self._send_cancel()
                    cancelled = True
            elif response.status < 300:
                await self._hang_up_fork(response)
                return
            else:
                return

    def _send_cancel(self) -> None:
        assert self.invite is not None and self.dest is not None
        self.ua.stack.transactions.send_request(make_cancel(self.invite), self.dest)


def _agreed_timer(response: SipResponse) -> SessionTimer | None:
    try:
        return timer_from_uac_response(response.headers)
    except SessionTimerError:
        log.info("sip unreadable Session-Expires in 2xx: no session timer", extra={"sip_call_id": response.call_id})
        return None
