"""When to refresh, how long to wait after a failure, and what a registrar granted (RFC 3261 10.2).

Pure functions, so the timing rules can be tested without a registrar or a clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from voicegate.internal.sip.message import SipResponse
from voicegate.internal.sip_grammar.syntax import SyntaxProblem
from voicegate.internal.sip_grammar.uri import NameAddr, SipUri, UriError

# Refresh at half the grant, or 30 s before it ends if that is earlier: half leaves room for a few
# retries on a long grant, the 30 s margin covers a slow registrar and retransmissions on a short one.
REFRESH_MARGIN_S = 30.0
# Never sooner than this, whatever a registrar grants: a 1 s grant would otherwise be a REGISTER loop.
MIN_REFRESH_S = 5.0
# Backoff after failure n: 2^n s (2, 4, 8, ...) up to 5 minutes, so a registrar that is down or a
# wrong password is not hammered, and an outage longer than that is retried every few minutes.
BACKOFF_CAP_S = 300.0
# Jitter: the wait is drawn from [half, full] of the backoff, so many nodes that lost the same
# registrar at once do not come back in lockstep.
JITTER_LOW = 0.5

RegistrationStateName = Literal["registering", "registered", "backing-off", "unregistered", "failed"]


def refresh_delay(granted_s: float) -> float:
    """Seconds after a successful REGISTER to send the next one."""
    return max(MIN_REFRESH_S, min(granted_s / 2, granted_s - REFRESH_MARGIN_S))


def backoff_delay(failures: int, retry_after_s: float | None = None,
                  uniform: Callable[[float, float], float] = random.uniform) -> float:
    """Seconds to wait after `failures` failed attempts in a row (1 = the first failure).

    A registrar's Retry-After (503, RFC 3261 20.33) is a floor: it knows when it will be back.
    """
    ceiling = min(BACKOFF_CAP_S, 2.0 ** max(1, failures))
    delay = uniform(ceiling * JITTER_LOW, ceiling)
    return max(delay, retry_after_s or 0.0)


def retry_after(response: SipResponse) -> float | None:
    """The Retry-After seconds of a response (comment and parameters ignored), None when absent."""
    value = (response.headers.get("Retry-After") or "").split(";", 1)[0].split("(", 1)[0].strip()
    return float(value) if value.isdigit() else None


def min_expires(response: SipResponse) -> int | None:
    """423 Interval Too Brief: the smallest expiry the registrar accepts (RFC 3261 10.2.8, 20.23)."""
    value = (response.headers.get("Min-Expires") or "").strip()
    return int(value) if value.isdigit() else None


def _same_binding(a: SipUri, b: SipUri) -> bool:
    # RFC 3261 10.3 compares Contact URIs by their parts; user, host and port identify our binding.
    return (a.user, a.host.lower(), a.port or 5060) == (b.user, b.host.lower(), b.port or 5060)


def granted_expiry(response: SipResponse, contact: SipUri, requested: int) -> int:
    """What a 2xx to our REGISTER grants for `contact` (RFC 3261 10.2.4).

    The 2xx lists every binding of the address-of-record; ours carries its own expires parameter,
    which wins over an Expires header, which wins over what we asked for. A registrar that echoes
    no Contact at all (some do) is taken at its Expires header or our request.
    """
    header = (response.headers.get("Expires") or "").strip()
    fallback = int(header) if header.isdigit() else requested
    try:
        values = response.headers.get_list("Contact")
    except SyntaxProblem:
        return fallback
    for value in values:
        try:
            binding = NameAddr.parse(value)
        except UriError:
            continue
        if binding.uri.is_sip and _same_binding(binding.uri, contact):
            expires = (binding.params.get("expires") or "").strip()
            return int(expires) if expires.isdigit() else fallback
    return fallback


@dataclass(frozen=True, slots=True)
class RegistrarPeer:
    """The address a registration reached its registrar at, and whether its binding is live."""

    host: str
    registered: bool
    transport: str = "udp"  # how the registration reached it: the only transport its trust covers


def registrar_sources(peers: Iterable[RegistrarPeer], transport: str | None = None) -> list[str]:
    """Addresses to treat like `sip.trusted_peers`: only while registered, since that is when the
    registrar routes calls for our account to us (and when we have proved our account to it), and,
    given a `transport`, only registrars reached over it: a registrar we reach over TLS vouches for
    INVITEs over TLS, not for a UDP packet anyone can send with its address."""
    return sorted({peer.host for peer in peers
                   if peer.registered and (transport is None or peer.transport == transport)})
