"""Typed events a call emits on the side of its audio, delivered through a transport-neutral sink.

WebRTC sends them on the DataChannel `events`; the control-plane WebSocket sends the owner's
`memory.changed`; SIP calls hand them to the server's event sink (logs, metrics). Events never carry
memory content or an owner id.
"""

from __future__ import annotations

import time
from typing import Literal, Protocol

from pydantic import BaseModel, Field

AgentState = Literal["listening", "thinking", "speaking"]


class Event(BaseModel):
    type: str
    ts: float = Field(default_factory=time.time)


class TranscriptEvent(Event):
    type: Literal["transcript"] = "transcript"
    role: Literal["user", "agent"] = "user"
    text: str
    final: bool
    # A user final that is the whole turn so far, heard again after the caller went on: it replaces the
    # turn's earlier line rather than adding one.
    replaces: bool = False
    # The caller's words while a digit form collected them (they may be a PIN or a card): `text` is a
    # placeholder, never the words (internal/pipeline/capture.py).
    masked: bool = False


class ResponseEvent(Event):
    type: Literal["response"] = "response"
    text: str
    interrupted: bool = False


class StateEvent(Event):
    type: Literal["state"] = "state"
    state: AgentState


class TimingEvent(Event):
    type: Literal["timing"] = "timing"
    stage: str  # stt, llm_first_token, tts_first_audio, first_audio, turn
    ms: float
    turn: int = 0


TurnOutcome = Literal["prepared_used", "prepared_discarded", "continued_before_reply", "continued_after_reply_heard",
                      "resumed"]


class TurnEvent(Event):
    """How a turn was taken: a prepared reply played or thrown away, or the caller went on after a release
    (before the reply was heard: absorbed unheard; after: a premature end of turn the caller heard)."""

    type: Literal["turn"] = "turn"
    outcome: TurnOutcome


class ReleaseEvent(Event):
    """The caller's turn was released to the agent, and why: `verdict` (the end-of-turn verdict reached the
    threshold: answered at once), `hold` (unsure: held for the caller to go on, then answered), `text_rules`
    (no end-of-turn model), `keypad` or `typed`. `probability`: the fused P(finished) it was decided on;
    `silence_ms`: from the caller's last sound to the release (0 for keys and typed turns)."""

    type: Literal["release"] = "release"
    reason: Literal["verdict", "hold", "text_rules", "keypad", "typed"]
    probability: float | None = None
    silence_ms: float = 0.0


class ConnectionEvent(Event):
    type: Literal["connection"] = "connection"
    state: Literal["connected", "resumed", "ended"]
    session_id: str = ""
    reason: str = ""


class DtmfEvent(Event):
    type: Literal["dtmf"] = "dtmf"
    digit: str  # "" when masked
    masked: bool = False  # pressed while a digit form collected keys: which key is never said


ConsentOutcome = Literal["pending", "not_asked", "announced", "granted", "declined", "no_answer", "opted_out"]


class RecordingEvent(Event):
    """The call's recording consent moved: `recording` says whether the call is being recorded from now
    on (docs/recording.md). Never carries audio, a file name or who the caller is."""

    type: Literal["recording"] = "recording"
    consent: ConsentOutcome
    recording: bool
    paused: bool = False  # consent holds, but a sensitive digit form has the recording paused (silence)


class DigitsEvent(Event):
    """A digit form ended (collect_digits). Never the digits themselves: they may be a PIN or a card."""

    type: Literal["digits"] = "digits"
    form: str = ""  # the [digits.forms] name, "" for a form the model described
    status: Literal["complete", "invalid", "timeout"]
    via: Literal["keys", "speech", "both", ""] = ""
    length: int = 0
    attempts: int = 1


class AmdEvent(Event):
    """Answering-machine detection on an outbound call decided who answered, and what it led to."""

    type: Literal["amd"] = "amd"
    result: Literal["human", "machine", "unknown"]
    reason: str
    decision_ms: int  # from the answer to the decision
    greeting_ms: int = 0  # how long the callee's greeting had run by then
    outcome: Literal["continue", "leave_message", "hangup"]


class VoicemailEvent(Event):
    """The message for an answering machine: when it started (after the beep, or after the greeting)."""

    type: Literal["voicemail"] = "voicemail"
    after: Literal["beep", "greeting", "wait"]  # what let it start ("wait": amd.beep_wait_s ran out)
    start_ms: int  # from the answer
    beep_hz: float = 0.0


class TransferEvent(Event):
    """A warm transfer moved on: holding, dialling, briefing, connected, or failed (the caller is back)."""

    type: Literal["transfer"] = "transfer"
    mode: Literal["cold", "warm"] = "warm"
    target: str  # the sip.transfer_targets name
    phase: Literal["holding", "dialling", "briefing", "connected", "failed", "ended"]
    status: int = 0  # the deciding SIP status of a failure (486, 603, 408 for no answer)


class MemoryChangedEvent(Event):
    type: Literal["memory.changed"] = "memory.changed"


class EventSink(Protocol):
    def emit(self, event: Event) -> None:
        """Deliver without blocking; a slow or closed consumer drops events, never stalls the call."""


class NullSink:
    def emit(self, event: Event) -> None:
        return None


class CollectingSink:
    """Keeps every event; for `voicegate talk` and tests."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def of_type(self, kind: str) -> list[Event]:
        return [event for event in self.events if event.type == kind]


class FanoutSink:
    """Delivers to several sinks (e.g. the DataChannel and the server log)."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = list(sinks)

    def emit(self, event: Event) -> None:
        for sink in self.sinks:
            sink.emit(event)
