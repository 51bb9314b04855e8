"""What the words of a turn say about whether it is finished: pure functions of the transcript.

A caller who stops after "a table for" or "my number is five five five" has not finished, however the
pause sounds; one who asked "where is my parcel?" has. The sound of the last words (Smart Turn) and these
cues are fused in fusion.py; here each cue is one plain predicate on the text, so a table test can pin it.

Punctuation is weak evidence: Whisper puts a full stop after fragments too ("I need to change."), but a
question mark only where it heard a question's shape. So the cues look at the words first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WORD = re.compile(r"[a-z0-9']+")

# Words no English sentence ends on (articles, prepositions, possessives, conjunctions, fillers): a turn
# whose words end here goes on, however finished it sounds. "it", "is", "you" are not here: "what time is
# it", "where is it", "thank you" end sentences all the time.
DANGLING_TAIL = frozenset(
    "um uh er erm like and or but so because if when while as that which the a an my your our their his her its "
    "this these those to of for with at on in by from about into onto over under than then whether".split()
)
FILLER_TAIL = frozenset("um umm uh uhh er erm hmm mm".split())
# The text rules' wider net (no end-of-turn model): also pronouns and auxiliaries, which end some sentences.
INCOMPLETE_TAIL = frozenset(
    "um uh er hmm like and or but so because if when then while as that which who where why how the a an my "
    "your this to of for with at on in by from about into onto over under is are was were be been being am do "
    "does did have has had will would can could shall should may might must i you he she we they it".split()
)
# Auxiliaries, copulas and verbs that want a complement: "my name is", "I would", "I need", "can you tell".
# Some do end sentences ("yes I can", "I do"), so this is evidence to weigh, not a rule.
OPEN_VERB_TAIL = frozenset(
    "is are was were am be been being do does did have has had will would can could shall should may might must "
    "want wants wanted need needs needed get got getting going gonna wanna trying try tell give send make put "
    "call bring change book order pay check see find keep leave move take ask".split()
)
SUBJECT_TAIL = frozenset("i we they he she i'm we're they're i'd we'd i'll we'll".split())
# Words that close a request ("..., please", "thank you", "that's all").
CLOSER_TAIL = frozenset("please thanks you bye goodbye all everything yet too again already anymore instead "
                        "today tonight tomorrow now".split())
NUMBER_WORDS = frozenset("zero oh one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
                         "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy "
                         "eighty ninety hundred thousand double triple".split())
DICTATION_TAIL = frozenset("dot dash hyphen underscore plus slash period point gmail hotmail outlook yahoo icloud "
                           "mail".split())
# Words that announce something being read out: a number, a code, a spelling, an address.
DICTATION_CONTEXT = frozenset("number numbers code postcode zip pin reference account phone card mobile spelled spell "
                              "spelling email address extension id digits ends starting".split())
# A turn made of these words alone is a whole answer ("Yes.", "No thanks.", "Okay, sure."), however short.
ANSWER_WORDS = frozenset("yes yeah yep yup no nope nah okay ok sure right correct exactly fine great perfect thanks "
                         "thank you please maybe alright absolutely definitely certainly indeed agreed that's it "
                         "all good".split())
# Whole turns that close a conversation's exchange: thanks and farewells, which a caller says and then
# waits ("Thank you very much.", "Thanks a lot.", "Bye for now."). Greetings are not here: "Hello," is as
# often the start of a sentence that goes on after a breath.
CLOSING_PHRASES = frozenset([
    "thank you very much", "thank you so much", "thanks a lot", "thanks so much", "thanks very much",
    "thank you very much indeed", "many thanks", "thanks a million", "much appreciated", "that's great thanks",
    "that's all thanks", "that's all thank you", "that's everything", "that's everything thanks", "that's all",
    "bye", "bye bye", "goodbye", "bye for now", "see you", "have a nice day", "have a good day", "you too",
    "cheers", "take care",
])
# Whole utterances a caller says and then waits: greetings (alone, they are a turn: a caller who goes on
# after "Hello." is absorbed by the continuation merge, which answers the whole sentence), thanks,
# farewells and bare answers (ANSWER_WORDS, CLOSING_PHRASES).
GREETINGS = frozenset([
    "hello", "hi", "hey", "hiya", "hello there", "hi there", "hey there", "good morning", "good afternoon",
    "good evening", "morning", "afternoon", "evening", "hello good morning", "hi good morning",
    "hello good afternoon", "hello good evening", "yes hello", "oh hello", "hello hello", "hello again",
    "hi again",
])
# A short wh-question is whole when it asks this few words and ends on none of the tails that go on.
# ("Can I pay with it?" and "Is it possible?" start questions that often go on: not these.)
SHORT_QUESTION_WORDS = 5
WH_WORDS = frozenset("what where when why who whom whose which how what's where's when's who's how's".split())
QUESTION_START = frozenset("what where when why who whom whose which how can could would will do does did is are "
                           "was were have has should may shall am isn't aren't don't doesn't won't can't".split())


def words(text: str) -> list[str]:
    """Lowercase words (letters, digits, apostrophes); hyphenated words become one token ("mm-hm")."""
    return _WORD.findall(text.lower().replace("-", ""))


def ends_terminal(text: str) -> bool:
    trimmed = text.strip().rstrip("'\")]}")
    return trimmed.endswith((".", "!", "?"))


def ends_question(text: str) -> bool:
    return text.strip().rstrip("'\")]}").endswith("?")


def ends_incomplete(text: str) -> bool:
    """The text rules' test: a tail word that usually goes on, and no terminal punctuation."""
    tokens = words(text)
    return bool(tokens) and tokens[-1] in INCOMPLETE_TAIL and not ends_terminal(text)


