"""The caller's turn as data: the words gathered so far and the moments that time it.

Plain values, no behaviour: the TurnOwner (owner.py) keeps one PendingTurn while the caller's words come
in, and hands its text and TurnTimes to the reply side when the turn is released.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


def merge_text(pending: str, addition: str) -> str:
    return " ".join(part for part in (pending.strip(), addition.strip()) if part)


@dataclass(slots=True)
class PendingTurn:
    text: str
    began: float  # monotonic time of the first final
    confidence: float | None = None
    over_agent_speech: bool = False  # began while the agent was talking (sticky across merges)

    def add(self, text: str, confidence: float | None, over_agent_speech: bool, replace: bool) -> None:
        """More of the turn: `replace` when `text` is the whole turn re-heard (Whisper), else an addition."""
        self.text = text if replace else merge_text(self.text, text)
        self.over_agent_speech |= over_agent_speech
        if confidence is not None:
            self.confidence = confidence if self.confidence is None else min(self.confidence, confidence)


@dataclass(slots=True)
class TurnTimes:
    """Monotonic moments of one turn, as the pipeline saw them (0.0: not applicable)."""

    speech_ended: float = 0.0
    final: float = 0.0
    released: float = 0.0


ReleaseReason = Literal["verdict", "hold", "text_rules", "keypad", "typed"]


@dataclass(frozen=True, slots=True)
class Decision:
    """How long a pending turn is held from now, and why (policy.py decides; owner.py applies it).

    - verdict: the fused P(finished) reached the threshold: answered at once;
    - hold: unsure: held `wait_ms` more for the caller to go on, then answered;
    - text_rules: no end-of-turn verdict (`end_of_turn = "off"`): the merge and quiet windows.
    """

    wait_ms: float
    reason: ReleaseReason
    probability: float | None = None


@dataclass(frozen=True, slots=True)
class Release:
    """Why a turn was answered when it was, for the `release` event and the release metrics."""

    reason: ReleaseReason
    probability: float | None = None
    silence_ms: float = 0.0  # from the caller's last sound (VAD offset included) to the release
