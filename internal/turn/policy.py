"""When to answer, and what a sound or a word over the agent means: the turn's policy, as pure functions.

Every threshold the caller's turn uses is named here with its reason; owner.py applies them.

**The hold.** With an end-of-turn verdict (fusion.py's probability that the caller has finished), a turn
at or above `threshold` is answered at once. Below it the hold is graded: the less finished the turn looks,
the longer the agent waits for more, up to the longest hold, which is this caller's own pause ceiling
(pauses.py) once their inner pauses are known, and `max_turn_wait_ms` before. An early release costs
little when the reply has not been heard yet: the continuation merge drops it and answers the whole
sentence, so the hold only has to cover the pause a caller would make *after* the reply starts playing.

Without a verdict (`pipeline.end_of_turn = "off"`) the text rules decide: finals are held for a merge
window that restarts with each new final (longer when the words trail off), and released only after the
caller has also been quiet for a while, never later than TURN_MERGE_MAX_MS after the first final.
"""

from __future__ import annotations

from internal.turn.pending import Decision
from internal.turn.text_cues import ends_dictation, ends_incomplete, ends_terminal

# A caller who never pauses cleanly still gets an answer after this long (text rules).
TURN_MERGE_MAX_MS = 2500
# The text rules' longer wait when the words trail off ("and", "my number is") or are mid-dictation.
TURN_MERGE_INCOMPLETE_MS = 900

# How long a turn waits for the end-of-turn model's answer before the words decide alone (text-only
# weights): a model that hangs must not hold the caller.
VERDICT_WAIT_MS = 700
# Shorter utterances (a cough, a click, "mm") are not worth the end-of-turn model: the words decide.
MIN_ASKED_SPEECH_MS = 240
# An utterance this long that came back without words was speech we failed to hear: ask again. Shorter
# ones (a breath, a click) are ignored.
NOT_UNDERSTOOD_SPEECH_MS = 400
# A reply is prepared only for turns at least this likely to be finished: one that surely goes on ("a table
# for") would only be thrown away.
PREPARE_FLOOR = 0.2

# The graded hold (measured with bench/turns.py curve against the all-or-nothing hold it replaced):
# a turn at HOLD_SURE_BELOW_P or less is held the whole ceiling; between it and the threshold the hold
# shrinks as (distance to the threshold)^HOLD_SHAPE, never below MIN_UNSURE_HOLD_MS.
HOLD_SURE_BELOW_P = 0.2
HOLD_SHAPE = 2.0
MIN_UNSURE_HOLD_MS = 250.0


def hold_ms(probability: float, *, threshold: float, ceiling_ms: float, since_silence_ms: float) -> float:
    """How much longer a turn whose fused P(finished) is `probability` is held (0 = answer now).

    Counted from the start of the caller's silence (the VAD's end of speech), so a verdict that arrived late
    does not add its own delay on top. `ceiling_ms`: the longest hold (pauses.py).
    """
    if probability >= threshold:
        return 0.0
    span = max(1e-6, threshold - HOLD_SURE_BELOW_P)
    unsure = min(1.0, max(0.0, (threshold - probability) / span)) ** HOLD_SHAPE
    floor = min(MIN_UNSURE_HOLD_MS, ceiling_ms)
    return max(0.0, floor + (ceiling_ms - floor) * unsure - since_silence_ms)


def fused_wait_ms(probability: float, *, threshold: float, max_wait_ms: float, since_silence_ms: float) -> float:
    """The all-or-nothing hold this policy replaced (kept for the benchmark's comparison)."""
    if probability >= threshold:
        return 0.0
    return max(0.0, max_wait_ms - since_silence_ms)


def asks_model(speech_ms: float, over_agent: bool) -> bool:
    """Is this utterance's end worth the end-of-turn model? Long enough to hold words, and not spoken over
    the agent (a backchannel or a barge-in is not the end of the caller's turn)."""
    return speech_ms >= MIN_ASKED_SPEECH_MS and not over_agent


def worth_preparing(probability: float | None, text: str) -> bool:
    """Start the reply for these words before the turn is released? (`probability` None: the text rules.)"""
    if probability is None:  # not for words the text rules hold longer ("I want to", "... 555")
        return not (ends_incomplete(text) or ends_dictation(text))
    return probability >= PREPARE_FLOOR


def merge_wait_ms(text: str, base_ms: int) -> int:
    """The text rules' hold of a pending turn. Terminal punctuation wins."""
    if ends_terminal(text):
        return base_ms
    if ends_incomplete(text) or ends_dictation(text):
        return max(base_ms, TURN_MERGE_INCOMPLETE_MS)
    return base_ms


def text_rule_wait_ms(text: str, *, merge_ms: int, quiet_ms: int, since_speech_end_ms: float | None,
                      since_first_final_ms: float) -> float:
    """How much longer the text rules hold a pending turn (0 = now).

    `since_speech_end_ms` is None when the caller has not spoken in this call (a typed or replayed final).
    """
    wait = float(merge_wait_ms(text, merge_ms))
    if since_speech_end_ms is not None:
        wait = max(wait, quiet_ms - since_speech_end_ms)
    wait = min(wait, max(0.0, TURN_MERGE_MAX_MS - since_first_final_ms))
    return max(0.0, wait)


def fused_decision(probability: float, *, threshold: float, ceiling_ms: float, since_silence_ms: float) -> Decision:
    wait = hold_ms(probability, threshold=threshold, ceiling_ms=ceiling_ms, since_silence_ms=since_silence_ms)
    return Decision(wait, "verdict" if probability >= threshold else "hold", probability)
