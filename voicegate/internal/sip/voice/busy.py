"""[admission] busy = "message": a caller the node cannot serve hears "all lines are busy", then our BYE.

Some callers reach a node through no dispatcher that would try another on a 503 (a trunk straight to one
node, a phone that shows "503" as a failed call). For them a short spoken busy is clearer than a
rejected call. The call gets media and nothing else: no session, no pipeline, no recogniser, no model;
the message comes from the phrase cache (rendered once, internal/tts/phrases.py), so a busy node spends
almost nothing on it. A call that does not answer our 200 with an ACK, or an offerless INVITE (its answer
would come in the ACK), is refused with 503 instead, upstream in the handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.handler import IncomingCall
from voicegate.internal.sip.sdes import negotiate_media, secure_answer
from voicegate.internal.sip.sdp import SessionDescription, build_answer
from voicegate.internal.sip.voice.call import SipVoiceCall, direction, media_address, secure
from voicegate.internal.telephony.leg_media import BriefingPort

if TYPE_CHECKING:
    from voicegate.internal.sip.voice.handler import VoiceCallHandler

log = logging.getLogger("voicegate.internal.sip.voice")

SAMPLE_RATE = 8000
POLL_S = 0.05
TAIL_S = 0.3  # quiet after the message before the BYE: the last word is not clipped by a jitter buffer

BusyAudio = Callable[[], Awaitable[bytes]]  # the busy message as 8 kHz PCM16 (from the phrase cache)


class BusyLine:
    def __init__(self, handler: VoiceCallHandler, audio: BusyAudio) -> None:
        self._handler = handler
        self._audio = audio
        self._expected: set[str] = set()
        self._calls: dict[str, SipVoiceCall] = {}
        self.told = 0  # callers who heard the whole message

    def expect(self, call_id: str) -> None:
        self._expected.add(call_id)

    def expected(self, call_id: str) -> bool:
        return call_id in self._expected

    async def answer(self, call: IncomingCall, dialog: Dialog) -> SessionDescription:
        assert call.offer is not None  # the handler refuses an offerless INVITE with 503 instead
        handler = self._handler
        negotiated, keys = negotiate_media(call.offer, list(handler.config.codecs), handler.config.srtp)
        voice = handler._new_call(call.call_id, call.source.host)
        handler.calls.pop(call.call_id, None)  # not a live call: no session, not counted as one
        self._calls[call.call_id] = voice
        voice.negotiated = negotiated
        voice.rtp.update((negotiated.remote_host, negotiated.remote_port), negotiated.payload_type,
                         negotiated.dtmf_payload_type, direction(negotiated.direction))
        secure(voice, keys)
        answer = build_answer(negotiated, media_address(handler.config, call.source.host), voice.rtp.local_port,
                              voice.sdp_session_id, offer=call.offer, session_version=voice.next_sdp_version())
        return secure_answer(answer, call.offer, negotiated, keys)

    async def confirmed(self, dialog: Dialog) -> None:
        voice = self._calls.get(dialog.call_id)
        if voice is None or voice.ended:
            return
        port = BriefingPort(SAMPLE_RATE)
        voice.route.endpoint = port
        voice.dialog = dialog
        remote = (voice.negotiated.remote_host, voice.negotiated.remote_port) if voice.negotiated else None
        voice.rtp.start(remote)
        ua = self._handler.ua
        ua.calls.spawn(self._tell(voice, port, dialog))

    async def _tell(self, voice: SipVoiceCall, port: BriefingPort, dialog: Dialog) -> None:
        log.info("sip caller told the lines are busy", extra={"call_id": dialog.call_id})
        try:
            pcm = await self._audio()
            port.say(pcm)
            # Sent at 20 ms a frame by the call's RTP; bounded, so a stalled sender still ends in our BYE.
            for _ in range(int((len(pcm) / (2 * SAMPLE_RATE) * 2 + 5) / POLL_S)):
                if not port.speaking or voice.ended:
                    break
                await asyncio.sleep(POLL_S)
            await asyncio.sleep(TAIL_S)
            if not voice.ended:
                self.told += 1
        except Exception:  # a render that failed: the caller still gets the BYE, never dead air
            log.exception("busy message failed", extra={"call_id": dialog.call_id})
        finally:
            if not voice.ended:
                with contextlib.suppress(Exception):
                    await self._handler.ua.hangup(dialog)

    def ended(self, call_id: str) -> None:
        self._expected.discard(call_id)
        voice = self._calls.pop(call_id, None)
        if voice is not None and not voice.ended:
            voice.ended = True
            voice.route.endpoint = None
            with contextlib.suppress(Exception):
                voice.rtp.close()
