"""Answering-machine detection on a live outbound call, and what each answer gets.

From the answer on, the listener holds the call's input (internal/pipeline/capture.py): every frame goes
to the classifier (amd.py), the recogniser's words too, and the greeting so far is transcribed while it
runs when the recogniser can do one-off transcriptions (Whisper, pocketsphinx: "probes"). Nothing is
said until the decision. Then, per class ([amd] on_human / on_machine / on_unknown):
- continue: the call's greeting, and the conversation as usual;
- hangup: end the call;
- leave_message: wait for the beep (or the end of a beep-less greeting), say `voicemail_message`
  (nobody can interrupt it: the machine is recording), then hang up.
The decision and its timing go into the call's events (AmdEvent, VoicemailEvent), the session's `AMD`
slot (POST /calls returns it) and the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from voicegate.internal.audio.frame import FRAME_MS
from voicegate.internal.config.telephony import AmdConfig, AmdOutcome
from voicegate.internal.conversation.slots import Slot
from voicegate.internal.conversation.state import LiveCall
from voicegate.internal.pipeline.capture import CallControl
from voicegate.internal.stt.base import Transcript
from voicegate.internal.telephony.amd import (
    AmdDecision,
    AmdResult,
    AmdSettings,
    AnsweringMachineClassifier,
    MessageTiming,
    message_may_start,
)
from voicegate.internal.telephony.events import AmdEvent, VoicemailEvent

log = logging.getLogger(__name__)

AMD: Slot[AmdRun] = Slot("amd")  # the call's AmdRun
AMD_MESSAGE_AT: Slot[float] = Slot("amd.message_at")  # monotonic time the voicemail message began
TICK_S = 0.1  # time passes for the classifier even when no RTP arrives
PRE_ROLL_MS = 300  # a probe transcribes from a little before the greeting's onset


class Transcriber(Protocol):
    async def transcribe(self, pcm: bytes, sample_rate: int) -> str: ...


@dataclass(frozen=True, slots=True)
class AmdPlan:
    """What one call does: the thresholds, the outcome per class, and what to say."""

    settings: AmdSettings
    timing: MessageTiming
    outcomes: dict[AmdResult, AmdOutcome]
    voicemail_message: str
    greeting: str  # said on "continue"
    probe: bool = True


@dataclass
class AmdRun:
    """One call's detection as the API sees it: the decision (once made) and what it led to."""

    decision: AmdDecision | None = None
    outcome: AmdOutcome | None = None
    message: Literal["", "started", "left", "interrupted"] = ""
    message_ms: int | None = None  # when the message started, from the answer
    beep_end_ms: int | None = None  # when the machine's beep ended, from the answer (None: no beep heard)
    decided: asyncio.Event = field(default_factory=asyncio.Event)

    def describe(self) -> dict[str, object]:
        if self.decision is None:
            return {"result": "pending"}
        return {"result": self.decision.result, "reason": self.decision.reason,
                "decision_ms": self.decision.at_ms, "greeting_ms": self.decision.greeting_ms,
                "outcome": self.outcome, **({"message": self.message} if self.message else {})}


