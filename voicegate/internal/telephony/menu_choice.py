"""Which of a menu's options leads toward the call's goal ("reach billing" -> "for billing, press 1").

Two signals, both offline and deterministic: the goal's content words found in an option's label (stems,
so "bill" meets "billing"), and the similarity of the two as sentences in the wordllama embedding the
project already ships for retrieval (internal/rag/embedding.py), which knows that "pay my bill" is near
"payments" and "track my order" near "order status". An option is chosen only when it is clearly the
best: a menu with nothing near the goal is a menu to wait through, or to leave for an operator.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from voicegate.internal.telephony.menu import MenuOption, normalise

# An option whose label shares a content word with the goal scores at least this (one word in common is
# already strong evidence on a menu of four or five unrelated departments).
WORD_MATCH_FLOOR = 0.6
WORD_SHARE_WEIGHT = 0.3
# Two labels sharing as many of the goal's words ("change my flight": "book a flight", "change a
# reservation") are told apart by meaning, weighted below one more shared word (for goals of up to six
# content words).
SIMILARITY_TIEBREAK = 0.05
# With no word in common, the embedding alone must reach this: measured on wordllama, unrelated
# departments sit below 0.3 ("billing" vs "cancel service" 0.14), paraphrases above 0.5 ("track my order"
# vs "order status" 0.53).
MIN_SIMILARITY = 0.4
# ... and beat the runner-up by this much, or the choice is a coin toss between two departments.
MIN_MARGIN = 0.08
# Labels of the way out of a menu to a person, used when nothing fits the goal. Only words that mean a
# human who takes any call: "agent" alone or after "an"/"the"/"live"/"customer service" ("speak to an
# agent"), never a trade's agent ("an insurance agent", "a travel agent", "estate agents"), which is a
# department of its own and a wrong door when we are unsure.
OPERATOR = re.compile(r"\b(?:operator|representative|associate|someone|somebody|attendant|receptionist|"
                      r"customer\s+(?:service|care)|(?:a|real|live)\s+person|"
                      r"all\s+other|other\s+(?:questions|inquiries|enquiries))\b"
                      r"|^person$|(?:^|\b(?:an?|the|any|live|human|real|available|service|care|support)\s+)agents?\b",
                      re.IGNORECASE)
FALLBACK_KEY = "0"  # what most menus route to an operator when no option says so
FALLBACK_WORD = "agent"

# Words of a goal that say how to get somewhere, not where.
_GOAL_FILLER = frozenset(
    "a an the to of for in on my our your i me we want would like need reach get talk speak with someone "
    "department dept team please about and or is it be go through connect person".split())
_LABEL_FILLER = frozenset("a an the to of for in on your you with and or is it be about".split())


class SentenceSimilarity(Protocol):
    def similarity(self, text: str, others: Sequence[str]) -> list[float]: ...


class WordLlamaSimilarity:
    """Cosine similarity in wordllama's bundled model, loaded from site-packages (never the network)."""

    def __init__(self) -> None:
        from voicegate.internal.rag.embedding import WordLlamaEmbedder

        self._embedder = WordLlamaEmbedder()

    def similarity(self, text: str, others: Sequence[str]) -> list[float]:
        if not others:
            return []
        import numpy as np

        vectors = self._embedder.embed_sync([text, *others])
        first = vectors[0] / (np.linalg.norm(vectors[0]) or 1.0)
        return [float(np.dot(first, v / (np.linalg.norm(v) or 1.0))) for v in vectors[1:]]


@dataclass(frozen=True, slots=True)
class Choice:
    option: MenuOption
    score: float
    why: str  # "words" or "similarity"


def stem(word: str) -> str:
    for suffix in ("ing", "ments", "ment", "ies", "es", "s", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str, filler: frozenset[str]) -> set[str]:
    return {stem(word) for word in normalise(text).replace(".", " ").split() if word not in filler}


# Abbreviations callers write in goals and menus spell out, with the word(s) they stand for.
ABBREVIATIONS = {"tv": "television", "pc": "computer", "id": "identification", "rx": "prescription",
                 "appt": "appointment", "acct": "account", "info": "information", "dept": "department",
                 "tech": "technical", "dmv": "motor vehicles", "er": "emergency", "ac": "air conditioning"}


