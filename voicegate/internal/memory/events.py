"""Memory's event: an owner's memory changed (sent to that owner's clients; never its content)."""

from __future__ import annotations

from typing import Literal

from voicegate.internal.event_envelope import Event


class MemoryChangedEvent(Event):
    type: Literal["memory.changed"] = "memory.changed"
