"""Which keys may go out on a call voicegate placed: the far end of an outbound call is untrusted too.

On a call we dial, whoever answers decides what the navigator hears ("for billing, press pound") and
what the agent is asked to key after a person takes over. Keys go out through the route we dialled
with, and a PBX on that route that honours DTMF feature codes from the calling side ("##" blind
transfer, "*2" attended transfer) would transfer the call to whatever number follows, at our cost. So
every key of an outbound call passes `screen` before it is sent (internal/sip/voice/dtmf.py, the one
place the navigator, `send_dtmf` and `POST /calls/{id}/dtmf` all send through):

- `free` keys (default the digits 0-9) go whenever asked;
- `asked_only` keys (default `*` and `#`) go only where the other side's last prompt named that very
  key ("press pound", "followed by the hash key"), and never right after another of them: no `##`,
  `**`, `*#` however often they are asked for, which is how the common feature codes start. In an entry
  of several keys one goes last only (the terminator of "your account number followed by pound"): what
  follows a `#` in one go ("#9011", "*2...") is the target of a feature code (a PBX whose code is one
  key, Asterisk's built-in `#` blind transfer, starts collecting there). The navigator presses one key
  per prompt, and a PBX that took its `#` as a feature code puts the menu on hold: it is not there to
  name the target;
- at most `max_per_call` keys in all on the call (default 16: a deep menu and an account number);
- any other key (A-D) never.

The API key's holder is the deployer: `POST /calls/{id}/dtmf` is not held to the key rules, only to
the cap, which the keys it sent count toward (and theirs toward it).

An entry is sent whole or not at all: the rest of `##900123` without its `##` is still a number nobody
meant to dial. Pure: the caller keeps the `KeyLedger` (one per call, in the session's slots).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from voicegate.internal.conversation.slots import Slot

KeySource = Literal["menu", "agent", "api"]
Rule = Literal["not_allowed", "not_asked", "in_a_row", "not_last", "cap"]

# Words a recogniser writes for the keys the other side names.
_KEY_WORDS = {"zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
              "seven": "7", "eight": "8", "nine": "9", "star": "*", "asterisk": "*", "pound": "#", "hash": "#",
              "hashtag": "#", "number sign": "#", "to": "2", "too": "2"}
_KEY = r"(?:the\s+)?([0-9*#]|" + "|".join(sorted(_KEY_WORDS, key=len, reverse=True)) + r")(?:\s+(?:key|sign))?\b"
# "press 2", "dial star", "followed by the pound key", "then hash": the other side naming a key.
_NAMED = re.compile(r"\b(?:press(?:ed)?|dial|enter|push|hit|select|choose|touch|followed\s+by|then|end\s+with)"
                    r"(?:\s+\.)?(?:\s+|(?=[0-9*#]))" + _KEY, re.IGNORECASE)
# The other side asking for keys at all: a menu, or a digit form ("please enter your account number").
_ASKS = re.compile(r"\b(?:press(?:ed)?|dial|enter|key\s+in|type\s+in|push|hit|touch[\s-]*tone|keypad|"
                   r"followed\s+by\s+the\s+(?:pound|hash|star))\b", re.IGNORECASE)


class KeysRefused(Exception):
    """The policy refused an entry; nothing of it was sent (the navigator ends its walk on this)."""


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """[sip] outbound_keys, outbound_asked_keys, outbound_max_keys."""

    free: str = "0123456789"
    asked_only: str = "*#"
    max_per_call: int = 16


@dataclass(slots=True)
class KeyLedger:
    """What one call has keyed so far, whoever keyed it."""

    sent: int = 0
    last: str = ""  # the last key that went out ("" none yet)
    refused: int = 0


KEYS: Slot[KeyLedger] = Slot("keys.ledger")  # the call's KeyLedger (internal/sip/voice/dtmf.py keeps it)


@dataclass(frozen=True, slots=True)
class Refusal:
    index: int  # where in the entry
    key: str
    rule: Rule


@dataclass(frozen=True, slots=True)
class Verdict:
    refusals: tuple[Refusal, ...] = field(default_factory=tuple)

    @property
    def allowed(self) -> bool:
        return not self.refusals


def screen(policy: KeyPolicy, ledger: KeyLedger, digits: str, source: KeySource,
           asked: frozenset[str] = frozenset()) -> Verdict:
    """Whether `digits` may go out now on this call. `asked` is the keys the other side named: for the
    navigator the key of the option it chose (the menu named it), for the agent the keys in what the
    other side said last (`keys_named`)."""
    refusals: list[Refusal] = []
    if ledger.sent + len(digits) > policy.max_per_call:
        # The cap binds everyone, the API too: a runaway loop or a talked-into model stops here.
        refusals.append(Refusal(min(len(digits), max(policy.max_per_call - ledger.sent, 0)), "", "cap"))
    if source == "api":
        return Verdict(tuple(refusals))
    previous = ledger.last
    for index, key in enumerate(digits):
        if key in policy.asked_only:
            if key not in asked:
                refusals.append(Refusal(index, key, "not_asked"))
            elif previous and previous in policy.asked_only:
                refusals.append(Refusal(index, key, "in_a_row"))
            elif index < len(digits) - 1:
                refusals.append(Refusal(index, key, "not_last"))
        elif key not in policy.free:
            refusals.append(Refusal(index, key, "not_allowed"))
        previous = key
    return Verdict(tuple(refusals))


def record(ledger: KeyLedger, digits: str) -> None:
    """`digits` went out."""
    if digits:
        ledger.sent += len(digits)
        ledger.last = digits[-1]


def explain(verdict: Verdict, policy: KeyPolicy) -> str:
    """A refusal the model (or the API's caller) can read; names keys, never the digits of the entry."""
    rules = {refusal.rule for refusal in verdict.refusals}
    parts = []
    if "cap" in rules:
        parts.append(f"this call may send at most {policy.max_per_call} keys in all")
    if "not_asked" in rules:
        parts.append(f"{_keys(policy.asked_only)} may only be pressed where the other side asked for that key")
    if "in_a_row" in rules:
        parts.append(f"{_keys(policy.asked_only)} are never pressed twice in a row (feature codes start so)")
    if "not_last" in rules:
        parts.append(f"{_keys(policy.asked_only)} may only end an entry (as in 'followed by pound')")
    if "not_allowed" in rules:
        parts.append(f"only {_keys(policy.free + policy.asked_only)} may be pressed on this call")
    return "key presses refused, nothing was sent: " + "; ".join(parts)


def log_fields(verdict: Verdict, digits: str, source: KeySource) -> dict[str, object]:
    """What the log says about a refusal: the rules, where, and the refused keys only when they are not
    digits (`*`, `#`, A-D say nothing about a PIN or an account number; a digit might)."""
    return {"source": source, "length": len(digits), "rules": sorted({r.rule for r in verdict.refusals}),
            "refused": [{"index": r.index, "key": r.key if r.key and not r.key.isdigit() else "digit"}
                        for r in verdict.refusals if r.rule != "cap"]}


def keys_named(text: str) -> frozenset[str]:
    """The keys the other side named in `text` ("press pound", "followed by the hash key", "press 2")."""
    return frozenset(_KEY_WORDS.get(match.group(1).lower(), match.group(1)) for match in _NAMED.finditer(text))


def asks_for_keys(text: str) -> bool:
    """Does `text` ask for key presses: a menu ("press 2 for billing") or a digit form ("please enter
    your account number")? Only then is the agent offered `send_dtmf`."""
    return bool(_ASKS.search(text)) or bool(keys_named(text))


def _keys(keys: str) -> str:
    return ", ".join(f"'{key}'" for key in keys)
