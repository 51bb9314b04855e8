"""Barge-in and turn-shape predicates: pure text functions, no pipeline state.

Ported from StreamCore's behaviour: a backchannel ("mm-hm", "yeah okay") means "I'm listening" and
never cuts the agent off; a command word ("stop", "wait") always does; anything else interrupts
when it carries at least one content word.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9']+")

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
INCOMPLETE_TAIL = frozenset(
    "um uh er hmm like and or but so because if when then while as that which who where why how the a an my "
    "your this to of for with at on in by from about into onto over under is are was were be been being am do "
    "does did have has had will would can could shall should may might must i you he she we they it".split()
)
# Words no English sentence ends on (articles, prepositions, possessives, conjunctions, fillers): a turn
# whose words end here goes on, however finished it sounds. "it", "is", "you" are not here: "what time is
# it", "where is it", "thank you" end sentences all the time.
DANGLING_TAIL = frozenset(
    "um uh er erm like and or but so because if when while as that which the a an my your our their his her its "
    "this these those to of for with at on in by from about into onto over under than then whether".split()
)
DICTATION_TAIL = frozenset("dot dash hyphen underscore plus slash period point gmail hotmail outlook yahoo icloud "
                           "mail".split())


def words(text: str) -> list[str]:
    """Lowercase words (letters, digits, apostrophes); hyphenated backchannels become one token."""
    return _WORD.findall(text.lower().replace("-", ""))


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


def ends_terminal(text: str) -> bool:
    trimmed = text.strip().rstrip("'\")]}")
    return trimmed.endswith((".", "!", "?"))


def ends_question(text: str) -> bool:
    return text.strip().rstrip("'\")]}").endswith("?")


def ends_incomplete(text: str) -> bool:
    tokens = words(text)
    return bool(tokens) and tokens[-1] in INCOMPLETE_TAIL and not ends_terminal(text)


def ends_unfinished(text: str) -> bool:
    """The words themselves say the sentence goes on: a dangling function word or a number being dictated.

    Punctuation is ignored: a recogniser that punctuates (Whisper) puts a full stop after fragments too.
    """
    tokens = words(text)
    return bool(tokens) and (tokens[-1] in DANGLING_TAIL or ends_dictation(text))


def ends_dictation(text: str) -> bool:
    tokens = words(text)
    if not tokens:
        return False
    last = tokens[-1]
    return last in DICTATION_TAIL or (len(last) == 1 and last.isalpha()) or last.isdigit()
