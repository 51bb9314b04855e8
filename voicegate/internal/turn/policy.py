"""When to answer, and what a sound or a word over the agent means: the turn's policy, as pure functions.

Every threshold the caller's turn uses is named here with its reason; owner.py applies them.

**The hold.** With an end-of-turn verdict (fusion.py's probability that the caller has finished), a turn
at or above `threshold` is answered at once. Below it the agent waits for more, all or nothing: a turn
whose words say it goes on (P below SURE_GOES_ON_P: "a table for", a number being read out) is held the
configured longest hold; an unsure one is held this caller's own pause ceiling (dynamic endpointing,
pauses.py), which is the configured longest hold until their inner pauses are known. A hold graded by the
probability was measured again on the turn benchmark (bench/turns/turn_taking.py curve, docs/performance.md) and lost
on every line: the first halves of paused sentences ("I was charged.", "The flat is on the second floor.")
sit in the same band of probability as slow finished statements, so any graded hold short of the longest
pause cut 20-60 % of them off audibly.

Without a verdict (`pipeline.end_of_turn = "off"`) the text rules decide: finals are held for a merge
window that restarts with each new final (longer when the words trail off), and released only after the
caller has also been quiet for a while, never later than TURN_MERGE_MAX_MS after the first final.
"""

from __future__ import annotations

from voicegate.internal.turn.pending import Decision
from voicegate.internal.turn.text_cues import ends_dictation, ends_incomplete, ends_terminal

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

# Below this fused P(finished) the words say the turn goes on: held the configured longest hold whatever
# this caller's pauses have been (a number read out, "a table for" invite the longest pauses).
SURE_GOES_ON_P = 0.3


def verdict_threshold(threshold: float, head_threshold: float, clean: float) -> float:
    """The fused P(finished) at which a turn judged by the recogniser's phone-band head is answered at once:
    `head_threshold` on a clean line (the head tells a finished turn from a paused one far better than
    Smart Turn: held-out AUC 0.99 against 0.79, docs/performance.md), rising to the usual `threshold` as the
    line gets noisy (`clean` 1 -> 0, fusion.cleanness), where the head is less sure and cut-offs rose at
    the lower threshold (bench/turns/turn_taking.py curve, piper 8 kHz in 10 dB white noise)."""
    head_threshold = min(head_threshold, threshold)
    return head_threshold + (threshold - head_threshold) * (1.0 - min(1.0, max(0.0, clean)))


def hold_ms(probability: float, *, threshold: float, max_wait_ms: float, caller_ceiling_ms: float,
            since_silence_ms: float) -> float:
    """How much longer a turn whose fused P(finished) is `probability` is held (0 = answer now).

    Counted from the start of the caller's silence (the VAD's end of speech), so a verdict that arrived late
    does not add its own delay on top. `caller_ceiling_ms`: this caller's pause ceiling (pauses.py).
    """
    if probability >= threshold:
        return 0.0
    longest = max_wait_ms if probability < SURE_GOES_ON_P else min(max_wait_ms, caller_ceiling_ms)
    return max(0.0, longest - since_silence_ms)


def fused_wait_ms(probability: float, *, threshold: float, max_wait_ms: float, since_silence_ms: float) -> float:
    """The hold before dynamic endpointing: every unsure turn waits the longest hold (the benchmark's
    replay of one dialogue per caller, where no caller's pauses are known yet, is the same)."""
    if probability >= threshold:
        return 0.0
    return max(0.0, max_wait_ms - since_silence_ms)


def asks_model(speech_ms: float) -> bool:
    """Is this utterance's end worth an end-of-turn verdict? Long enough to hold words. Speech over the agent
    is asked too: once its words make it the caller's turn (an interruption, a question), it is a turn like
    any other and is answered through the same verdict (without one it waited the longest hold: 2 s after a
    caller who interrupted stopped speaking, against ~0.4 s for the same question asked in silence)."""
    return speech_ms >= MIN_ASKED_SPEECH_MS


def asks_model_early(over_agent: bool, recogniser_verdicts: bool) -> bool:
    """Ask the end-of-turn model beside the decode, before the words are in? Not for speech over the agent:
    most of it is a backchannel, which is no turn, so the model is asked for it only once its words make it
    one (the recogniser's own head costs nothing extra and always comes with the words)."""
    return not over_agent and not recogniser_verdicts


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


def fused_decision(probability: float, *, threshold: float, max_wait_ms: float, caller_ceiling_ms: float,
                   since_silence_ms: float) -> Decision:
    wait = hold_ms(probability, threshold=threshold, max_wait_ms=max_wait_ms, caller_ceiling_ms=caller_ceiling_ms,
                   since_silence_ms=since_silence_ms)
    return Decision(wait, "verdict" if probability >= threshold else "hold", probability)


FRAMES_PER_S = 50  # the pipeline's 20 ms frames


def max_utterance_frames(max_utterance_s: float) -> int:
    """`pipeline.max_utterance_s` in voiced frames (what `forced_end` counts)."""
    return int(max_utterance_s * FRAMES_PER_S)


def forced_end(voiced_frames: int, max_frames: int) -> bool:
    """End the caller's utterance here, as if they had paused? A caller who never pauses (or a line whose noise
    the VAD keeps hearing as voice) must still be transcribed and answered: past `max_frames` voiced frames
    the utterance ends, and the next frame of speech begins a new one."""
    return voiced_frames >= max_frames


def judged_by_head(end_of_turn: str, phone_turn_head: str, recogniser_has_head: bool, sample_rate: int) -> bool:
    """Does the recogniser's phone-band head judge the sound of this call's turns (instead of Smart Turn)?
    `pipeline.phone_turn_head`: always (the default: trained on 8 kHz G.711 turns, it also beat Smart Turn on
    held-out 16 kHz ones), auto (8 kHz calls only) or off; only with the fused end-of-turn decision
    (`end_of_turn = "smart_turn"`) and a recogniser that computes it (Whisper tiny.en)."""
    if end_of_turn != "smart_turn" or phone_turn_head == "off" or not recogniser_has_head:
        return False
    return phone_turn_head == "always" or sample_rate == 8000