# Something is wrong: a caller's words for a fault, and a menu's for the line that deals with one. Neither
# shares a word with the other ("my wifi keeps dropping" -> "if you're having a problem with your service"),
# and the embedding does not put them near enough, so both stand for one shared word, FAULT.
FAULT = "<fault>"
FAULT_IN_GOAL = re.compile(r"\b(?:not\s+working|(?:is|does|do|are|wo|ca)n'?t\s+(?:working|work|connect|start|"
                           r"turn\s+on)|"
                           r"stopped\s+working|broken|broke|keeps?\s+(?:dropping|cutting\s+out|crashing|failing|"
                           r"freezing)|dropping\s+out|outage|problems?|trouble|faulty|fault|no\s+(?:signal|"
                           r"connection|dial\s+tone|power|heating|hot\s+water))\b")
FAULT_IN_LABEL = re.compile(r"\b(?:technical|tech\s+support|repairs?|problems?|trouble\w*|faults?|outages?|"
                            r"not\s+working|issues?\s+with|broken|breakdowns?)\b")


# What callers say and menus say otherwise, as shared concepts like FAULT: (the goal's words, the label's).
# Written from the development splits' misses (bench/sip/menus.py dev .. final: "change my flight" ->
# "manage a booking you already have", "my car was in an accident" -> "make a claim", "appeal a parking
# ticket" -> "challenge a penalty charge", "what films are on" -> "showtimes", "see a doctor today" ->
# "appointments", "book a room" -> "reservations", "get a quote" -> "a quotation", "apply for a course" ->
# "admissions", "set up a payment plan" -> "struggling to pay", "my car won't start" -> "breakdowns") and
# the issue's own examples ("my
# train was called off" -> "changes to an existing booking", "the heating stopped working" -> "report a
# fault"); never from the split that measures them.
PARAPHRASES: dict[str, tuple[str, str]] = {
    "<change>": (r"\b(?:called\s+off|cancell?ed|change|reschedule|postpone|amend|move\s+my)\b",
                 r"\b(?:change|changes|manage|amend|existing\s+(?:booking|reservation)|already\s+have|"
                 r"reschedul\w*)\b"),
    "<claim>": (r"\b(?:accident|crash(?:ed)?|damaged?|hit\s+by|was\s+stolen|break-?in|burgl\w+)\b",
                r"\bclaims?\b"),
    "<appeal>": (r"\b(?:appeal|dispute|contest|challenge|unfair)\b", r"\b(?:appeals?|dispute|contest|challenge)\b"),
    "<showtimes>": (r"\b(?:films?|movies?|what'?s\s+on|showing)\b", r"\b(?:showtimes|show\s+times|listings)\b"),
    "<appointment>": (r"\b(?:see\s+(?:a|the|my)\s+(?:doctor|nurse|gp|dentist|vet)|vaccinat\w+|check-?up)\b",
                      r"\b(?:appointments?|book\s+a\s+visit)\b"),
    "<quote>": (r"\b(?:quote|estimate|how\s+much\s+(?:would|will|does))\b", r"\b(?:quotation|quotes?)\b"),
    "<admission>": (r"\b(?:apply\s+for\s+a\s+(?:course|place|degree)|enrol\w*|study\s+at)\b",
                    r"\b(?:admissions?|applications?)\b"),
    "<booking>": (r"\b(?:book\s+a\s+(?:room|stay|night)|reserve)\b", r"\breservations?\b"),
    "<hardship>": (r"\b(?:payment\s+plan|can'?t\s+(?:afford|pay)|struggling|behind\s+on)\b",
                   r"\b(?:struggling\s+to\s+pay|payment\s+plans?|hardship|help\s+paying)\b"),
}


def concepts(text: str, side: int) -> set[str]:
    """The shared concepts `text` (a goal: side 0, a label: side 1) names."""
    lowered = normalise(text)
    return {name for name, patterns in PARAPHRASES.items() if re.search(patterns[side], lowered)}


def synonym_words(goal: str, synonyms: dict[str, list[str]]) -> set[str]:
    """The deployer's [menus] synonyms: each phrase found in the goal brings the words its menus use
    ("called off" -> ["cancel", "change"]), as the goal's own content words."""
    lowered = f" {normalise(goal)} "
    found: set[str] = set()
    for phrase, words in synonyms.items():
        if f" {normalise(phrase)} " in lowered:
            found |= {stem(word) for text in words for word in normalise(text).split() if word not in _GOAL_FILLER}
    return found


