"""The agent's side of a call: one reply at a time, interruptible, recorded, timed and traced.

The turn owner (internal/turn/owner.py) decides *when* the agent answers, and *whether* a sound over it
stops it, through the `Replies` port (internal/turn/ports.py) this class implements; the Responder
decides *how*: it builds the request from the session's conversation and context layers, runs the reply
(reply.py), records what the caller actually heard, apologises when the model fails, and hangs up after
a farewell. Each turn becomes a trace span with a child span per stage, and each stage's latency a
metric. The turn announces its own decisions (`release`, `overlap`); the Responder's events are the
agent's (`response`, `state`, its transcript lines, and how a prepared reply was used: `turn`).

A reply may be *prepared* before the turn is released (`prepare`): the model and the first sentence's
synthesis run from the transcript while the end-of-turn decision is still out, into a held playout,
with side-effect tools waiting at their gate; `release` plays it, or throws it away and starts afresh
when the words changed. A released reply the caller talks over at once can be *absorbed* (`absorb`):
they were finishing their sentence, so it goes, unrecorded, and the whole sentence is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import trace

from voicegate.internal.conversation.actions import record_action, tool_action
from voicegate.internal.conversation.slots import Slot
from voicegate.internal.conversation.state import CallContext
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.llm.base import LlmError, ToolCall, Turn
from voicegate.internal.pipeline.events import AgentState, ResponseEvent, StateEvent, TranscriptEvent
from voicegate.internal.pipeline.meter import TurnMeter
from voicegate.internal.pipeline.playout import Playout
from voicegate.internal.pipeline.record import INTERRUPTED_TEXT, record_agent, record_turn
from voicegate.internal.pipeline.reply import ReplyRunner, speak_text
from voicegate.internal.pipeline.request import build_request
from voicegate.internal.pipeline.services import PipelineServices, misunderstanding_note
from voicegate.internal.pipeline.thinking import ThinkingCue, ThinkingCues
from voicegate.internal.pipeline.turn_reply import TurnReply
from voicegate.internal.tools.registry import ToolContext
from voicegate.internal.turn.pending import Release, TurnTimes
from voicegate.internal.turn.ports import AfterFalseAlarm
from voicegate.internal.turn.text_cues import same_turn_text

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I'm having trouble answering right now. Could you try again?"
TOO_BUSY = "Sorry, I'm very busy right now. Please say that again."
NOT_UNDERSTOOD = "Sorry, I didn't catch that. Could you say it again?"
STILL_NOT_UNDERSTOOD = ("I'm having trouble hearing you. You could try again from a quieter place, "
                        "or use your keypad.")
SESSION_SPAN: Slot[trace.Span] = Slot("telemetry.span")  # the session's trace span


class Responder:
    def __init__(self, session: CallContext, services: PipelineServices, playout: Playout, sink: EventSink,
                 clock: Callable[[], float]) -> None:
        self.session = session
        self.services = services
        self.config = services.config
        self.playout = playout
        self.sink = sink
        self._clock = clock
        self.state: AgentState = "listening"
        self._task: asyncio.Task[None] | None = None
        self._reply: TurnReply | None = None  # the released turn reply (until it is done or replaced)
        self._prepared: TurnReply | None = None  # a reply started before its turn was released
        self._holding: TurnReply | None = None  # the reply held because the caller spoke right after it
        self._heard_at_interrupt: str | None = None
        self._paused = False  # paused for the caller's sound over the agent (pause, false_alarm)
        self._hangup_requested = False
        self._drained = asyncio.Event()
        self._drained.set()
        self._first_frame_pending = False
        self._released_at = 0.0
        self._first_frame_at = 0.0
        self.prepared_used = 0  # prepared replies that were played
        self.prepared_discarded = 0  # prepared replies thrown away (the words changed, the caller went on)
        self.absorbed_unheard = 0  # released replies dropped before the caller heard them
        self.absorbed_heard = 0  # released replies cut off because the caller went on (they heard some)
        # Words a reply may be prepared for before the turn is over: not a recording consent's answer, which
        # no model is asked about (pipeline.py sets it when the call is recorded).
        self.may_prepare: Callable[[str], bool] = lambda text: True
        self.meter = TurnMeter(session, services, sink, clock)
        self.timing = self.meter.timing
        self.thinking = ThinkingCues(self.config, services.tts, playout, sink, self.timing, clock, services.cue_audio)

    @property
    def active(self) -> bool:
        """A reply is running or its audio is still queued (a reply still being prepared is not)."""
        running = self._task is not None and not self._task.done()
        return running or (self.playout.active and self._prepared is None)

    @property
    def audible(self) -> bool:
        """The agent is active and not holding its audio: what the caller hears or is about to."""
        return self.active and not self.playout.held

    @property
    def paused(self) -> bool:
        """Silent for the caller's sound over it, until the words say whether it was a turn."""
        return self._paused

    def absorbable(self) -> bool:
        """Could the caller's next words still join the turn just answered?"""
        reply = self._reply
        # Barge-in off: the caller's speech never stops an agent they can hear, so only a reply not yet heard.
        window = self.config.continuation_window_ms if self.config.barge_in else 0
        return reply is not None and reply.absorbable(self._clock(), window)

    # ---- running replies -------------------------------------------------------------------------

    def start(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run one reply (made lazily, so a reply cancelled before it starts leaves no coroutine behind)."""
        self.discard_prepared()
        self._reply = None
        self._run(work)

    def aside(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` like a reply, outside any turn (the idle prompt, the goodbye): no turn's latency."""
        self._released_at = 0.0
        self.start(work)

    def _run(self, work: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        previous = self._task
        if previous is not None and not previous.done():
            previous.cancel()
        self._drained.clear()
        self._task = asyncio.create_task(self._guarded(work), name="reply")
        return self._task

    async def _guarded(self, work: Callable[[], Awaitable[None]]) -> None:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reply failed")
            self.set_state("listening")

    def prepare(self, text: str, confidence: float | None, times: TurnTimes) -> None:
        """Start answering `text` now, in a held playout, in case it turns out to be the whole turn."""
        if not self.config.preemptive_reply or self.active or not self.may_prepare(text):
            return
        if self._prepared is not None:
            if same_turn_text(self._prepared.text, text):
                return
            self.discard_prepared()
        reply = TurnReply(text, prepared_at=self._clock())
        self._prepared = reply
        self.playout.held = True
        reply.task = asyncio.create_task(
            self._guarded(lambda: self.respond(Turn(text=text, prepared=True), confidence, times, reply)),
            name="prepared-reply")

    def discard_prepared(self) -> None:
        reply, self._prepared = self._prepared, None
        if reply is None:
            return
        self.prepared_discarded += 1
        if reply.task is not None:
            reply.task.cancel()
        self.playout.clear()
        self.playout.held = False
        self.meter.turn_event("prepared_discarded")

    def release(self, turn: Turn, confidence: float | None, times: TurnTimes, why: Release | None = None) -> None:
        """The caller's turn is over: play the reply prepared for these words, or start one now."""
        if why is not None:
            self.meter.released(why)
        reply = self._prepared
        if reply is not None and same_turn_text(reply.text, turn.text) and reply.running and not turn.dtmf:
            self._prepared = None
            self.prepared_used += 1
            self.meter.turn_event("prepared_used")
            previous = self._task
            if previous is not None and not previous.done():
                previous.cancel()
            self._drained.clear()
            self._task = reply.task
        else:
            self.discard_prepared()
            reply = TurnReply(turn.text, prepared_at=self._clock())
            reply.task = self._run(lambda: self.respond(turn, confidence, times, reply))
        self._reply = reply
        self._released_at = times.released or self._clock()
        self._first_frame_pending = True
        self.playout.held = False
        reply.released.set()
        self.set_state("thinking")

    def duck(self, ducked: bool) -> None:
        """The caller may be talking over the agent: lower its voice until they stop (or it is stopped)."""
        self.playout.ducked = ducked

    def pause(self) -> None:
        """The caller's sound over the agent may be a turn: silent from this frame on, the reply kept."""
        self._paused = True
        self.playout.held = True
        self.playout.ducked = False

    def false_alarm(self) -> AfterFalseAlarm:
        """The sound over the agent was no turn: play on; a sentence cut off by a pause starts again. Says
        what it did (the turn owner reports it as an `overlap` event)."""
        ducked = self.playout.ducked
        self.playout.ducked = False
        if self._paused:
            self._paused = False
            self.playout.held = False
            sentence = self.playout.rewind_sentence()
            self.meter.turn_event("resumed")
            return "resumed", sentence
        return ("played_on", "") if ducked else None

    def stage(self, name: str, ms: float) -> None:
        """A latency of the turn about to be answered."""
        self.timing(name, ms, self.session.conversation.turns + 1)

    def hold(self) -> None:
        """The caller started speaking right after the reply began: stop the sound now, keep the reply
        (its continuation window is judged now, not when the words are in)."""
        self._holding = self._reply
        self.playout.held = True
        self.playout.ducked = False

    def resume(self) -> None:
        """They were not going on after all (a cough, "mm"): play the rest."""
        self._holding = None
        self.playout.held = False

    def absorb(self) -> bool:
        """The caller went on with the turn just answered: drop its reply (False: too late for that)."""
        reply, self._holding = self._holding, None
        if reply is None or reply is not self._reply or not reply.running or reply.side_effects:
            self.playout.held = False
            return False
        reply.absorbed = True
        reply.heard_text = self.playout.clear()
        self.playout.held = False
        if reply.heard:
            self.absorbed_heard += 1
            self.meter.turn_event("continued_after_reply_heard")
        else:
            self.absorbed_unheard += 1
            self.meter.turn_event("continued_before_reply")
        self._reply = None
        if reply.task is not None:
            reply.task.cancel()
        return True

    def interrupt(self, reason: str) -> None:
        """Barge-in: stop playback now (within this frame) and cancel the reply in flight."""
        task = self._task
        if task is None or task.done():
            if self.playout.active and self._prepared is None:
                self.playout.clear()
            return
        log.info("agent interrupted", extra={"reason": reason})
        # Silence first, in this very tick; the reply task records what was heard when it unwinds.
        self._heard_at_interrupt = self.playout.clear()
        self.playout.ducked = False
        self.playout.held = False
        self._paused = False
        task.cancel()

    async def cancel(self) -> None:
        self.discard_prepared()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _take_heard(self) -> str:
        heard = self._heard_at_interrupt
        self._heard_at_interrupt = None
        return heard if heard is not None else self.playout.clear()

    def frame_pulled(self, frame: bytes | None) -> None:
        """Called by the pipeline for every outbound tick: first-audio timing and drain detection."""
        if frame is not None and self._first_frame_pending and not self.playout.last_aside:
            self._first_frame_pending = False
            self._first_frame_at = self._clock()
            reply = self._reply
            if reply is not None and not reply.heard:
                reply.heard = True
                reply.first_audio_at = self._first_frame_at
            self.set_state("speaking")
            if self._released_at:
                self.timing("first_audio", (self._first_frame_at - self._released_at) * 1000.0)
        if frame is None and not self._drained.is_set() and not self.playout.active:
            self._drained.set()

    async def _wait_drained(self) -> None:
        if not self.playout.active:
            self._drained.set()
            return
        self._drained.clear()
        await self._drained.wait()

    # ---- what the agent says ---------------------------------------------------------------------

    async def settled(self) -> None:
        """Wait for the reply running now (if any) to end, however it ends."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.gather(asyncio.shield(task), return_exceptions=True)

    async def say(self, text: str) -> None:
        """Speak `text` as the agent (recorded like a reply) and return once it has been played."""
        self.start(lambda: self.announce(text))
        await self.settled()

    async def announce(self, text: str, record: bool = True) -> None:
        """Speak fixed text (greeting, apology) without the model; interruptible like any reply."""
        self._first_frame_pending = True
        try:
            try:
                async with asyncio.timeout(self.config.turn_timeout_s):
                    await speak_text(text, self.services.tts, self.playout, lambda: None)
            except TimeoutError:  # a hung synthesiser: say nothing rather than hang the call
                log.error("speech synthesis timed out; the agent stays quiet this turn")
                self.playout.clear()
                self.set_state("listening")
                return
            await self._wait_drained()
        except asyncio.CancelledError:
            heard = self._take_heard()
            if record:
                record_agent(self.session, self.sink, heard, interrupted=True, intended=text)
            self.set_state("listening")
            raise
        # Played to the end: forget its segments, or the next reply cut short by a barge-in would report
        # this greeting (or apology) as part of what the caller heard of it.
        self.playout.finish_turn()
        if record:
            record_agent(self.session, self.sink, text)
        self.set_state("listening")

    def too_busy(self) -> None:
        """The recogniser shed the caller's words (server at capacity): say so, briefly; not a
        misunderstanding, so it does not count towards giving up."""
        self.start(lambda: self.announce(TOO_BUSY))

    def not_understood(self) -> None:
        conversation = self.session.conversation
        conversation.misunderstanding_streak += 1
        too_many = conversation.misunderstanding_streak > self.config.max_misunderstandings
        text = STILL_NOT_UNDERSTOOD if too_many else NOT_UNDERSTOOD
        self.start(lambda: self.announce(text))

    async def respond(self, turn: Turn, confidence: float | None, times: TurnTimes, reply: TurnReply) -> None:
        """Answer `turn` as `reply`: prepared (not released yet) or released (`release`, which typed turns and
        keys go through too)."""
        parent = self.session.slots.get(SESSION_SPAN)
        context = trace.set_span_in_context(parent) if parent is not None else None
        span = self.services.tracer.start_span("turn", context=context,
                                               start_time=self.meter.ns(times.speech_ended or reply.prepared_at))
        cue = self.thinking.watch(reply.released, lambda: self._released_at)
        try:
            with trace.use_span(span, end_on_exit=False):
                await self._respond(turn, confidence, times, span, reply, cue)
        finally:
            cue.stop()
            if reply.released.is_set() and not reply.absorbed:
                span.end(end_time=self.meter.ns(self._clock()))  # a reply thrown away leaves no span

    async def _respond(self, turn: Turn, confidence: float | None, times: TurnTimes, span: Any,
                       reply: TurnReply, cue: ThinkingCue) -> None:
        conversation = self.session.conversation
        number = conversation.turns + 1
        span.set_attribute("voicegate.turn", number)
        user_text = turn.text if turn.text else f"[The caller pressed keypad keys: {' '.join(turn.dtmf)}]"
        streak, turn.note = misunderstanding_note(confidence, self.config.min_confidence,
                                                  conversation.misunderstanding_streak)
        slots = self.session.slots
        tool_context = ToolContext(self.session.id, self.session.resource_id, number, self._request_hangup,
                                   # heard: the other side's words this turn (send_dtmf is offered if they ask for keys)
                                   extras={"session": self.session, "heard": turn.text},
                                   record_tool=lambda name, ok: record_action(slots, tool_action(name, ok)))
        request = await build_request(self.session, self.services, turn, user_text, tool_context)

        async def before_tool(call: ToolCall) -> None:
            cue.tool_called(self.services.tools.is_slow(call))
            if self.services.tools.has_side_effects(call):
                await reply.released.wait()  # never for a turn that may still be thrown away
                reply.side_effects = True

        runner = ReplyRunner(self.services.model, self.services.tts, self.services.tools, self.playout, before_tool)
        started = self._clock()
        first_audio: list[float] = []

        def audio_ready() -> None:
            cue.answered()
            first_audio.append(self._clock())
            self.timing("tts_first_audio", (first_audio[0] - started) * 1000.0, number)

        def commit(agent_text: str, interrupted: bool = False, intended: str = "") -> None:
            record_turn(self.session, self.sink, user_text, reply.exchange, streak=streak, keypad=bool(turn.dtmf),
                        agent_text=agent_text, interrupted=interrupted, intended=intended)

        try:
            try:
                async with asyncio.timeout(self.config.turn_timeout_s) as deadline:
                    tool_context.extend_deadline = lambda seconds: _extend(deadline, seconds)
                    result = await runner.run(request, tool_context, reply.exchange, audio_ready)
            except (LlmError, TimeoutError) as exc:
                await reply.released.wait()
                log.error("turn failed: %s", exc if isinstance(exc, LlmError) else "timed out", extra={"turn": number})
                span.set_attribute("voicegate.outcome", "failed")
                self.playout.clear()
                commit("")
                await self.announce(APOLOGY)
                return
            await reply.released.wait()
            self.meter.stage_span("endpointing", times.speech_ended, self._released_at)
            self.meter.stage_span("stt", times.speech_ended, times.final)
            first_token = result.timings.first_token
            if first_token is not None:
                self.timing("llm_first_token", (first_token - started) * 1000.0, number)
                self.meter.stage_span("llm.first_token", started, first_token)
                if first_audio:
                    self.meter.stage_span("tts.first_audio", first_token, first_audio[0])
            span.set_attribute("voicegate.tool_calls", result.tool_calls)
            await self._wait_drained()
        except asyncio.CancelledError:
            if not reply.released.is_set():
                raise  # a prepared reply thrown away: nothing happened
            if reply.absorbed and not reply.side_effects:
                # The caller went on with this turn: the reply goes unrecorded in the history (the whole
                # sentence is answered next); what they heard of it stays in the transcript.
                if reply.heard_text:
                    conversation.transcript.add("agent", reply.heard_text, interrupted=True,
                                                intended=" ".join(runner.spoken))
                    self.sink.emit(TranscriptEvent(role="agent", text=reply.heard_text, final=True))
                    self.sink.emit(ResponseEvent(text=reply.heard_text, interrupted=True))
                span.set_attribute("voicegate.outcome", "absorbed")
                self.set_state("listening")
                raise
            # Barge-in or hang-up, while generating or while speaking: keep what the caller heard.
            heard = self._take_heard()
            intended = " ".join(runner.spoken)
            commit(heard, interrupted=True, intended=intended)
            self.session.slots.set(INTERRUPTED_TEXT, intended)
            self.sink.emit(ResponseEvent(text=heard, interrupted=True))
            span.set_attribute("voicegate.outcome", "interrupted")
            self.set_state("listening")
            raise
        self.playout.finish_turn()
        if result.text:  # once it has played: a reply the caller talked over at once may still be dropped
            self.sink.emit(ResponseEvent(text=result.text))
        commit(result.text)
        span.set_attribute("voicegate.outcome", "answered")
        self.set_state("listening")
        if self._reply is reply:
            self._reply = None
        await self.services.after_turn(self.session)
        if self._hangup_requested and self.session.hangup is not None:
            await self.session.hangup()

    def _request_hangup(self) -> None:
        self._hangup_requested = True

    # ---- events, metrics, spans ------------------------------------------------------------------

    def set_state(self, state: AgentState) -> None:
        if state != self.state:
            self.state = state
            self.sink.emit(StateEvent(state=state))


def _extend(deadline: asyncio.Timeout, seconds: float) -> None:
    """A tool that waits on the caller (collect_digits) keeps the turn's timeout from cutting it off."""
    wanted = asyncio.get_running_loop().time() + seconds
    when = deadline.when()
    if when is not None and when < wanted:
        deadline.reschedule(wanted)
