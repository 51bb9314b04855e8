"""The registering side (RFC 3261 section 10.2): one REGISTER loop per `[[sip.registrations]]` table.

    registrations = Registrations(stack, config.registrations)
    registrations.start()        # REGISTER each account; refresh before expiry; back off on failure
    registrations.trusted_sources()   # registrar addresses whose INVITEs count as trusted peers
    await registrations.stop()   # REGISTER with Expires: 0 for every live binding

One Call-ID per registration for its whole life and a CSeq that only grows (10.2.4: a registrar uses
them to order refreshes). Digest challenges are answered with digest.py, the same code INVITE uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from voicegate.internal.config.sip_registration import SipRegistration
from voicegate.internal.sip.digest import DigestError, authorization_header, choose_challenge
from voicegate.internal.sip.headers import Headers
from voicegate.internal.sip.message import SipRequest, SipResponse
from voicegate.internal.sip.registration_policy import (
    RegistrarPeer,
    RegistrationStateName,
    backoff_delay,
    granted_expiry,
    min_expires,
    refresh_delay,
    registrar_sources,
    retry_after,
)
from voicegate.internal.sip.stack import ALLOWED_METHODS, RoutingError, SipStack, new_tag
from voicegate.internal.sip.transport import Address
from voicegate.internal.sip_grammar.uri import NameAddr, SipUri

log = logging.getLogger(__name__)

# One exchange may take: challenge, credentials, 423 and a new interval, a second challenge (a
# registrar that makes nonces single-use). More than that is a registrar we cannot satisfy.
MAX_ROUNDS = 5
UNREGISTER_TIMEOUT_S = 5.0


@dataclass(slots=True)
class RegistrationStatus:
    """What /health and /metrics show of one registration; never the password."""

    registrar: str
    username: str
    state: RegistrationStateName = "unregistered"
    last_status: int | None = None
    last_reason: str = ""
    expires_at: float | None = None  # wall clock, when the registrar's grant ends
    failures: int = 0  # failed attempts in a row
    registered_count: int = 0  # successful REGISTERs (first and refreshes)
    next_attempt_at: float | None = None

    @property
    def up(self) -> bool:
        return self.state == "registered"

    def describe(self, now: float) -> dict[str, Any]:
        def seconds_until(moment: float | None) -> float | None:
            return None if moment is None else round(max(0.0, moment - now), 1)

        return {"registrar": self.registrar, "username": self.username, "state": self.state,
                "last_status": self.last_status, "last_reason": self.last_reason,
                "expires_in_s": seconds_until(self.expires_at), "failures": self.failures,
                "next_attempt_in_s": seconds_until(self.next_attempt_at)}


class _Permanent(Exception):
    """This registration can never be sent on this stack (e.g. sips: without TLS)."""


def _lr_uri(text: str) -> SipUri:
    uri = SipUri.parse(text)
    uri.params.setdefault("lr", None)  # an outbound proxy is spoken to with loose routing (16.12)
    return uri


class Registration:
    def __init__(self, stack: SipStack, account: SipRegistration, *, clock: Callable[[], float] = time.time,
                 uniform: Callable[[float, float], float] = random.uniform) -> None:
        self.stack = stack
        self.account = account
        self._clock = clock
        self._uniform = uniform
        registrar = SipUri.parse(account.registrar)
        # 10.2: the Request-URI names the registrar's domain, without a user part.
        self.request_uri = SipUri(registrar.scheme, "", None, registrar.host, registrar.port,
                                  {k: v for k, v in registrar.params.items() if k in ("transport", "maddr")})
        self.aor = SipUri(registrar.scheme, account.username, None, registrar.host)
        self.proxy = _lr_uri(account.outbound_proxy) if account.outbound_proxy else None
        self.call_id = stack.new_call_id()
        self.from_tag = new_tag()
        self.cseq = 0
        self.expires = account.expires  # raised by a 423's Min-Expires
        self.status = RegistrationStatus(account.registrar, account.username)
        self.dest: Address | None = None
        self.contact: SipUri | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self.status.state = "registering"
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"register {self.account.label}")

    async def stop(self, timeout_s: float = UNREGISTER_TIMEOUT_S) -> None:
        """Stop refreshing, and remove our binding if the registrar may still hold one."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        expires_at = self.status.expires_at
        if expires_at is not None and expires_at > self._clock():
            try:
                response = await asyncio.wait_for(self._exchange(0), timeout_s)
                self._record(response)
            except (TimeoutError, RoutingError) as exc:
                log.warning("sip un-register failed", extra={"sip_registration": self.account.label,
                                                             "sip_reason": str(exc) or "timeout"})
        self.status.state = "unregistered"
        self.status.expires_at = self.status.next_attempt_at = None

    @property
    def peer(self) -> RegistrarPeer | None:
        if self.dest is None:
            return None
        return RegistrarPeer(self.dest.host, self.status.up, self.dest.transport)

    # ---- the loop --------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            self._transport()
        except _Permanent as exc:
            self.status.state, self.status.last_reason = "failed", str(exc)
            log.error("sip registration cannot be sent", extra={"sip_registration": self.account.label,
                                                                "sip_reason": str(exc)})
            return
        while True:
            granted, wait_floor = await self._attempt()
            status = self.status
            if granted is not None:
                status.state, status.failures = "registered", 0
                status.registered_count += 1
                status.expires_at = self._clock() + granted
                delay = refresh_delay(granted)
            else:
                status.failures += 1
                status.state = "backing-off"
                delay = backoff_delay(status.failures, wait_floor, self._uniform)
                log.warning("sip registration failed", extra={
                    "sip_registration": self.account.label, "sip_status": status.last_status,
                    "sip_reason": status.last_reason, "sip_retry_in_s": round(delay, 1)})
            status.next_attempt_at = self._clock() + delay
            await asyncio.sleep(delay)

    async def _attempt(self) -> tuple[int | None, float | None]:
        """(seconds granted, None) on success, else (None, the registrar's Retry-After if any)."""
        try:
            response = await self._exchange(self.expires)
        except RoutingError as exc:
            self.status.last_status, self.status.last_reason = None, f"no route ({exc})"
            return None, None
        self._record(response)
        if not 200 <= response.status < 300:
            return None, retry_after(response)
        assert self.contact is not None
        granted = granted_expiry(response, self.contact, self.expires)
        if granted <= 0:
            # A 2xx that lists our binding as expired: the registrar did not keep it.
            self.status.last_reason = "registrar granted no time"
            return None, None
        return granted, None

    def _record(self, response: SipResponse) -> None:
        self.status.last_status, self.status.last_reason = response.status, response.reason

    # ---- one REGISTER exchange -------------------------------------------------------------------

    def _transport(self) -> str:
        target = self.proxy or self.request_uri
        if self.account.transport:
            if self.account.transport not in self.stack.transport.transports:
                raise _Permanent(f"transport {self.account.transport} is not enabled")
            if target.scheme == "sips" and self.account.transport != "tls":
                raise _Permanent(f"a sips: registrar is reached over tls, not {self.account.transport}")
            return self.account.transport
        try:
            return self.stack.transport_for(target)
        except RoutingError as exc:
            raise _Permanent(str(exc)) from exc

    async def _exchange(self, expires: int) -> SipResponse:
        """Send REGISTER, answering a digest challenge and a 423 as needed; the final response."""
        self.dest = await self.stack.resolve(self.proxy or self.request_uri, self._transport())
        authorization: tuple[str, str] | None = None
        challenged = False
        response: SipResponse | None = None
        for _ in range(MAX_ROUNDS):
            request = self._build(self.dest, expires, authorization)
            response = await self.stack.send_request(request, self.dest).final_response()
            if response.status in (401, 407) and not challenged:
                # A challenge right after our credentials means they were wrong: do not loop on it.
                challenged = True
                answer = self._answer(response, request)
                if answer is None:
                    return response
                authorization = answer
                continue
            challenged = False
            wanted = min_expires(response) if response.status == 423 else None
            if wanted is not None and expires != 0 and wanted > expires:
                expires = self.expires = wanted
                continue
            return response
        assert response is not None
        return response

    def _answer(self, response: SipResponse, request: SipRequest) -> tuple[str, str] | None:
        proxy_auth = response.status == 407
        values = response.headers.get_all("Proxy-Authenticate" if proxy_auth else "WWW-Authenticate")
        try:
            challenge = choose_challenge(values)
        except DigestError:
            return None
        value = authorization_header(challenge, method="REGISTER", uri=request.uri,
                                     username=self.account.auth_user, password=self.account.password)
        return ("Proxy-Authorization" if proxy_auth else "Authorization"), value

    def _build(self, dest: Address, expires: int, authorization: tuple[str, str] | None) -> SipRequest:
        self.cseq += 1
        contact = self.stack.contact(dest.transport, dest.host, self.account.contact_user or self.account.username)
        self.contact = NameAddr.parse(contact).uri
        headers = Headers()
        headers.add("Max-Forwards", "70")
        headers.add("From", str(NameAddr(self.aor, None, {"tag": self.from_tag})))
        headers.add("To", str(NameAddr(self.aor)))
        headers.add("Call-ID", self.call_id)
        headers.add("CSeq", f"{self.cseq} REGISTER")
        headers.add("Contact", contact)
        headers.add("Expires", str(expires))
        if self.proxy is not None:
            headers.add("Route", f"<{self.proxy}>")
        headers.add("Allow", ", ".join(ALLOWED_METHODS))
        if authorization is not None:
            headers.add(*authorization)
        return SipRequest("REGISTER", str(self.request_uri), headers)


class Registrations:
    """Every configured registration of one user agent, started and stopped with it."""

    def __init__(self, stack: SipStack, accounts: Sequence[SipRegistration], **options: Any) -> None:
        self.items = [Registration(stack, account, **options) for account in accounts]

    def start(self) -> None:
        for item in self.items:
            item.start()

    async def stop(self, timeout_s: float = UNREGISTER_TIMEOUT_S) -> None:
        await asyncio.gather(*(item.stop(timeout_s) for item in self.items))

    def statuses(self) -> list[RegistrationStatus]:
        return [item.status for item in self.items]

    def describe(self) -> list[dict[str, Any]]:
        now = time.time()
        return [item.status.describe(now) for item in self.items]

    def trusted_sources(self, transport: str | None = None) -> list[str]:
        return registrar_sources((peer for item in self.items if (peer := item.peer) is not None), transport)
