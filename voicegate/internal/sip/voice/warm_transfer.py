"""Warm transfer of a live SIP call: hold the caller, brief the target, bridge the two, leave.

    state = warm.start(session, "sales")      # TargetNotAllowed / NotTransferable, else under way

1. The caller hears the agent finish its sentence, then `warm_transfer.hold_message`, then hold music
   (the caller's media is routed to a HoldPort; the pipeline hears nothing meanwhile).
2. voicegate calls the target (a second leg: RTP and a dialog, no session) from the moment the transfer
   starts, for up to `warm_transfer.ring_timeout_s`.
3. When the target answers and their "hello" is over, they hear the briefing: the call's rolling summary
   (or the caller's words) in `warm_transfer.brief_template`, in the agent's voice.
4. The legs are bridged inside voicegate (each leg's audio to the other; the target's keys to the caller,
   the caller's to the target only with `warm_transfer.relay_caller_keys`), the agent's pipeline closes,
   and the session lives on until either side hangs up, or `warm_transfer.max_bridge_s` is up; then the
   other is hung up too and the session ends "transferred".
A target that is busy, declines, does not answer, or hangs up before the bridge sends the caller back
to the agent, who says why (`warm_transfer.return_message`); the call goes on. A caller who hangs up
meanwhile ends the attempt (the target's call is cancelled or hung up). Each step is a TransferEvent in
the call's events; the outcome settles the call's ledger of actions like a cold transfer's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from voicegate.internal.config.telephony import WarmTransferConfig
from voicegate.internal.conversation.actions import record_action, settle_transfer, transfer_action
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.session import Session
from voicegate.internal.sip.handler import CallFailed
from voicegate.internal.sip.voice.call import SIP_CALL_ID, SipVoiceCall
from voicegate.internal.sip.voice.dtmf import info_body
from voicegate.internal.sip.voice.transfer import (
    IN_PROGRESS,
    TRANSFER_STATE,
    TRANSFERRED,
    CallTransfers,
    NotTransferable,
    TransferPhase,
    TransferState,
    agent_quiet,
    resolve_target,
)
from voicegate.internal.telephony.events import TransferEvent
from voicegate.internal.telephony.leg_media import BriefingPort, HoldPort, bridge, chime, load_hold_music
from voicegate.internal.telephony.warm_transfer import briefing, call_summary, greeting_over, return_message

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often the briefing's progress is looked at (once per transfer, not per frame)
SAMPLE_RATE = 8000
EndSession = Callable[[Session, str], Awaitable[None]]


class TargetGone(Exception):
    """The target's call failed or ended before the bridge; `status` is the SIP status (0: hung up)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class CallerGone(Exception):
    """The caller hung up during the transfer."""


