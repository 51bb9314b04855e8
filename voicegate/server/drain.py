"""Graceful drain: a node that stops taking calls, lets the live ones finish, then shuts down.

On SIGTERM (server/serve.py) the gateway enters draining: new INVITEs, WHIP POSTs and POST /calls get 503,
OPTIONS gets 503 (a SIP dispatcher's keep-alive probe, so Kamailio routes new calls elsewhere) and /health
answers 503 (so an HTTP balancer does too). Calls already up carry on. The drain ends when the last live
call ends or when server.drain_timeout_s has passed; the normal shutdown that follows sends our BYE to
the SIP calls still up and closes the WebRTC sessions.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal, Protocol

log = logging.getLogger(__name__)

# How often the drain looks at the live-call count. A poll, not an event: a call ends through several
# paths (BYE, CANCEL, WebRTC grace expiry, the agent's hang-up) and a quarter second is nothing next to a
# drain measured in seconds.
POLL_S = 0.25

DrainOutcome = Literal["idle", "deadline"]


class Drainable(Protocol):
    def begin_drain(self) -> None: ...

    def live_calls(self) -> int: ...


async def drain(node: Drainable, timeout_s: float, poll_s: float = POLL_S) -> DrainOutcome:
    """Stop taking calls and wait until none is live ("idle") or `timeout_s` has passed ("deadline")."""
    node.begin_drain()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (live := node.live_calls()) > 0:
        remaining = deadline - loop.time()
        if remaining <= 0:
            log.info("drain deadline reached; ending the calls still up", extra={"live_calls": live})
            return "deadline"
        await asyncio.sleep(min(poll_s, remaining))
    log.info("drain complete: no live calls")
    return "idle"
