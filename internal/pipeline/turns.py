"""Turn-taking: gather the caller's words into one turn, and release it when they have finished.

A caller who pauses mid-sentence ("I want to... um... book a table") produces several finals. Answering
the first half is the most common way a voice agent feels rude, and every 100 ms of silence after a
finished question is a wait the caller hears. The TurnBuffer holds the pending turn and applies the
policy (internal/turn/policy.py):

- with the end-of-turn fusion (the default), each silence gets one probability that the caller has
  finished, from how the last words sounded (Smart Turn) and what they say (internal/turn/fusion.py);
  the turn is released at once above the threshold and held longer the less finished it looks;
- without it (`pipeline.end_of_turn = "off"`), the text rules' merge and quiet windows decide.

While a transcript the caller already spoke is still being decoded, or while Smart Turn's answer for
this silence is out (up to VERDICT_WAIT_MS), nothing is released: a decision then would answer half of
what was said.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from internal.turn.fusion import TurnFusion
from internal.turn.policy import fused_wait_ms, text_rule_wait_ms

# How long a turn waits for Smart Turn's answer before the words decide alone (text-only weights).
VERDICT_WAIT_MS = 700


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
    """Debounces finals into turns; `on_turn(pending)` is called once per released turn.

    `on_decision(pending, probability)` is told each time the policy has decided how long to hold the
    turn (probability None under the text rules): the pipeline prepares a reply from it.
    """

    def __init__(self, merge_ms: int, quiet_ms: int, on_turn: Callable[[PendingTurn], None],
                 clock: Callable[[], float] = time.monotonic, max_turn_wait_ms: int = 3000,
                 fusion: TurnFusion | None = None, threshold: float = 0.5,
                 on_decision: Callable[[PendingTurn, float | None], None] | None = None) -> None:
        self.merge_ms = merge_ms
        self.quiet_ms = quiet_ms
        self.max_turn_wait_ms = max_turn_wait_ms
        self.fusion = fusion
        self.threshold = threshold
        self.probability: float | None = None  # the fused verdict for the latest silence, once known
        self.audio_probability: float | None = None  # Smart Turn's, for the latest silence
        self.snr_db: float | None = None
        self._audio_pending = False
        self._silences = 0  # numbers the caller's silences, so a late verdict for an earlier one is ignored
        self._on_turn = on_turn
        self._on_decision = on_decision
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

    @property
    def verdict_pending(self) -> bool:
        return self._audio_pending

    def caller_started_speaking(self) -> None:
        """Hold the pending turn: the caller is adding to it."""
        self._caller_speaking = True
        self._audio_pending = False
        self.audio_probability = self.probability = None
        self._cancel_timer()

    def caller_stopped_speaking(self, verdict_expected: bool = False, snr_db: float | None = None) -> int:
        """The caller fell silent; returns this silence's number for `set_verdict`. `snr_db`: the line's
        signal-to-noise ratio so far (the fusion trusts the sound less on a noisy line)."""
        self._caller_speaking = False
        self.snr_db = snr_db
        self._last_speech_end = self._clock()
        self._silences += 1
        self._audio_pending = verdict_expected
        self.audio_probability = self.probability = None
        if self._pending is not None:
            self._pending.speech_ended_at = self._last_speech_end
            self._arm()
        return self._silences

    def set_verdict(self, silence: int, probability: float | None) -> None:
        """Smart Turn's P(complete) for silence number `silence` (None: it failed; the words decide)."""
        if silence != self._silences or self._caller_speaking:
            return  # the caller spoke again since: that silence is no longer the question
        self._audio_pending = False
        self.audio_probability = probability
        if self._pending is not None:
            self._arm()

    def add_final(self, text: str, confidence: float | None = None, over_agent_speech: bool = False,
                  replace: bool = False) -> None:
        """A transcript for the caller's latest speech; `replace`: it is the whole turn's text so far
        (a recogniser that re-hears the turn), not an addition to it."""
        text = text.strip()
        if not text:
            if self._pending is not None:
                self._arm()
            return
        now = self._clock()
        if self._pending is None:
            self._pending = PendingTurn(text, now, confidence, over_agent_speech, self._last_speech_end or now)
        else:
            self._pending.text = text if replace else merge_text(self._pending.text, text)
            self._pending.over_agent_speech |= over_agent_speech
            if confidence is not None:
                previous = self._pending.confidence
                self._pending.confidence = confidence if previous is None else min(previous, confidence)
        self._arm()

    def restore(self, pending: PendingTurn) -> None:
        """Take back a released turn: the caller went on with it before its answer counted."""
        self._cancel_timer()
        self._pending = pending

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

    def _hold_ms(self, pending: PendingTurn) -> float | None:
        """How much longer to hold the pending turn; None: not yet decidable (a verdict is still out)."""
        now = self._clock()
        since_end = (now - self._last_speech_end) * 1000.0 if self._last_speech_end else None
        if self.fusion is None:
            self.probability = None
            return text_rule_wait_ms(pending.text, merge_ms=self.merge_ms, quiet_ms=self.quiet_ms,
                                     since_speech_end_ms=since_end,
                                     since_first_final_ms=(now - pending.began) * 1000.0)
        quiet = since_end or 0.0
        if self._audio_pending and quiet < VERDICT_WAIT_MS:
            return None
        self.probability = self.fusion.probability(self.audio_probability, pending.text, self.snr_db)
        return fused_wait_ms(self.probability, threshold=self.threshold, max_wait_ms=self.max_turn_wait_ms,
                             since_silence_ms=quiet)

    def _arm(self) -> None:
        self._cancel_timer()
        pending = self._pending
        if pending is None or self._caller_speaking or self._awaiting_final:
            # While a final is owed, a decision now would answer half of what was said (on a loaded machine
            # recognition runs seconds behind the caller). The pipeline's recognition deadline
            # (`turn_timeout_s`) clears `awaiting_final` when a final never comes, which re-arms this.
            return
        loop = asyncio.get_running_loop()
        wait_ms = self._hold_ms(pending)
        if wait_ms is None:  # Smart Turn is still out: look again when it answers or its time is up
            quiet = (self._clock() - self._last_speech_end) * 1000.0 if self._last_speech_end else 0.0
            self._timer = loop.call_later(max(0.0, VERDICT_WAIT_MS - quiet) / 1000.0, self._arm)
            return
        if self._on_decision is not None:
            self._on_decision(pending, self.probability)
        self._timer = loop.call_later(wait_ms / 1000.0, self.flush)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
