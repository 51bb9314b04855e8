"""Session: the durable half of a call, apart from any transport.

The conversation (model history, TranscriptLog, rolling summary, memory snapshot) lives here, so a
browser that reconnects (WHIP resume) gets a new transport and pipeline attached to the same session
and carries on where it was, with no repeated greeting.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from internal.identity import CallerIdentity
from internal.llm.base import ChatMessage
from internal.pipeline.rolling_summary import RollingSummary
from internal.pipeline.transcript import TranscriptLog

if TYPE_CHECKING:
    from internal.pipeline.pipeline import VoicePipeline

TransportKind = Literal["sip", "webrtc", "talk"]

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


@dataclass
class Session:
    identity: CallerIdentity
    transport: TransportKind
    conversation: Conversation
    id: str = field(default_factory=lambda: secrets.token_hex(12))
    created_at: float = field(default_factory=time.time)
    attached: int = 0
    detached_since: float | None = None  # monotonic; None while a transport is attached
    ended: bool = False
    end_reason: str = ""
    pipeline: VoicePipeline | None = None
    # Called when the pipeline wants the call to end, e.g. after "goodbye" (transports usually end the
    # session through the manager, which then calls `close_transport`).
    hangup: Callable[[], Awaitable[None]] | None = None
    # Called by SessionManager.end with the reason: tear the transport down (SIP BYE, close the peer).
    close_transport: Callable[[str], Awaitable[None]] | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def resource_id(self) -> str | None:
        return self.identity.resource_id
