"""Consent to record a call: what the caller's words and keys mean, and the state they move.

Pure policy, no audio and no I/O, so every rule here is tested on its own:
- `ask` records nothing until a clear yes (words or `yes_key`); a clear no, or an answer that is
  neither, leaves the call unrecorded. Doubt always falls on the side of not recording.
- `announce` and `none` record from the start; the caller can opt out at any time, in every mode, by
  saying one of the opt-out phrases, objecting in words of their own (objection.py), or pressing
  `opt_out_key` on its own; or the agent stops it at their request (the `stop_recording` tool).
- Phrases match whole words ("no" is not in "know"), and a longer phrase wins over one inside it
  ("no problem" is a yes, "don't mind" is a yes, not a "don't").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from voicegate.internal.config.recording import RecordingConfig
from voicegate.internal.recording.events import ConsentOutcome
from voicegate.internal.recording.objection import objects_to_recording, words

Answer = Literal["yes", "no"]

def _spans(tokens: list[str], phrase: list[str]) -> list[tuple[int, int]]:
    size = len(phrase)
    return [(start, start + size) for start in range(len(tokens) - size + 1) if tokens[start:start + size] == phrase]


def matched(text: str, phrases: dict[str, list[str]]) -> set[str]:
    """Which groups of `phrases` occur in `text` as whole words, a phrase lying inside a longer matched
    phrase of any group not counting (so "no problem" counts as its own group, not as "no")."""
    tokens = words(text)
    found: list[tuple[int, int, str]] = []
    for group, group_phrases in phrases.items():
        for phrase in group_phrases:
            found += [(start, end, group) for start, end in _spans(tokens, words(phrase))]
    return {group for start, end, group in found
            if not any(s <= start and end <= e and (e - s) > (end - start) for s, e, _ in found)}


def spoken_answer(text: str, config: RecordingConfig) -> Answer | None:
    """A yes or a no to "may I record this call?"; None when the words are neither (or both: a caller
    who says "yes, no, wait" has not agreed)."""
    groups = matched(text, {"yes": config.yes_phrases, "no": config.no_phrases})
    if "no" in groups:
        return "no"
    return "yes" if groups == {"yes"} else None


def keyed_answer(digits: str, config: RecordingConfig) -> Answer | None:
    if config.yes_key and digits == config.yes_key:
        return "yes"
    if config.no_key and digits == config.no_key:
        return "no"
    return None


def opts_out(text: str, config: RecordingConfig) -> bool:
    """The configured phrases, and any other way of objecting to the recording (objection.py)."""
    return bool(matched(text, {"out": config.opt_out_phrases})) or objects_to_recording(text)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the pipeline does with a caller's turn: `reply` is said instead of answering it (None: the
    turn is not about recording and goes to the agent as usual)."""

    reply: str | None
    outcome: ConsentOutcome
    changed: bool  # the outcome moved (an event is due)


class ConsentState:
    """One call's consent, from the opening to the hang-up (kept with the session across a resume)."""

    def __init__(self, config: RecordingConfig) -> None:
        self.config = config
        opening: dict[str, ConsentOutcome] = {"ask": "pending", "announce": "announced", "none": "not_asked"}
        self.outcome: ConsentOutcome = opening[config.consent]

    @property
    def recording(self) -> bool:
        return self.outcome in ("announced", "not_asked", "granted")

    @property
    def pending(self) -> bool:
        return self.outcome == "pending"

    def opening(self, greeting: str) -> str:
        """What the call opens with: the question (the greeting waits for the answer), the announcement
        followed by the greeting, or just the greeting."""
        if self.config.consent == "ask":
            return self.config.question
        if self.config.consent == "announce":
            return " ".join(part for part in (self.config.announcement, greeting) if part)
        return greeting

    def concerns(self, text: str) -> bool:
        """Would these words be taken as an answer or an opt-out (without taking them)?"""
        if self.pending:
            return spoken_answer(text, self.config) is not None or opts_out(text, self.config)
        return self.recording and opts_out(text, self.config)

    def spoken(self, text: str, greeting: str) -> Decision:
        if self.pending:
            answer = spoken_answer(text, self.config)
            if answer is None and opts_out(text, self.config):
                answer = "no"
            return self._answered(answer, greeting)
        if self.recording and opts_out(text, self.config):
            return self._opted_out()
        return Decision(None, self.outcome, False)

    def keys(self, digits: str, greeting: str) -> Decision:
        if self.pending:
            answer = keyed_answer(digits, self.config)
            if answer is None and self.config.opt_out_key and digits == self.config.opt_out_key:
                answer = "no"
            return self._answered(answer, greeting)
        if self.recording and self.config.opt_out_key and digits == self.config.opt_out_key:
            return self._opted_out()
        return Decision(None, self.outcome, False)

    def stop_requested(self) -> Decision:
        """The agent was asked to stop the recording (its `stop_recording` tool): an opt-out, whatever
        words the caller used; nothing to do when nothing is being recorded."""
        if self.recording:
            return self._opted_out()
        return Decision(None, self.outcome, False)

    def ended(self) -> ConsentOutcome:
        """At the hang-up: a question never answered is a "no_answer"."""
        if self.pending:
            self.outcome = "no_answer"
        return self.outcome

    def _answered(self, answer: Answer | None, greeting: str) -> Decision:
        if answer is None:
            # Not an answer: the caller went straight to what they called about. Nothing is recorded,
            # and their words go to the agent.
            self.outcome = "no_answer"
            return Decision(None, self.outcome, True)
        self.outcome = "granted" if answer == "yes" else "declined"
        said = self.config.granted_reply if answer == "yes" else self.config.declined_reply
        return Decision(" ".join(part for part in (said, greeting) if part), self.outcome, True)

    def _opted_out(self) -> Decision:
        self.outcome = "opted_out"
        return Decision(self.config.opted_out_reply, self.outcome, True)
