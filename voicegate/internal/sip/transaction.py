"""RFC 3261 section 17 transactions, with the RFC 6026 "Accepted" state for INVITE.

The transaction layer is what makes UDP usable: it retransmits, absorbs retransmissions, and turns
silence into a timeout. Choices worth knowing:

* An INVITE server transaction sends 100 Trying the moment it is created (17.2.1 allows the 200 ms
  wait; sending at once stops the caller's Timer A retransmissions as early as possible, and costs
  one small datagram).
* After a 2xx the INVITE transactions stay in Accepted for 64*T1 (RFC 6026) so a retransmitted INVITE
  is absorbed instead of becoming a second call, and retransmitted 2xx still reach the UAC core.
* Timeouts and transport errors reach the TU as synthetic 408 / 503 responses (RFC 3261 8.1.3.1).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from typing import Protocol

from voicegate.internal.sip.headers import Headers
from voicegate.internal.sip.message import SipMessage, SipRequest, SipResponse, make_response
from voicegate.internal.sip.timers import TimerSettings
from voicegate.internal.sip.tls import transport_failure
from voicegate.internal.sip.transport import Address, ErrorHandler
from voicegate.internal.sip.via import MAGIC_COOKIE

log = logging.getLogger(__name__)


class Sender(Protocol):
    def send_request(self, request: SipRequest, dest: Address, on_error: ErrorHandler | None = None) -> None: ...

    def send_response(self, response: SipResponse, source: Address) -> None: ...


class TransactionUser(Protocol):
    def on_request(self, request: SipRequest, transaction: ServerTransaction | None, source: Address) -> None:
        """A new request (with its server transaction), or an ACK for a 2xx (transaction None)."""

    def on_stray_response(self, response: SipResponse, source: Address) -> None:
        """A response no client transaction claims (e.g. a 2xx retransmitted after Timer M)."""


def server_key(request: SipRequest) -> Hashable:
    """17.2.3: branch + sent-by + method, with ACK folded onto INVITE; RFC 2543 fallback otherwise."""
    via = request.top_via
    method = "INVITE" if request.method == "ACK" else request.method
    if via.branch and via.branch.startswith(MAGIC_COOKIE) and via.branch != MAGIC_COOKIE:
        return (via.branch, via.sent_by, method)
    # A bare cookie names no transaction (RFC 4475 3.2.1): matched the old way, like a pre-3261 peer.
    # A pre-3261 peer: the To tag differs between INVITE and its ACK, so it is left out.
    return ("rfc2543", request.uri, request.from_tag, request.call_id, request.cseq[0], via.sent_by, method)


def client_key(message: SipMessage) -> Hashable:
    """17.1.3: the top Via branch and the CSeq method."""
    return (message.top_via.branch, message.cseq[1])


class Transaction:
    """Timers and state shared by all four machines."""

    def __init__(self, layer: TransactionLayer, key: Hashable, request: SipRequest, reliable: bool) -> None:
        self.layer = layer
        self.key = key
        self.request = request
        self.reliable = reliable
        self.state = "init"
        self.done = asyncio.Event()
        self._handles: dict[str, asyncio.TimerHandle] = {}

    @property
    def timers(self) -> TimerSettings:
        return self.layer.timers

    def _start_timer(self, name: str, delay: float, callback: Callable[[], None]) -> None:
        self._cancel_timer(name)

        def fire() -> None:
            self._handles.pop(name, None)
            try:
                callback()
            except Exception:
                log.exception("sip timer %s failed", name)

        self._handles[name] = asyncio.get_running_loop().call_later(delay, fire)

    def _cancel_timer(self, name: str) -> None:
        handle = self._handles.pop(name, None)
        if handle:
            handle.cancel()

    def terminate(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        self.state = "terminated"
        self.layer._remove(self)
        self.done.set()


class ServerTransaction(Transaction):
    def __init__(self, layer: TransactionLayer, key: Hashable, request: SipRequest, source: Address) -> None:
        super().__init__(layer, key, request, source.reliable)
        self.source = source
        self.last_response: SipResponse | None = None

    @property
    def final_sent(self) -> bool:
        return self.last_response is not None and self.last_response.status >= 200

    def _send(self, response: SipResponse) -> None:
        self.layer.sender.send_response(response, self.source)

    def respond(self, response: SipResponse) -> None:
        raise NotImplementedError

    def on_retransmission(self, request: SipRequest) -> None:
        raise NotImplementedError


class InviteServerTransaction(ServerTransaction):
    def start(self) -> None:
        self.state = "proceeding"
        self.respond(make_response(self.request, 100, "Trying"))

    def respond(self, response: SipResponse) -> None:
        status = response.status
        if self.state == "proceeding":
            self.last_response = response
            self._send(response)
            if 200 <= status < 300:
                self.state = "accepted"
                self._start_timer("L", self.timers.transaction_timeout, self.terminate)
            elif status >= 300:
                self.state = "completed"
                if not self.reliable:
                    self._schedule_g(self.timers.t1)
                self._start_timer("H", self.timers.transaction_timeout, self._timer_h)
        elif self.state == "accepted" and 200 <= status < 300:
            self._send(response)  # the UAS core retransmitting its 2xx

    def _schedule_g(self, interval: float) -> None:
        def fire() -> None:
            if self.state == "completed" and self.last_response is not None:
                self._send(self.last_response)
                self._schedule_g(min(2 * interval, self.timers.t2))

        self._start_timer("G", interval, fire)

    def _timer_h(self) -> None:
        log.info("sip no ACK for final response", extra={"sip_call_id": self.request.call_id})
        self.terminate()

    def on_retransmission(self, request: SipRequest) -> None:
        if self.state in ("proceeding", "completed") and self.last_response is not None:
            self._send(self.last_response)

    def on_ack(self) -> None:
        if self.state == "completed":
            self.state = "confirmed"
            self._cancel_timer("G")
            self._cancel_timer("H")
            self._start_timer("I", self.timers.timer_i_for(self.reliable), self.terminate)


class NonInviteServerTransaction(ServerTransaction):
    def start(self) -> None:
        self.state = "trying"

    def respond(self, response: SipResponse) -> None:
        if self.state not in ("trying", "proceeding"):
            return
        self.last_response = response
        self._send(response)
        if response.status < 200:
            self.state = "proceeding"
        else:
            self.state = "completed"
            self._start_timer("J", self.timers.timer_j_for(self.reliable), self.terminate)

    def on_retransmission(self, request: SipRequest) -> None:
        if self.state in ("proceeding", "completed") and self.last_response is not None:
            self._send(self.last_response)


class ClientTransaction(Transaction):
    """Responses go to `on_response` (by default a queue read with `next_response`)."""

    def __init__(self, layer: TransactionLayer, key: Hashable, request: SipRequest, dest: Address) -> None:
        super().__init__(layer, key, request, dest.reliable)
        self.dest = dest
        self.responses: asyncio.Queue[SipResponse] = asyncio.Queue()
        self.on_response: Callable[[SipResponse], None] = self.responses.put_nowait

    async def next_response(self) -> SipResponse:
        return await self.responses.get()

    async def final_response(self) -> SipResponse:
        while True:
            response = await self.responses.get()
            if response.status >= 200:
                return response

    def _send_request(self) -> None:
        self.layer.sender.send_request(self.request, self.dest, self._transport_error)

    def _deliver(self, response: SipResponse) -> None:
        try:
            self.on_response(response)
        except Exception:
            log.exception("sip response handler failed")

    def _synthetic(self, status: int, reason: str) -> None:
        self._deliver(make_response(self.request, status, reason))

    def _transport_error(self, exc: Exception) -> None:
        if self.state in ("calling", "trying", "proceeding"):
            self._synthetic(503, f"Service Unavailable (transport error: {transport_failure(exc)})")
            self.terminate()

    def start(self) -> None:
        raise NotImplementedError

    def receive(self, response: SipResponse) -> None:
        raise NotImplementedError


class InviteClientTransaction(ClientTransaction):
    def start(self) -> None:
        self.state = "calling"
        self._send_request()
        if not self.reliable:
            self._schedule_a(self.timers.t1)
        self._start_timer("B", self.timers.transaction_timeout, self._timer_b)

    def _schedule_a(self, interval: float) -> None:
        def fire() -> None:
            if self.state == "calling":
                self._send_request()
                self._schedule_a(2 * interval)

        self._start_timer("A", interval, fire)

    def _timer_b(self) -> None:
        if self.state == "calling":
            self._synthetic(408, "Request Timeout")
            self.terminate()

    def receive(self, response: SipResponse) -> None:
        status = response.status
        if self.state in ("calling", "proceeding"):
            self._cancel_timer("A")
            self._cancel_timer("B")
            if status < 200:
                self.state = "proceeding"
            elif status < 300:
                self.state = "accepted"
                self._start_timer("M", self.timers.transaction_timeout, self.terminate)
            else:
                self.state = "completed"
                self._send_ack(response)
                self._start_timer("D", self.timers.timer_d_for(self.reliable), self.terminate)
            self._deliver(response)
        elif self.state == "completed" and status >= 300:
            self._send_ack(response)  # our ACK was lost; the final response is not news to the TU
        elif self.state == "accepted" and 200 <= status < 300:
            self._deliver(response)  # the UAC core answers it with its ACK again

    def _send_ack(self, response: SipResponse) -> None:
        self.layer.sender.send_request(ack_for_non_2xx(self.request, response), self.dest)


class NonInviteClientTransaction(ClientTransaction):
    def start(self) -> None:
        self.state = "trying"
        self._send_request()
        if not self.reliable:
            self._schedule_e(self.timers.t1)
        self._start_timer("F", self.timers.transaction_timeout, self._timer_f)

    def _schedule_e(self, interval: float) -> None:
        def fire() -> None:
            if self.state in ("trying", "proceeding"):
                self._send_request()
                next_interval = self.timers.t2 if self.state == "proceeding" else min(2 * interval, self.timers.t2)
                self._schedule_e(next_interval)

        self._start_timer("E", interval, fire)

    def _timer_f(self) -> None:
        if self.state in ("trying", "proceeding"):
            self._synthetic(408, "Request Timeout")
            self.terminate()

    def receive(self, response: SipResponse) -> None:
        if self.state not in ("trying", "proceeding"):
            return
        if response.status < 200:
            self.state = "proceeding"
        else:
            self.state = "completed"
            self._cancel_timer("E")
            self._cancel_timer("F")
            self._start_timer("K", self.timers.timer_k_for(self.reliable), self.terminate)
        self._deliver(response)


def ack_for_non_2xx(invite: SipRequest, response: SipResponse) -> SipRequest:
    """17.1.1.3: same branch and Request-URI as the INVITE, To from the response, Route kept."""
    headers = Headers()
    headers.add("Via", invite.headers.get_list("Via")[0])
    for name in ("Max-Forwards", "From"):
        value = invite.headers.get(name)
        if value is not None:
            headers.add(name, value)
    headers.add("To", response.headers.get("To") or "")
    headers.add("Call-ID", invite.call_id)
    headers.add("CSeq", f"{invite.cseq[0]} ACK")
    for route in invite.headers.get_all("Route"):
        headers.add("Route", route)
    return SipRequest("ACK", invite.uri, headers)


class TransactionLayer:
    """Owns the transaction tables and routes every message to its transaction or to the TU."""

    def __init__(self, sender: Sender, user: TransactionUser, timers: TimerSettings | None = None) -> None:
        self.sender = sender
        self.user = user
        self.timers = timers or TimerSettings()
        self._server: dict[Hashable, ServerTransaction] = {}
        self._client: dict[Hashable, ClientTransaction] = {}

    def receive(self, message: SipMessage, source: Address) -> None:
        if isinstance(message, SipResponse):
            client = self._client.get(client_key(message))
            if client is not None:
                client.receive(message)
            else:
                self.user.on_stray_response(message, source)
            return
        assert isinstance(message, SipRequest)
        key = server_key(message)
        server = self._server.get(key)
        if message.method == "ACK":
            if isinstance(server, InviteServerTransaction) and server.state in ("completed", "confirmed"):
                server.on_ack()
            else:
                self.user.on_request(message, None, source)  # ACK for a 2xx: end-to-end, the TU's
            return
        if server is not None:
            server.on_retransmission(message)
            return
        created: InviteServerTransaction | NonInviteServerTransaction
        if message.method == "INVITE":
            created = InviteServerTransaction(self, key, message, source)
        else:
            created = NonInviteServerTransaction(self, key, message, source)
        self._server[key] = created
        created.start()
        self.user.on_request(message, created, source)

    def send_request(self, request: SipRequest, dest: Address) -> ClientTransaction:
        """Start a client transaction; `request` must already carry its Via with a fresh branch."""
        if request.method == "ACK":
            raise ValueError("ACK is not sent in a client transaction")
        key = client_key(request)
        created: ClientTransaction
        if request.method == "INVITE":
            created = InviteClientTransaction(self, key, request, dest)
        else:
            created = NonInviteClientTransaction(self, key, request, dest)
        self._client[key] = created
        created.start()
        return created

    def find_invite_server(self, cancel: SipRequest) -> InviteServerTransaction | None:
        """9.2: the INVITE a CANCEL targets has the same key apart from the method."""
        key = server_key(cancel)
        invite_key = (*key[:-1], "INVITE") if isinstance(key, tuple) else key
        found = self._server.get(invite_key)
        return found if isinstance(found, InviteServerTransaction) else None

    def _remove(self, transaction: Transaction) -> None:
        table: dict[Hashable, ServerTransaction] | dict[Hashable, ClientTransaction]
        table = self._server if isinstance(transaction, ServerTransaction) else self._client
        if table.get(transaction.key) is transaction:
            del table[transaction.key]

    def close(self) -> None:
        for transaction in [*self._server.values(), *self._client.values()]:
            transaction.terminate()

    @property
    def counts(self) -> tuple[int, int]:
        """(server, client) transactions alive, for tests and metrics."""
        return len(self._server), len(self._client)
