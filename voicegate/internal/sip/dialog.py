"""SIP dialogs (RFC 3261 section 12): the peer-to-peer relationship an INVITE sets up.

A `Dialog` holds what in-dialog requests need (tags, CSeq counters, remote target, route set) and
builds those requests with RFC 3261 12.2.1.1 routing, so BYE and re-INVITE follow the same path
through proxies as the call did. It does no I/O: the user agent adds a Via and sends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from voicegate.internal.sip.headers import Headers
from voicegate.internal.sip.message import SipRequest, SipResponse
from voicegate.internal.sip.sdp import SessionDescription
from voicegate.internal.sip.transport import Address
from voicegate.internal.sip_grammar.uri import NameAddr, SipUri

DialogState = Literal["early", "confirmed", "terminated"]
DialogId = tuple[str, str, str]  # (Call-ID, local tag, remote tag)


class DialogError(ValueError):
    """The request or response cannot create a dialog (no Contact, no tag, ...)."""


def _without_tag(address: NameAddr) -> NameAddr:
    params = {k: v for k, v in address.params.items() if k != "tag"}
    return NameAddr(address.uri, address.display_name, params)


def _contact_uri(message: SipRequest | SipResponse) -> SipUri:
    contacts = message.headers.get_list("Contact")
    if not contacts:
        raise DialogError("no Contact")
    return NameAddr.parse(contacts[0]).uri


@dataclass(eq=False)
class Dialog:
    call_id: str
    local_tag: str
    remote_tag: str
    local_uri: NameAddr
    remote_uri: NameAddr
    remote_target: SipUri
    route_set: list[NameAddr] = field(default_factory=list)
    local_cseq: int = 0
    remote_cseq: int | None = None
    secure: bool = False
    state: DialogState = "early"
    is_caller: bool = False  # we sent the INVITE (UAC) rather than received it
    # Where the dialog's first request came from or went to: connection-oriented transports reuse it.
    peer: Address | None = None
    invite_cseq: int = 0  # CSeq number of the INVITE that last (re)negotiated the session
    local_sdp: SessionDescription | None = None
    remote_sdp: SessionDescription | None = None
    created_at: float = field(default_factory=time.monotonic)

    @property
    def id(self) -> DialogId:
        return (self.call_id, self.local_tag, self.remote_tag)

    @property
    def transport(self) -> str:
        hop = self.next_hop()
        return hop.transport or (self.peer.transport if self.peer else "udp")

    @staticmethod
    def for_uas(request: SipRequest, local_tag: str, source: Address) -> Dialog:
        """12.1.1: the dialog our 1xx/2xx to `request` creates."""
        # RFC 3261 12.1.1: an RFC 2543 peer sends no From tag; its tag is then null (""), and we
        # invent none for it (our own To tag is still added).
        remote_tag = request.from_tag or ""
        if request.from_tag is None and not request.headers.get_list("Contact"):
            target = request.from_addr.uri  # RFC 2543 made Contact optional: requests went to From
        else:
            target = _contact_uri(request)
        return Dialog(
            call_id=request.call_id,
            local_tag=local_tag,
            remote_tag=remote_tag,
            local_uri=_without_tag(request.to_addr),
            remote_uri=_without_tag(request.from_addr),
            remote_target=target,
            route_set=[NameAddr.parse(v) for v in request.headers.get_list("Record-Route")],
            local_cseq=0,
            remote_cseq=request.cseq[0],
            secure=request.request_uri.scheme == "sips" and source.transport == "tls",
            is_caller=False,
            peer=source,
            invite_cseq=request.cseq[0],
        )

    @staticmethod
    def for_uac(request: SipRequest, response: SipResponse, peer: Address) -> Dialog:
        """12.1.2: the dialog a 1xx-with-tag or 2xx to our INVITE creates."""
        remote_tag = response.to_tag
        local_tag = request.from_tag
        if not remote_tag or not local_tag:
            raise DialogError("response without a To tag")
        return Dialog(
            call_id=request.call_id,
            local_tag=local_tag,
            remote_tag=remote_tag,
            local_uri=_without_tag(request.from_addr),
            remote_uri=_without_tag(request.to_addr),
            remote_target=_contact_uri(response),
            route_set=[NameAddr.parse(v) for v in reversed(response.headers.get_list("Record-Route"))],
            local_cseq=request.cseq[0],
            remote_cseq=None,
            secure=request.request_uri.scheme == "sips",
            state="confirmed" if 200 <= response.status < 300 else "early",
            is_caller=True,
            peer=peer,
            invite_cseq=request.cseq[0],
        )

    def accept_remote_cseq(self, request: SipRequest) -> bool:
        """12.2.2: a request with a lower CSeq than the last is out of order (answer 500)."""
        number = request.cseq[0]
        if request.method in ("ACK", "CANCEL"):
            return True
        if self.remote_cseq is not None and number < self.remote_cseq:
            return False
        self.remote_cseq = number
        return True

    def refresh_target(self, message: SipRequest | SipResponse) -> None:
        """12.2: a re-INVITE (or its 2xx) may move the remote target."""
        try:
            self.remote_target = _contact_uri(message)
        except Exception:  # keep the old target: a bad Contact in a refresh must not lose the call
            return

    def next_hop(self) -> SipUri:
        """Where in-dialog requests go: the first route if there is one, else the remote target."""
        return self.route_set[0].uri if self.route_set else self.remote_target

    def _route(self) -> tuple[str, list[str]]:
        """12.2.1.1: (Request-URI, Route values) for loose or strict routing."""
        if not self.route_set:
            return str(self.remote_target), []
        if "lr" in self.route_set[0].uri.params:
            return str(self.remote_target), [str(r) for r in self.route_set]
        # Strict router: it wants itself in the Request-URI and the real target as the last Route.
        first = self.route_set[0].uri.without_headers()
        return str(first), [*(str(r) for r in self.route_set[1:]), f"<{self.remote_target}>"]

    def _headers(self, cseq: int, method: str) -> tuple[str, Headers]:
        uri, routes = self._route()
        headers = Headers()
        headers.add("Max-Forwards", "70")
        headers.add("From", str(self.local_uri.with_tag(self.local_tag)))
        headers.add("To", str(self.remote_uri.with_tag(self.remote_tag) if self.remote_tag else self.remote_uri))
        headers.add("Call-ID", self.call_id)
        headers.add("CSeq", f"{cseq} {method}")
        for route in routes:
            headers.add("Route", route)
        return uri, headers

    def create_request(
        self,
        method: str,
        *,
        body: bytes = b"",
        content_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> SipRequest:
        """An in-dialog request (BYE, re-INVITE, INFO, ...) with the next CSeq; the caller adds Via."""
        if method in ("ACK", "CANCEL"):
            raise ValueError("ACK and CANCEL reuse the INVITE's CSeq: use create_ack")
        self.local_cseq += 1
        uri, built = self._headers(self.local_cseq, method)
        for name, value in (headers or {}).items():
            built.add(name, value)
        request = SipRequest(method, uri, built)
        if body:
            request.set_body(body, content_type)
        return request

    def create_ack(self, cseq: int, *, body: bytes = b"", content_type: str | None = None) -> SipRequest:
        """13.2.2.4: the ACK for a 2xx carries the INVITE's CSeq number and follows the route set."""
        uri, built = self._headers(cseq, "ACK")
        request = SipRequest("ACK", uri, built)
        if body:
            request.set_body(body, content_type)
        return request
