"""What the turn owner needs from the rest of a call, as small Protocols (nothing here imports the pipeline).

- `Replies`: the agent's side (internal/pipeline/responder.py): prepare a reply from words, release it,
  hold it while the caller may be going on, drop it, interrupt it.
- `EndOfTurnModel`: a model that hears the end of an utterance (Smart Turn) and says P(finished).
- `Line`: what the voice activity detector knows about the line (its SNR, its offset).
"""

from __future__ import annotations

from typing import Literal, Protocol

from voicegate.internal.llm.base import Turn
from voicegate.internal.turn.pending import Release, TurnTimes

# What the agent did when a sound over it proved no turn: resumed (it had paused; the sentence it picks up
# again from its start), played on (it had only been ducked), or None (neither: the caller heard no change).
AfterFalseAlarm = tuple[Literal["resumed", "played_on"], str] | None


class Replies(Protocol):
    @property
    def active(self) -> bool:
        """A reply is running or its audio is queued."""

    @property
    def audible(self) -> bool:
        """Active and not holding its audio: what the caller hears or is about to."""

    def absorbable(self) -> bool:
        """Could the caller's next words still join the turn just answered?"""

    def prepare(self, text: str, confidence: float | None, times: TurnTimes) -> None: ...

    def release(self, turn: Turn, confidence: float | None, times: TurnTimes, why: Release | None = None) -> None: ...

    def hold(self) -> None: ...

    def resume(self) -> None: ...

    def absorb(self) -> bool: ...

    def interrupt(self, reason: str) -> None: ...

    def duck(self, ducked: bool) -> None: ...

    def pause(self) -> None:
        """Silence the agent now but keep its reply: the caller's sound over it may not be a turn."""

    def false_alarm(self) -> AfterFalseAlarm:
        """The caller's sound over the agent was no turn: play on, from the start of the sentence it was
        paused in if it had paused."""

    def not_understood(self) -> None: ...

    def too_busy(self) -> None: ...

    def stage(self, name: str, ms: float) -> None:
        """A latency of the turn about to be answered (metrics, timing events)."""


class EndOfTurnModel(Protocol):
    async def predict(self, pcm: bytes, sample_rate: int) -> float | None: ...


class VadProfileView(Protocol):
    @property
    def onset_frames(self) -> int: ...

    @property
    def offset_frames(self) -> int: ...


class Line(Protocol):
    @property
    def snr_db(self) -> float | None: ...

    @property
    def profile(self) -> VadProfileView: ...
