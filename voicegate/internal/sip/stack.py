"""The plumbing under the user agent: transport + transaction layer + the bits every request needs.

Kept apart from `ua.py` so the UA reads as call policy (who may call, what we answer) and this file
as mechanics (Via with a fresh branch, Contact, where an in-dialog request goes).
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import socket
from collections.abc import Iterable, Mapping

from voicegate.internal.config.sections import SipConfig
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.message import SipMessage, SipRequest, SipResponse, make_response
from voicegate.internal.sip.timers import TimerSettings
from voicegate.internal.sip.tls import default_port
from voicegate.internal.sip.transaction import ClientTransaction, TransactionLayer, TransactionUser
from voicegate.internal.sip.transport import Address, TransportLayer
from voicegate.internal.sip.via import MAGIC_COOKIE
from voicegate.internal.sip_grammar.uri import SipUri

# Methods we implement, for Allow (405 responses, OPTIONS, INVITE/200). NOTIFY only in a dialog we sent
# REFER in (transfer.py); we send REFER but do not accept one, so it is not listed.
ALLOWED_METHODS = ("INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "INFO", "UPDATE", "PRACK", "NOTIFY")
# Extensions we implement (RFC 4028 session timers, RFC 3262 reliable 1xx): a Require naming any other gets 420.
SUPPORTED_OPTIONS: tuple[str, ...] = ("timer", "100rel")
HeaderItems = Mapping[str, str] | Iterable[tuple[str, str]]


class RoutingError(Exception):
    """We cannot send to that URI (unresolvable host, transport not enabled)."""


def new_tag() -> str:
    return secrets.token_hex(6)


def new_branch() -> str:
    return MAGIC_COOKIE + secrets.token_hex(8)


class SipStack:
    def __init__(self, config: SipConfig, user: TransactionUser, timers: TimerSettings | None = None,
                 bind: tuple[str, int] | None = None) -> None:
        self.config = config
        self.timers = timers or TimerSettings()
        self.transport = TransportLayer(config, self._on_message, bind=bind, allow=ALLOWED_METHODS)
        self.transactions = TransactionLayer(self.transport, user, self.timers)

    async def start(self) -> None:
        await self.transport.start()

    async def stop(self) -> None:
        self.transactions.close()
        await self.transport.stop()

    def _on_message(self, message: SipMessage, source: Address) -> None:
        self.transactions.receive(message, source)

    # ---- building ---------------------------------------------------------------------------------

    def new_call_id(self) -> str:
        return f"{secrets.token_hex(12)}@voicegate"

    def via(self, dest: Address) -> str:
        host, port = self.transport.advertised(dest.transport, dest.host)
        wire_host = f"[{host}]" if ":" in host else host
        # rport (RFC 3581) so a peer behind NAT answers to where we really sent from.
        return f"SIP/2.0/{dest.transport.upper()} {wire_host}:{port};branch={new_branch()};rport"

    def contact(self, transport: str, remote_host: str, user: str = "voicegate", *, secure: bool = False) -> str:
        """`secure` (a sips: dialog) gives a sips: Contact, as RFC 3261 12.1.1 requires; other TLS
        dialogs keep sip: with transport=tls, which RFC 5630 deprecates but phones still send."""
        host, port = self.transport.advertised(transport, remote_host)
        if secure and transport == "tls":
            return f"<{SipUri('sips', user, None, host, port)}>"
        uri = SipUri("sip", user, None, host, port, {"transport": transport} if transport != "udp" else {})
        return f"<{uri}>"

    def response(
        self,
        request: SipRequest,
        status: int,
        reason: str,
        headers: HeaderItems | None = None,
        body: bytes = b"",
        *,
        to_tag: str | None = None,
        content_type: str | None = None,
    ) -> SipResponse:
        """make_response plus our Server header."""
        extra = list(headers.items() if isinstance(headers, Mapping) else headers or [])
        if self.config.user_agent:
            extra.append(("Server", self.config.user_agent))
        return make_response(request, status, reason, extra, body, to_tag=to_tag, content_type=content_type)

    # ---- routing ----------------------------------------------------------------------------------

    def transport_for(self, uri: SipUri) -> str:
        wanted = "tls" if uri.scheme == "sips" else uri.transport  # sips: means TLS on every hop
        enabled = self.transport.transports
        if wanted:
            if wanted not in enabled:
                raise RoutingError(f"transport {wanted} is not enabled")
            return wanted
        return "udp" if "udp" in enabled else enabled[0]

    async def resolve(self, uri: SipUri, transport: str | None = None) -> Address:
        """An address for `uri` (A/AAAA only: no NAPTR/SRV), on its transport or the one given."""
        if not uri.is_sip:
            raise RoutingError("only sip: URIs can be reached")
        chosen = transport or self.transport_for(uri)
        host = uri.params.get("maddr") or uri.host
        port = uri.port or default_port(chosen)
        try:
            ipaddress.ip_address(host)
            return Address(host, port, chosen, host)
        except ValueError:
            pass
        bound = self.transport.local_address(chosen).host
        family = socket.AF_INET6 if ":" in bound else socket.AF_INET
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, family=family)
        except OSError as exc:
            raise RoutingError(f"cannot resolve {host}") from exc
        if not infos:
            raise RoutingError(f"cannot resolve {host}")
        return Address(str(infos[0][4][0]), port, chosen, host)

    async def dialog_destination(self, dialog: Dialog) -> Address:
        """Where an in-dialog request goes; an open connection to the peer is reused if routing allows."""
        peer = dialog.peer
        hop = dialog.next_hop()
        transport = hop.transport or (peer.transport if peer else None)
        if not dialog.route_set and peer is not None and peer.reliable and transport in (None, peer.transport):
            if self.transport.has_connection(peer):
                return peer
        return await self.resolve(hop, transport)

    # ---- sending ----------------------------------------------------------------------------------

    def send_request(self, request: SipRequest, dest: Address) -> ClientTransaction:
        """Add our Via (fresh branch) and User-Agent, then start a client transaction."""
        request.headers.prepend("Via", self.via(dest))
        if self.config.user_agent and "User-Agent" not in request.headers:
            request.headers.add("User-Agent", self.config.user_agent)
        return self.transactions.send_request(request, dest)

    def send_ack(self, ack: SipRequest, dest: Address) -> None:
        """An ACK for a 2xx is its own transaction-less request (RFC 3261 13.2.2.4)."""
        if "Via" not in ack.headers:
            ack.headers.prepend("Via", self.via(dest))
        self.transport.send_request(ack, dest)

    async def request_in_dialog(
        self, dialog: Dialog, method: str, *, body: bytes = b"", content_type: str | None = None
    ) -> SipResponse:
        """Send BYE/INFO/... in `dialog` and wait for the final response (a synthetic 408/503 on failure)."""
        request = dialog.create_request(method, body=body, content_type=content_type)
        try:
            dest = await self.dialog_destination(dialog)
        except RoutingError:
            return make_response(request, 503, "Service Unavailable (no route)")
        return await self.send_request(request, dest).final_response()
