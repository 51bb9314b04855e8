"""A phone menu's words, read: the options a prompt offers, and what else a line can be saying.

"For billing, press 1. For sales, press 2. To speak to an agent, say 'agent'." becomes three
`MenuOption`s (key or spoken word -> label). A prompt with no option is something else: a hold message
("please stay on the line"), a dead end ("the office is now closed"), a complaint about the last key
("that is not a valid option"), a voicemail greeting (the answering-machine detector's own phrases,
amd.py `words_say`), or a person ("Billing, this is Dana, how can I help?"). Everything here is a pure
function of the transcript text, so a table test pins it; the recogniser's punctuation is not relied on
(Whisper gives it, a streaming engine does not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from voicegate.internal.telephony.amd import words_say

PromptKind = Literal["menu", "garbled_menu", "invalid", "closed", "hold", "voicemail", "person", "unclear", "silence"]

KEY_WORDS = {"zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
             "seven": "7", "eight": "8", "nine": "9", "star": "*", "pound": "#", "hash": "#", "hashtag": "#"}
# What the recogniser writes for a spoken key after "press": "press to" is "press two".
MISHEARD_KEYS = {"to": "2", "too": "2", "won": "1", "ate": "8"}
_KEY = (r"(?:the\s+)?([0-9*#]|" + "|".join([*KEY_WORDS, *MISHEARD_KEYS]) + r")(?:\s+key)?\b")
# "Dial2": the recogniser sometimes runs the digit into the verb, or ends a sentence between ("Press. 3."),
# or hears "press three" as "pressed three".
_ACTION = re.compile(r"\b(?:press(?:ed)?|dial|enter|push|hit|select|choose)(?:\s+\.)?(?:\s+|(?=[0-9]))" + _KEY
                     + r"|\bsay\s+([a-z]+)\b")
# A label before its action ("for billing, press 1") starts with one of these; after it ("press 1 for
# billing") the label follows "for"/"to".
_LEAD = re.compile(r"^(?:(?:and|or|otherwise|now|please|if(?:\s+you(?:'re|\s+(?:would|'d))?)?(?:\s+(?:like|want|wish|"
                   r"need|are(?:\s+calling)?|have))?(?:\s+(?:to|about|a|an))?|for|to)\b\s*)+")
_TAIL = re.compile(r"(?:\s*\b(?:please|now|at\s+any\s+time|or|and)\b)+\s*$")
_BEFORE_STYLE = re.compile(r"\b(?:for|to|if)\b")
_STARTS_WITH_LEAD = re.compile(r"^\W*(?:(?:and|or|please)\s+)?(?:for|to|if)\b")
_SENTENCE = re.compile(r"[.!?;:]")
_CARRIES_ON = re.compile(r"^\W*(?:or|and|including|plus)\b")

# A menu that gives up on the caller, or tells them the last key was wrong.
_CLOSED = re.compile(r"\b(?:(?:office|offices|we|lines)\s+(?:is|are)\s+(?:now\s+)?closed|outside\s+(?:of\s+)?"
                     r"(?:our|normal|regular)\s+(?:business|office)\s+hours|goodbye|good\s+bye|too\s+many\s+"
                     r"(?:invalid|attempts|failed)|no\s+longer\s+in\s+service|please\s+call\s+(?:back|again)\s+"
                     r"(?:later|during))\b")
_INVALID = re.compile(r"\b(?:invalid|not\s+(?:a\s+)?valid|did\s*n[o']?t\s+(?:understand|get|recogni[sz]e)|"
                      r"not\s+recogni[sz]ed|please\s+try\s+again|no\s+(?:such|valid)\s+(?:option|selection))\b")
# A queue talking to a caller who waits: not a menu, not a person.
_HOLD = re.compile(r"\b(?:please\s+(?:hold|wait|stay\s+on|remain\s+on)|(?:stay|remain)\s+on\s+the\s+line|"
                   r"your\s+call\s+is\s+important|(?:all|each)\s+of\s+our\s+\w+\s+(?:are|is)\s+(?:busy|currently|"
                   r"assisting|helping)|next\s+available|will\s+be\s+with\s+you|(?:transferring|connecting|"
                   r"transfer)\s+(?:you|your\s+call)|in\s+the\s+order\s+(?:it\s+was|they\s+were)\s+received|"
                   r"estimated\s+wait|one\s+moment)\b")
# What only a person on the line says to a caller (amd.py's human phrases, and introductions).
_PERSON = re.compile(r"\b(?:how\s+(?:can|may)\s+i\s+(?:help|assist)|what\s+can\s+i\s+do\s+for\s+you|"
                     r"this\s+is\s+[a-z]+|my\s+name\s+is|[a-z]+\s+speaking|who\s+am\s+i\s+speaking|"
                     r"can\s+i\s+help|hello|hi\s+there|good\s+(?:morning|afternoon|evening))\b")
_REACHED = re.compile(r"\byou(?:'ve|\s+have)\s+reached\b")
# A menu the recogniser misheard still talks about keys and options; a person greets in a few words.
_MENU_WORDS = re.compile(r"\b(?:press|dial|option|options|selection|menu|extension|keypad)\b")
PERSON_MAX_WORDS = 14
# Whisper's words for a line with no speech on it (music, tones, hiss).
_NON_SPEECH = re.compile(r"^(?:\W|music|applause|silence|beep|beeping|tone|static|noise|ringing|blank_audio)*$")


@dataclass(frozen=True, slots=True)
class MenuOption:
    """One choice a menu offers: a key to press or a word to say (or both: "press 1 or say billing")."""

    label: str  # what it is for, as the menu says it ("billing and payments")
    key: str = ""
    word: str = ""

    @property
    def action(self) -> str:
        return f"key {self.key}" if self.key else f"say '{self.word}'"


def normalise(text: str) -> str:
    """Lower case, quotes and filler punctuation gone, sentence ends kept as ".", one space between words."""
    lowered = text.lower().replace("\u2019", "'")
    lowered = re.sub(r"[\"\u201c\u201d]|(?<!\w)'|'(?!\w)", " ", lowered)
    lowered = re.sub(r"[.!?;:]+", " . ", lowered)
    lowered = re.sub(r"[^a-z0-9*#'. ]+", " ", lowered)
    return " ".join(lowered.split())


def parse_menu(text: str) -> list[MenuOption]:
    """The options a prompt offers, in the order it says them (the same key twice: the first wins)."""
    said = normalise(text)
    actions = list(_ACTION.finditer(said))
    if not actions:
        return []
    label_before = _labels_come_first(said, actions)
    options: list[MenuOption] = []
    for index, action in enumerate(actions):
        if label_before:
            start = actions[index - 1].end() if index else 0
            label = _clean_label(_from_lead(_nearest_piece(said[start:action.start()], last=True)))
        else:
            end = actions[index + 1].start() if index + 1 < len(actions) else len(said)
            label = _clean_label(_nearest_piece(said[action.end():end], last=False))
        spoken = action.group(1) or ""
        key = KEY_WORDS.get(spoken) or MISHEARD_KEYS.get(spoken) or spoken
        word = action.group(2) or ""
        if not label and options and _joins_previous(said, actions, index, label_before):
            previous = options[-1]  # "press 1 or say billing": one option, two ways to choose it
            options[-1] = MenuOption(previous.label, previous.key or key, previous.word or word)
            continue
        options.append(MenuOption(label or word, key, word))
    seen: set[str] = set()
    unique = []
    for option in options:
        ident = option.key or "say:" + option.word
        if ident not in seen:
            seen.add(ident)
            unique.append(option)
    return unique


def _labels_come_first(said: str, actions: list[re.Match[str]]) -> bool:
    """Which way a menu puts its labels, from its ends: a label after the last key ("... press 3 for
    billing") says key first; otherwise words before the first key ("For sales, press 1", or a welcome
    whose "to" the recogniser lost: "Acme, report an outage. Press 1.") say label first; a menu that
    starts with its first key ("Say agent to ..., or press 9") is key first. The recogniser's sentence
    ends fall anywhere (it may write "For sales. Press 1."), so only pieces with words count."""
    after_last = _nearest_piece(said[actions[-1].end():], last=False)
    if _STARTS_WITH_LEAD.match(after_last):
        return False
    return bool(_nearest_piece(said[:actions[0].start()], last=True))


def _from_lead(piece: str) -> str:
    """A label-first option from its "for"/"to"/"if you": words before it belong to something else
    ("acme dot com for billing", where the recogniser wrote a web address)."""
    lead = _BEFORE_STYLE.search(piece)
    return piece[lead.start():] if lead else piece


def _nearest_piece(segment: str, *, last: bool) -> str:
    pieces = [piece for piece in _SENTENCE.split(segment) if _clean_label(piece)]
    if not pieces:
        return ""
    if not last:
        return pieces[0]
    # The recogniser ends sentences inside a phrase ("to change your delivery date. or address. Press 2."):
    # a last piece that carries on the one before it with "or"/"and" is read together with it.
    joined = pieces[-1]
    for earlier in reversed(pieces[:-1]):
        if not _CARRIES_ON.match(joined):
            break
        joined = f"{earlier.strip()} {joined.strip()}"
    return joined


def _joins_previous(said: str, actions: list[re.Match[str]], index: int, label_before: bool) -> bool:
    between = said[actions[index - 1].end():actions[index].start()].strip()
    return between in ("or", "", ", or") or (not label_before and between.startswith("or"))


def _clean_label(segment: str) -> str:
    label = _LEAD.sub("", segment.strip(" ,."))
    label = _TAIL.sub("", label)
    return label.strip(" ,.")


def classify_prompt(text: str) -> PromptKind:
    """What a whole prompt (one stretch of speech up to a pause) is. Options make a menu even when the
    prompt also complains ("invalid entry. for billing press 1"); a menu-less prompt is checked from
    the most to the least decisive: gave up, complained, voicemail, queue, person; what is left is a menu
    whose options were misheard when it speaks of keys or runs long, else unclear (maybe a person)."""
    said = normalise(text)
    if not said or _NON_SPEECH.match(said):
        return "silence"
    if parse_menu(said):
        return "menu"
    if _CLOSED.search(said):
        return "closed"
    if _INVALID.search(said):
        return "invalid"
    if words_say(_REACHED.sub(" ", said)) == "machine":  # "you have reached acme" also opens menus
        return "voicemail"
    if _HOLD.search(said):
        return "hold"
    if _PERSON.search(said):
        return "person"
    if _MENU_WORDS.search(said) or len(said.split()) > PERSON_MAX_WORDS:
        return "garbled_menu"
    return "unclear"


def menu_signature(options: list[MenuOption]) -> frozenset[str]:
    """What makes two hearings the same menu: its actions (labels vary with the recogniser's mishearings)."""
    return frozenset(option.key or "say:" + option.word for option in options)
