"""Voice calls over SIP: the CallHandler that gives each dialog RTP media, a session and a pipeline.

The UA (internal/sip/ua.py) speaks SIP; this module is what a call *is* to the rest of voicegate. Answering allocates
an RTP port pair and a session (memory loaded for a verified caller); the ACK starts media and the
greeting; a re-INVITE (hold, resume, new address or codec) updates the RTP session; the end of the
dialog, whoever ends it, releases everything exactly once. Telephone audio stays at 8 kHz end to end
(the pipeline runs at the transport's rate), so no frame is resampled on the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from voicegate.internal.audio.rtp_ports import RtpPortAllocator, RtpPortsExhausted
from voicegate.internal.audio.rtp_session import RtpSession, RtpStats
from voicegate.internal.audio.scheduler import PacedScheduler
from voicegate.internal.config.sections import SipConfig
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.session import Session, SessionLimitReached, TransportKind
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.handler import CallFailed, CallRejected, IncomingCall, OutboundCall, Rejection
from voicegate.internal.sip.sdes import negotiate_media, secure_answer, secure_offer
from voicegate.internal.sip.sdp import SdpError, SessionDescription, build_answer, build_offer
from voicegate.internal.sip.voice.call import (
    SIP_CALL_ID,
    SIP_OUTBOUND,
    CallLog,
    MediaRoute,
    SipVoiceCall,
    callee_identity,
    direction,
    media_address,
    secure,
)
from voicegate.internal.sip.voice.dtmf import CallKeypad
from voicegate.internal.sip.voice.transfer import transfer_under_way
from voicegate.internal.sip_grammar.uri import SipUri
from voicegate.internal.telephony.answering_machine import AmdPlan, AmdRun, run_in_background
from voicegate.internal.telephony.navigation import MenuPlan, PromptEars, walk_in_background

log = logging.getLogger("voicegate.internal.sip.voice")  # the package's logger, as before the move

SAMPLE_RATE = 8000  # G.711: the pipeline of a SIP call runs at the codec's own rate
RETRY_AFTER_S = "5"
AT_CAPACITY = "this server is at its live-session limit"

# Opens a live session (raising SessionLimitReached when full). If it is cancelled or fails part way,
# it ends what it opened: the caller never gets a session to clean up (server.gateway.open_session).
OpenSession = Callable[[CallerIdentity, TransportKind], Awaitable[Session]]
NewPipeline = Callable[[Session, int, EventSink, str | None], VoicePipeline]
EndSession = Callable[[Session, str], Awaitable[None]]


class VoiceCallHandler:
    """Implements internal.sip.handler.CallHandler for voice calls; one per server."""

    def __init__(self, config: SipConfig, *, open_session: OpenSession, new_pipeline: NewPipeline,
                 end_session: EndSession, refusal: Callable[[], SessionLimitReached | None],
                 allocator: RtpPortAllocator,
                 scheduler: PacedScheduler, greeting_outgoing: str, jitter_ms: int | None = None) -> None:
        self.config = config
        self._open_session = open_session
        self._new_pipeline = new_pipeline
        self._end_session = end_session
        self._refusal = refusal
        # Each refusal made here, before a session is asked for (counted and logged by the composition root).
        self.on_refused: Callable[[SessionLimitReached], None] = lambda refusal: None
        # [admission] busy = "message": a refused caller is answered, hears this, and gets our BYE
        # (internal/sip/voice/busy.py); None: refused with 503 + Retry-After.
        self.busy_line: Any = None
        self._allocator = allocator
        self._scheduler = scheduler
        self._greeting_outgoing = greeting_outgoing
        self._codecs: list[str] = list(config.codecs)
        self.calls: dict[str, SipVoiceCall] = {}
        self.ua: Any = None  # set by the composition root once the UserAgent exists
        self.on_media_stats: Callable[[RtpStats], None] | None = None  # each call's RTP figures, at its end
        self.on_amd_decision: Callable[[AmdRun], None] = lambda run: None  # metrics, set by the composition root
        self.menu_ears: PromptEars | None = None  # hears whole menu prompts again ([menus] whisper_model)

    # ---- inbound ---------------------------------------------------------------------------------

    def admit(self, call: IncomingCall) -> Rejection | None:
        refusal = self._refusal()
        if refusal is None:
            return None
        self.on_refused(refusal)
        if self.busy_line is not None and refusal.reason != "draining" and call.offer is not None:
            self.busy_line.expect(call.call_id)  # answered, told the lines are busy, hung up
            return None
        return Rejection(503, "Service Unavailable", {"Retry-After": str(refusal.retry_after_s)})

    async def answer(self, call: IncomingCall, dialog: Dialog) -> SessionDescription:
        if self.busy_line is not None and self.busy_line.expected(call.call_id):
            return await self.busy_line.answer(call, dialog)
        if call.offer is None:
            # Offerless INVITE: we offer in the 200 and learn the caller's answer from the ACK.
            voice = self._new_inbound_call(dialog.call_id, call.source.host)
            await self._attach_inbound_session(voice, call.identity)
            voice.next_sdp_version()
            offer = build_offer(media_address(self.config, call.source.host), voice.rtp.local_port,
                                self._codecs, session_id=voice.sdp_session_id)
            voice.srtp_offered = secure_offer(offer, self.config.srtp)
            return offer
        # NoCommonCodec or an SRTP policy refusal -> 488, before any allocation.
        negotiated, keys = negotiate_media(call.offer, self._codecs, self.config.srtp)
        voice = self._new_inbound_call(dialog.call_id, call.source.host)
        voice.negotiated = negotiated
        await self._attach_inbound_session(voice, call.identity)
        voice.rtp.update((negotiated.remote_host, negotiated.remote_port), negotiated.payload_type,
                         negotiated.dtmf_payload_type, direction(negotiated.direction))
        secure(voice, keys)
        answer = build_answer(negotiated, media_address(self.config, call.source.host), voice.rtp.local_port,
                              voice.sdp_session_id, offer=call.offer, session_version=voice.next_sdp_version())
        return secure_answer(answer, call.offer, negotiated, keys)

    def _new_inbound_call(self, call_id: str, toward: str) -> SipVoiceCall:
        try:
            return self._new_call(call_id, toward)
        except RtpPortsExhausted:
            log.warning("no free RTP port pair: refusing the call", extra={"call_id": call_id})
            raise CallRejected(503, "Service Unavailable", {"Retry-After": RETRY_AFTER_S}) from None

    async def _attach_inbound_session(self, voice: SipVoiceCall, identity: CallerIdentity) -> None:
        try:
            await self._attach_session(voice, identity, greeting=None)
        except SessionLimitReached as refusal:  # counted by the session manager
            self._release(voice)
            raise CallRejected(503, "Service Unavailable", {"Retry-After": str(refusal.retry_after_s)}) from None

    async def early_media(self, dialog: Dialog) -> None:
        """sip.early_media: our 183 carried the answer, so media and the greeting start before the 200."""
        voice = self.calls.get(dialog.call_id)
        if voice is not None and not voice.ended and voice.negotiated is not None:
            await self._start_media(voice, dialog)

    async def answer_in_ack(self, dialog: Dialog, answer: SessionDescription) -> None:
        """An offerless re-INVITE: our 200 offered our current SDP and the ACK carried the caller's answer."""
        voice = self.calls.get(dialog.call_id)
        if voice is None or voice.ended:
            return
        try:  # our offer in the 200 was our current SDP, with the SRTP key we already use
            negotiated, keys = negotiate_media(answer, self._codecs, self.config.srtp,
                                               voice.srtp_keys.local if voice.srtp_keys else None)
        except SdpError as exc:
            log.info("sip unusable answer in ACK: media unchanged", extra={"call_id": dialog.call_id,
                                                                           "sip_reason": str(exc)})
            return
        voice.negotiated = negotiated
        voice.rtp.update((negotiated.remote_host, negotiated.remote_port), negotiated.payload_type,
                         negotiated.dtmf_payload_type, direction(negotiated.direction))
        secure(voice, keys)

    async def confirmed(self, dialog: Dialog) -> None:
        if self.busy_line is not None and self.busy_line.expected(dialog.call_id):
            await self.busy_line.confirmed(dialog)
            return
        voice = self.calls.get(dialog.call_id)
        if voice is None or voice.ended or voice.route.endpoint is not None:
            return  # gone, or media already running since the 183 (early media)
        if voice.negotiated is None:
            # Offerless INVITE: the caller's answer came in the ACK; without a usable one there is no call.
            try:
                if dialog.remote_sdp is None:
                    raise SdpError("the ACK carried no SDP answer to our offer")
                negotiated, keys = negotiate_media(dialog.remote_sdp, self._codecs, self.config.srtp,
                                                   voice.srtp_offered)
            except SdpError as exc:
                log.info("sip call has no usable media: hanging up", extra={"call_id": dialog.call_id,
                                                                             "sip_reason": str(exc)})
                if self.ua is not None:
                    await self.ua.hangup(dialog)
                return
            voice.negotiated = negotiated
            voice.rtp.update((negotiated.remote_host, negotiated.remote_port), negotiated.payload_type,
                             negotiated.dtmf_payload_type, direction(negotiated.direction))
            secure(voice, keys)
        await self._start_media(voice, dialog)

    async def reinvite(self, dialog: Dialog, offer: SessionDescription | None) -> SessionDescription:
        voice = self.calls.get(dialog.call_id)
        if voice is None or offer is None:
            raise CallRejected(488, "Not Acceptable Here")
        negotiated, keys = negotiate_media(offer, self._codecs, self.config.srtp,
                                           voice.srtp_keys.local if voice.srtp_keys else None)
        voice.negotiated = negotiated
        voice.rtp.update((negotiated.remote_host, negotiated.remote_port), negotiated.payload_type,
                         negotiated.dtmf_payload_type, direction(negotiated.direction))
        keys = secure(voice, keys)  # a new suite gets a new key of ours: the answer carries it
        log.info("sip call media updated", extra={"call_id": dialog.call_id, "direction": negotiated.direction,
                                                  "codec": negotiated.codec})
        peer = dialog.peer.host if dialog.peer else negotiated.remote_host
        answer = build_answer(negotiated, media_address(self.config, peer), voice.rtp.local_port,
                              voice.sdp_session_id, offer=offer, session_version=voice.next_sdp_version())
        return secure_answer(answer, offer, negotiated, keys)

    def dtmf(self, dialog: Dialog, digit: str) -> None:
        """A key press sent as SIP INFO (phones without RFC 4733 events)."""
        voice = self.calls.get(dialog.call_id)
        endpoint = voice.route.endpoint if voice is not None else None
        if endpoint is not None:
            endpoint.push_dtmf(digit)

    async def ended(self, dialog: Dialog, reason: str) -> None:
        if self.busy_line is not None and self.busy_line.expected(dialog.call_id):
            self.busy_line.ended(dialog.call_id)
            return
        voice = self.calls.pop(dialog.call_id, None)
        if voice is None or voice.ended:
            return
        voice.ended = True
        self._release(voice)
        for callback in voice.on_end:
            with contextlib.suppress(Exception):
                callback(reason)
        session = voice.session
        if session is not None:
            session.close_transport = None  # the dialog is already over: no BYE to send
            await self._end_session(session, voice.end_reason or f"sip {reason}")
        log.info("sip call ended", extra={"call_id": dialog.call_id, "reason": reason})

    # ---- outbound --------------------------------------------------------------------------------

    async def place_call(self, target: str, *, greeting: str | None = None, amd: AmdPlan | None = None,
                         menu: MenuPlan | None = None) -> Session:
        """Dial `target`; returns the session once answered.

        With `amd`, nothing is said until answering-machine detection has decided (its outcome then
        says the greeting, leaves a message or hangs up: internal/telephony/answering_machine.py); the
        session's data holds the run (`AMD`) from the answer on. With `menu`, the agent walks the callee's
        phone menu toward its goal first (internal/telephony/navigation.py; it tells a voicemail greeting
        from a menu itself, so it replaces `amd`'s detection) and greets the person it reaches.
        Raises CallFailed (the callee's final status; 408 for our timeout, 503 when we are full) and
        ValueError for a target that is not a SIP URI. Whatever fails, nothing is left allocated.
        """
        refusal = self._refusal()
        if refusal is not None:
            self.on_refused(refusal)
            raise CallFailed(503, AT_CAPACITY)
        identity = callee_identity(target, self.config, getattr(self.ua, "shared_numbers", frozenset()))
        voice, outbound = await self._dial(target)
        dialog = outbound.dialog
        spoken = greeting or self._greeting_outgoing or None
        try:
            session = await self._connect(voice, dialog, outbound.answer, identity, "" if amd or menu else spoken)
        except BaseException:
            if not voice.ended:  # hanging up ends the dialog, and `ended` releases media and session
                await asyncio.shield(self.ua.hangup(dialog))
            raise
        if menu is not None and voice.pipeline is not None and not session.ended:
            self._walk_menu(voice.pipeline, session, menu, amd, spoken)
        elif amd is not None and voice.pipeline is not None and not session.ended:
            pipeline = voice.pipeline
            plan = replace(amd, greeting=spoken if spoken is not None else pipeline.services.greeting(session))
            stt = pipeline.services.stt
            transcriber = stt if callable(getattr(stt, "transcribe", None)) else None
            run_in_background(pipeline, session, plan, transcriber,  # type: ignore[arg-type]
                              spawn=self.ua.calls.spawn, on_decision=self.on_amd_decision)
        return session

    def _walk_menu(self, pipeline: VoicePipeline, session: Session, menu: MenuPlan, amd: AmdPlan | None,
                   spoken: str | None) -> None:
        message = amd.voicemail_message if amd is not None and amd.outcomes["machine"] == "leave_message" else ""
        plan = replace(menu, greeting=spoken if spoken is not None else pipeline.services.greeting(session),
                       voicemail_message=message, ears=menu.ears if menu.ears is not None else self.menu_ears)
        keypad = CallKeypad(self.ua, self)

        async def press(digits: str) -> str:  # the key of the option chosen: the menu named it
            return await keypad.send(session, digits, source="menu", asked=frozenset(digits))

        walk_in_background(pipeline, session, plan, press, spawn=self.ua.calls.spawn)

    async def dial_leg(self, target: str, *, timeout_s: float) -> SipVoiceCall:
        """A call with media and no session or pipeline (a warm transfer's target): once answered, its RTP
        runs and its route decides what it hears. Raises CallFailed like `place_call`."""
        voice, outbound = await self._dial(target, timeout_s)
        try:
            self._apply_answer(voice, outbound.answer)
        except BaseException:
            if not voice.ended:
                await asyncio.shield(self.ua.hangup(outbound.dialog))
            raise
        voice.dialog = outbound.dialog
        remote = (voice.negotiated.remote_host, voice.negotiated.remote_port) if voice.negotiated else None
        voice.rtp.start(remote)
        return voice

    async def _dial(self, target: str, timeout_s: float | None = None) -> tuple[SipVoiceCall, OutboundCall]:
        toward = SipUri.parse(target if ":" in target else f"sip:{target}").host
        provisional_id = f"out-{secrets.token_hex(8)}"  # until the UA gives the dialog its Call-ID
        try:
            voice = self._new_call(provisional_id, toward)
        except RtpPortsExhausted as exc:
            raise CallFailed(503, str(exc)) from None
        offer = build_offer(media_address(self.config, toward), voice.rtp.local_port, self._codecs,
                            session_id=voice.sdp_session_id)
        voice.srtp_offered = secure_offer(offer, self.config.srtp)
        voice.next_sdp_version()
        try:
            outbound = await self.ua.call(target, offer, timeout_s=timeout_s)
        except BaseException:
            self.calls.pop(provisional_id, None)
            self._release(voice)
            raise
        self.calls.pop(provisional_id, None)
        voice.outbound = True
        voice.call_id = outbound.dialog.call_id
        self.calls[voice.call_id] = voice
        return voice, outbound

    def _apply_answer(self, voice: SipVoiceCall, answer: SessionDescription | None) -> None:
        if answer is None:
            return
        try:
            negotiated, keys = negotiate_media(answer, self._codecs, self.config.srtp, voice.srtp_offered)
        except SdpError as exc:
            raise CallFailed(488, f"the callee's SDP answer is not usable ({exc})") from None
        voice.negotiated = negotiated
        voice.rtp.update((negotiated.remote_host, negotiated.remote_port), negotiated.payload_type,
                         negotiated.dtmf_payload_type, direction(negotiated.direction))
        secure(voice, keys)

    async def _connect(self, voice: SipVoiceCall, dialog: Dialog, answer: SessionDescription | None,
                       identity: CallerIdentity, greeting: str | None) -> Session:
        self._apply_answer(voice, answer)
        try:
            await self._attach_session(voice, identity, greeting=greeting)
        except SessionLimitReached:
            raise CallFailed(503, AT_CAPACITY) from None
        session = voice.session
        assert session is not None
        if voice.ended:
            # The callee hung up while the session was opening, so `ended` found none to end.
            await self._end_session(session, "sip bye")
            raise CallFailed(480, "the callee hung up as soon as it answered")
        await self._start_media(voice, dialog)
        return session

    # ---- shared ----------------------------------------------------------------------------------

    def _new_call(self, call_id: str, toward: str) -> SipVoiceCall:
        route = MediaRoute(call_id)

        def source() -> bytes | None:
            endpoint = route.endpoint
            return endpoint.pull_audio() if endpoint is not None else None

        def sink(pcm: bytes) -> None:
            endpoint = route.endpoint
            if endpoint is not None:
                endpoint.push_audio(pcm)

        def on_dtmf(digit: str) -> None:
            endpoint = route.endpoint
            if endpoint is not None:
                endpoint.push_dtmf(digit)

        def on_timeout() -> None:
            log.warning("no RTP from the caller; ending the call", extra={"call_id": call_id})
            voice_ = self.calls.get(route.call_id)
            if voice_ is not None and voice_.session is not None and voice_.session.close_transport is not None:
                session = voice_.session

                async def end() -> None:
                    await self._end_session(session, "rtp timeout")

                asyncio.get_running_loop().create_task(end())

        rtp = RtpSession(local_host=self.config.bind_host, allocator=self._allocator, scheduler=self._scheduler,
                         payload_type=0, dtmf_payload_type=None, symmetric=self.config.symmetric_rtp,
                         timeout_s=self.config.rtp_timeout_s, jitter_ms=self.config.jitter_ms, source=source,
                         sink=sink, on_dtmf=on_dtmf, on_timeout=on_timeout, signalling_host=toward)
        voice = SipVoiceCall(call_id, rtp, route=route)
        self.calls[call_id] = voice
        return voice

    async def _attach_session(self, voice: SipVoiceCall, identity: CallerIdentity, greeting: str | None) -> None:
        # Cancellation (CANCEL, shutdown) may land while the session opens and memory loads; the
        # OpenSession contract is that an abandoned opening frees its own slot.
        session = await self._open_session(identity, "sip")
        voice.session = session
        session.slots.set(SIP_OUTBOUND, voice.outbound)
        voice.pipeline = self._new_pipeline(session, SAMPLE_RATE, CallLog(voice.call_id), greeting)
        voice.pipeline.caller_away = lambda: caller_away(voice, session)
        log.info("sip call answered", extra={"call_id": voice.call_id, "session_id": session.id,
                                             "identity_kind": identity.kind, "identity_reason": identity.reason})

    async def _start_media(self, voice: SipVoiceCall, dialog: Dialog) -> None:
        session, pipeline = voice.session, voice.pipeline
        assert session is not None and pipeline is not None
        voice.route.call_id = dialog.call_id
        if session.ended:
            # Ended (shutdown, an admin, the agent) while the call was answered but not yet
            # established, when there was no dialog to BYE: hang up now, and start no media.
            log.info("sip session ended before media: hanging up", extra={"call_id": dialog.call_id})
            if self.ua is not None:
                await self.ua.hangup(dialog)
            return

        async def close_transport(reason: str) -> None:
            if not voice.ended and self.ua is not None:
                await self.ua.hangup(dialog)

        async def hangup() -> None:
            await self._end_session(session, "agent ended the call")

        session.close_transport = close_transport
        session.hangup = hangup
        session.slots.set(SIP_CALL_ID, dialog.call_id)
        voice.dialog = dialog
        remote = (voice.negotiated.remote_host, voice.negotiated.remote_port) if voice.negotiated else None
        voice.rtp.start(remote)
        voice.route.endpoint = pipeline
        await pipeline.start()

    def _release(self, voice: SipVoiceCall) -> None:
        voice.route.endpoint = None
        if self.on_media_stats is not None:
            with contextlib.suppress(Exception):
                self.on_media_stats(voice.rtp.stats())
        with contextlib.suppress(Exception):
            voice.rtp.close()


def caller_away(voice: SipVoiceCall, session: Session) -> bool:
    """The caller is away from the conversation: they put the call on hold (our side now only receives, or
    nothing flows), or a transfer is under way. Their silence then is no sign that they have gone."""
    held = voice.negotiated is not None and voice.negotiated.on_hold
    return held or transfer_under_way(session)