def ends_dictation(text: str) -> bool:
    """The last word is part of something read out: a digit group, a single letter, "dot", "gmail"."""
    tokens = words(text)
    if not tokens:
        return False
    last = tokens[-1]
    return last in DICTATION_TAIL or (len(last) == 1 and last.isalpha()) or last.isdigit()


def ends_unfinished(text: str) -> bool:
    """The words themselves say the sentence goes on: a dangling function word or a number being dictated.

    Punctuation is ignored: a recogniser that punctuates (Whisper) puts a full stop after fragments too.
    """
    tokens = words(text)
    return bool(tokens) and (tokens[-1] in DANGLING_TAIL or ends_dictation(text))


def _numberish(token: str) -> bool:
    return token.isdigit() or token in NUMBER_WORDS or (len(token) == 1 and token.isalpha() and token not in "ai")


@dataclass(frozen=True, slots=True)
class TextCues:
    """The cues of one transcript, each 0/1 except `words` (a count)."""

    words: int
    empty: bool  # no words at all (noise, a cough)
    short: bool  # one or two words ("yes", "no thanks")
    terminal: bool  # ends in ". ! ?" (weak: Whisper adds full stops after fragments)
    question_mark: bool
    question_start: bool  # starts like a question (wh-word or an inverted auxiliary)
    dangling: bool  # ends on an article, preposition, possessive or conjunction
    filler: bool  # ends on "um", "uh"
    open_verb: bool  # ends on an auxiliary or a verb wanting a complement
    subject: bool  # ends on a subject pronoun ("... and I")
    number_tail: bool  # ends on a digit, number word or spelled letter
    dictation: bool  # ...and the turn announced something read out ("my number is", "spelled")
    closer: bool  # ends on a word that closes requests ("please", "thank you", "that's all")
    answer_only: bool  # nothing but answer words ("yes", "no thanks", "okay sure"), or thanks and farewells
    trailing_off: bool  # the recogniser wrote the words trailing off ("I'd like to...") or a word cut short


def text_cues(text: str) -> TextCues:
    tokens = words(text)
    last = tokens[-1] if tokens else ""
    number_tail = bool(tokens) and (_numberish(last) or last in DICTATION_TAIL)
    return TextCues(
        words=len(tokens),
        empty=not tokens,
        short=0 < len(tokens) <= 2,
        terminal=ends_terminal(text),
        question_mark=ends_question(text),
        question_start=bool(tokens) and tokens[0] in QUESTION_START,
        dangling=last in DANGLING_TAIL,
        filler=last in FILLER_TAIL,
        open_verb=last in OPEN_VERB_TAIL,
        subject=last in SUBJECT_TAIL,
        number_tail=number_tail,
        dictation=number_tail and any(token in DICTATION_CONTEXT for token in tokens[:-1]),
        closer=last in CLOSER_TAIL,
        answer_only=bool(tokens) and (all(token in ANSWER_WORDS for token in tokens)
                                      or " ".join(tokens) in CLOSING_PHRASES),
        trailing_off=trails_off(text),
    )