class WarmTransfers:
    """One per server: warm transfers of the SIP calls the handler holds."""

    def __init__(self, config: WarmTransferConfig, transfers: CallTransfers, handler: Any, ua: Any,
                 end_session: EndSession) -> None:
        self.config = config
        self._transfers = transfers
        self._handler = handler
        self._ua = ua
        self._end_session = end_session
        # Read at start-up, so a missing or unreadable file is a start-up error, not a silent caller.
        self._hold_sound = load_hold_music(config.hold_music, SAMPLE_RATE) if config.hold_music else chime(SAMPLE_RATE)

    def start(self, session: Session, wanted: str) -> TransferState:
        """Start a warm transfer; returns at once (the caller is being put on hold)."""
        name, uri = resolve_target(self._transfers.targets, wanted)
        self._transfers.dialog_of(session)  # NotTransferable unless established
        busy = session.slots.get(TRANSFER_STATE)
        if isinstance(busy, TransferState) and busy.phase in IN_PROGRESS:
            raise NotTransferable("a transfer of this call is already under way")
        caller = self._handler.calls.get(session.slots.get(SIP_CALL_ID))
        pipeline = session.pipeline
        if caller is None or pipeline is None:
            raise NotTransferable("the call is not established (not answered yet, or already ended)")
        state = TransferState(name, uri, phase="holding", mode="warm")
        session.slots.set(TRANSFER_STATE, state)
        record_action(session.slots, transfer_action(name))
        self._ua.calls.spawn(self._run(session, caller, pipeline, state))
        return state

    async def _run(self, session: Session, caller: SipVoiceCall, pipeline: VoicePipeline, state: TransferState) -> None:
        caller_gone = asyncio.Event()
        caller.on_end.append(lambda reason: caller_gone.set())
        self._phase(pipeline, state, "holding")
        holding = asyncio.ensure_future(self._hold(session, caller, pipeline))
        dialling = asyncio.ensure_future(self._dial(state.uri))
        self._phase(pipeline, state, "dialling")
        target: SipVoiceCall | None = None
        try:
            try:
                target, port, answered = await _unless(caller_gone, dialling)
            except CallFailed as failure:
                raise TargetGone(failure.status) from None
            await _unless(caller_gone, holding)  # the caller hears the hold message out before the bridge
            await self._brief(session, caller_gone, target, port, answered, pipeline, state)
            self._connect(session, caller, target, pipeline, state)
            await pipeline.close()  # the agent leaves the call
        except CallerGone:
            self._finish(session, pipeline, state, "ended", 0)
            if target is not None:
                await self._hang_up(target)
        except TargetGone as gone:
            holding.cancel()  # a hold message still playing is cut by the news, and no music follows it
            await asyncio.gather(holding, return_exceptions=True)
            await self._return_caller(session, caller, pipeline, state, gone.status)
            if target is not None:
                await self._hang_up(target)
        except BaseException:
            if target is not None:
                await asyncio.shield(self._hang_up(target))
            raise
        finally:
            for task in (dialling, holding):
                if not task.done():
                    task.cancel()  # the UA CANCELs a call still ringing
            await asyncio.gather(dialling, holding, return_exceptions=True)

    async def _dial(self, uri: str) -> tuple[SipVoiceCall, BriefingPort, float]:
        """The target's leg, listening from the moment it answers (for the end of their "hello")."""
        target: SipVoiceCall = await self._handler.dial_leg(uri, timeout_s=self.config.ring_timeout_s)
        port = BriefingPort(SAMPLE_RATE)
        target.route.endpoint = port
        return target, port, asyncio.get_running_loop().time()

    async def _hold(self, session: Session, caller: SipVoiceCall, pipeline: VoicePipeline) -> None:
        await agent_quiet(session)
        if self.config.hold_message:
            await pipeline.say(self.config.hold_message)
        caller.route.endpoint = HoldPort(self._hold_sound, SAMPLE_RATE)

    async def _brief(self, session: Session, caller_gone: asyncio.Event, target: SipVoiceCall, port: BriefingPort,
                     answered: float, pipeline: VoicePipeline, state: TransferState) -> None:
        self._phase(pipeline, state, "briefing")
        loop = asyncio.get_running_loop()

        def check() -> None:
            if caller_gone.is_set():
                raise CallerGone
            if target.ended:
                raise TargetGone(0)

        while not greeting_over(port.first_speech_ms, port.last_speech_ms, int((loop.time() - answered) * 1000),
                                self.config.greet_wait_ms):
            check()
            await asyncio.sleep(POLL_S)
        conversation = session.conversation
        summary = call_summary(conversation.summary.text, conversation.transcript.entries(),
                               self.config.summary_max_chars)
        text = briefing(self.config.brief_template, state.target, summary)
        port.say(b"".join([chunk async for chunk in pipeline.services.tts.synthesize(text, SAMPLE_RATE)]))
        while port.speaking:
            check()
            await asyncio.sleep(POLL_S)
        check()

    def _connect(self, session: Session, caller: SipVoiceCall, target: SipVoiceCall, pipeline: VoicePipeline,
                 state: TransferState) -> None:
        relay = (lambda digit: self._press(target, digit)) if self.config.relay_caller_keys else _kept_from_target
        to_target, to_caller = bridge(relay, lambda digit: self._press(caller, digit))
        caller.route.endpoint, target.route.endpoint = to_target, to_caller
        caller.end_reason = TRANSFERRED
        limit = asyncio.get_running_loop().call_later(self.config.max_bridge_s, self._bridge_too_long,
                                                      session, caller, target)
        caller.on_end.append(lambda reason: limit.cancel())
        target.on_end.append(lambda reason: limit.cancel())
        caller.on_end.append(lambda reason: self._ua.calls.spawn(self._hang_up(target)))
        target.on_end.append(lambda reason: self._ua.calls.spawn(self._end_session(session, TRANSFERRED)))
        self._finish(session, pipeline, state, "connected", 200)

    async def _return_caller(self, session: Session, caller: SipVoiceCall, pipeline: VoicePipeline,
                             state: TransferState, status: int) -> None:
        self._finish(session, pipeline, state, "failed", status)
        if caller.ended or session.ended:
            return
        caller.route.endpoint = pipeline
        pipeline.announce(return_message(self.config.return_message, state.target, status))

    def _bridge_too_long(self, session: Session, caller: SipVoiceCall, target: SipVoiceCall) -> None:
        """`warm_transfer.max_bridge_s` is up: both legs are hung up (a bridge left open, e.g. two
        answering machines talking to each other, would hold a call and its media ports for ever)."""
        call_id = session.slots.get(SIP_CALL_ID)
        log.info("sip warm transfer bridge reached its maximum duration; hanging up",
                 extra={"call_id": call_id, "max_bridge_s": self.config.max_bridge_s})
        self._ua.calls.spawn(self._hang_up(target))
        self._ua.calls.spawn(self._hang_up(caller))

    def _press(self, leg: SipVoiceCall, digit: str) -> None:
        """A key pressed on one side of the bridge, sent on the other (RFC 4733, else SIP INFO)."""
        if leg.ended:
            return
        if leg.rtp.dtmf_negotiated:
            with contextlib.suppress(ValueError):
                leg.rtp.send_dtmf(digit)
        elif leg.dialog is not None:
            self._ua.calls.spawn(self._ua.stack.request_in_dialog(
                leg.dialog, "INFO", body=info_body(digit), content_type="application/dtmf-relay"))

    async def _hang_up(self, leg: SipVoiceCall) -> None:
        if not leg.ended and leg.dialog is not None:
            await self._ua.hangup(leg.dialog)

    def _phase(self, pipeline: VoicePipeline, state: TransferState, phase: TransferPhase, status: int = 0) -> None:
        state.phase, state.status = phase, status
        pipeline.sink.emit(TransferEvent(mode="warm", target=state.target, phase=phase, status=status))  # type: ignore[arg-type]

    def _finish(self, session: Session, pipeline: VoicePipeline, state: TransferState, phase: TransferPhase,
                status: int) -> None:
        self._phase(pipeline, state, phase, status)
        settle_transfer(session.slots, state.target, {"connected": "succeeded"}.get(phase, phase))
        call_id = session.slots.get(SIP_CALL_ID)
        log.info("sip warm transfer %s", phase, extra={"call_id": call_id,
                                                       "transfer_target": state.target, "sip_status": status})


def _kept_from_target(digit: str) -> None:
    """A caller's key on the bridge, not sent on (`warm_transfer.relay_caller_keys` off)."""
    return None


async def _unless(gone: asyncio.Event, work: Awaitable[Any]) -> Any:
    """`work`'s result, unless `gone` is set first (CallerGone; `work` is cancelled unless it is a future
    someone else owns, which is left running)."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if not task.done():
        if not isinstance(work, asyncio.Future):
            task.cancel()
        raise CallerGone
    return task.result()
