"""Per-client token buckets for the signalling endpoints (`whip_rate_per_min`, `patch_rate_per_min`).

Each POST /whip builds a peer connection and gathers ICE candidates, so it costs sockets and CPU even
when auth is off; a bucket per client address caps that. A bucket holds a minute's allowance and
refills continuously: a page that redials a few times in a row is never refused, a loop is. POST and
PATCH have separate buckets so a client's PATCH attempts never eat into its allowance for calls.
"""

from __future__ import annotations

from typing import Protocol

from internal.session.limits import Decision, TokenBucketLimiter

__all__ = ["Decision", "TokenBucketLimiter", "client_address"]


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
