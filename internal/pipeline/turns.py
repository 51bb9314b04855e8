"""Turn-taking: merge consecutive finals into one turn, and wait for the caller to be quiet.

A caller who pauses mid-sentence ("I want to... um... book a table") produces several finals.
Answering the first half is the most common way a voice agent feels rude, so finals are held for a
merge window that restarts with each new final, and the turn is released only when the caller has
also been quiet for `user_speech_quiet_ms` and is not speaking again.

With an end-of-turn model (Smart Turn), the sound of the caller's last words decides instead: a turn the
model hears as complete is released as soon as its transcript is in, unless the words end where no
sentence ends ("a table for", "five five five"); one it hears as unfinished waits up to
`max_turn_wait_ms` of silence for more. While the verdict is being computed the text rules hold
the turn, and if the verdict is late they decide alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from internal.pipeline.bargein import (
    ends_dictation,
    ends_incomplete,
    ends_question,
    ends_terminal,
    ends_unfinished,
)

# A caller who never pauses cleanly still gets an answer after this long.
TURN_MERGE_MAX_MS = 2500
# The longer wait when the text trails off ("and", "my number is") or is mid-dictation.
TURN_MERGE_INCOMPLETE_MS = 900
# How long a turn waits for the end-of-turn model's verdict before the text rules decide alone.
VERDICT_WAIT_MS = 700


class Verdict(Enum):
    """The end-of-turn model's answer for the caller's latest silence."""

    NONE = "none"  # no model, or not asked
    PENDING = "pending"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"


def merge_wait_ms(text: str, base_ms: int) -> int:
    """How long to hold a pending turn before answering it. Terminal punctuation wins."""
    if ends_terminal(text):
        return base_ms
    if ends_incomplete(text) or ends_dictation(text):
        return max(base_ms, TURN_MERGE_INCOMPLETE_MS)
    return base_ms


def release_wait_ms(text: str, verdict: Verdict, *, merge_ms: int, quiet_ms: int, max_turn_wait_ms: int,
                    since_speech_end_ms: float | None, since_first_final_ms: float) -> float:
    """How much longer a pending turn is held before it is released (0 = now). Pure policy.

    `since_speech_end_ms` is None when the caller has not spoken in this call (a typed or replayed final).
    """
    quiet_since = since_speech_end_ms if since_speech_end_ms is not None else 0.0
    if verdict in (Verdict.COMPLETE, Verdict.INCOMPLETE):
        if ends_unfinished(text):  # however it sounds, "... for" or "... five five five" goes on
            return max(0.0, max_turn_wait_ms - quiet_since)
        if verdict is Verdict.COMPLETE:
            return 0.0
        if not ends_question(text):
            return max(0.0, max_turn_wait_ms - quiet_since)
    # An "unfinished" question ("What is my name?") is left to the text rules: a recogniser puts "?" only
    # where it heard a question's shape, unlike the full stop it adds after fragments too.
    wait = float(merge_wait_ms(text, merge_ms))
    if since_speech_end_ms is not None:
        wait = max(wait, quiet_ms - since_speech_end_ms)
    wait = min(wait, max(0.0, TURN_MERGE_MAX_MS - since_first_final_ms))
    if verdict is Verdict.PENDING:
        wait = max(wait, VERDICT_WAIT_MS - quiet_since)
    return max(0.0, wait)


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
                 clock: Callable[[], float] = time.monotonic, max_turn_wait_ms: int = 3000) -> None:
        self.merge_ms = merge_ms
        self.quiet_ms = quiet_ms
        self.max_turn_wait_ms = max_turn_wait_ms
        self.verdict = Verdict.NONE
        self._silences = 0  # numbers the caller's silences, so a late verdict for an earlier one is ignored
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
        if value:
            self._cancel_timer()
        elif self._pending is not None:
            self._arm()

    @property
    def pending(self) -> PendingTurn | None:
        return self._pending

    def caller_started_speaking(self) -> None:
        """Hold the pending turn: the caller is adding to it."""
        self._caller_speaking = True
        self.verdict = Verdict.NONE
        self._cancel_timer()

    def caller_stopped_speaking(self, verdict_expected: bool = False) -> int:
        """The caller fell silent; returns this silence's number for `set_verdict`."""
        self._caller_speaking = False
        self._last_speech_end = self._clock()
        self._silences += 1
        self.verdict = Verdict.PENDING if verdict_expected else Verdict.NONE
        if self._pending is not None:
            self._pending.speech_ended_at = self._last_speech_end
            self._arm()
        return self._silences

    def set_verdict(self, silence: int, complete: bool | None) -> None:
        """The end-of-turn model's answer for silence number `silence` (None: it failed; text rules decide)."""
        if silence != self._silences or self._caller_speaking:
            return  # the caller spoke again since: that silence is no longer the question
        if complete is None:
            self.verdict = Verdict.NONE
        else:
            self.verdict = Verdict.COMPLETE if complete else Verdict.INCOMPLETE
        if self._pending is not None:
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
        elapsed_ms = (now - pending.began) * 1000.0
        wait_ms = release_wait_ms(
            pending.text, self.verdict, merge_ms=self.merge_ms, quiet_ms=self.quiet_ms,
            max_turn_wait_ms=self.max_turn_wait_ms,
            since_speech_end_ms=(now - self._last_speech_end) * 1000.0 if self._last_speech_end else None,
            since_first_final_ms=elapsed_ms)
        if self._awaiting_final:
            # The caller said more than the pending text holds: a decision now would answer half of what
            # was said (on a loaded machine recognition runs seconds behind the caller, and a 2.5 s ceiling
            # here split a dictated phone number in two). The pipeline's recognition deadline
            # (`turn_timeout_s`) clears `awaiting_final` when a final never comes, which re-arms this.
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(wait_ms / 1000.0, self.flush)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
