"""Collecting digits from a caller: the rules of one attempt, as a pure state machine.

"Please enter your account number followed by hash": the caller answers by keypad (RFC 4733 events or
SIP INFO, as keys arrive) or by voice ("five five five one two", as the recogniser's finals arrive). An
attempt ends when
- the terminator is pressed (or said: "hash", "pound"), or `max_digits` have come;
- nothing came within `timeout_ms` of the prompt's end: a timeout;
- the caller stopped: `inter_digit_timeout_ms` after the last key, `speech_end_ms` after the last spoken
  digits (speech comes in whole utterances, so the wait after it can be shorter);
and is then valid when it holds `min_digits` to `max_digits` digits. While the caller is still talking
nothing times out: their digits are on their way. The attempts, the prompts and the re-prompts are
collection.py's; times here are plain milliseconds so every rule is testable without a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from voicegate.internal.conversation.spoken_digits import spoken_digits

InputMode = Literal["keys", "speech", "both"]
AttemptStatus = Literal["complete", "invalid", "timeout"]
Via = Literal["keys", "speech", "both", ""]
KEYS = "0123456789*"  # what an entry may hold (A-D exist on some keypads but no form asks for them)
TERMINATORS = ("", "#", "*")
HOMOPHONE_WORDS = 5  # "to", "for" count as digits only in an answer this short ("one to three")


class DigitSpecError(ValueError):
    """A form that cannot be collected (min above max, a terminator that is not # or *, ...)."""


@dataclass(frozen=True, slots=True)
class DigitSpec:
    """One form: what to ask, what to accept, how long to wait. `collect_digits` and [digits.forms]."""

    prompt: str
    min_digits: int = 1
    max_digits: int = 16
    terminator: str = "#"  # "" for none
    timeout_ms: int = 8000  # from the end of the prompt to the first key or word
    inter_digit_timeout_ms: int = 4000
    speech_end_ms: int = 1500
    input: InputMode = "both"
    max_attempts: int = 3
    retry_prompt: str = "Sorry, I didn't get that."

    def __post_init__(self) -> None:
        if not 1 <= self.min_digits <= self.max_digits <= 64:
            raise DigitSpecError(f"need 1 <= min_digits ({self.min_digits}) <= max_digits ({self.max_digits}) <= 64")
        if self.terminator not in TERMINATORS:
            raise DigitSpecError(f"terminator must be '#', '*' or '' (none), not {self.terminator!r}")
        if self.max_attempts < 1:
            raise DigitSpecError("max_attempts must be at least 1")
        for name in ("timeout_ms", "inter_digit_timeout_ms", "speech_end_ms"):
            if getattr(self, name) <= 0:
                raise DigitSpecError(f"{name} must be positive")

    @property
    def keys(self) -> bool:
        return self.input in ("keys", "both")

    @property
    def speech(self) -> bool:
        return self.input in ("speech", "both")


@dataclass(frozen=True, slots=True)
class AttemptResult:
    status: AttemptStatus
    digits: str = ""
    via: Via = ""


def judge(digits: str, spec: DigitSpec, via: Via) -> AttemptResult:
    """An entry the caller finished: valid when its length is within the form's bounds."""
    valid = spec.min_digits <= len(digits) <= spec.max_digits
    return AttemptResult("complete" if valid else "invalid", digits, via)


class DigitEntry:
    """One attempt, from the end of its prompt (`started_ms`) until `result` is set."""

    def __init__(self, spec: DigitSpec, started_ms: int) -> None:
        self.spec = spec
        self.started_ms = started_ms
        self.digits = ""
        self.result: AttemptResult | None = None
        self._last_input_ms: int | None = None
        self._last_was_speech = False
        self._speaking = False
        self._via: set[str] = set()

    @property
    def begun(self) -> bool:
        """The caller has started answering (a key, or words): the prompt should stop."""
        return self._last_input_ms is not None or self._speaking

    def key(self, key: str, now_ms: int) -> AttemptResult | None:
        if self.result is not None or not self.spec.keys:
            return self.result
        if key == self.spec.terminator and key:
            return self._finish("keys")
        if key not in KEYS:
            return None  # A-D, or the other of */#: not part of an entry
        self.digits += key
        self._input(now_ms, speech=False, via="keys")
        return self._finish("keys") if len(self.digits) >= self.spec.max_digits else None

    def speech_started(self, now_ms: int) -> None:
        if self.result is None and self.spec.speech:
            self._speaking = True

    def speech(self, text: str, now_ms: int) -> AttemptResult | None:
        """A final transcript. Words that hold no digits change nothing but end the caller's utterance."""
        if self.result is not None or not self.spec.speech:
            return self.result
        self._speaking = False
        # Homophones ("to", "for") count only in a short answer: in "I want to pay for two" they are words.
        said = spoken_digits(text, homophones=len(text.split()) <= HOMOPHONE_WORDS)
        if said.digits:
            self.digits += said.digits
            self._input(now_ms, speech=True, via="speech")
        elif self._last_input_ms is None and said.terminated:
            return self._finish("speech")
        if said.terminated or len(self.digits) >= self.spec.max_digits:
            return self._finish("speech")
        return None

    def deadline_ms(self) -> int | None:
        """When `expire` may next end the attempt (None while the caller is talking)."""
        if self.result is not None or self._speaking:
            return None
        if self._last_input_ms is None:
            return self.started_ms + self.spec.timeout_ms
        wait = self.spec.speech_end_ms if self._last_was_speech else self.spec.inter_digit_timeout_ms
        return self._last_input_ms + wait

    def expire(self, now_ms: int) -> AttemptResult | None:
        deadline = self.deadline_ms()
        if deadline is None or now_ms < deadline:
            return self.result
        if self._last_input_ms is None:
            self.result = AttemptResult("timeout")
            return self.result
        return self._finish("speech" if self._last_was_speech else "keys")

    def _input(self, now_ms: int, *, speech: bool, via: str) -> None:
        self._last_input_ms = now_ms
        self._last_was_speech = speech
        self._via.add(via)

    def _finish(self, via: Via) -> AttemptResult:
        if self._via:
            via = "both" if len(self._via) > 1 else self._via.pop()  # type: ignore[assignment]
        self.result = judge(self.digits, self.spec, via)
        return self.result


def next_prompt(spec: DigitSpec, attempt: int, last: AttemptResult | None) -> str | None:
    """What to say before attempt number `attempt` (1-based): the prompt, after a failed attempt the retry
    prompt first; None when the attempts are used up (the collection has failed)."""
    if attempt > spec.max_attempts:
        return None
    if attempt == 1 or last is None:
        return spec.prompt
    return f"{spec.retry_prompt} {spec.prompt}".strip()
