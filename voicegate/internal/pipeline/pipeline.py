"""VoicePipeline: 20 ms PCM frames in, 20 ms PCM frames out, events on the side. A frame router.

Inbound: every frame goes through noise suppression (optional) and the VAD; speech (with a little
pre-roll) goes to speech-to-text; the VAD's events, the recogniser's transcripts and key presses go to
whichever input holds the call: the TurnOwner (internal/turn/owner.py), which gathers the caller's turn
and decides when it is over, or for a while a digit form or an answering-machine listener (capture.py).
The turn's rules for the frames (the barge-in onset while the agent can be heard, the forced end of an
utterance past max_utterance_s, whether the recogniser's head judges the turns) are internal/turn/'s pure
functions, which the pipeline only applies. Phone flows reach the call through the CallControl port
(capture.py), which this class implements.
Outbound: the Responder (responder.py) plays replies; the Playout holds the audio the transport pulls
once per tick. The conversation itself lives on the call (a Session, seen here as a CallContext), so a
resumed transport carries on with a new pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from voicegate.internal.audio.frame import frame_bytes
from voicegate.internal.conversation.state import CallContext
from voicegate.internal.conversation.text import clean
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.pipeline.capture import CallerInput, shown
from voicegate.internal.pipeline.events import AgentState, DtmfEvent, TranscriptEvent
from voicegate.internal.pipeline.idle import IdleCaller
from voicegate.internal.pipeline.playout import Playout
from voicegate.internal.pipeline.record import record_caller
from voicegate.internal.pipeline.responder import APOLOGY, Responder
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.stt.base import SttStream, Transcript
from voicegate.internal.turn.bargein import listens_for_barge_in
from voicegate.internal.turn.owner import TurnOwner, TurnSettings
from voicegate.internal.turn.policy import forced_end, judged_by_head, max_utterance_frames
from voicegate.internal.turn.vad import VadEvent, VadProfile

log = logging.getLogger(__name__)

PRE_ROLL_MS = 300  # audio kept from before the VAD decided speech began, so first syllables survive
STT_REOPENS_PER_CALL = 3  # fresh streams after the engine's stream dies, before the call goes on without
__all__ = ["APOLOGY", "VoicePipeline"]


class VoicePipeline:
    def __init__(self, session: CallContext, services: PipelineServices, sample_rate: int, sink: EventSink,
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
        self._pre_roll: deque[bytes] = deque(maxlen=max(1, PRE_ROLL_MS // 20))
        self._stt: SttStream | None = None
        self._stt_task: asyncio.Task[None] | None = None
        self._stt_deadlines: deque[asyncio.TimerHandle] = deque()  # one per final the recogniser owes
        self._stt_reopens = 0
        self._utterance_frames = 0
        self._closed = False
        self._max_utterance_frames = max_utterance_frames(self.config.max_utterance_s)
        self._frame_bytes = frame_bytes(sample_rate)
        self._recording = recording = services.recording(session, sample_rate, sink) if services.recording else None
        if recording is not None:  # no reply is prepared for a consent answer: no model is asked about it
            self.responder.may_prepare = lambda text: not recording.concerns(text)
        prefetch = services.prefetch
        by_head = judged_by_head(self.config.end_of_turn, self.config.phone_turn_head,
                                 bool(getattr(services.stt, "end_of_turn_head", False)), sample_rate)
        self.turn = TurnOwner(
            TurnSettings.from_config(self.config), self.responder, self.vad, sample_rate,
            model=services.turn_model, fusion=services.turn_fusion,
            backchannels=frozenset(self.config.backchannels),
            prefetch=(lambda text: prefetch(session, text)) if prefetch is not None else None,
            intercept=self._about_recording, recogniser_verdicts=by_head,
            clock=clock, events=sink)
        # While set, the caller's keys and words go to it, not to the turn (capture.py): digit collection,
        # answering-machine detection.
        self.capture: CallerInput | None = None
        # The transport says when the caller is away from the conversation (on hold, being transferred): their
        # silence then is no sign that they have gone (internal/pipeline/idle.py).
        self.caller_away: Callable[[], bool] = lambda: False
        self.idle_caller = IdleCaller(self.config, self.responder, session, sink, self._silence_means_idle)

    @property
    def input(self) -> CallerInput:
        """Whichever input holds the call now."""
        return self.capture if self.capture is not None else self.turn

    # ---- CallControl (capture.py): what the phone flows may do --------------------------------------

    @property
    def turn_input(self) -> CallerInput:
        return self.turn

    def take_input(self, holder: CallerInput) -> CallerInput | None:
        previous, self.capture = self.capture, holder
        return previous

    def hand_back_input(self, holder: CallerInput, to: CallerInput | None) -> None:
        if self.capture is holder:
            self.capture = to

    def clear_playout(self) -> None:
        self.playout.clear()

    async def say(self, text: str) -> None:
        await self.responder.say(text)

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
        self.turn.close()
        for deadline in self._stt_deadlines:
            deadline.cancel()
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
        return not (self.agent_active or self.vad.speaking or self.turn.busy or self._stt_deadlines)

    def _silence_means_idle(self) -> bool:
        """Is the caller's silence now a sign that they may have gone? Not while anything is in flight, and
        not in a digit form (it has its own timeouts), on hold or in a transfer, or while the recording question
        awaits its answer (a "yes" to "are you still there?" would be taken as consent)."""
        recording = self._recording
        return (self.idle and self.capture is None and not self.caller_away()
                and not (recording is not None and recording.asking))

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
        vad = self.vad
        barge = listens_for_barge_in(self.agent_audible, self.config.barge_in)
        vad.profile = self._barge_vad if barge else self._normal_vad
        event = vad.process(pcm)
        target = self.input
        target.audio(pcm, vad.voiced)
        stt = self._stt
        if stt is not None and stt.continuous:
            stt.push(pcm)
        if event is VadEvent.SPEECH_START:
            self._utterance_frames = 0
            self.idle_caller.caller_active()
            if target.speech_started(len(self._pre_roll)) and stt is not None:
                stt.new_turn()
            if stt is not None and not stt.continuous:
                for earlier in self._pre_roll:
                    stt.push(earlier)
            self._pre_roll.clear()
        elif event is VadEvent.SPEECH_END:
            self._speech_ended(target)
        if vad.speaking:
            if stt is not None and not stt.continuous:
                stt.push(pcm)
            if vad.voiced:
                self._utterance_frames += 1
            if forced_end(self._utterance_frames, self._max_utterance_frames):
                self._speech_ended(target)  # a caller who never pauses still gets transcribed
                vad.speaking = False
        else:
            self._pre_roll.append(pcm)
        self.services.observe_audio(self.session, pcm, event)

    def _speech_ended(self, target: CallerInput) -> None:
        stt = self._stt
        owed = stt is not None and not stt.continuous
        if owed:
            self._stt_deadlines.append(asyncio.get_running_loop().call_later(
                self.config.turn_timeout_s, self._stt_timed_out))
        if stt is not None:
            stt.end_of_speech()
        target.speech_ended(owed)
        if stt is None and self._stt_reopens:
            target.finals_lost(1)  # the recogniser is gone for this call (_stt_failed): ask to repeat

    # ---- audio out -------------------------------------------------------------------------------

    def pull_audio(self) -> bytes | None:
        """The next 20 ms of agent audio (None when quiet). Called once per tick by the transport."""
        frame = self.playout.pull()
        self.responder.frame_pulled(frame)
        if not self._closed:
            self.idle_caller.tick()
        if self._recording is not None:
            self._recording.said(frame)  # every tick, quiet or not: the recording's clock
        return frame

    # ---- transcripts -----------------------------------------------------------------------------

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
        self.input.finals_lost(owed)
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
        if transcript.final and self._stt is not None and not self._stt.continuous and self._stt_deadlines:
            self._stt_deadlines.popleft().cancel()
        text = transcript.text.strip()
        if text and not transcript.superseded:
            whole = transcript.final and transcript.whole_turn
            self.sink.emit(shown(self.capture, TranscriptEvent(role="user", text=text, final=transcript.final,
                                                               replaces=whole and self.turn.holds_words)))
        self.input.transcript(transcript)

    def _stt_timed_out(self) -> None:
        """A transcript that never came (a hung or crashed engine): tell the caller, keep listening."""
        if self._stt_deadlines:
            self._stt_deadlines.popleft()
        log.error("speech-to-text gave no transcript in time; asking the caller to repeat")
        self.input.finals_lost(1)

    # ---- turns that are not for the agent ------------------------------------------------------------

    def _about_recording(self, text: str, keys: str = "") -> bool:
        """The caller answered the recording question or opted out: that turn is consent, not a question
        for the agent, which says the recording's reply instead (both kept in the conversation)."""
        recording = self._recording
        reply = None if recording is None else recording.caller_pressed(keys) if keys else recording.caller_said(text)
        if reply is None:
            return False
        if self.agent_active:
            self.interrupt("recording consent")
        record_caller(self.session, text or f"[The caller pressed keypad keys: {' '.join(keys)}]")
        self.responder.start(lambda: self.responder.announce(reply))
        return True

    # ---- typed turns and keys ----------------------------------------------------------------------

    def submit_text(self, text: str) -> None:
        """A typed turn (e.g. from the browser's DataChannel): answered like speech, without STT. Control
        characters are removed first (internal/conversation/text.py): nothing downstream keeps them."""
        text = clean(text).strip()
        if not text or self._closed:
            return
        self.sink.emit(TranscriptEvent(role="user", text=text, final=True))
        self.idle_caller.caller_active()  # a typed answer to "are you still there?" is an answer
        self.turn.typed(text)

    def push_dtmf(self, digit: str) -> None:
        """A keypad digit (RFC 4733 or SIP INFO); digits pressed together become one turn."""
        self.sink.emit(shown(self.capture, DtmfEvent(digit=digit)))  # masked while a digit form collects
        self.idle_caller.caller_active()
        self.input.digit(digit)