def acronyms(goal: str) -> set[str]:
    """The goal's abbreviations ("TV", "dmv"): known ones, and two to four letters in capitals or with no
    vowel (which may stand for the initials of the label's words)."""
    found = set()
    for token in re.findall(r"[A-Za-z]+", goal):
        lowered = token.lower()
        if lowered in ABBREVIATIONS or (2 <= len(token) <= 4 and (
                token.isupper() or not re.search(r"[aeiouy]", token, re.IGNORECASE))):
            found.add(lowered)
    return found


def spells_out(acronym: str, label: str) -> bool:
    """`label` says what `acronym` stands for: its known expansion ("tv": "television"), or the initials of
    words in a row ("pc": "personal computers"; filler words such as "of" skipped)."""
    said = normalise(label).replace(".", " ").split()
    expansion = ABBREVIATIONS.get(acronym)
    if expansion and {_root(word) for word in expansion.split()} <= {_root(word) for word in said}:
        return True
    initials = "".join(word[0] for word in said if word not in _LABEL_FILLER)
    return len(acronym) >= 2 and acronym in initials


def _root(word: str) -> str:
    return stem(word).removesuffix("e")  # "vehicles" and "vehicle" alike


def goal_focus(goal: str) -> str:
    """The goal without its verbs of travel: "reach the billing department" -> "billing"."""
    words = [word for word in normalise(goal).replace(".", " ").split() if word not in _GOAL_FILLER]
    return " ".join(words) or goal


class GoalMatcher:
    def __init__(self, goal: str, similarity: SentenceSimilarity | None = None, *,
                 synonyms: dict[str, list[str]] | None = None, paraphrases: bool = True) -> None:
        self.goal = goal
        self.focus = goal_focus(goal)
        self._goal_words = content_words(self.focus, _GOAL_FILLER)
        # What the goal asks to do comes first in it ("cancel my appointment", "report a leak"): menus
        # are often split by what is done with the same thing ("confirm an appointment", "cancel or
        # reschedule"), so that word counts twice.
        first = normalise(self.focus).replace(".", " ").split()
        self._action = stem(first[0]) if first and first[0] not in _GOAL_FILLER else ""
        self._acronyms = acronyms(goal)
        if FAULT_IN_GOAL.search(normalise(goal)):
            self._goal_words.add(FAULT)
        self._paraphrases = paraphrases
        if paraphrases:
            self._goal_words |= concepts(goal, 0)
        self._goal_words |= synonym_words(goal, synonyms or {})
        self._similarity = similarity

    def scores(self, options: Sequence[MenuOption]) -> list[tuple[float, str]]:
        labels = [option.label or option.word for option in options]
        similarity = self._similarity
        similar = similarity.similarity(self.focus, labels) if similarity is not None else [0.0] * len(labels)
        scored: list[tuple[float, str]] = []
        for label, near in zip(labels, similar, strict=True):
            shared = self._goal_words & self._label_words(label)
            if shared:  # more of the goal's words first (its action twice); between equals, the nearer meaning
                weight = 1 if self._action else 0
                share = (len(shared) + (weight if self._action in shared else 0)) / (len(self._goal_words) + weight)
                scored.append((WORD_MATCH_FLOOR + WORD_SHARE_WEIGHT * share + SIMILARITY_TIEBREAK * near, "words"))
            else:
                scored.append((near, "similarity"))
        return scored

    def _label_words(self, label: str) -> set[str]:
        """The label's content words, the goal's abbreviations it spells out ("television": "tv"), and FAULT
        when it is the line for something that is wrong."""
        found = content_words(label, _LABEL_FILLER) | {acronym for acronym in self._acronyms
                                                       if spells_out(acronym, label)}
        if self._paraphrases:
            found |= concepts(label, 1)
        return found | {FAULT} if FAULT_IN_LABEL.search(normalise(label)) else found

    def choose(self, options: Sequence[MenuOption]) -> Choice | None:
        """The option toward the goal, or None when none is clearly it."""
        scored = self.scores(options)
        if not scored:
            return None
        ranked = sorted(range(len(options)), key=lambda i: scored[i][0], reverse=True)
        best = ranked[0]
        score, why = scored[best]
        runner_up = scored[ranked[1]][0] if len(ranked) > 1 else 0.0
        if why == "words" and score - runner_up > 0.0:
            return Choice(options[best], score, why)
        if score >= MIN_SIMILARITY and score - runner_up >= MIN_MARGIN:
            return Choice(options[best], score, why)
        return None


def operator_option(options: Sequence[MenuOption]) -> MenuOption | None:
    """The option a menu offers toward a person, if it names one."""
    for option in options:
        if OPERATOR.search(option.label) or OPERATOR.search(option.word):
            return option
    return None
