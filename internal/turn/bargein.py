"""Barge-in predicates: pure text functions, no pipeline state.

The turn-shape predicates (does this text end a sentence?) are in internal/turn/text_cues.py.
Ported from StreamCore's behaviour: a backchannel ("mm-hm", "yeah okay") means "I'm listening" and
never cuts the agent off; a command word ("stop", "wait") always does; anything else interrupts
when it carries at least one content word.
"""

from __future__ import annotations

from voicegate.internal.turn.text_cues import words

BACKCHANNEL_TOKENS = frozenset(
    "mm mhm mmhm mmhmm mhmm hmm hm uh huh uhhuh um umm yep yup yeah yea yes ya okay ok kay right sure alright "
    "cool nice wow oh ah aha gotcha got it i see true totally exactly thats that's".split()
)
COMMAND_TOKENS = frozenset("stop wait pause cancel actually no hang hold repeat transfer operator human help".split())
WEAK_TOKENS = frozenset(
    "i im i'm me my you your we it this that the a an and or but so to of for with on in at from about is are "
    "was were be can could would should will do does did need want um uh uhh umm hmm okay ok yeah yes yep "
    "right sure".split()
)


def is_backchannel(text: str, extra: frozenset[str] = frozenset()) -> bool:
    """Every word is acknowledgement vocabulary (configured phrases included)."""
    tokens = words(text)
    vocabulary = BACKCHANNEL_TOKENS | {w for phrase in extra for w in words(phrase)}
    return bool(tokens) and all(token in vocabulary for token in tokens)


def is_meaningful_interruption(text: str, extra_backchannels: frozenset[str] = frozenset()) -> bool:
    """Is this (partial) transcript worth cutting the agent off for?"""
    tokens = words(text)
    if not tokens:
        return False
    if any(token in COMMAND_TOKENS for token in tokens):
        return True
    if is_backchannel(text, extra_backchannels):
        return False
    content = sum(1 for token in tokens if len(token) >= 3 and token not in WEAK_TOKENS)
    return content >= 1


# More words than a voice says in a second of speech, even a fast one (2.5-4 words a second is usual).
MAX_WORDS_PER_VOICED_S = 6.0


def too_many_words(text: str, voiced_ms: float) -> bool:
    """More words than the caller's voice could have held: the recogniser made them up. Whisper turns a
    short sound into a sentence from its training data ("Mm-hm" into "And then make 10.", a breath into
    "Make sure to hit the bell icon."), which over the agent would cut it off."""
    count = len(words(text))
    return count >= 3 and count > MAX_WORDS_PER_VOICED_S * voiced_ms / 1000.0
