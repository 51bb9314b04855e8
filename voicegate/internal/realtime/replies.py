"""What the Realtime pipeline keeps about each response it asked for or the model started, and the small
policy decisions around them (pure, so they read as rules).

A caller turn (`CallerTurn`) may take several responses: one that calls functions and the follow-up that
answers. The turn is written to the conversation once, with the first response that says something (as
the cascade writes a turn with its reply, internal/pipeline/record.py); later ones add the agent's lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from voicegate.internal.conversation.state import CallContext
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.pipeline.playout import Segment
from voicegate.internal.pipeline.record import record_agent, record_turn

AskKind = Literal["turn", "greeting", "announce", "follow_up"]


@dataclass
class CallerTurn:
    """The caller's side of a turn: typed or keyed text at once; spoken words when the model's
    transcription of `item_id` arrives (None until then)."""

    text: str | None
    item_id: str = ""
    keypad: bool = False
    recorded: bool = False  # its user line is in the conversation


@dataclass
class Ask:
    """What a response is for: a caller turn (or its follow-up after function calls), or a fixed line."""

    kind: AskKind
    turn: CallerTurn | None = None
    at: float = 0.0  # when a caller turn was handed to the model (its first audio is timed from there)


@dataclass
class ModelReply:
    """One response: its audio item playing through the playout, its words, its function calls."""

    id: str
    ask: Ask
    item_id: str = ""
    segment: Segment | None = None
    parts: list[str] = field(default_factory=list)  # transcript deltas so far
    text: str = ""  # the transcript once done
    running: bool = True  # response.done not seen yet
    calls_pending: bool = False  # its function calls are running (recorded after them, in order)
    had_calls: bool = False  # it called functions: without words of its own, the follow-up carries the turn
    heard: bool = False  # a frame of it reached the caller

    def words(self) -> str:
        return self.text or "".join(self.parts).strip()

    def played_out(self) -> bool:
        """Done, and every frame of its audio pulled (or it had none)."""
        if self.running:
            return False
        segment = self.segment
        return segment is None or (segment.complete and segment.played >= segment.frames)


def barge_in_applies(agent_audible: bool, barge_in: bool) -> bool:
    """Does the caller's speech stop the agent? Only one they can hear (audio queued and not held), and not
    when the deployer turned barge-in off (pipeline.barge_in): then the agent finishes and the caller's
    words are the next turn."""
    return agent_audible and barge_in


def cancel_after_truncate(reply_running: bool) -> bool:
    """After a barge-in, is a response.cancel needed? Only while the model is still generating: a response
    already done has nothing left to stop (the server would answer an error for it)."""
    return reply_running


def record_reply(session: CallContext, sink: EventSink, reply: ModelReply, said: str, *, interrupted: bool) -> bool:
    """Put a reply the caller heard (`said`: all of it, or what they heard before cutting it off) on record as
    the cascade does: with the caller's turn it answered when that is not recorded yet (typed, keyed or
    transcribed words), else as an agent line. True when the caller's turn was recorded (a turn ended)."""
    turn = reply.ask.turn
    intended = reply.words() if interrupted else ""
    if turn is not None and not turn.recorded and turn.text:
        turn.recorded = True
        record_turn(session, sink, turn.text, [], streak=0, keypad=turn.keypad, agent_text=said,
                    interrupted=interrupted, intended=intended)
        return True
    record_agent(session, sink, said, interrupted=interrupted, intended=intended)
    return False
