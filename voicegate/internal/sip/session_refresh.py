"""Session timers at run time (RFC 4028 10): refresh the dialog, or end it when nobody does.

One `SessionRefresh` per call leg. `arm` is called with each newly negotiated timer (the 2xx of the
INVITE, of every re-INVITE and UPDATE, in either direction) and replaces whatever was scheduled:
  - we are the refresher: at half the interval send a re-INVITE with our current SDP (or a body-less
    UPDATE when the peer allows UPDATE, so no media is renegotiated). 408, 481 or no answer means
    the dialog is gone on the far side: BYE and end the call (10, "session refresh failed").
  - the peer is: wait until the interval minus min(32 s, interval/3); a refresh from the peer re-arms
    the timer; otherwise BYE and end the call ("session expired").
The pure rules (intervals, headers) are in session_timer.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from voicegate.internal.sip.calls import CallLeg
from voicegate.internal.sip.core import UaCore
from voicegate.internal.sip.message import SipResponse
from voicegate.internal.sip.session_timer import (
    SessionTimer,
    retry_after_422,
    timer_from_uac_response,
    uac_request_headers,
)
from voicegate.internal.sip.stack import RoutingError

log = logging.getLogger(__name__)

# A refresh that crosses one of the peer's re-INVITEs (491, or our own busy flag) is tried again
# after a pause: RFC 3261 14.1 has the dialog's owner of the Call-ID wait 2.1-4 s, the other 0-2 s.
GLARE_RETRY_S = (0.5, 2.0)
DIALOG_GONE = (408, 481)  # RFC 4028 10: these answers to a refresh mean the session is over


class SessionRefresh:
    def __init__(self, ua: UaCore, leg: CallLeg, *, peer_allows_update: bool) -> None:
        self.ua = ua
        self.leg = leg
        self.peer_allows_update = peer_allows_update
        self.timer: SessionTimer | None = None
        self.refreshes_sent = 0
        self._task: asyncio.Task[None] | None = None

    def arm(self, timer: SessionTimer | None) -> None:
        """Start over with `timer` (None: no session timer on this dialog any more)."""
        self.stop()
        self.timer = timer
        if timer is not None and not self.leg.ended:
            self._task = self.ua.calls.spawn(self._run(timer))

    def stop(self) -> None:
        task, self._task = self._task, None
        # The task ending its own call must not cancel itself half way through the BYE.
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _run(self, timer: SessionTimer) -> None:
        loop = asyncio.get_running_loop()
        expires_at = loop.time() + timer.expire_after_s
        if not timer.we_refresh:
            await asyncio.sleep(timer.expire_after_s)
            await self._end("session expired", "sip session timer expired without a refresh")
            return
        await asyncio.sleep(timer.refresh_after_s)
        interval = timer.interval_s
        while not self.leg.ended:
            status, response = await self._send_refresh(interval)
            if 200 <= status < 300:
                self.refreshes_sent += 1
                agreed = timer_from_uac_response(response.headers) if response is not None else None
                # A 2xx without Session-Expires (a peer without timer support) keeps our own interval.
                self.arm(agreed or SessionTimer(interval, we_refresh=True))
                return
            if status in DIALOG_GONE:
                await self._end("session refresh failed", f"sip session refresh got {status}: hanging up")
                return
            retry_interval = retry_after_422(response.headers, interval) if status == 422 and response else None
            if retry_interval is not None:
                interval = retry_interval
                continue
            remaining = expires_at - loop.time()
            if status != 491 or remaining <= 0:
                break
            await asyncio.sleep(min(random.uniform(*GLARE_RETRY_S), remaining))
        # Any other failure leaves the session unrefreshed: it lasts until it would expire.
        remaining = expires_at - loop.time()
        if remaining > 0:
            await asyncio.sleep(remaining)
        await self._end("session expired", "sip session refresh failed; the session expired")

    async def _send_refresh(self, interval: int) -> tuple[int, SipResponse | None]:
        """Send one refresh; (status, response). 491 stands for "busy": an INVITE of theirs is open."""
        leg, stack = self.leg, self.ua.stack
        if leg.reinvite_busy or leg.awaiting_ack is not None:
            return 491, None
        dialog = leg.dialog
        use_update = self.peer_allows_update or dialog.local_sdp is None
        method = "UPDATE" if use_update else "INVITE"
        config = self.ua.config
        headers = {
            "Contact": stack.contact(dialog.transport, dialog.next_hop().host, secure=dialog.secure),
            "Supported": "timer",
            # We send this request, so we are its "uac": asking to stay the refresher.
            **uac_request_headers(interval, min(interval, config.min_se_s), refresher="uac"),
        }
        body = b"" if use_update or dialog.local_sdp is None else dialog.local_sdp.serialise()
        request = dialog.create_request(method, body=body, content_type="application/sdp" if body else None,
                                        headers=headers)
        try:
            dest = await stack.dialog_destination(dialog)
        except RoutingError:
            return 408, None
        leg.reinvite_busy = method == "INVITE"
        try:
            response = await stack.send_request(request, dest).final_response()
        finally:
            leg.reinvite_busy = False
        if method == "INVITE" and 200 <= response.status < 300:
            # 13.2.2.4: our 2xx ACK; kept on the leg so a retransmitted 2xx gets it again.
            ack = dialog.create_ack(request.cseq[0])
            stack.send_ack(ack, dest)
            leg.last_ack, leg.ack_dest = ack, dest
            dialog.refresh_target(response)
        log.info("sip session refreshed" if response.status < 300 else "sip session refresh refused",
                 extra={"sip_call_id": dialog.call_id, "sip_method": method, "sip_status": response.status})
        return response.status, response

    async def _end(self, reason: str, message: str) -> None:
        leg = self.leg
        if leg.ended:
            return
        log.info(message, extra={"sip_call_id": leg.dialog.call_id})
        await self.ua.calls.end(leg, reason)
        with contextlib.suppress(Exception):  # the peer may be gone: the call is over here either way
            await self.ua.stack.request_in_dialog(leg.dialog, "BYE")
