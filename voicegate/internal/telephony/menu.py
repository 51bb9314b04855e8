"""A phone menu's words, read: the options a prompt offers, and what else a line can be saying.

"For billing, press 1. For sales, press 2. To speak to an agent, say 'agent'." becomes three
`MenuOption`s (key or spoken word -> label). A prompt with no option is something else: a hold message
("please stay on the line"), a dead end ("the office is now closed"), a complaint about the last key
("that is not a valid option"), a voicemail greeting (the answering-machine detector's own phrases,
amd.py `words_say`), or a person ("Billing, this is Dana, how can I help?"). Everything here is a pure
function of the transcript text, so a table test pins it; the recogniser's punctuation is not relied on
(Whisper gives it, a streaming engine does not).

A slip in one clause costs that clause's option, not the menu: each key takes its label from its own
clause (the side of the key its words are on, in the same sentence), and only a key whose clause does
not say (a sentence of its own: "For sales. Press 1.") follows its neighbours or the rest of the menu.
A key the recogniser lost ("presto", "oprima tres") ends a clause as a sentence end does. A prompt in
another language is no menu (`other_language`); two hearings of one menu are read together
(`merge_hearings`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from voicegate.internal.telephony.amd import words_say

PromptKind = Literal["menu", "garbled_menu", "invalid", "closed", "hold", "voicemail", "person", "unclear", "silence",
                     "foreign"]

KEY_WORDS = {"zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
             "seven": "7", "eight": "8", "nine": "9", "star": "*", "pound": "#", "hash": "#", "hashtag": "#"}
# What the recogniser writes for a spoken key after "press": "press to" is "press two".
MISHEARD_KEYS = {"to": "2", "too": "2", "won": "1", "ate": "8"}
_KEY = (r"(?:the\s+)?([0-9*#]|" + "|".join([*KEY_WORDS, *MISHEARD_KEYS]) + r")(?:\s+key)?\b")
# "Dial2": the recogniser sometimes runs the digit into the verb, or ends a sentence between ("Press. 3."),
# or hears "press three" as "pressed three".
_ACTION = re.compile(r"\b(?:press(?:ed)?|dial|enter|push|hit|select|choose)(?:\s+[.,])?(?:\s+|(?=[0-9]))" + _KEY
                     + r"|\bsay\s+([a-z]+)\b")
# A label before its action ("for billing, press 1") starts with one of these; after it ("press 1 for
# billing") the label follows "for"/"to".
_LEAD = re.compile(r"^(?:(?:and|or|otherwise|now|please|if(?:\s+you(?:'re|\s+(?:would|'d))?)?(?:\s+(?:like|want|wish|"
                   r"need|are(?:\s+calling)?|have))?(?:\s+(?:to|about|a|an))?|for|to)\b\s*)+")
_TAIL = re.compile(r"(?:\s*\b(?:please|now|at\s+any\s+time|or|and)\b)+\s*$")
_BEFORE_STYLE = re.compile(r"\b(?:for|to|if)\b")
_STARTS_WITH_LEAD = re.compile(r"^\W*(?:(?:and|or|please)\s+)?(?:for|to|if)\b")
_SENTENCE = re.compile(r"[.!?;:]")
# A welcome's own "for"/"to" leads no option: "thank you for calling northwind energy for sales, press one"
# (the recogniser ran the welcome into the first option) reads as "for sales".
_WELCOME = re.compile(r"^\W*(?:thank\s+you|thanks)\s+for\s+(?:calling|choosing|contacting)\b|^\W*welcome\s+to\b|"
                      r"^\W*you(?:'ve|\s+have)\s+reached\b")
_CARRIES_ON = re.compile(r"^\W*(?:or|and|including|plus)\b")
# A key verb whose key the recogniser lost or misheard ("presto", "press tree"), or another language's
# ("oprima", "appuyez"): its clause ends there, so its label is not read into the next option's.
# Only a verb its clause ends soon after (two words at most) is one: "for the press office, press 4" keeps its label.
_NOUN_BEFORE = frozenset({"the", "a", "an", "our", "your", "for", "to", "of", "direct", "speed"})
_LOST_ACTION = re.compile(r"\b(?:press(?:ed)?|prez|presto|preston|dial|oprima|marque|presione|appuyez|tapez)\b"
                          r"(?=(?:\s+[a-z0-9*#']+){0,2}\s*(?:[.,]|$|\b(?:for|to|if)\b))")

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


def normalise(text: str, *, commas: bool = False) -> str:
    """Lower case, quotes and filler punctuation gone, sentence ends kept as ".", one space between words
    (and, with `commas`, the recogniser's commas kept as ",")."""
    lowered = text.lower().replace("\u2019", "'")
    lowered = re.sub(r"[\"\u201c\u201d]|(?<!\w)'|'(?!\w)", " ", lowered)
    lowered = re.sub(r"[.!?;:]+", " . ", lowered)
    if commas:
        lowered = re.sub(r"(?:,(?!\d))+", " , ", lowered)  # "1,000" is no clause end
    lowered = re.sub(r"[^a-z0-9*#'., ]+" if commas else r"[^a-z0-9*#'. ]+", " ", lowered)
    return " ".join(lowered.split())


def parse_menu(text: str) -> list[MenuOption]:
    """The options a prompt offers, in the order it says them (the same key twice: the first wins)."""
    if other_language(text):
        return []
    said = normalise(text, commas=True)
    actions = list(_ACTION.finditer(said))
    if not actions:
        return []
    gaps = _gaps(said, actions)
    sides, default = _label_sides(gaps)
    labels = _labels(gaps, sides, default)
    options: list[MenuOption] = []
    for index, action in enumerate(actions):
        label = labels[index]
        spoken = action.group(1) or ""
        key = KEY_WORDS.get(spoken) or MISHEARD_KEYS.get(spoken) or spoken
        word = action.group(2) or ""
        if not label and options and _joins_previous(gaps[index], sides[index]):
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


def _gaps(said: str, actions: list[re.Match[str]]) -> list[str]:
    """The words around the keys: before the first, between each two, after the last; a lost key in them
    is a clause end."""
    marked = said
    for lost in _LOST_ACTION.finditer(said):
        before = said[:lost.start()].split()
        if before and before[-1] in _NOUN_BEFORE:  # "the press office", "for press enquiries"
            continue
        if not any(action.start() <= lost.start() < action.end() for action in actions):
            marked = marked[:lost.start()] + "." + " " * (lost.end() - lost.start() - 1) + marked[lost.end():]
    bounds = [0, *(edge for action in actions for edge in (action.start(), action.end())), len(said)]
    return [marked[bounds[i]:bounds[i + 1]] for i in range(0, len(bounds), 2)]


# How sure a key is of its side: its own words ("For sales, press 1."; a key that opens or closes the
# prompt with words on one side only) are sure; words after a key that starts a sentence ("Press 1 for
# sales.") are a hint only, as Whisper also starts sentences at the key in a label-first menu
# ("Department to hear your balance. Press one to speak with a billing representative. Press two.").
_SURE, _HINT = 2, 1


def _label_sides(gaps: list[str]) -> tuple[list[bool], bool]:
    """For each key, whether its label comes before it, and the menu's way for keys that do not say.
    Each key's side comes from its own clause (`_own_side`); a clause between two keys that is the only
    one there can be only one key's label, so a key next to a surer one that takes it reads the same way
    (the one before a key that reads before, the one after a key that reads after). A key that still does
    not say goes the way most keys go, and when none says, the way the menu's ends say
    (`_labels_come_first`)."""
    count = len(gaps) - 1
    sides = [_own_side(gaps, index) for index in range(count)]
    changed = True
    while changed:
        changed = False
        for index in range(count - 1):
            if len(_pieces(gaps[index + 1])) != 1:
                continue
            (early, early_rank), (late, late_rank) = sides[index], sides[index + 1]
            if late is True and late_rank > early_rank:
                sides[index], changed = (True, late_rank), True
            elif early is False and early_rank > late_rank:
                sides[index + 1], changed = (False, early_rank), True
    votes = [side for side, _ in sides if side is not None]
    if 2 * votes.count(True) == len(votes):
        default = _labels_come_first(gaps)
    else:
        default = 2 * votes.count(True) > len(votes)
    return [default if side is None else side for side, _ in sides], default


def _own_side(gaps: list[str], index: int) -> tuple[bool | None, int]:
    """The side a key's own clause puts its label on, and how sure that is (0: it does not say)."""
    before, after = gaps[index], gaps[index + 1]
    joined_before, joined_after = _attached(before, last=True), _attached(after, last=False)
    if joined_before and not joined_after:
        return True, _SURE
    if index == 0 and not _pieces(before) and _pieces(after):
        return False, _SURE
    if index == len(gaps) - 2 and not _pieces(after) and _pieces(before):
        return True, _SURE
    if joined_after and not joined_before:
        return False, _HINT
    return None, 0


def _labels(gaps: list[str], sides: list[bool], default: bool) -> list[str]:
    """Each key's label from its side. A gap of one clause between a key that reads after it and one that
    reads before it is one option's label: the key in whose sentence it is gets it; in both keys'
    sentences, the earlier key when it ends in "or" ("Say agent to speak to someone, or press 9"), else
    the key the menu's way gives it to."""
    labels = []
    for index, before in enumerate(sides):
        gap = gaps[index] if before else gaps[index + 1]
        shared = (index > 0 and not sides[index - 1]) if before else (index + 1 < len(sides) and sides[index + 1])
        if shared and len(_pieces(gap)) == 1 and _gap_owner(gap, default) != before:
            labels.append("")
        elif before:
            labels.append(_clean_label(_from_lead(_nearest_piece(gap, last=True))))
        else:
            labels.append(_clean_label(_nearest_piece(gap, last=False)))
    return labels


def _gap_owner(gap: str, default: bool) -> bool:
    """Whether a one-clause gap between two keys is the later key's label (True) or the earlier's."""
    later, earlier = _attached(gap, last=True), _attached(gap, last=False)
    if later != earlier:
        return later
    if re.search(r"\bor\W*$", gap):
        return False
    return default


def _pieces(segment: str) -> list[str]:
    return [piece for piece in _SENTENCE.split(segment) if _clean_label(piece)]


def _attached(segment: str, *, last: bool) -> bool:
    """Whether words of a label sit in the key's own sentence on this side (no sentence end between)."""
    pieces = _SENTENCE.split(segment)
    return bool(_clean_label(pieces[-1] if last else pieces[0]))


def _labels_come_first(gaps: list[str]) -> bool:
    """Which way a menu puts its labels, from its ends: a label after the last key ("... press 3 for
    billing") says key first; otherwise words before the first key ("For sales, press 1", or a welcome
    whose "to" the recogniser lost: "Acme, report an outage. Press 1.") say label first; a menu that
    starts with its first key ("Say agent to ..., or press 9") is key first. The recogniser's sentence
    ends fall anywhere (it may write "For sales. Press 1."), so only pieces with words count."""
    after_last = _nearest_piece(gaps[-1], last=False)
    before_first = _after_welcome(_nearest_piece(gaps[0], last=True))
    if _STARTS_WITH_LEAD.match(after_last):
        # Both ends lead ("For sales, press one, for billing, press two, for technical support, upper
        # mattress"): the words after the last key in a clause of their own (a comma or sentence end
        # between) are an option whose key was lost, and the menu reads label first.
        return bool(_STARTS_WITH_LEAD.match(before_first)) and bool(re.match(r"\s*[.,]", gaps[-1]))
    return bool(before_first)


def _from_lead(piece: str) -> str:
    """A label-first option from its "for"/"to"/"if you": words before it belong to something else
    ("acme dot com for billing", where the recogniser wrote a web address)."""
    piece = _after_welcome(piece)
    lead = _BEFORE_STYLE.search(piece)
    return piece[lead.start():] if lead else piece


def _after_welcome(piece: str) -> str:
    """A piece from its first lead after a welcome that opens it ("thank you for calling northwind energy
    for sales" -> "for sales"); a welcome with no lead after it, or a piece with no welcome, as it is."""
    welcome = _WELCOME.match(piece)
    if not welcome:
        return piece
    lead = _BEFORE_STYLE.search(piece, welcome.end())
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


def _joins_previous(between: str, label_before: bool) -> bool:
    between = between.strip(" ,")
    return between in ("or", "") or (not label_before and between.startswith("or"))


def _clean_label(segment: str) -> str:
    label = _LEAD.sub("", segment.replace(",", " ").strip(" ."))
    label = _TAIL.sub("", label)
    return " ".join(label.strip(" .").split())


# Words a phone menu says in each language that English does not use (words both use, "a", "no", "me",
# "si", are left out). A prompt in which these outnumber English's own is in that language: Whisper's
# English models write such a prompt as broken English, or keep a word like "press 2" from it, and its
# options would be read as English ones with labels that are no labels.
_OTHER_LANGUAGES = {
    "spanish": frozenset({"para", "por", "que", "el", "la", "los", "las", "de", "del", "y", "en", "con", "su",
                          "sus", "usted", "oprima", "marque", "presione", "pulse", "diga", "desea", "gracias",
                          "llamar", "un", "una", "es", "al", "uno", "dos", "tres", "cuatro", "cinco", "nueve",
                          "cero", "hablar", "servicio", "opciones", "ventas", "favor", "espere", "numero"}),
    "french": frozenset({"pour", "le", "la", "les", "de", "des", "du", "et", "vous", "votre", "vos", "appuyez",
                         "tapez", "sur", "merci", "d", "avoir", "un", "une", "au", "aux", "est", "nous", "avec",
                         "parler", "conseiller", "restez", "ligne", "touche", "ou", "l", "en", "service", "dites"}),
}
_ENGLISH = frozenset({"the", "to", "for", "and", "of", "you", "your", "press", "is", "please", "if", "or", "with",
                      "in", "on", "our", "we", "are", "this", "that", "say", "thank", "calling", "option", "options",
                      "menu", "dial", "would", "like", "have", "be", "an", "at", "it", "my", "from", "will", "can",
                      "all", "any", "about", "hold", "line", "call"})
# Fewer words than this of another language: a line for its speakers in an English menu ("Para español,
# oprima dos"), read as English (at most one option).
OTHER_LANGUAGE_MIN_WORDS = 4


def other_language(text: str) -> str:
    """The language a prompt is in when it is not English ("spanish", "french"), else ""."""
    plain = unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z]+", plain)
    english = sum(word in _ENGLISH for word in words)
    counts = {language: sum(word in known for word in words) for language, known in _OTHER_LANGUAGES.items()}
    language, count = max(counts.items(), key=lambda item: item[1])
    return language if count >= OTHER_LANGUAGE_MIN_WORDS and count > english else ""


