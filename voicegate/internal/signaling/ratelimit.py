"""Which client a signalling rate limit counts against (`whip_rate_per_min`, `patch_rate_per_min`).

The buckets are internal.token_bucket.TokenBucketLimiter, one per endpoint, so a client's PATCH
attempts never eat into its allowance for calls. Each POST /whip builds a peer connection and gathers
ICE candidates, so it costs sockets and CPU even when auth is off; the bucket caps that per address.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from voicegate.internal.identity.networks import address_in

FORWARDED_FOR = "x-forwarded-for"


class _Peer(Protocol):
    @property
    def host(self) -> str: ...


class _Request(Protocol):
    @property
    def client(self) -> _Peer | None: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


def forwarded_for(headers: Mapping[str, str]) -> str:
    """Every X-Forwarded-For line, in order, as one list. A proxy may append its own line rather than
    extend the client's (HAProxy's `option forwardfor` does), so the first line alone is the client's
    own claim: reading only it would let anyone pick their bucket."""
    getlist = getattr(headers, "getlist", None)
    lines = getlist(FORWARDED_FOR) if callable(getlist) else [headers.get(FORWARDED_FOR) or ""]
    return ",".join(line for line in lines if line)


def forwarded_client(peer: str, forwarded_for: str | None, trusted_proxies: Sequence[str]) -> str:
    """The client behind a chain of trusted proxies: the right-most X-Forwarded-For address that is not
    itself a trusted proxy. Anyone can write the header, so only entries appended by proxies we trust
    count, read from the right (each proxy appends the address it saw); a peer outside
    `trusted_proxies` is the client whatever the header says."""
    client = peer
    hops = [hop.strip() for hop in (forwarded_for or "").split(",") if hop.strip()]
    while address_in(client, trusted_proxies) and hops:
        client = hops.pop()
    return client


def client_address(request: _Request, trusted_proxies: Sequence[str] = ()) -> str:
    """The address a limit counts against: the TCP peer, or behind `server.trusted_proxies` (HAProxy)
    the client their X-Forwarded-For names. Without trusted proxies every client behind a reverse
    proxy shares the proxy's bucket."""
    peer = request.client.host if request.client is not None else "unknown"
    if not trusted_proxies:
        return peer
    return forwarded_client(peer, forwarded_for(request.headers), trusted_proxies)
