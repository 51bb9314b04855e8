"""The calls the user agent is handling: one `CallLeg` per dialog, and the end-exactly-once rule.

Several things can end a call at nearly the same moment (a BYE crossing our hangup, a CANCEL racing
the answer); routing every ending through `CallRegistry.end` is what keeps the handler's `ended`
to a single call per dialog.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from voicegate.internal.sip.dialog import Dialog, DialogId
from voicegate.internal.sip.handler import CallHandler
from voicegate.internal.sip.message import SipRequest, SipResponse
from voicegate.internal.sip.transaction import InviteServerTransaction
from voicegate.internal.sip.transport import Address

if TYPE_CHECKING:
    from voicegate.internal.sip.reliable import ReliableProvisionals
    from voicegate.internal.sip.session_timer import SessionTimer

log = logging.getLogger(__name__)


class LegTimer(Protocol):
    """A leg's RFC 4028 timer (session_refresh.SessionRefresh), named here so this module, which that
    one imports, need not import it back."""

    def arm(self, timer: SessionTimer | None) -> None: ...
    def stop(self) -> None: ...


@dataclass(eq=False)
class CallLeg:
    dialog: Dialog
    invite_txn: InviteServerTransaction | None = None  # inbound: the dialog-creating INVITE
    task: asyncio.Task[None] | None = None  # inbound: the flow from 100 Trying to confirmed
    announced: bool = False  # the handler has seen this dialog (answer called / outbound connected)
    ended: bool = False
    awaiting_ack: int | None = None  # CSeq of the INVITE whose 2xx waits for its ACK
    ack_event: asyncio.Event = field(default_factory=asyncio.Event)
    reinvite_busy: bool = False
    last_ack: SipRequest | None = None  # outbound: re-sent when the callee retransmits its 2xx
    ack_dest: Address | None = None
    ack_request: SipRequest | None = None  # the ACK that ended the last wait (its body: an answer to our offer)
    session_timer: LegTimer | None = None  # RFC 4028 refresh/expiry (session_refresh.py)
    reliable: ReliableProvisionals | None = None  # inbound: our reliable 1xx awaiting PRACK (reliable.py)


class CallRegistry:
    def __init__(self, handler: CallHandler) -> None:
        self._handler = handler
        self._legs: dict[DialogId, CallLeg] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._legs)

    def legs(self) -> list[CallLeg]:
        return list(self._legs.values())

    def add(self, leg: CallLeg) -> None:
        self._legs[leg.dialog.id] = leg

    def remove(self, leg: CallLeg) -> None:
        if self._legs.get(leg.dialog.id) is leg:
            del self._legs[leg.dialog.id]

    def get(self, dialog: Dialog) -> CallLeg | None:
        leg = self._legs.get(dialog.id)
        return leg if leg is not None and leg.dialog is dialog else None

    def for_request(self, request: SipRequest) -> CallLeg | None:
        """The leg an in-dialog request belongs to (its To tag is ours, its From tag theirs; an
        RFC 2543 peer's missing From tag is the null tag "")."""
        to_tag = request.to_tag
        if not to_tag:
            return None
        return self._legs.get((request.call_id, to_tag, request.from_tag or ""))

    def for_response(self, response: SipResponse) -> CallLeg | None:
        to_tag, from_tag = response.to_tag, response.from_tag
        if not to_tag or not from_tag:
            return None
        return self._legs.get((response.call_id, from_tag, to_tag))

    def for_invite(self, transaction: InviteServerTransaction) -> CallLeg | None:
        return next((leg for leg in self._legs.values() if leg.invite_txn is transaction), None)

    async def end(self, leg: CallLeg, reason: str) -> None:
        """Terminate the leg and tell the handler once (if it ever saw the dialog)."""
        if leg.ended:
            return
        leg.ended = True
        leg.dialog.state = "terminated"
        leg.ack_event.set()
        if leg.session_timer is not None:
            leg.session_timer.stop()
        self.remove(leg)
        if not leg.announced:
            return
        try:
            await self._handler.ended(leg.dialog, reason)
        except Exception:
            log.exception("sip handler.ended failed", extra={"sip_reason": reason})

    def end_soon(self, leg: CallLeg, reason: str) -> None:
        self.spawn(self.end(leg, reason))

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """A tracked background task: kept alive until done, cancelled by `cancel_all`."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("sip task failed", exc_info=task.exception())

    async def cancel_all(self) -> None:
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