class MachineListener:
    """The CallerInput while detection runs (and while a message waits for the beep)."""

    private = False  # what answered the call we placed: its greeting is shown in the call's events

    def __init__(self, classifier: AnsweringMachineClassifier, transcriber: Transcriber | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.classifier = classifier
        self._transcriber = transcriber
        self._clock = clock
        self._start = clock()
        self._audio = bytearray()
        self._max_bytes = classifier.sample_rate * 2 * (classifier.settings.max_decision_ms // 1000 + 2)
        self.probe: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()

    def now_ms(self) -> int:
        return int((self._clock() - self._start) * 1000)

    def audio(self, pcm: bytes, voiced: bool) -> None:
        classifier = self.classifier
        undecided = classifier.decision is None
        if undecided and len(self._audio) < self._max_bytes:
            self._audio += pcm
        if classifier.feed(pcm, self.now_ms()) is not None or not undecided:
            self.changed.set()
        if self._transcriber is not None and classifier.probe_due():
            self._start_probe(self._transcriber)

    def tick(self) -> None:
        self.classifier.tick(self.now_ms())
        self.changed.set()  # time passing can decide (silence), start the message, or find the call over

    def speech_started(self, preroll_frames: int) -> bool:
        return True  # each utterance is heard on its own

    def speech_ended(self, final_owed: bool) -> None:
        if self.classifier.decision is None:
            self.classifier.utterance_ended()

    def transcript(self, transcript: Transcript) -> None:
        if not transcript.final or transcript.superseded:
            return
        if self.classifier.transcript(transcript.text.strip()) is not None:
            self.changed.set()

    def finals_lost(self, count: int) -> None:
        if count:
            self.transcript(Transcript("", final=True))

    def digit(self, digit: str) -> None:
        return None

    def _start_probe(self, transcriber: Transcriber) -> None:
        onset = self.classifier.heard.onset_ms or 0
        rate = self.classifier.sample_rate
        # The buffer starts at the answer: frame n ends at (n + 1) * 20 ms.
        begin = max(0, (onset - PRE_ROLL_MS) // FRAME_MS) * rate * FRAME_MS // 1000 * 2
        pcm = bytes(self._audio[begin:])
        self.classifier.probe_started()

        async def probe() -> None:
            text = ""
            try:
                text = await transcriber.transcribe(pcm, rate)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the words are a help, never a reason to fail the call
                log.warning("amd probe transcription failed: %s", type(exc).__name__)
            if self.classifier.transcript(text) is not None:
                self.changed.set()

        self.probe = asyncio.get_running_loop().create_task(probe(), name="amd-probe")

    def close(self) -> None:
        if self.probe is not None:
            self.probe.cancel()


async def run_detection(pipeline: CallControl, session: LiveCall, plan: AmdPlan, transcriber: Transcriber | None,
                        on_decision: Callable[[AmdRun], None] = lambda run: None) -> AmdRun:
    """Detect, act on the decision, and return the run (the call may have ended by then)."""
    run = session.slots.setdefault(AMD, AmdRun())
    probing = transcriber if plan.probe else None
    classifier = AnsweringMachineClassifier(plan.settings, pipeline.sample_rate,
                                            words_expected=probing is not None)
    listener = MachineListener(classifier, probing)
    previous = pipeline.take_input(listener)
    ticker = asyncio.get_running_loop().create_task(_ticks(listener), name="amd-ticks")
    try:
        await _wait(listener, lambda: classifier.decision is not None or session.ended)
        decision = classifier.decision
        if decision is None:
            return run  # the callee hung up before anything was decided
        outcome = plan.outcomes[decision.result]
        run.decision, run.outcome = decision, outcome
        run.decided.set()
        pipeline.sink.emit(AmdEvent(result=decision.result, reason=decision.reason, decision_ms=decision.at_ms,
                                    greeting_ms=decision.greeting_ms, outcome=outcome))
        log.info("amd decided", extra={"amd_result": decision.result, "amd_reason": decision.reason,
                                       "ms": decision.at_ms, "amd_outcome": outcome})
        on_decision(run)
        if outcome == "leave_message" and plan.voicemail_message:
            await _wait(listener, lambda: session.ended or message_may_start(
                classifier.heard, classifier.beep, classifier.in_tone, decision.at_ms, plan.timing))
            if not session.ended:
                await _leave_message(pipeline, session, listener, plan, run)
            return run
    finally:
        ticker.cancel()
        listener.close()
        pipeline.hand_back_input(listener, previous)
    if outcome == "continue":
        if plan.greeting:
            pipeline.announce(plan.greeting)
    elif session.hangup is not None:
        await session.hangup()  # hangup, or leave_message with no message to leave
    return run


async def _leave_message(pipeline: CallControl, session: LiveCall, listener: MachineListener, plan: AmdPlan,
                         run: AmdRun) -> None:
    classifier = listener.classifier
    beep = classifier.beep
    after: Literal["beep", "greeting", "wait"] = "beep" if beep is not None else (
        "greeting" if classifier.heard.silent_ms >= plan.timing.after_greeting_silence_ms else "wait")
    run.message_ms, run.beep_end_ms = listener.now_ms(), beep.end_ms if beep is not None else None
    pipeline.sink.emit(VoicemailEvent(after=after, start_ms=run.message_ms, beep_hz=beep.hz if beep else 0.0))
    run.message = "started"
    session.slots.set(AMD_MESSAGE_AT, time.monotonic())
    await pipeline.say(plan.voicemail_message)
    entries = session.conversation.transcript.entries()
    run.message = "left" if entries and entries[-1].role == "agent" and not entries[-1].interrupted else "interrupted"
    if session.hangup is not None and not session.ended:
        await session.hangup()


async def _wait(listener: MachineListener, ready: Callable[[], bool]) -> None:
    while not ready():
        listener.changed.clear()
        await listener.changed.wait()


async def _ticks(listener: MachineListener) -> None:
    while True:
        await asyncio.sleep(TICK_S)
        listener.tick()


def run_in_background(pipeline: CallControl, session: LiveCall, plan: AmdPlan, transcriber: Transcriber | None,
                      spawn: Callable[[Awaitable[None]], object],
                      on_decision: Callable[[AmdRun], None] = lambda run: None) -> AmdRun:
    """Start detection on the call; returns its AmdRun at once (await `run.decided` for the decision)."""
    run = session.slots.setdefault(AMD, AmdRun())
    spawn(_guarded(run_detection(pipeline, session, plan, transcriber, on_decision)))
    return run


async def _guarded(detection: Awaitable[AmdRun]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        try:
            await detection
        except Exception:
            log.exception("answering-machine detection failed")


def plan_from_config(config: AmdConfig, *, voicemail_message: str | None = None, greeting: str = "") -> AmdPlan:
    """A call's plan from the [amd] section (and what the request that placed it overrides)."""
    settings = AmdSettings(
        initial_silence_ms=config.initial_silence_ms, end_silence_ms=config.end_silence_ms,
        human_greeting_ms=config.human_greeting_ms, machine_greeting_ms=config.machine_greeting_ms,
        words_greeting_ms=config.words_greeting_ms, max_human_greeting_ms=config.max_human_greeting_ms,
        word_wait_ms=config.word_wait_ms, first_probe_ms=config.first_probe_ms,
        probe_every_ms=config.probe_every_ms, max_decision_ms=config.max_decision_ms)
    timing = MessageTiming(after_greeting_silence_ms=config.after_greeting_silence_ms,
                           beep_wait_ms=int(config.beep_wait_s * 1000))
    outcomes: dict[AmdResult, AmdOutcome] = {"human": config.on_human, "machine": config.on_machine,
                                             "unknown": config.on_unknown}
    message = config.voicemail_message if voicemail_message is None else voicemail_message
    return AmdPlan(settings, timing, outcomes, message.strip(), greeting, probe=config.probe)
