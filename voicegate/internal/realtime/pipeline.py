"""RealtimePipeline: a VoicePipeline whose agent is a Realtime speech-to-speech model (docs/realtime.md).

Every transport takes it unchanged: it pushes 20 ms caller frames and pulls 20 ms agent frames. Inbound,
each frame goes to the model at its rate, one `input_audio_buffer.append` per frame; the model hears the
caller, decides when their turn is over (server or semantic VAD; or voicegate's VAD commits the turn) and
answers. Outbound, its audio deltas go through the inherited Playout, which paces them and counts what the
caller heard of each item: a barge-in clears it at once and truncates the item at that offset.

The conversation is kept as the cascade keeps it (internal/pipeline/record.py), so the TranscriptLog, the
rolling summary, the hang-up digest and the recording work unchanged; memory and tools come from
internal/realtime/memory.py. When the model fails (it cannot be reached, refuses the key, rate-limits,
drops the socket, or stalls) the caller hears the apology in the local voice, then the call hangs up or the
cascade takes over ([realtime] on_failure), never dead air.
"""

from __future__ import annotations

import asyncio
import logging

from voicegate.internal.conversation.text import clean
from voicegate.internal.pipeline.capture import CallerInput
from voicegate.internal.pipeline.events import DtmfEvent, TranscriptEvent
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.realtime import protocol
from voicegate.internal.realtime.audio import heard_ms
from voicegate.internal.realtime.link import ModelLink
from voicegate.internal.realtime.replies import Ask, CallerTurn, cancel_after_truncate
from voicegate.internal.turn.vad import VadEvent

log = logging.getLogger(__name__)