def merge_hearings(earlier: Sequence[MenuOption], later: Sequence[MenuOption]) -> list[MenuOption]:
    """One menu heard twice, read from both hearings: an option one of them lost comes from the other (in
    its place), a label missing from one is the other's, a label cut short in one is the longer one, and
    two different readings of a label are both kept ("feeling / billing") for the chooser to weigh: which
    one the recogniser got right is not known here."""
    merged = {_ident(option): option for option in earlier}
    order = [_ident(option) for option in earlier]
    for position, option in enumerate(later):
        ident = _ident(option)
        if ident not in merged:
            follows = [_ident(before) for before in later[:position] if _ident(before) in merged]
            order.insert(order.index(follows[-1]) + 1 if follows else 0, ident)
            merged[ident] = option
            continue
        known = merged[ident]
        merged[ident] = MenuOption(_merged_label(known.label, option.label), known.key or option.key,
                                   known.word or option.word)
    return [merged[ident] for ident in order]


def _ident(option: MenuOption) -> str:
    return option.key or "say:" + option.word


def _merged_label(one: str, other: str) -> str:
    readings = [reading for part in (one, other) for reading in part.split(" / ") if reading]
    kept: list[str] = []
    for reading in readings:
        words = set(reading.split())
        if any(words <= set(known.split()) for known in kept):
            continue
        kept = [known for known in kept if not set(known.split()) <= words] + [reading]
    return " / ".join(kept)


def classify_prompt(text: str) -> PromptKind:
    """What a whole prompt (one stretch of speech up to a pause) is. A prompt in another language is that,
    whatever it says (its words are not read as English). Options make a menu even when the
    prompt also complains ("invalid entry. for billing press 1"); a menu-less prompt is checked from
    the most to the least decisive: gave up, complained, voicemail, queue, person; what is left is a menu
    whose options were misheard when it speaks of keys or runs long, else unclear (maybe a person)."""
    said = normalise(text)
    if not said or _NON_SPEECH.match(said):
        return "silence"
    if other_language(text):
        return "foreign"
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
