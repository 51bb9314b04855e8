"""Digits a caller said, from the recogniser's words: "five five five one two", "5551 2", "double oh seven".

Recognisers write digits every way there is: as words ("five five five"), as numerals ("55512",
"555-12", "5, 5, 5"), or mixed ("5551 two"). Callers say "oh" for zero, "double five" for 55, group
digits in pairs ("twenty one fifty five") and end with "hash" or "pound". `spoken_digits` turns all of
these into the keys they stand for; words that are not digits ("my account number is", "um") are
skipped. The terminator word is reported separately, as a key press of it would be.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = {"zero": 0, "oh": 0, "o": 0, "nought": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
          "six": 6, "seven": 7, "eight": 8, "nine": 9}
# Recognisers mishear short digit words as their homophones; in a digit context they are digits.
_HOMOPHONES = {"won": "one", "to": "two", "too": "two", "for": "four", "fore": "four", "ate": "eight", "free": "three"}
_TEENS = {"ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
          "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 2, "thirty": 3, "forty": 4, "fifty": 5, "sixty": 6, "seventy": 7, "eighty": 8, "ninety": 9}
_REPEATS = {"double": 2, "triple": 3}
_STAR = {"star", "asterisk"}
_HASH = {"hash", "pound", "hashtag", "octothorpe"}
_TOKENS = re.compile(r"[a-z]+|\d+|[*#]")


@dataclass(frozen=True, slots=True)
class SpokenDigits:
    digits: str  # the keys said, in order ("*" included; "#" never: it is the terminator)
    terminated: bool  # the caller said the terminator word ("hash", "pound") or "#"

    def __bool__(self) -> bool:
        return bool(self.digits) or self.terminated


def spoken_digits(text: str, *, homophones: bool = False) -> SpokenDigits:
    """The digits in `text`. `homophones`: also take "to", "for", "won"... as digits (only when the
    caller was asked for digits and said little else)."""
    tokens = _TOKENS.findall(text.lower().replace("-", " "))
    digits: list[str] = []
    repeat = 1
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if homophones:
            token = _HOMOPHONES.get(token, token)
        index += 1
        if token.isdigit():
            digits.append(token * repeat if len(token) == 1 else token)
        elif token in _UNITS:
            digits.append(str(_UNITS[token]) * repeat)
        elif token in _TEENS:
            digits.append(str(_TEENS[token]))
        elif token in _TENS:
            # "twenty one" is 21, "twenty" alone is 20.
            following = tokens[index] if index < len(tokens) else ""
            if following in _UNITS and _UNITS[following] != 0 and following not in ("oh", "o"):
                digits.append(f"{_TENS[token]}{_UNITS[following]}")
                index += 1
            else:
                digits.append(f"{_TENS[token]}0")
        elif token == "hundred" and digits:
            digits.append("00")
        elif token in _STAR or token == "*":
            digits.append("*")
        elif token in _HASH or token == "#":
            return SpokenDigits("".join(digits), True)
        elif token in _REPEATS:
            repeat = _REPEATS[token]
            continue
        repeat = 1
    return SpokenDigits("".join(digits), False)
