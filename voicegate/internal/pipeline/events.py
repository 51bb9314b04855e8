"""The pipeline's own events: what the caller said and the agent answered, the agent's state, timings,
how a reply was used, the transport's connection and the caller's key presses. The envelope and the
sinks are internal/event_envelope.py; the turn's (`release`, `overlap`: internal/turn/events.py), the phone
flows', the recording's and memory's events live with their owners (docs/protocol.md is the wire format
of all of them). `ReleaseEvent` is re-exported here for the sinks that read it with the pipeline's.
"""

from __future__ import annotations

from typing import Literal

from voicegate.internal.event_envelope import Event
from voicegate.internal.turn.events import ReleaseEvent

__all__ = ["AgentState", "ConnectionEvent", "DtmfEvent", "ReleaseEvent", "ResponseEvent", "StateEvent",
           "TimingEvent", "TranscriptEvent", "TurnEvent", "TurnOutcome"]

AgentState = Literal["listening", "thinking", "speaking"]


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


class ConnectionEvent(Event):
    type: Literal["connection"] = "connection"
    state: Literal["connected", "resumed", "ended"]
    session_id: str = ""
    reason: str = ""


class DtmfEvent(Event):
    type: Literal["dtmf"] = "dtmf"
    digit: str  # "" when masked
    masked: bool = False  # pressed while a digit form collected keys: which key is never said
