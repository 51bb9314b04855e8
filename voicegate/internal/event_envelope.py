"""The envelope every event of a call shares, and the sinks that carry it.

An event is a small typed pydantic model with a JSON `type` and a timestamp; each package declares its
own beside its code (internal/pipeline/events.py: transcript, response, state, timing, turn, connection,
dtmf; internal/pipeline/idle.py: idle; internal/pipeline/thinking.py: thinking; internal/turn/events.py:
release, overlap; internal/telephony/events.py: digits, amd, voicemail, transfer;
internal/telephony/navigation.py: menu; internal/recording/events.py: recording;
internal/memory/events.py: memory.changed). WebRTC sends them on the DataChannel `events`; the
control-plane WebSocket sends the owner's `memory.changed`; a SIP call's sink is its log
(internal/sip/voice/call.py, CallLog). With `server.call_events` on, the gateway also copies each call's
events into the call feed (server/call_feed.py). docs/protocol.md is the wire format. Events never carry
memory content or an owner id.

This module imports nothing of the project, so every package that emits or carries events can use it.
"""

from __future__ import annotations

import time
from typing import Protocol

from pydantic import BaseModel, Field


class Event(BaseModel):
    type: str
    ts: float = Field(default_factory=time.time)


class EventSink(Protocol):
    def emit(self, event: Event) -> None:
        """Deliver without blocking; a slow or closed consumer drops events, never stalls the call."""


class NullSink:
    def emit(self, event: Event) -> None:
        return None


class CollectingSink:
    """Keeps every event, for tests to read back (`voicegate talk` prints them instead: server/talk.py)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def of_type(self, kind: str) -> list[Event]:
        return [event for event in self.events if event.type == kind]


class FanoutSink:
    """Delivers to several sinks (the gateway: the call's own sink and the call feed)."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = list(sinks)

    def emit(self, event: Event) -> None:
        for sink in self.sinks:
            sink.emit(event)
