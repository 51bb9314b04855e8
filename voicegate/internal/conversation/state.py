"""The conversation of one call, which outlives any transport, and the narrow view the pipeline has of a call.

`Conversation` is what a reconnect keeps (the model's history, the TranscriptLog, the rolling summary, the
memory injected into it). The Session (internal/session) holds one; the pipeline reads and writes it
through a `CallContext`, so the pipeline never imports the session package and the arrows point one way:
session -> pipeline -> conversation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from voicegate.internal.conversation.messages import ChatMessage
from voicegate.internal.conversation.rolling_summary import RollingSummary
from voicegate.internal.conversation.slots import Slots
from voicegate.internal.conversation.transcript import TranscriptLog
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.identity import CallerIdentity

# The model sees at most this many recent messages; the rolling summary covers what falls out.
HISTORY_WINDOW = 30


@dataclass
class Conversation:
    summary: RollingSummary
    history: list[ChatMessage] = field(default_factory=list)
    transcript: TranscriptLog = field(default_factory=TranscriptLog)
    greeted: bool = False
    turns: int = 0
    misunderstanding_streak: int = 0
    # The caller's memory as injected into this conversation: set at start, refreshed between turns.
    user_preferences: str = ""
    memory: str = ""
    # What memory adds to the system context: fenced, labelled and bounded by memory.max_chars as a whole.
    memory_context: str = ""
    # The same memory as plain text, bounded the same way: a bring-your-own agent's `memory` field.
    memory_text: str = ""
    memory_revision: int = 0
    # Index into `history` where messages observed by the memory provider end (restored history excluded).
    observed_upto: int = 0

    def recent_history(self, *then: ChatMessage) -> list[ChatMessage]:
        """The last messages the model sees, followed by `then` (this turn's, not yet in the history)."""
        window = [*self.history, *then][-HISTORY_WINDOW:]
        # Never start the window on a tool result whose call fell out of it.
        while window and window[0].role == "tool":
            window = window[1:]
        return window


class CallContext(Protocol):
    """What the pipeline knows of the call it serves (a Session is one): its ids, its conversation, the
    per-call values features keep (`slots`, internal/conversation/slots.py), and how to hang up."""

    id: str
    identity: CallerIdentity
    conversation: Conversation
    slots: Slots
    hangup: Callable[[], Awaitable[None]] | None

    @property
    def resource_id(self) -> str | None: ...


class LiveCall(CallContext, Protocol):
    """What the features that keep something with a call (memory, recording, the phone flows) know of it: a
    Session (internal/session) is one. They stand below the session package, so they name this port, never
    the Session: how the call came (`transport`), whether it has ended, and where its events go."""

    ended: bool

    @property
    def transport(self) -> str: ...

    @property
    def events(self) -> EventSink:
        """The call's events (its pipeline's sink: the DataChannel, the call feed), or nowhere without one."""

    @property
    def sample_rate(self) -> int:
        """The call's audio rate (its pipeline's), or 0 while it has none."""
