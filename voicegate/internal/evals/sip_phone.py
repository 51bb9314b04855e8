"""A simulated phone on the product's own SIP stack: INVITE, G.711 RTP both ways, RFC 4733 keys, BYE,
and a REFER taken the way a phone takes a transfer.

One `SipLine` is one user agent bound to one address of this machine, with any number of calls on it.
Which address matters: a server believes a caller's number only from an address in its
sip.trusted_peers, so a trusted caller phones from one line and an untrusted one (claiming a number)
from another. A REFER is accepted (202) and answered with a final "200 OK" NOTIFY, as a phone that
reached the transfer target would; the phone does not really dial the target (docs/evals.md).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine
from typing import Any

from voicegate.internal.audio.rtp_ports import RtpPortAllocator
from voicegate.internal.audio.rtp_session import RtpSession
from voicegate.internal.audio.scheduler import PacedScheduler
from voicegate.internal.config.sections import SipConfig
from voicegate.internal.evals.phone import CallSetupFailed, Phone
from voicegate.internal.evals.server_api import CallEvents, Observed
from voicegate.internal.evals.wire import Ear, Mouth
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.handler import CallFailed, CallRejected, IncomingCall, Rejection
from voicegate.internal.sip.message import SipRequest
from voicegate.internal.sip.sdp import SdpError, SessionDescription, build_offer, negotiate
from voicegate.internal.sip.transfer import SIPFRAG
from voicegate.internal.sip.ua import UserAgent
from voicegate.internal.sip_grammar.uri import NameAddr, UriError

log = logging.getLogger(__name__)

RATE = 8000
DIAL_TIMEOUT_S = 30.0
RTP_TIMEOUT_S = 120.0  # the caller listens through long agent turns; the server's own timeout governs
TARGET_ANSWERS_S = 3.0  # a transfer target that answers after a ring or two


class SipPhone(Phone):
    transport = "sip"

    def __init__(self, line: SipLine, rtp: RtpSession, mouth: Mouth, ear: Ear) -> None:
        super().__init__(mouth, ear)
        self.line = line
        self.rtp = rtp
        self.dialog: Dialog | None = None

    def server_events(self) -> list[Observed]:
        events = self.line.events
        if events is None:
            return []
        self.session_id = self.session_id or events.session_of_sip_call(self.sip_call_id)
        return events.of_session(self.session_id)

    @property
    def server_events_problem(self) -> str:
        events = self.line.events
        if events is None:
            return "no HTTP API of the server to read its call events from (--target http://...)"
        return events.problem

    async def hang_up(self) -> None:
        if self.dialog is not None and not self.ended.is_set():
            self.end("caller", "caller hung up")
            await self.line.ua.hangup(self.dialog)
        self.rtp.close()

    def closed(self, reason: str) -> None:
        self.end("agent" if reason == "bye" else "caller", reason)
        self.rtp.close()

    def refer(self, request: SipRequest) -> tuple[int, str]:
        try:
            target = NameAddr.parse(request.headers.get("Refer-To") or "").uri
        except (UriError, ValueError):
            return 400, "Bad Request (unreadable Refer-To)"
        self.transferred_to = str(target)
        assert self.dialog is not None
        self.line.spawn(self._report_transfer(self.dialog))
        return 202, "Accepted"

    async def _report_transfer(self, dialog: Dialog) -> None:
        """RFC 3515: how the referred call goes, in NOTIFYs: trying at once, connected a ring or two
        later (a real phone dials the target meanwhile; this one only lets the time pass)."""
        await self._notify(dialog, b"SIP/2.0 100 Trying\r\n", "active;expires=60")
        await asyncio.sleep(TARGET_ANSWERS_S)
        if not self.ended.is_set():
            await self._notify(dialog, b"SIP/2.0 200 OK\r\n", "terminated;reason=noresource")

    async def _notify(self, dialog: Dialog, fragment: bytes, state: str) -> None:
        request = dialog.create_request("NOTIFY", body=fragment, content_type=SIPFRAG,
                                        headers={"Event": "refer", "Subscription-State": state})
        stack = self.line.ua.stack
        await stack.send_request(request, await stack.dialog_destination(dialog)).final_response()


class SipLine:
    """The eval's user agent on one address; `dial` places a call from it."""

    def __init__(self, host: str, events: CallEvents | None) -> None:
        self.host = host
        self.events = events
        config = SipConfig(bind=f"{host}:5060", transports=["udp"], user_agent="voicegate-eval",
                           invite_rate_per_min=0, rtp_timeout_s=RTP_TIMEOUT_S)
        self.ua = UserAgent(config, _LineHandler(self), bind=(host, 0))
        self.scheduler = PacedScheduler()
        low = random.randrange(30000, 59000) & ~1  # a private range: other evals and tests run beside us
        self.allocator = RtpPortAllocator(low, low + 999)
        self.phones: dict[str, SipPhone] = {}
        self.ended_early: dict[str, str] = {}  # BYEs that beat `dial` to registering its phone
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.ua.start()

    async def stop(self) -> None:
        await self.ua.shutdown(timeout_s=2.0)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.scheduler.close()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def dial(self, target: str, number: str) -> SipPhone:
        """Call `target` (sip:agent@host:port) as `number`; returns once answered and media flows."""
        mouth, ear = Mouth(RATE), Ear(RATE)
        rtp = RtpSession(local_host=self.host, allocator=self.allocator, scheduler=self.scheduler, payload_type=0,
                         dtmf_payload_type=101, symmetric=False, timeout_s=RTP_TIMEOUT_S, jitter_ms=40,
                         source=mouth.frame, sink=ear.hear, on_dtmf=lambda digit: None, on_timeout=lambda: None)
        mouth.press = rtp.send_dtmf
        phone = SipPhone(self, rtp, mouth, ear)
        offer = build_offer(self.host, rtp.local_port, ("PCMU",))
        try:
            call = await self.ua.call(target, offer, timeout_s=DIAL_TIMEOUT_S, from_user=number or "anonymous")
        except (CallFailed, ValueError) as exc:
            rtp.close()
            raise CallSetupFailed(f"the call to {target} failed: {exc}") from None
        phone.dialog, phone.sip_call_id = call.dialog, call.dialog.call_id
        self.phones[call.dialog.call_id] = phone
        if call.dialog.call_id in self.ended_early:
            phone.closed(self.ended_early.pop(call.dialog.call_id))
            raise CallSetupFailed("the server hung up as soon as it answered")
        try:
            media = negotiate(call.answer) if call.answer is not None else None
        except SdpError as exc:
            await phone.hang_up()
            raise CallSetupFailed(f"unusable SDP answer: {exc}") from None
        if media is None:
            await phone.hang_up()
            raise CallSetupFailed("the answer carried no SDP")
        remote = (media.remote_host, media.remote_port)
        rtp.update(remote, media.payload_type, media.dtmf_payload_type)
        rtp.start(remote)
        return phone


class _LineHandler:
    """The CallHandler of the eval's user agent: it takes no calls, only its own calls' news."""

    def __init__(self, line: SipLine) -> None:
        self._line = line

    def admit(self, call: IncomingCall) -> Rejection | None:
        return Rejection(403, "Forbidden (a scripted caller takes no calls)")

    async def answer(self, call: IncomingCall, dialog: Dialog) -> SessionDescription:
        raise CallRejected(403, "Forbidden")

    async def confirmed(self, dialog: Dialog) -> None:
        return None

    async def reinvite(self, dialog: Dialog, offer: SessionDescription | None) -> SessionDescription:
        assert dialog.local_sdp is not None
        return dialog.local_sdp  # hold or a media change: we keep sending and listening as before

    async def ended(self, dialog: Dialog, reason: str) -> None:
        phone = self._line.phones.get(dialog.call_id)
        if phone is None:
            self._line.ended_early[dialog.call_id] = reason
        else:
            phone.closed(reason)

    def refer(self, dialog: Dialog, request: SipRequest) -> tuple[int, str]:
        phone = self._line.phones.get(dialog.call_id)
        return phone.refer(request) if phone is not None else (481, "Call/Transaction Does Not Exist")
