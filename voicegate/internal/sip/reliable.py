"""Reliable provisional responses (RFC 3262, 100rel) on the answering side, and PRACK.

A plain 1xx may be lost; a caller that needs to see our 183 (its SDP answer sets up early media) says
`Require: 100rel` or `Supported: 100rel`. Such a 1xx carries `RSeq` and `Require: 100rel`, and we
pass it to the transaction again at T1, 2*T1, 4*T1... until the caller's PRACK names it in `RAck`.
One reliable 1xx is outstanding at a time (3: the next waits for the PRACK), and after 64*T1
without a PRACK we give up on the INVITE with a 5xx, as section 3 says a UAS should.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field

from voicegate.internal.sip.message import SipRequest, SipResponse
from voicegate.internal.sip.timers import TimerSettings
from voicegate.internal.sip.transaction import InviteServerTransaction

OPTION = "100rel"
# 3: the first RSeq is random in 1..2**31-1 so a restarted UAS does not reuse numbers.
MAX_FIRST_RSEQ = 2**31 - 1


def _options(request: SipRequest, header: str) -> set[str]:
    return {option.lower() for option in request.headers.get_list(header)}


def caller_requires(request: SipRequest) -> bool:
    return OPTION in _options(request, "Require")


def caller_supports(request: SipRequest) -> bool:
    return OPTION in _options(request, "Supported") or caller_requires(request)


def should_send_reliably(request: SipRequest, *, carries_sdp: bool) -> bool:
    """3: every 1xx (but 100) when the caller requires 100rel; one with our SDP when it supports it."""
    return caller_requires(request) or (carries_sdp and caller_supports(request))


@dataclass(frozen=True, slots=True)
class RAck:
    rseq: int
    cseq: int
    method: str

    @staticmethod
    def parse(value: str) -> RAck | None:
        parts = value.split()
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
            return None
        return RAck(int(parts[0]), int(parts[1]), parts[2].upper())


@dataclass
class ReliableProvisionals:
    """The reliable 1xx of one INVITE server transaction."""

    txn: InviteServerTransaction
    timers: TimerSettings
    next_rseq: int = field(default_factory=lambda: 1 + secrets.randbelow(MAX_FIRST_RSEQ // 2))
    _pending: tuple[int, asyncio.Event] | None = None

    def headers(self) -> dict[str, str]:
        """RSeq and Require for the next reliable 1xx (call `deliver` with that response)."""
        return {"Require": OPTION, "RSeq": str(self.next_rseq)}

    async def deliver(self, response: SipResponse) -> bool:
        """Retransmit `response` (already sent once) until its PRACK; False after 64*T1 without one."""
        rseq = int(response.headers.get("RSeq") or "0")
        self.next_rseq = rseq + 1
        acked = asyncio.Event()
        self._pending = (rseq, acked)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timers.transaction_timeout
        interval = self.timers.t1
        try:
            while not acked.is_set():
                remaining = deadline - loop.time()
                if remaining <= 0 or self.txn.final_sent:
                    return False
                try:
                    await asyncio.wait_for(acked.wait(), min(interval, remaining))
                except TimeoutError:
                    self.txn.respond(response)  # still "proceeding": the transaction sends it again
                    interval *= 2
            return True
        finally:
            self._pending = None

    def on_prack(self, request: SipRequest) -> bool:
        """True when this PRACK acknowledges the 1xx we wait for (answer 200), else 481 (3)."""
        rack = RAck.parse(request.headers.get("RAck") or "")
        if rack is None or self._pending is None:
            return False
        rseq, acked = self._pending
        invite_cseq = self.txn.request.cseq[0]
        if (rack.rseq, rack.cseq, rack.method) != (rseq, invite_cseq, "INVITE"):
            return False
        acked.set()
        return True
