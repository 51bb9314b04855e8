"""VoicePipeline: 20 ms PCM frames in, 20 ms PCM frames out, events on the side.

Inbound: every frame goes through the VAD; speech (with a little pre-roll) goes to speech-to-text;
finals are gathered into turns by the TurnBuffer, which releases a turn when the caller has finished
(Smart Turn and the words, fused). Caller speech over the agent ducks the agent and, once confirmed
(long enough, or meaningful words, and not a backchannel), interrupts it.
Outbound: a reply is prepared as soon as the turn's transcript is in and plays when the turn is
released (responder.py); a caller who goes on right after a release was not done: the reply is
dropped (or stopped, if it had begun) and the whole sentence is answered once. The Playout holds the
audio the transport pulls once per tick. The conversation itself lives on the Session, so a resumed
transport carries on with a new pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from internal.audio.frame import frame_bytes
from internal.llm.base import Turn
from internal.pipeline.bargein import is_backchannel, is_meaningful_interruption, too_many_words
from internal.pipeline.capture import CallerInput, shown
from internal.pipeline.endpointing import Endpointing
from internal.pipeline.events import AgentState, DtmfEvent, EventSink, TranscriptEvent
from internal.pipeline.keypad import Keypad
from internal.pipeline.playout import Playout
from internal.pipeline.record import record_caller
from internal.pipeline.responder import APOLOGY, Responder, TurnTimes
from internal.pipeline.services import PipelineServices
from internal.pipeline.text import clean
from internal.pipeline.turns import PendingTurn, TurnBuffer
from internal.pipeline.vad import VadEvent, VadProfile
from internal.session.session import Session
from internal.stt.base import SttStream, Transcript

log = logging.getLogger(__name__)

PRE_ROLL_MS = 300  # audio kept from before the VAD decided speech began, so first syllables survive
STT_REOPENS_PER_CALL = 3  # fresh streams after the engine's stream dies, before the call goes on without
MIN_ASKED_SPEECH_MS = 240  # shorter utterances (a cough, a click, "mm") are left to the text rules
__all__ = ["APOLOGY", "VoicePipeline"]


class VoicePipeline:
    def __init__(self, session: Session, services: PipelineServices, sample_rate: int, sink: EventSink,
                 *, greeting: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self.services = services
        self.config = services.config
        self.sample_rate = sample_rate
        self.sink = sink
        self._greeting = greeting
        self._clock = clock
        self.playout = Playout(sample_rate, duck_gain=self.config.duck_gain)
        self.responder = Responder(session, services, self.playout, sink, clock)
        self._normal_vad = VadProfile(self.config.vad_onset_ms, self.config.vad_offset_ms)
        self._barge_vad = VadProfile(self.config.barge_in_onset_ms, self.config.vad_offset_ms)
        self.vad = services.make_vad(sample_rate, self._normal_vad)
        self._denoiser = services.make_denoiser(sample_rate)
        self._backchannels = frozenset(self.config.backchannels)
        self._pre_roll: deque[bytes] = deque(maxlen=max(1, PRE_ROLL_MS // 20))
        self._stt: SttStream | None = None
        self._stt_task: asyncio.Task[None] | None = None
        self._keypad = Keypad(self._release_dtmf)
        # While set, the caller's keys and words go to it, not to turns (capture.py): digit collection,
        # answering-machine detection.
        self.capture: CallerInput | None = None
        self._turns = TurnBuffer(self.config.turn_merge_ms, self.config.user_speech_quiet_ms, self._on_turn,
                                 clock=clock, max_turn_wait_ms=self.config.max_turn_wait_ms,
                                 fusion=services.turn_fusion, threshold=self.config.end_of_turn_threshold,
                                 on_decision=lambda pending, p: self._endpointing.decided(pending, p))
        self._endpointing = Endpointing(services, self._turns, self.responder, self.vad, sample_rate,
                                        self._backchannels, lambda: TurnTimes(self._speech_ended_at, self._final_at))
        self._utterance_over_agent = False
        self._speech_frames = 0
        self._turn_voiced_frames = 0  # voiced frames of the turn in progress (all its utterances)
        self._speech_ended_at = 0.0
        self._final_at = 0.0
        self._awaiting_finals = 0
        self._stt_deadlines: deque[asyncio.TimerHandle] = deque()
        self._stt_reopens = 0
        self._closed = False
        self._max_utterance_frames = int(self.config.max_utterance_s * 50)
        self._frame_bytes = frame_bytes(sample_rate)
        self._recording = recording = services.recording(session, sample_rate, sink) if services.recording else None
        if recording is not None:  # no reply is prepared for a consent answer: no model is asked about it
            self.responder.may_prepare = lambda text: not recording.concerns(text)

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self._stt = self.services.stt.open(self.sample_rate)
        self._stt_task = asyncio.create_task(self._consume_transcripts(self._stt), name="stt-results")
        conversation = self.session.conversation
        if not conversation.greeted:
            conversation.greeted = True
            text = self._greeting if self._greeting is not None else self.services.greeting(self.session)
            if self._recording is not None:  # the consent question, or the announcement, comes first
                text = self._recording.opening(text)
            if text:
                self.responder.start(lambda: self.responder.announce(text))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._turns.close()
        self._endpointing.close()
        for deadline in self._stt_deadlines:
            deadline.cancel()
        self._keypad.close()
        await self.responder.cancel()
        if self._stt_task is not None:
            self._stt_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stt_task
        if self._stt is not None:
            with contextlib.suppress(Exception):
                await self._stt.aclose()

    @property
    def state(self) -> AgentState:
        return self.responder.state

    @property
    def agent_active(self) -> bool:
        """The agent is thinking or speaking (a reply is running or audio is queued)."""
        return self.responder.active

    @property
    def agent_audible(self) -> bool:
        """Active, and not holding its audio (a reply held while the caller goes on is not talked over)."""
        return self.responder.audible

    @property
    def idle(self) -> bool:
        """Nothing in flight: the caller is not speaking, no turn is pending, the agent is quiet."""
        return not (self.agent_active or self.vad.speaking or self._turns.pending is not None
                    or self._awaiting_finals or self._keypad.pending)

    def interrupt(self, reason: str) -> None:
        self.responder.interrupt(reason)

    def announce(self, text: str) -> None:
        """Say `text` as the agent, outside any turn (news from the transport, e.g. a failed transfer);
        it is recorded in the transcript like a reply."""
        if not self._closed:
            self.responder.start(lambda: self.responder.announce(text))

    # ---- audio in (hot path: called every 20 ms by the transport) ----------------------------------

    def push_audio(self, pcm: bytes) -> None:
        if self._closed or len(pcm) != self._frame_bytes:
            return
        if self._recording is not None:
            self._recording.heard(pcm)  # what the caller sent, before any noise suppression
        if self._denoiser is not None:
            pcm = self._denoiser.process(pcm)
        self.vad.profile = self._barge_vad if self.agent_audible and self.config.barge_in else self._normal_vad
        event = self.vad.process(pcm)
        if self.capture is not None:
            self.capture.audio(pcm)
        self._endpointing.hear(pcm, self.vad.voiced)
        stt = self._stt
        if stt is not None and stt.continuous:
            stt.push(pcm)
        if event is VadEvent.SPEECH_START:
            self._on_speech_start(stt)
        elif event is VadEvent.SPEECH_END:
            self._on_speech_end(stt)
        if self.vad.speaking:
            if stt is not None and not stt.continuous:
                stt.push(pcm)
            if self.vad.voiced:
                self._speech_frames += 1
                self._turn_voiced_frames += 1
                self._check_barge_in()
            if self._speech_frames >= self._max_utterance_frames:
                self._on_speech_end(stt)  # a caller who never pauses still gets transcribed
                self.vad.speaking = False
        else:
            self._pre_roll.append(pcm)
        self.services.observe_audio(self.session, pcm, event)

    def _on_speech_start(self, stt: SttStream | None) -> None:
        self._speech_frames = 0
        if self.capture is not None:  # no turn, no barge-in: the holder hears each utterance on its own
            self._utterance_over_agent = False
            if stt is not None:
                stt.new_turn()
            if stt is not None and not stt.continuous:
                for earlier in self._pre_roll:
                    stt.push(earlier)
            self._pre_roll.clear()
            self.capture.speech_started()
            return
        continuing = self._endpointing.speech_started()
        self._utterance_over_agent = not continuing and self.agent_audible
        if self._turns.pending is None and not self._awaiting_finals and not continuing:
            self._endpointing.new_turn(len(self._pre_roll) + self.vad.profile.onset_frames)
            self._turn_voiced_frames = 0
            if stt is not None:
                stt.new_turn()
        self._turns.caller_started_speaking()
        if stt is not None and not stt.continuous:
            for earlier in self._pre_roll:
                stt.push(earlier)
        self._pre_roll.clear()
        if self._utterance_over_agent and self.config.barge_in:
            self.playout.ducked = True

    def _on_speech_end(self, stt: SttStream | None) -> None:
        self._speech_ended_at = self._clock()
        self.playout.ducked = False
        if self.capture is not None:
            if stt is not None and not stt.continuous:
                self._awaiting_finals += 1
                self._stt_deadlines.append(asyncio.get_running_loop().call_later(
                    self.config.turn_timeout_s, self._stt_timed_out))
            if stt is not None:
                stt.end_of_speech()
            self.capture.speech_ended()
            return
        if stt is None and self._stt_reopens and not self._utterance_over_agent and not self.agent_active:
            self.responder.not_understood()  # the recogniser is gone for this call (_stt_failed)
        if stt is not None:
            if not stt.continuous:
                self._awaiting_finals += 1
                self._turns.awaiting_final = True
                self._stt_deadlines.append(asyncio.get_running_loop().call_later(
                    self.config.turn_timeout_s, self._stt_timed_out))
            stt.end_of_speech()
        model = self.services.turn_model
        # Ask the model only about an utterance that can end the caller's turn: long enough to hold words
        # (not a cough or a click) and not spoken over the agent (a backchannel or a barge-in).
        ask = (model is not None and self._speech_frames * 20 >= MIN_ASKED_SPEECH_MS
               and not self._utterance_over_agent)
        silence = self._turns.caller_stopped_speaking(verdict_expected=ask, snr_db=self.vad.snr_db)
        final_owed = self._stt is not None and not self._stt.continuous
        self._endpointing.silence(silence, ask, self.vad.profile.offset_frames, final_owed)

    def _check_barge_in(self) -> None:
        if not (self._utterance_over_agent and self.config.barge_in and self.agent_active) or self.capture:
            return
        if self._speech_frames * 20 >= self.config.barge_in_confirm_ms:
            self.interrupt("caller spoke over the agent")

    # ---- audio out -------------------------------------------------------------------------------

    def pull_audio(self) -> bytes | None:
        """The next 20 ms of agent audio (None when quiet). Called once per tick by the transport."""
        frame = self.playout.pull()
        self.responder.frame_pulled(frame)
        if self._recording is not None:
            self._recording.said(frame)  # every tick, quiet or not: the recording's clock
        return frame

    # ---- transcripts and turns -------------------------------------------------------------------

    async def _consume_transcripts(self, stt: SttStream) -> None:
        try:
            async for transcript in stt.results():
                try:
                    self._on_transcript(transcript)
                except Exception:  # one bad transcript must not stop the call listening
                    log.exception("transcript handling failed")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("speech-to-text stream failed")
            self._stt_failed()
            with contextlib.suppress(Exception):
                await stt.aclose()

    def _stt_failed(self) -> None:
        """The engine's stream died: what it still owed is not coming, so the caller is asked to repeat
        now, not when the turn timeout runs out; a fresh stream listens from here (a few times a call)."""
        owed = len(self._stt_deadlines)
        for deadline in self._stt_deadlines:
            deadline.cancel()
        self._stt_deadlines.clear()
        self._awaiting_finals = 0
        self._turns.awaiting_final = False
        self._endpointing.end_continuation()
        if owed and self.capture is not None:
            self.capture.transcript("", True)
        elif owed and not self.agent_active:
            self.responder.not_understood()
        if self._closed:
            return
        if self._stt_reopens >= STT_REOPENS_PER_CALL:
            log.error("speech-to-text failed %d times in this call; typed turns and keys still work",
                      self._stt_reopens + 1)
            self._stt = None  # no recogniser: each utterance is answered with a request to repeat
            return
        self._stt_reopens += 1
        try:
            self._stt = self.services.stt.open(self.sample_rate)
        except Exception:
            log.exception("speech-to-text could not open a new stream; typed turns and keys still work")
            self._stt = None
            return
        self._stt_task = asyncio.create_task(self._consume_transcripts(self._stt), name="stt-results")

    def _on_transcript(self, transcript: Transcript) -> None:
        text = transcript.text.strip()
        whole = transcript.final and transcript.whole_turn
        if transcript.final and not self._stt_is_continuous():
            if self._stt_deadlines:
                self._stt_deadlines.popleft().cancel()
            self._awaiting_finals = max(0, self._awaiting_finals - 1)
            self._turns.awaiting_final = self._awaiting_finals > 0
        if transcript.superseded:
            return  # a later final of this turn holds the same words and more
        if text:
            replaces = whole and (self._turns.pending is not None or self._endpointing.continuing)
            self.sink.emit(shown(self.capture, TranscriptEvent(role="user", text=text, final=transcript.final,
                                                               replaces=replaces)))
        if self.capture is not None:
            self.capture.transcript(text, transcript.final)
            return
        if not transcript.final:
            meaningful = is_meaningful_interruption(text, self._backchannels)
            if self.agent_active and self._utterance_over_agent and meaningful:
                self.interrupt("meaningful words over the agent")
            return
        self._final_at = self._clock()
        if self._speech_ended_at:
            # This final belongs to the turn about to be answered, not to the last one.
            self.responder.timing("stt", (self._final_at - self._speech_ended_at) * 1000.0,
                                  self.session.conversation.turns + 1)
        self._take_final(text, transcript, whole)
        self._endpointing.words_in(awaiting=self._awaiting_finals > 0)

    def _take_final(self, text: str, transcript: Transcript, whole: bool) -> None:
        if self._endpointing.continuing and self._endpointing.took_back(text, transcript):
            self._prefetch()
            return
        if not text:
            self._turns.add_final("")
            if transcript.overloaded and not self.agent_active:
                self.responder.too_busy()
            elif self._speech_frames * 20 >= 400 and not self._utterance_over_agent and not self.agent_active:
                self.responder.not_understood()
            return
        over = self._utterance_over_agent
        if over and (is_backchannel(text, self._backchannels) or too_many_words(text, self._turn_voiced_frames * 20)):
            log.info("backchannel ignored", extra={"text": text})
            self._turns.add_final("")
            return
        if self.agent_active:
            self.interrupt("caller turn while the agent was speaking")
        self._turns.add_final(text, transcript.confidence, self._utterance_over_agent, replace=whole)
        self._prefetch()

    def _prefetch(self) -> None:
        pending = self._turns.pending
        if self.services.prefetch is not None and pending is not None:
            # Overlap retrieval with the merge wait; the turn reuses it when no more words arrive.
            self.services.prefetch(self.session, pending.text)

    def _stt_timed_out(self) -> None:
        """A transcript that never came (a hung or crashed engine): tell the caller, keep listening."""
        if self._stt_deadlines:
            self._stt_deadlines.popleft()
        self._awaiting_finals = max(0, self._awaiting_finals - 1)
        self._turns.awaiting_final = self._awaiting_finals > 0
        self._endpointing.end_continuation()
        log.error("speech-to-text gave no transcript in time; asking the caller to repeat")
        if self.capture is not None:
            self.capture.transcript("", True)  # the holder stops waiting for these words
        elif not self.agent_active:
            self.responder.not_understood()

    def _stt_is_continuous(self) -> bool:
        return self._stt is not None and self._stt.continuous

    def _on_turn(self, pending: PendingTurn) -> None:
        times = TurnTimes(self._speech_ended_at, self._final_at, self._clock())
        if self._speech_ended_at:
            # From the caller's last sound (the VAD's offset before its decision) to the release.
            self.responder.timing("end_of_turn", (times.released - self._speech_ended_at) * 1000.0
                                  + self.config.vad_offset_ms, self.session.conversation.turns + 1)
        if self._about_recording(pending.text):
            return
        self._endpointing.released = pending
        self.responder.release(Turn(text=pending.text), pending.confidence, times)

    def _about_recording(self, text: str, keys: str = "") -> bool:
        """The caller answered the recording question or opted out: that turn is consent, not a question
        for the agent, which says the recording's reply instead (both kept in the conversation)."""
        recording = self._recording
        reply = None if recording is None else recording.caller_pressed(keys) if keys else recording.caller_said(text)
        if reply is None:
            return False
        self._endpointing.released = None
        if self.agent_active:
            self.interrupt("recording consent")
        record_caller(self.session, text or f"[The caller pressed keypad keys: {' '.join(keys)}]")
        self.responder.start(lambda: self.responder.announce(reply))
        return True

    def submit_text(self, text: str) -> None:
        """A typed turn (e.g. from the browser's DataChannel): answered like speech, without STT. Control
        characters are removed first (internal/pipeline/text.py): nothing downstream keeps them."""
        text = clean(text).strip()
        if not text or self._closed:
            return
        if self.agent_active:
            self.interrupt("typed input")
        self._endpointing.released = None
        self.sink.emit(TranscriptEvent(role="user", text=text, final=True))
        if self._about_recording(text):
            return
        times = TurnTimes(released=self._clock())
        self.responder.start(lambda: self.responder.respond(Turn(text=text), None, times))

    def push_dtmf(self, digit: str) -> None:
        """A keypad digit (RFC 4733 or SIP INFO); digits pressed together become one turn."""
        self.sink.emit(shown(self.capture, DtmfEvent(digit=digit)))  # masked while a digit form collects
        if self.capture is not None:
            self.capture.digit(digit)
            return
        self._keypad.press(digit)

    def _release_dtmf(self, digits: str) -> None:
        if self._about_recording("", digits):
            return
        self._endpointing.released = None
        if self.agent_active:
            self.interrupt("keypad input")
        times = TurnTimes(released=self._clock())
        self.responder.start(lambda: self.responder.respond(Turn(text="", dtmf=digits), None, times))
