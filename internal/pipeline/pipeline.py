"""VoicePipeline: 20 ms PCM frames in, 20 ms PCM frames out, events on the side.

Inbound: every frame goes through the VAD; speech (with a little pre-roll) goes to speech-to-text;
finals are merged into turns by the TurnBuffer. Caller speech over the agent ducks the agent and,
once confirmed (long enough, or meaningful words, and not a backchannel), interrupts it.
Outbound: a released turn becomes one reply (see reply.py) synthesised into the Playout, which the
transport pulls once per tick. The conversation itself lives on the Session, so a resumed transport
carries on with a new pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

from internal.audio.frame import frame_bytes
from internal.llm.base import ChatMessage, ChatRequest, LlmError, Turn
from internal.pipeline.bargein import is_backchannel, is_meaningful_interruption
from internal.pipeline.context import build_system_context
from internal.pipeline.events import (
    AgentState,
    DtmfEvent,
    EventSink,
    ResponseEvent,
    StateEvent,
    TimingEvent,
    TranscriptEvent,
)
from internal.pipeline.playout import Playout
from internal.pipeline.reply import ReplyRunner, speak_text
from internal.pipeline.services import PipelineServices, misunderstanding_note
from internal.pipeline.tools import ToolContext
from internal.pipeline.turns import PendingTurn, TurnBuffer
from internal.pipeline.vad import VadEvent, VadProfile
from internal.session.session import Session
from internal.stt.base import SttStream, Transcript

log = logging.getLogger(__name__)

PRE_ROLL_MS = 300  # audio kept from before the VAD decided speech began, so first syllables survive
DTMF_GAP_S = 1.5  # keypad digits separated by less than this form one entry ("#" ends it at once)
APOLOGY = "Sorry, I'm having trouble answering right now. Could you try again?"
NOT_UNDERSTOOD = "Sorry, I didn't catch that. Could you say it again?"
STILL_NOT_UNDERSTOOD = ("I'm having trouble hearing you. You could try again from a quieter place, "
                        "or use your keypad.")


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
        self._normal_vad = VadProfile(self.config.vad_onset_ms, self.config.vad_offset_ms)
        self._barge_vad = VadProfile(self.config.barge_in_onset_ms, self.config.vad_offset_ms)
        self.vad = services.make_vad(sample_rate, self._normal_vad)
        self._backchannels = frozenset(self.config.backchannels)
        self._pre_roll: deque[bytes] = deque(maxlen=max(1, PRE_ROLL_MS // 20))
        self._stt: SttStream | None = None
        self._stt_task: asyncio.Task[None] | None = None
        self._reply_task: asyncio.Task[None] | None = None
        self._dtmf_digits = ""
        self._dtmf_timer: asyncio.TimerHandle | None = None
        self._turns = TurnBuffer(self.config.turn_merge_ms, self.config.user_speech_quiet_ms, self._on_turn,
                                 clock=clock)
        self.state: AgentState = "listening"
        self._utterance_over_agent = False
        self._speech_frames = 0
        self._speech_ended_at = 0.0
        self._awaiting_finals = 0
        self._turn_released_at = 0.0
        self._first_frame_pending = False
        self._drained = asyncio.Event()
        self._drained.set()
        self._hangup_requested = False
        self._heard_at_interrupt: str | None = None
        self._closed = False
        self._max_utterance_frames = int(self.config.max_utterance_s * 50)

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self._stt = self.services.stt.open(self.sample_rate)
        self._stt_task = asyncio.create_task(self._consume_transcripts(self._stt), name="stt-results")
        conversation = self.session.conversation
        if not conversation.greeted:
            conversation.greeted = True
            text = self._greeting if self._greeting is not None else self.services.greeting(self.session)
            if text:
                self._start_reply(lambda: self._announce(text, record=True))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._turns.close()
        if self._dtmf_timer is not None:
            self._dtmf_timer.cancel()
        await self._cancel_reply()
        if self._stt_task is not None:
            self._stt_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stt_task
        if self._stt is not None:
            with contextlib.suppress(Exception):
                await self._stt.aclose()

    @property
    def agent_active(self) -> bool:
        """The agent is thinking or speaking (a reply is running or audio is queued)."""
        return (self._reply_task is not None and not self._reply_task.done()) or self.playout.active

    @property
    def idle(self) -> bool:
        """Nothing in flight: the caller is not speaking, no turn is pending, the agent is quiet."""
        return not (self.agent_active or self.vad.speaking or self._turns.pending is not None
                    or self._awaiting_finals or self._dtmf_digits)

    # ---- audio in (hot path: called every 20 ms by the transport) ----------------------------------

    def push_audio(self, pcm: bytes) -> None:
        if self._closed or len(pcm) != frame_bytes(self.sample_rate):
            return
        self.vad.profile = self._barge_vad if self.agent_active and self.config.barge_in else self._normal_vad
        event = self.vad.process(pcm)
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
                self._check_barge_in()
            if self._speech_frames >= self._max_utterance_frames:
                self._on_speech_end(stt)  # a caller who never pauses still gets transcribed
                self.vad.speaking = False
        else:
            self._pre_roll.append(pcm)
        self.services.observe_audio(self.session, pcm, event)

    def _on_speech_start(self, stt: SttStream | None) -> None:
        self._speech_frames = 0
        self._utterance_over_agent = self.agent_active
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
        if stt is not None:
            if not stt.continuous:
                self._awaiting_finals += 1
                self._turns.awaiting_final = True
            stt.end_of_speech()
        self._turns.caller_stopped_speaking()

    def _check_barge_in(self) -> None:
        if not (self._utterance_over_agent and self.config.barge_in and self.agent_active):
            return
        if self._speech_frames * 20 >= self.config.barge_in_confirm_ms:
            self.interrupt("caller spoke over the agent")

    # ---- audio out -------------------------------------------------------------------------------

    def pull_audio(self) -> bytes | None:
        """The next 20 ms of agent audio (None when quiet). Called once per tick by the transport."""
        frame = self.playout.pull()
        if frame is not None and self._first_frame_pending:
            self._first_frame_pending = False
            self._set_state("speaking")
            if self._turn_released_at:
                self._timing("first_audio", (self._clock() - self._turn_released_at) * 1000.0)
        if frame is None and not self._drained.is_set() and not self.playout.active:
            self._drained.set()
        return frame

    # ---- transcripts and turns -------------------------------------------------------------------

    async def _consume_transcripts(self, stt: SttStream) -> None:
        async for transcript in stt.results():
            try:
                self._on_transcript(transcript)
            except Exception:  # one bad transcript must not stop the call listening
                log.exception("transcript handling failed")

    def _on_transcript(self, transcript: Transcript) -> None:
        text = transcript.text.strip()
        if transcript.final and not self._stt_is_continuous():
            self._awaiting_finals = max(0, self._awaiting_finals - 1)
            self._turns.awaiting_final = self._awaiting_finals > 0
        if text:
            self.sink.emit(TranscriptEvent(role="user", text=text, final=transcript.final))
        if not transcript.final:
            meaningful = is_meaningful_interruption(text, self._backchannels)
            if self.agent_active and self._utterance_over_agent and meaningful:
                self.interrupt("meaningful words over the agent")
            return
        if self._speech_ended_at:
            self._timing("stt", (self._clock() - self._speech_ended_at) * 1000.0)
        if not text:
            self._turns.add_final("")
            if self._speech_frames * 20 >= 400 and not self._utterance_over_agent and not self.agent_active:
                self._not_understood()
            return
        if self._utterance_over_agent and is_backchannel(text, self._backchannels):
            log.info("backchannel ignored", extra={"text": text})
            self._turns.add_final("")
            return
        if self.agent_active:
            self.interrupt("caller turn while the agent was speaking")
        self._turns.add_final(text, transcript.confidence, self._utterance_over_agent)

    def _stt_is_continuous(self) -> bool:
        return self._stt is not None and self._stt.continuous

    def _on_turn(self, pending: PendingTurn) -> None:
        self._turn_released_at = self._clock()
        self._start_reply(lambda: self._respond(Turn(text=pending.text), pending.confidence))

    def submit_text(self, text: str) -> None:
        """A typed turn (e.g. from the browser's DataChannel): answered like speech, without STT."""
        text = text.strip()
        if not text or self._closed:
            return
        if self.agent_active:
            self.interrupt("typed input")
        self.sink.emit(TranscriptEvent(role="user", text=text, final=True))
        self._turn_released_at = self._clock()
        self._start_reply(lambda: self._respond(Turn(text=text), None))

    def push_dtmf(self, digit: str) -> None:
        """A keypad digit (RFC 4733 or SIP INFO); digits pressed together become one turn."""
        self.sink.emit(DtmfEvent(digit=digit))
        self._dtmf_digits += digit
        if self._dtmf_timer is not None:
            self._dtmf_timer.cancel()
        delay = 0.0 if digit == "#" else DTMF_GAP_S
        self._dtmf_timer = asyncio.get_running_loop().call_later(delay, self._release_dtmf)

    def _release_dtmf(self) -> None:
        digits, self._dtmf_digits = self._dtmf_digits, ""
        self._dtmf_timer = None
        if digits:
            if self.agent_active:
                self.interrupt("keypad input")
            self._turn_released_at = self._clock()
            self._start_reply(lambda: self._respond(Turn(text="", dtmf=digits), None))

    # ---- replies ---------------------------------------------------------------------------------

    def _start_reply(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run one reply (made lazily, so a reply cancelled before it starts leaves no coroutine behind)."""
        previous = self._reply_task
        if previous is not None and not previous.done():
            previous.cancel()
        self._drained.clear()
        self._reply_task = asyncio.create_task(self._guarded(work), name="reply")

    async def _guarded(self, work: Callable[[], Awaitable[None]]) -> None:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reply failed")
            self._set_state("listening")

    def interrupt(self, reason: str) -> None:
        """Barge-in: stop playback now (within this frame) and cancel the reply in flight."""
        task = self._reply_task
        if task is None or task.done():
            if self.playout.active:
                self.playout.clear()
            return
        log.info("agent interrupted", extra={"reason": reason})
        # Silence first, in this very tick; the reply task records what was heard when it unwinds.
        self._heard_at_interrupt = self.playout.clear()
        self.playout.ducked = False
        task.cancel()

    def _take_heard(self) -> str:
        heard = self._heard_at_interrupt
        self._heard_at_interrupt = None
        return heard if heard is not None else self.playout.clear()

    async def _cancel_reply(self) -> None:
        task = self._reply_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _announce(self, text: str, record: bool) -> None:
        """Speak fixed text (greeting, apology) without the model; interruptible like any reply."""
        self._first_frame_pending = True
        try:
            await speak_text(text, self.services.tts, self.playout, lambda: None)
            await self._wait_drained()
        except asyncio.CancelledError:
            heard = self._take_heard()
            if record:
                self._record_agent(heard, interrupted=True, intended=text)
            self._set_state("listening")
            raise
        if record:
            self._record_agent(text)
        self._set_state("listening")

    async def _respond(self, turn: Turn, confidence: float | None) -> None:
        conversation = self.session.conversation
        conversation.turns += 1
        turn_number = conversation.turns
        user_text = turn.text if turn.text else f"[The caller pressed keypad keys: {' '.join(turn.dtmf)}]"
        conversation.transcript.add("user", user_text)
        conversation.history.append(ChatMessage("user", user_text))
        if turn.dtmf:
            self.sink.emit(TranscriptEvent(role="user", text=user_text, final=True))
        conversation.misunderstanding_streak, turn.note = misunderstanding_note(
            confidence, self.config.min_confidence, conversation.misunderstanding_streak)
        conversation.summary.maybe_refresh(conversation.transcript.entries())
        await self.services.before_turn(self.session)
        self._set_state("thinking")
        self._first_frame_pending = True
        turn.summary = conversation.summary.text
        if self.services.retrieve is not None and turn.text:
            turn.context = await self.services.retrieve(self.session, turn.text)
        layers = self.services.context(self.session)
        if self.services.turn_memory is not None and turn.text:
            relevant = await self.services.turn_memory(self.session, turn.text)
            if relevant is not None:
                layers.memory = relevant
        turn.memory = "\n".join(part for part in (layers.user_preferences, layers.memory) if part)
        interrupted = self.session.data.pop("interrupted_text", "")
        turn.interrupted_text = interrupted
        tool_context = ToolContext(self.session.id, self.session.resource_id, turn_number, self._request_hangup,
                                   extras={"session": self.session})
        request = ChatRequest(
            session_id=self.session.id,
            resource_id=self.session.resource_id,
            system=build_system_context(layers, summary=turn.summary, knowledge=turn.context, note=turn.note),
            messages=list(conversation.recent_history()),
            turn=turn,
            tools=self.services.tools.specs(tool_context),
            agent_system=layers.skills,
        )
        runner = ReplyRunner(self.services.model, self.services.tts, self.services.tools, self.playout)
        started = self._clock()

        def first_audio() -> None:
            self._timing("tts_first_audio", (self._clock() - started) * 1000.0, turn_number)

        try:
            try:
                async with asyncio.timeout(self.config.turn_timeout_s):
                    result = await runner.run(request, tool_context, conversation.history, first_audio)
            except (LlmError, TimeoutError) as exc:
                log.error("turn failed: %s", exc if isinstance(exc, LlmError) else "timed out",
                          extra={"turn": turn_number})
                self.playout.clear()
                await self._announce(APOLOGY, record=True)
                return
            if result.timings.first_token is not None:
                self._timing("llm_first_token", result.timings.ms(result.timings.first_token) or 0.0, turn_number)
            if result.text:
                self.sink.emit(ResponseEvent(text=result.text))
            await self._wait_drained()
        except asyncio.CancelledError:
            # Barge-in or hang-up, while generating or while speaking: keep what the caller heard.
            heard = self._take_heard()
            intended = " ".join(runner.spoken)
            self._record_agent(heard, interrupted=True, intended=intended)
            self.session.data["interrupted_text"] = intended
            self.sink.emit(ResponseEvent(text=heard, interrupted=True))
            self._set_state("listening")
            raise
        self.playout.finish_turn()
        self._record_agent(result.text)
        self._set_state("listening")
        await self.services.after_turn(self.session)
        if self._hangup_requested and self.session.hangup is not None:
            await self.session.hangup()

    def _record_agent(self, text: str, interrupted: bool = False, intended: str = "") -> None:
        conversation = self.session.conversation
        if not text:
            return  # nothing was heard (e.g. interrupted while still thinking): nothing to record
        conversation.transcript.add("agent", text, interrupted=interrupted, intended=intended)
        content = f"{text} [interrupted by the caller]" if interrupted else text
        conversation.history.append(ChatMessage("assistant", content))
        if text:
            self.sink.emit(TranscriptEvent(role="agent", text=text, final=True))

    async def _wait_drained(self) -> None:
        if not self.playout.active:
            self._drained.set()
            return
        self._drained.clear()
        await self._drained.wait()

    def _not_understood(self) -> None:
        conversation = self.session.conversation
        conversation.misunderstanding_streak += 1
        text = STILL_NOT_UNDERSTOOD if conversation.misunderstanding_streak > self.config.max_misunderstandings \
            else NOT_UNDERSTOOD
        self._start_reply(lambda: self._announce(text, record=True))

    def _request_hangup(self) -> None:
        self._hangup_requested = True

    # ---- events ----------------------------------------------------------------------------------

    def _set_state(self, state: AgentState) -> None:
        if state != self.state:
            self.state = state
            self.sink.emit(StateEvent(state=state))

    def _timing(self, stage: str, ms: float, turn: int = 0) -> None:
        if self.config.debug:
            self.sink.emit(TimingEvent(stage=stage, ms=round(ms, 2), turn=turn or self.session.conversation.turns))
