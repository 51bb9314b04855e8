"""Putting a turn on record: the conversation's history (what the model sees next) and its TranscriptLog.

A turn is written once, when it counts (responder.py): its reply played, or was cut off after the caller
heard some of it. A reply thrown away before that is never written, so nothing here needs undoing.
"""

from __future__ import annotations

from voicegate.internal.conversation.slots import Slot
from voicegate.internal.conversation.state import CallContext
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.llm.base import ChatMessage
from voicegate.internal.pipeline.events import TranscriptEvent

# What the agent meant to say in a reply the caller cut off: the next request tells the model.
INTERRUPTED_TEXT: Slot[str] = Slot("interrupted_text")


def record_agent(session: CallContext, sink: EventSink, text: str, interrupted: bool = False,
                 intended: str = "") -> None:
    """What the agent said (or, interrupted, what the caller heard of it)."""
    if not text:
        return  # nothing was heard (e.g. interrupted while still thinking): nothing to record
    conversation = session.conversation
    conversation.transcript.add("agent", text, interrupted=interrupted, intended=intended)
    content = f"{text} [interrupted by the caller]" if interrupted else text
    conversation.history.append(ChatMessage("assistant", content))
    sink.emit(TranscriptEvent(role="agent", text=text, final=True))


def record_caller(session: CallContext, text: str) -> None:
    """Caller words answered outside the agent (the recording's consent): kept in the conversation so the
    model knows what was said, without counting as a turn it answered."""
    conversation = session.conversation
    conversation.transcript.add("user", text)
    conversation.history.append(ChatMessage("user", text))


def record_turn(session: CallContext, sink: EventSink, user_text: str, exchange: list[ChatMessage], *,
                streak: int, keypad: bool, agent_text: str, interrupted: bool, intended: str) -> None:
    """The caller's words, the tool calls the reply made, and what the agent said, in that order."""
    conversation = session.conversation
    conversation.turns += 1
    conversation.misunderstanding_streak = streak
    session.slots.pop(INTERRUPTED_TEXT)
    conversation.transcript.add("user", user_text)
    conversation.history.append(ChatMessage("user", user_text))
    conversation.history.extend(exchange)
    if keypad:
        sink.emit(TranscriptEvent(role="user", text=user_text, final=True))
    record_agent(session, sink, agent_text, interrupted=interrupted, intended=intended)
