"""Dynamic endpointing: how long this caller pauses inside a turn, learnt as the call goes.

A fixed longest hold is tuned for the slowest speaker on the worst line; most callers never pause that
long mid-sentence, and each of their finished-but-unsure turns pays the whole of it. Every time a caller
goes on after a silence (their turn was held, or its reply was absorbed), that silence is one of their
inner pauses. Once a few are known, an unsure turn is held a margin past the longest of them, not the
configured longest hold; a caller who makes long pauses keeps the long hold. (LiveKit's dynamic
endpointing adapts its delay to each caller's pauses in the same spirit.)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# Pauses remembered per call: the recent ones say more about this caller on this line than the first ones.
PAUSES_KEPT = 8
# Inner pauses seen before the hold follows them: one pause is an anecdote.
PAUSES_BEFORE_ADAPTING = 2
# Held this much past the longest inner pause seen: a person's pauses vary by a few hundred ms.
PAUSE_MARGIN_MS = 300
# Never held less than this for an unsure turn, however quick the caller: below it, a breath between two
# clauses would end the turn.
MIN_CEILING_MS = 800
# Shorter silences are gaps between words (the VAD's offset splits an utterance there), not the pauses a
# caller makes to think: they say nothing about how long this caller's thinking pauses are.
MIN_INNER_PAUSE_MS = 300
# Silences longer than this were not a pause inside a sentence (the caller thought, or read something out).
LONGEST_INNER_PAUSE_MS = 4000


@dataclass(slots=True)
class CallerPauses:
    """The inner pauses (ms of silence before the caller went on with the same turn) of one call."""

    pauses: deque[float] = field(default_factory=lambda: deque(maxlen=PAUSES_KEPT))

    def went_on_after(self, silence_ms: float) -> None:
        if MIN_INNER_PAUSE_MS <= silence_ms <= LONGEST_INNER_PAUSE_MS:
            self.pauses.append(silence_ms)

    def ceiling_ms(self, max_wait_ms: float) -> float:
        """The longest hold this caller's unsure turns need (`max_wait_ms` until their pauses are known)."""
        return hold_ceiling_ms(list(self.pauses), max_wait_ms)


def hold_ceiling_ms(pauses: list[float], max_wait_ms: float) -> float:
    if len(pauses) < PAUSES_BEFORE_ADAPTING:
        return max_wait_ms
    return min(max_wait_ms, max(MIN_CEILING_MS, max(pauses) + PAUSE_MARGIN_MS))
