"""The contract between the SIP stack and the application that owns media and sessions.

`ua.py` re-exports everything here; it lives in its own module so the inbound and outbound call
flows (`uas.py`, `uac.py`) can use these types without importing the user agent itself.

Lifecycle promise: once `answer` has been called for a dialog, `ended` is called exactly once for
it, whatever happens next (rejection raised from `answer`, CANCEL, BYE, ACK timeout, our hangup,
shutdown), so everything `answer` allocates can be released in `ended`.

Optional methods a handler may add (the UA looks them up, like `dtmf`): `early_media(dialog)` when
our 183 with the answer went out (sip.early_media: start media before the 200), and
`answer_in_ack(dialog, answer)` when the ACK to an offerless re-INVITE answers the SDP our 200 offered;
`refer(dialog, request) -> (status, reason)` to accept a transfer by REFER (without it REFER gets 405).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from voicegate.internal.identity.caller import CallerIdentity
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.message import SipRequest, SipResponse
from voicegate.internal.sip.sdp import SessionDescription
from voicegate.internal.sip.transport import Address


@dataclass
class IncomingCall:
    call_id: str
    request: SipRequest  # the INVITE
    source: Address  # where it came from (host, port, transport)
    identity: CallerIdentity  # resolved by the UA: trusted peer / digest auth, else anonymous
    offer: SessionDescription | None  # None for an offerless INVITE: `answer` then returns OUR offer


@dataclass
class Rejection:
    status: int
    reason: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(eq=False)
class CallRejected(Rejection, Exception):
    """Raise from `answer`/`reinvite` to refuse with a status (e.g. 486 Busy Here)."""

    def __str__(self) -> str:
        return f"{self.status} {self.reason}"


class CallHandler(Protocol):
    def admit(self, call: IncomingCall) -> Rejection | None:
        """Synchronous admission (capacity, policy): a Rejection such as 503 + Retry-After, or None."""
        ...

    async def answer(self, call: IncomingCall, dialog: Dialog) -> SessionDescription:
        """The SDP for our 200 OK. Raise `sdp.NoCommonCodec` (-> 488) or `CallRejected` to refuse."""
        ...

    async def confirmed(self, dialog: Dialog) -> None:
        """The ACK for our 200 arrived: media may start. (For an offerless INVITE the caller's
        answer is in `dialog.remote_sdp`.)"""
        ...

    async def reinvite(self, dialog: Dialog, offer: SessionDescription | None) -> SessionDescription:
        """A re-INVITE (hold, resume, media change): the SDP for our 200. Same exceptions as `answer`."""
        ...

    async def ended(self, dialog: Dialog, reason: str) -> None:
        """The call is over: "bye", "cancelled", "ack timeout", "hangup", "shutdown", "rejected",
        "no common codec", "error", "session expired" / "session refresh failed" (RFC 4028 timers)
        or "no prack" (a reliable 1xx was never acknowledged)."""
        ...


@dataclass
class OutboundCall:
    dialog: Dialog
    answer: SessionDescription | None  # the callee's SDP from the 2xx
    response: SipResponse  # the 2xx itself


class CallFailed(Exception):
    """An outbound call did not connect: the final status (408 for our timeout, 503 transport)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
