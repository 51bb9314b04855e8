"""TranscriptLog: the ordered record of what was said on a call, by whom, and what was heard.

When the caller interrupts, the agent's entry records only the words the caller actually heard, with
`interrupted = True`, so the model's next turn does not assume the caller heard the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from voicegate.internal.conversation.text import clean

Speaker = Literal["user", "agent"]


@dataclass(frozen=True, slots=True)
class TranscriptEntry:
    role: Speaker
    text: str
    at: float  # wall-clock seconds since the epoch
    interrupted: bool = False
    intended: str = ""  # for an interrupted agent entry: the whole reply it meant to say


class TranscriptLog:
    def __init__(self) -> None:
        self._entries: list[TranscriptEntry] = []

    def add(self, role: Speaker, text: str, *, interrupted: bool = False, intended: str = "") -> TranscriptEntry:
        entry = TranscriptEntry(role, clean(text).strip(), time.time(), interrupted, clean(intended))
        self._entries.append(entry)
        return entry

    def entries(self) -> list[TranscriptEntry]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def since(self, index: int) -> list[TranscriptEntry]:
        return self._entries[index:]

    def user_turns(self) -> int:
        return sum(1 for entry in self._entries if entry.role == "user")