def whole_utterance(text: str, questions: bool = True) -> bool:
    """Words that are a whole turn by themselves however they sounded: a greeting, thanks or a farewell, a
    bare answer ("Yes.", "No thanks."), or (`questions`) a short wh-question that ends on no open word
    ("What is my name?", "What time is it?"). The fusion answers these at once (fusion.WHOLE_UTTERANCE_P)."""
    tokens = words(text)
    if not tokens or trails_off(text):
        return False
    phrase = " ".join(tokens)
    # Not "that's everything", which is as often followed by thanks ("That's everything. | Thank you.").
    closing = phrase in CLOSING_PHRASES and not phrase.startswith("that's")
    if phrase in GREETINGS or closing or all(token in ANSWER_WORDS for token in tokens):
        return True
    last = tokens[-1]
    # Two words at least: a lone "What?" is as often the start of a question split at a word gap. A
    # question on a noisy line is left to the fused weights (the caller's `questions` False).
    return (questions and ends_question(text) and tokens[0] in WH_WORDS and 2 <= len(tokens) <= SHORT_QUESTION_WORDS
            and last not in DANGLING_TAIL and last not in OPEN_VERB_TAIL and last not in SUBJECT_TAIL
            and not _numberish(last))


def says_it_goes_on(text: str) -> bool:
    """The words themselves say more is coming: a dangling word, a number or a spelling being read out after
    "my number is" / "spelled", or Whisper's trailing-off marks. However finished the turn sounds to the
    phone-band head, these keep the usual threshold and the words' own weights: a caller reading out
    "five five five, | one two three" pauses where the head hears a sentence end."""
    return ends_unfinished(text) or trails_off(text) or text_cues(text).dictation


# Words that open a lead-in: a clause or phrase that sets up the part that matters ("Unless you can, ...",
# "Before anything else, ...", "If it's possible, ..."). Until a second clause follows, the turn has only
# begun, however finished its last word sounds.
LEAD_IN_OPENERS = frozenset("if unless when whenever before after although though while since once until as "
                            "besides regarding concerning apart".split())


def opens_lead_in(text: str) -> bool:
    """The turn so far is a lead-in: it ends on a comma (Whisper writes one where the voice held on), or it
    opens with a lead-in word and no clause has followed one yet (no comma inside). A question ("When does
    it open?") is no lead-in."""
    trimmed = text.strip().rstrip("'\")]}")
    if trimmed.endswith(","):
        return True
    tokens = words(trimmed)
    if not tokens or ends_question(trimmed):
        return False
    return tokens[0] in LEAD_IN_OPENERS and "," not in trimmed and len(tokens) <= 8


def trails_off(text: str) -> bool:
    """Whisper writes an ellipsis where speech trails off, and a hyphen after a word cut short ("the s-")."""
    trimmed = text.strip().rstrip("'\")]}")
    return trimmed.endswith(("...", "\u2026", "-", "\u2014"))


def same_turn_text(a: str, b: str) -> bool:
    """Do two transcripts say the same words (punctuation and case aside)?"""
    return words(a) == words(b)


def added_words(before: str, after: str) -> list[str]:
    """The words `after` has beyond what it shares with `before` from the start.

    A turn re-recognised after the caller went on ("I'd like a table for." -> "I'd like a table for four
    people.") gives the continuation; a caller who only said "mm" gives ["mm"]; a re-recognition with no
    more words than before (noise, or a word heard differently) gives nothing.
    """
    old, new = words(before), words(after)
    if len(new) <= len(old):
        return []
    shared = 0
    while shared < len(old) and old[shared] == new[shared]:
        shared += 1
    return new[shared:]
