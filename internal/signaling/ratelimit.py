"""Which client a signalling rate limit counts against (`whip_rate_per_min`, `patch_rate_per_min`).

The buckets are internal.session.limits.TokenBucketLimiter, one per endpoint, so a client's PATCH
attempts never eat into its allowance for calls. Each POST /whip builds a peer connection and gathers
ICE candidates, so it costs sockets and CPU even when auth is off; the bucket caps that per address.
"""

from __future__ import annotations

from typing import Protocol


class _Peer(Protocol):
    @property
    def host(self) -> str: ...


class _Request(Protocol):
    @property
    def client(self) -> _Peer | None: ...


def client_address(request: _Request) -> str:
    """The TCP peer's address. Not X-Forwarded-For: anyone can write that header, and a limit keyed
    on it is no limit. Behind a reverse proxy every client shares the proxy's bucket."""
    return request.client.host if request.client is not None else "unknown"
