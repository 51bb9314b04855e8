"""Session: the durable half of a call, apart from any transport.

The conversation (internal/conversation: model history, TranscriptLog, rolling summary, memory snapshot)
is held here, so a browser that reconnects (WHIP resume) gets a new transport and pipeline attached to the
same session and carries on where it was, with no repeated greeting. The pipeline sees a Session only as
a CallContext, and memory, recording and the phone flows only as a LiveCall (internal/conversation/state.py):
none of them imports this module.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from voicegate.internal.conversation.slots import Slots
from voicegate.internal.conversation.state import Conversation
from voicegate.internal.event_envelope import EventSink, NullSink
from voicegate.internal.identity import CallerIdentity

if TYPE_CHECKING:
    from voicegate.internal.pipeline.pipeline import VoicePipeline

TransportKind = Literal["sip", "webrtc", "talk"]

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
    # What each feature keeps with the call (SIP Call-ID, recording consent, memory owner, ...), typed by
    # the key its owner declares: internal/conversation/slots.py.
    slots: Slots = field(default_factory=Slots)

    @property
    def resource_id(self) -> str | None:
        return self.identity.resource_id

    @property
    def events(self) -> EventSink:
        return self.pipeline.sink if self.pipeline is not None else NullSink()

    @property
    def sample_rate(self) -> int:
        return self.pipeline.sample_rate if self.pipeline is not None else 0
