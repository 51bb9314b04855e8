"""When to answer: how long a pending turn is held after the caller falls silent. Pure policy.

With an end-of-turn verdict (fusion.py's probability that the caller has finished), a turn at or above
`threshold` is answered at once; below it, the agent waits up to `max_wait_ms` of silence for more. A
graded wait (longer the less finished the turn looks) was measured too and lost on every line of
bench/turns.py: the turns it answers sooner are mostly first halves whose probability sits just under the
threshold, so it bought a faster p95 with many more premature answers (docs/performance.md).

Without a verdict (`pipeline.end_of_turn = "off"`) the text rules decide: finals are held for a merge
window that restarts with each new final (longer when the words trail off), and released only after the
caller has also been quiet for a while, never later than TURN_MERGE_MAX_MS after the first final.
"""

from __future__ import annotations

from internal.turn.text_cues import ends_dictation, ends_incomplete, ends_terminal

# A caller who never pauses cleanly still gets an answer after this long (text rules).
TURN_MERGE_MAX_MS = 2500
# The text rules' longer wait when the words trail off ("and", "my number is") or are mid-dictation.
TURN_MERGE_INCOMPLETE_MS = 900


def fused_wait_ms(probability: float, *, threshold: float, max_wait_ms: float, since_silence_ms: float) -> float:
    """How much longer a turn whose fused P(finished) is `probability` is held (0 = answer now).

    The hold is counted from the start of the caller's silence (the VAD's end of speech), so a verdict that
    arrived late does not add its own delay on top.
    """
    if probability >= threshold:
        return 0.0
    return max(0.0, max_wait_ms - since_silence_ms)


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
