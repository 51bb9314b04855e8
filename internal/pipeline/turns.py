"""Turn-taking: merge consecutive finals into one turn, and wait for the caller to be quiet.

A caller who pauses mid-sentence ("I want to... um... book a table") produces several finals.
Answering the first half is the most common way a voice agent feels rude, so finals are held for a
merge window that restarts with each new final, and the turn is released only when the caller has
also been quiet for `user_speech_quiet_ms` and is not speaking again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from internal.pipeline.bargein import ends_dictation, ends_incomplete, ends_terminal

# A caller who never pauses cleanly still gets an answer after this long.
TURN_MERGE_MAX_MS = 2500
# The longer wait when the text trails off ("and", "my number is") or is mid-dictation.
TURN_MERGE_INCOMPLETE_MS = 900


def merge_wait_ms(text: str, base_ms: int) -> int:
    """How long to hold a pending turn before answering it. Terminal punctuation wins."""
    if ends_terminal(text):
        return base_ms
    if ends_incomplete(text) or ends_dictation(text):
        return max(base_ms, TURN_MERGE_INCOMPLETE_MS)
    return base_ms


def merge_text(pending: str, addition: str) -> str:
    return " ".join(part for part in (pending.strip(), addition.strip()) if part)


@dataclass(slots=True)
class PendingTurn:
    text: str
    began: float  # monotonic time of the first final
    confidence: float | None = None
    over_agent_speech: bool = False  # began while the agent was talking (sticky across merges)
    speech_ended_at: float = field(default=0.0)  # monotonic time the caller last stopped speaking


class TurnBuffer:
    """Debounces finals into turns; `on_turn(pending)` is called once per released turn."""

    def __init__(self, merge_ms: int, quiet_ms: int, on_turn: Callable[[PendingTurn], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.merge_ms = merge_ms
        self.quiet_ms = quiet_ms
        self._on_turn = on_turn
        self._clock = clock
        self._pending: PendingTurn | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._caller_speaking = False
        self._last_speech_end = 0.0
        self._awaiting_final = False

    @property
    def awaiting_final(self) -> bool:
        """A transcript for speech the caller already finished is still being decoded."""
        return self._awaiting_final

    @awaiting_final.setter
    def awaiting_final(self, value: bool) -> None:
        self._awaiting_final = value
        if not value and self._pending is not None:
            self._arm()

    @property
    def pending(self) -> PendingTurn | None:
        return self._pending

    def caller_started_speaking(self) -> None:
        """Hold the pending turn: the caller is adding to it."""
        self._caller_speaking = True
        self._cancel_timer()

    def caller_stopped_speaking(self) -> None:
        self._caller_speaking = False
        self._last_speech_end = self._clock()
        if self._pending is not None:
            self._pending.speech_ended_at = self._last_speech_end
            self._arm()

    def add_final(self, text: str, confidence: float | None = None, over_agent_speech: bool = False) -> None:
        text = text.strip()
        if not text:
            if self._pending is not None:
                self._arm()
            return
        now = self._clock()
        if self._pending is None:
            self._pending = PendingTurn(text, now, confidence, over_agent_speech, self._last_speech_end or now)
        else:
            self._pending.text = merge_text(self._pending.text, text)
            self._pending.over_agent_speech |= over_agent_speech
            if confidence is not None:
                previous = self._pending.confidence
                self._pending.confidence = confidence if previous is None else min(previous, confidence)
        self._arm()

    def discard(self) -> PendingTurn | None:
        """Drop the pending turn (e.g. it was a backchannel); return it."""
        pending, self._pending = self._pending, None
        self._cancel_timer()
        return pending

    def flush(self) -> None:
        """Release the pending turn now."""
        pending, self._pending = self._pending, None
        self._cancel_timer()
        if pending is not None:
            self._on_turn(pending)

    def close(self) -> None:
        self._pending = None
        self._cancel_timer()

    def _arm(self) -> None:
        self._cancel_timer()
        pending = self._pending
        if pending is None or self._caller_speaking:
            return
        now = self._clock()
        wait_ms: float = merge_wait_ms(pending.text, self.merge_ms)
        quiet_left_ms = self.quiet_ms - (now - self._last_speech_end) * 1000.0 if self._last_speech_end else 0.0
        wait_ms = max(wait_ms, quiet_left_ms)
        elapsed_ms = (now - pending.began) * 1000.0
        wait_ms = min(wait_ms, max(0.0, TURN_MERGE_MAX_MS - elapsed_ms))
        if self._awaiting_final:
            # Hold for the decode in flight, but never past the merge ceiling (a lost final must not
            # leave the caller unanswered).
            wait_ms = max(wait_ms, TURN_MERGE_MAX_MS - elapsed_ms)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(wait_ms / 1000.0, self.flush)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
