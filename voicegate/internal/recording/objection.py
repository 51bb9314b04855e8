"""Does the caller object to being recorded? Rules over words, not a list of sentences.

The configured `opt_out_phrases` catch the phrasings a deployer expects; people say it in many more
ways ("I don't want this call recorded", "I do not consent to recording", "turn off the recording", "I
object to being recorded"). An objection here is a word about recording (record, recorded, recording,
taping...) with, in the same stretch of speech, one of:
- a word that stops or refuses it (stop, end, turn/switch/shut ... off, cancel, pause, object, refuse,
  decline, withdraw, against, without, "off the record");
- a negation (don't, do not, not, no, never, won't ...) before it, unless the negation is part of an
  acceptance ("I don't mind being recorded", "no problem", "not a problem").
A question about recording ("is this call recorded?") is neither. Where the rules err, they err on the
side of stopping: an objection that is not one costs a recording, a missed one costs the caller's wish.

`asks_to_stop_recording` is looser, and gates the agent's `stop_recording` tool rather than stopping
anything itself: the model understands phrasings no rule catches ("could you get rid of the
recording?"), but a model can also be talked into calling the tool by text that is not the caller's (a
tool result, a retrieved document). So the tool acts only when the caller's own recent words mention
recording together with any word a request to stop or delete it would carry, in any order.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9']+")

RECORDING_WORDS = frozenset({"record", "records", "recorded", "recording", "recordings", "recorder", "tape",
                             "taped", "taping", "recordin"})
STOPPING_WORDS = frozenset({"stop", "stopped", "end", "cancel", "pause", "disable", "kill", "quit", "halt", "cease",
                            "object", "objects", "objection", "refuse", "decline", "withdraw", "withdrawing",
                            "against", "opposed", "without", "delete", "erase", "remove", "mute"})
OFF_VERBS = frozenset({"turn", "switch", "shut", "cut", "shutting", "turning", "switching"})
NEGATIONS = frozenset({"don't", "dont", "do", "not", "no", "never", "won't", "wouldn't", "didn't", "doesn't",
                       "can't", "cannot", "shouldn't"})
# A negation inside one of these is an acceptance, not an objection.
ACCEPTANCES = (("don't", "mind"), ("do", "not", "mind"), ("dont", "mind"), ("no", "problem"),
               ("not", "a", "problem"), ("no", "objection"), ("no", "objections"), ("don't", "object"),
               ("do", "not", "object"), ("not", "bothered"), ("doesn't", "bother"), ("don't", "care"))
# Words before a recording word that may carry the objection ("I do not consent to this call being recorded").
BEFORE = 8
AFTER = 4  # ... and after it ("turn the recording off", "recording, please stop it")


# Words a request to stop, delete or opt out of a recording carries besides the recording word: the
# objection rules' words, and a few more that only the model can weigh ("get rid of", "wipe", "opt out").
REQUEST_WORDS = STOPPING_WORDS | OFF_VERBS | NEGATIONS | frozenset({
    "off", "rid", "wipe", "wiped", "discard", "destroy", "scrap", "lose", "drop", "deleted", "erased", "removed",
    "stopping", "ending", "opt", "opting", "none", "nothing", "rather", "prefer", "private", "uncomfortable"})


def words(text: str) -> list[str]:
    """Lower-case words, with typographic apostrophes made plain (recognisers emit both)."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def _accepted(tokens: list[str]) -> set[int]:
    """Positions of words that belong to an acceptance ("don't mind")."""
    covered: set[int] = set()
    for phrase in ACCEPTANCES:
        size = len(phrase)
        for start in range(len(tokens) - size + 1):
            if tuple(tokens[start:start + size]) == phrase:
                covered.update(range(start, start + size))
    return covered


def objects_to_recording(text: str) -> bool:
    tokens = words(text)
    accepted = _accepted(tokens)
    for at, token in enumerate(tokens):
        if token not in RECORDING_WORDS:
            continue
        near = [(index, tokens[index]) for index in range(max(0, at - BEFORE), min(len(tokens), at + AFTER + 1))
                if index != at and index not in accepted]
        for index, word in near:
            if word in STOPPING_WORDS:
                return True
            if word == "off" and (any(verb in OFF_VERBS for _, verb in near)
                                  or tokens[index + 1:index + 3] == ["the", "record"]):
                return True
            if index < at and word in NEGATIONS and (word != "do" or tokens[index + 1:index + 2] == ["not"]):
                return True
    return False


def asks_to_stop_recording(text: str) -> bool:
    """Could these words be the caller asking to stop or delete the recording? A recording word and a
    request word anywhere in the turn, an acceptance's words ("don't mind") not counting. A question
    ("is this recorded?") or an acceptance is no such request, so the tool refuses; where a request
    is missed, the refusal tells the model how the caller can stop it themselves."""
    if objects_to_recording(text):
        return True
    tokens = words(text)
    accepted = _accepted(tokens)
    return (any(token in RECORDING_WORDS for token in tokens)
            and any(token in REQUEST_WORDS for at, token in enumerate(tokens) if at not in accepted))
