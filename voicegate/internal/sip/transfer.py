"""Call transfer by REFER (RFC 3515): we ask the far end of a call to call someone else instead.

    subscription = ua.transfers.open(dialog)        # before the REFER: a NOTIFY may overtake its 202
    refused = await send_refer(ua.stack, dialog, "sip:sales@pbx.example")   # None: accepted (2xx)
    outcome = refused or await await_outcome(dialog, subscription, timeout_s=30)
    ua.transfers.close(subscription)

The REFER goes in the call's own dialog with `Refer-To: <target>` and `Referred-By: <our URI>`. A 2xx
(normally 202 Accepted) only says the peer will try; how the attempt goes comes in NOTIFY requests of the
same dialog (`Event: refer`), each carrying a `message/sipfrag` body: the status line of the peer's new
call ("SIP/2.0 100 Trying", then "SIP/2.0 200 OK" or a failure such as "SIP/2.0 486 Busy Here"). We answer
every NOTIFY and read its status line; the first final status decides. This module does the signalling
only: what a success or a failure means for the call (hang up, tell the caller) is `voice/transfer.py`.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Literal

from voicegate.internal.sip.dialog import Dialog, DialogId
from voicegate.internal.sip.message import SipRequest
from voicegate.internal.sip.stack import RoutingError, SipStack

SIPFRAG = "message/sipfrag"
# While waiting for NOTIFYs we look this often at whether the call has ended under us (a BYE from the
# peer ends the wait at once instead of after sip.transfer_timeout_s).
DIALOG_CHECK_S = 0.5

_STATUS_LINE_RE = re.compile(r"^SIP/2\.0[ \t]+([1-6][0-9]{2})(?:[ \t]+(.*))?$", re.IGNORECASE)

TransferStage = Literal["refer", "notify", "timeout", "ended"]


class SipfragError(ValueError):
    """A NOTIFY body that is not a SIP status line (RFC 3420 message/sipfrag)."""


class TransferBusy(Exception):
    """A transfer of this call is already under way: RFC 3515 allows several, we keep one at a time."""


@dataclass(frozen=True, slots=True)
class FragStatus:
    status: int
    reason: str

    @property
    def final(self) -> bool:
        return self.status >= 200


def parse_sipfrag(body: bytes) -> FragStatus:
    """The status line a sipfrag body starts with ("SIP/2.0 180 Ringing" -> 180, "Ringing").

    RFC 3515 2.4.5 says the body is at least the status line of the referred request's response; any
    headers after it are optional, so only the first line counts.
    """
    text = body.decode("utf-8", errors="replace").lstrip("\r\n")
    first = text.splitlines()[0].strip() if text else ""
    match = _STATUS_LINE_RE.match(first)
    if match is None:
        raise SipfragError(f"not a SIP status line: {first[:80]!r}")
    return FragStatus(int(match.group(1)), (match.group(2) or "").strip())


def subscription_terminated(value: str | None) -> bool:
    """Subscription-State: terminated (RFC 6665): the peer will send no further NOTIFY."""
    return bool(value) and value.split(";", 1)[0].strip().lower() == "terminated"  # type: ignore[union-attr]


@dataclass(frozen=True, slots=True)
class TransferOutcome:
    succeeded: bool
    stage: TransferStage  # where it was decided: the REFER's answer, a NOTIFY, our timeout, the call's end
    status: int  # the REFER's status (stage "refer"), the sipfrag's (stage "notify"), 408 for our timeout
    reason: str


@dataclass(eq=False)
class ReferSubscription:
    """The implicit subscription one REFER creates: the statuses its NOTIFYs carry, in order."""

    dialog: Dialog
    updates: asyncio.Queue[tuple[FragStatus | None, bool]] = field(default_factory=asyncio.Queue)


class TransferSubscriptions:
    """The REFER subscriptions of every call, so the UA can route an in-dialog NOTIFY to its transfer."""

    def __init__(self) -> None:
        self._open: dict[DialogId, ReferSubscription] = {}

    def open(self, dialog: Dialog) -> ReferSubscription:
        if dialog.id in self._open:
            raise TransferBusy("a transfer of this call is already under way")
        subscription = self._open[dialog.id] = ReferSubscription(dialog)
        return subscription

    def close(self, subscription: ReferSubscription) -> None:
        if self._open.get(subscription.dialog.id) is subscription:
            del self._open[subscription.dialog.id]

    def active(self, dialog: Dialog) -> bool:
        return dialog.id in self._open

    def on_notify(self, dialog: Dialog, request: SipRequest) -> tuple[int, str]:
        """The status to answer a NOTIFY in `dialog` with; a readable one is passed to its transfer."""
        subscription = self._open.get(dialog.id)
        if subscription is None:
            return 481, "Subscription Does Not Exist"
        event = (request.headers.get("Event") or "").split(";", 1)[0].strip().lower()
        if event != "refer":
            return 489, "Bad Event"
        terminated = subscription_terminated(request.headers.get("Subscription-State"))
        if not request.body:
            if not terminated:
                return 400, "Bad Request (NOTIFY without a sipfrag body)"
            subscription.updates.put_nowait((None, True))
            return 200, "OK"
        if request.content_type != SIPFRAG:
            return 415, "Unsupported Media Type"
        try:
            status = parse_sipfrag(request.body)
        except SipfragError:
            return 400, "Bad Request (unreadable sipfrag)"
        subscription.updates.put_nowait((status, terminated))
        return 200, "OK"


def refer_request(stack: SipStack, dialog: Dialog, target: str, dest_transport: str, dest_host: str) -> SipRequest:
    # Referred-By (RFC 3892) tells the transfer target who sent the caller; Contact is required in a
    # REFER (RFC 3515 2.4.1) since it is a target-refresh request.
    headers = {
        "Refer-To": f"<{target}>",
        "Referred-By": f"<{dialog.local_uri.uri}>",
        "Contact": stack.contact(dest_transport, dest_host, secure=dialog.secure),
    }
    return dialog.create_request("REFER", headers=headers)


async def send_refer(stack: SipStack, dialog: Dialog, target: str) -> TransferOutcome | None:
    """The REFER's own answer: None when the peer accepted it (2xx), else the failed outcome."""
    try:
        dest = await stack.dialog_destination(dialog)
    except RoutingError as exc:
        return TransferOutcome(False, "refer", 503, f"no route to the peer ({exc})")
    request = refer_request(stack, dialog, target, dest.transport, dest.host)
    response = await stack.send_request(request, dest).final_response()
    if 200 <= response.status < 300:
        return None
    return TransferOutcome(False, "refer", response.status, response.reason)


async def await_outcome(dialog: Dialog, subscription: ReferSubscription, *, timeout_s: float) -> TransferOutcome:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last: FragStatus | None = None
    while (remaining := deadline - loop.time()) > 0:
        if dialog.state == "terminated":
            return TransferOutcome(False, "ended", 0, "the call ended before the transfer completed")
        try:
            status, terminated = await asyncio.wait_for(subscription.updates.get(), min(remaining, DIALOG_CHECK_S))
        except TimeoutError:
            continue
        if status is not None:
            last = status
            if status.final:
                return TransferOutcome(200 <= status.status < 300, "notify", status.status, status.reason)
        if terminated:
            # The peer gave up on telling us before any final status: we cannot know it worked.
            reason = f"the subscription ended after {last.status} {last.reason}" if last else "the subscription ended"
            return TransferOutcome(False, "notify", last.status if last else 0, reason)
    return TransferOutcome(False, "timeout", 408, "no final NOTIFY in time")