class RealtimePipeline(ModelLink):
    # ---- the agent's state ------------------------------------------------------------------------

    @property
    def agent_active(self) -> bool:
        if self.fallback:
            return super().agent_active
        return bool(self._replies or self._asks) or self.responder.active or self.playout.active

    @property
    def agent_audible(self) -> bool:
        return self.agent_active and not self.playout.held

    @property
    def idle(self) -> bool:
        if self.fallback:
            return super().idle
        return not (self.agent_active or self._caller_speaking or self._tasks)

    # ---- audio in (hot path) ------------------------------------------------------------------------

    def push_audio(self, pcm: bytes) -> None:
        if self.fallback:
            return super().push_audio(pcm)
        if self._closed or len(pcm) != self._frame_bytes:
            return
        stamp = self._clock()
        if self._recording is not None:
            self._recording.heard(pcm)
        if self.capture is not None:
            return self._held(self.capture, pcm)
        conn = self._conn
        if conn is not None:
            conn.send(protocol.audio_append(self._uplink.process(pcm)), stamp)
        event: VadEvent | None = None
        if not self._server_turns:  # voicegate's VAD owns the turn
            vad = self.vad
            vad.profile = self._barge_vad if self.agent_audible and self.config.barge_in else self._normal_vad
            event = vad.process(pcm)
            if event is VadEvent.SPEECH_START:
                self._speech_started("caller speech")
            elif event is VadEvent.SPEECH_END:
                self._caller_speaking = False
                self._commit_turn()
        self.services.observe_audio(self.session, pcm, event)

    def _held(self, capture: CallerInput, pcm: bytes) -> None:
        """A phone flow holds the caller's input (answering-machine detection on a call we placed): it gets
        the sound and voicegate's VAD events, as the cascade gives them; the model hears none of it, so it
        does not answer a voicemail greeting. (No words: the model's transcription is not running for it.)"""
        vad = self.vad
        vad.profile = self._normal_vad
        event = vad.process(pcm)
        capture.audio(pcm, vad.voiced)
        if event is VadEvent.SPEECH_START:
            capture.speech_started(0)
        elif event is VadEvent.SPEECH_END:
            capture.speech_ended(False)
        self.services.observe_audio(self.session, pcm, event)

    def _commit_turn(self) -> None:
        """voicegate's VAD heard the end of the caller's speech: their turn goes to the model."""
        if self._conn is None:
            return
        self._turn_starts()
        self._conn.send(protocol.audio_commit())
        self._ask(Ask("turn", CallerTurn(None)), create=True)

    # ---- audio out ---------------------------------------------------------------------------------

    def pull_audio(self) -> bytes | None:
        if self.fallback:
            return super().pull_audio()
        frame = self.playout.pull()
        self.responder.frame_pulled(frame)
        if frame is not None and self._out_stamp:
            self.latency.outbound.append((self._clock() - self._out_stamp) * 1000.0)
            self._out_stamp = 0.0
        if self._replies:
            self._played(frame)
        if not self._closed:
            self.idle_caller.tick()
            self._maybe_idle_point()
        if self._recording is not None:
            self._recording.said(frame)
        return frame

    def _played(self, frame: bytes | None) -> None:
        """Each tick: the state follows the model's audio; replies played to the end are recorded."""
        for reply in list(self._replies.values()):
            if frame is not None and not reply.heard and reply.segment is not None and reply.segment.played:
                reply.heard = True
                self.responder.set_state("speaking")
                if reply.ask.kind == "turn":  # the model's answer time, as the cascade's first_audio
                    self.responder.timing("first_audio", (self._clock() - reply.ask.at) * 1000.0,
                                          self.session.conversation.turns + 1)
            if not reply.played_out() or reply.calls_pending:
                return  # in order: a later reply is recorded after this one
            del self._replies[reply.id]
            self._finish(reply)
        if not self._replies and not self._asks and not self.responder.active:
            self.responder.set_state("listening")

    # ---- barge-in ---------------------------------------------------------------------------------

    def interrupt(self, reason: str) -> None:
        """Stop the agent now: playout cleared in this tick, the model's item truncated at what the caller
        heard of it, its response cancelled while it runs; what was heard is recorded as interrupted."""
        if self.fallback:
            return super().interrupt(reason)
        playing = [reply for reply in self._replies.values() if reply.segment is not None]
        heard = {reply.id: (heard_ms(reply.segment.played), reply.segment.heard_text())
                 for reply in playing if reply.segment is not None}  # before anything clears the playout
        self.responder.interrupt(reason)  # a local line (the apology, an idle prompt) stops too
        self.playout.clear()
        conn = self._conn
        for reply in list(self._replies.values()):
            if reply.calls_pending:
                continue
            ms, text = heard.get(reply.id, (0, ""))
            if conn is not None:
                if reply.item_id and reply.segment is not None:
                    conn.send(protocol.truncate(reply.item_id, ms))
                if cancel_after_truncate(reply.running):
                    conn.send(protocol.response_cancel())
                    self._cancelling.add(reply.id)
            del self._replies[reply.id]
            self._record(reply, text, interrupted=True)
        log.info("agent interrupted", extra={"reason": reason})
        self.responder.set_state("listening")

    # ---- typed turns, keys, fixed lines -----------------------------------------------------------

    def submit_text(self, text: str) -> None:
        if self.fallback:
            return super().submit_text(text)
        text = clean(text).strip()
        if not text or self._closed:
            return
        self.sink.emit(TranscriptEvent(role="user", text=text, final=True))
        self.idle_caller.caller_active()
        if self.agent_active:
            self.interrupt("typed input")
        if self._about_recording(text):
            return
        self._user_turn(CallerTurn(text))

    def push_dtmf(self, digit: str) -> None:
        if self.fallback or self.capture is not None:
            return super().push_dtmf(digit)
        self.sink.emit(DtmfEvent(digit=digit))
        self.idle_caller.caller_active()
        self._keys.press(digit)

    def announce(self, text: str) -> None:
        """A fixed line from the transport (a failed transfer), said by the model in its voice."""
        if self.fallback or self._conn is None:
            return super().announce(text)
        if not self._closed:
            self._ask(Ask("announce"), create=True, instructions=protocol.verbatim(text))

    # ---- failure ----------------------------------------------------------------------------------

    def _fail(self, reason: str, at_start: bool = False) -> None:
        """The model is no use for this call any more: apologise in the local voice, then hang up or let
        the cascade carry on. Logged with its reason, never the caller's words."""
        if self._failed or self._ending:
            return
        self._failed = True
        cascade = self.realtime.on_failure == "cascade"
        log.error("realtime model failed: %s; %s", reason, "the cascade takes over" if cascade else "hanging up")
        self._cancel_stall()
        if self._replies:
            self.interrupt("model failure")
        self._asks.clear()
        conn, self._conn = self._conn, None
        if conn is not None:
            self._spawn(conn.close(), "realtime-close")
        if cascade:
            self.fallback = True
            self._caller_speaking = False
            self._spawn(self._cascade(greet=at_start), "realtime-fallback")
            return
        self.responder.start(self._apologise_and_hang_up)

    async def _apologise_and_hang_up(self) -> None:
        await self.responder.announce(self.realtime.apology)
        if self.session.hangup is not None:
            await self.session.hangup()

    async def _cascade(self, greet: bool) -> None:
        """From here the call is the cascade's: its recogniser listens; the caller first hears the apology
        (or, when the model was never reached, just the cascade's greeting: they saw no trouble)."""
        if greet:
            await VoicePipeline.start(self)
            return
        self._stt = self.services.stt.open(self.sample_rate)
        self._stt_task = asyncio.create_task(self._consume_transcripts(self._stt), name="stt-results")
        self.responder.start(lambda: self.responder.announce(self.realtime.apology))
