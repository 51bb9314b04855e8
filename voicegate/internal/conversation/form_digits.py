"""Digits a caller entered in a digit form: kept with the call, masked for the model, never sent to a tool server.

`collect_digits` returns the entry to the model, which may need it (to confirm it, or for a tool that
checks it). A sensitive form's entry (a card, a PIN) is the exception: whatever the model is told it may
say aloud, and what it says is spoken, recorded, shown in the call's events and remembered. So the model
gets it `masked` ("••••••••••••1111"), never the digits, and a tool in this process that needs them
reads them from the call (`form_entry`). A tool from
an MCP server is somebody else's program: a PIN or a card number must not reach it, whether the model
means to send it or was talked into it. So every entry a form took is kept with the call (the session's
slots, never logged or stored), and a call of an MCP tool whose arguments carry one is refused before it
is sent (internal/tools/mcp.py).

A model that was talked into sending it need not write it as the caller keyed it, so the arguments are
read as a person would read them out (`digits_in`): digit words are digits ("four one one one", "forty
one eleven", "double five", and "to"/"for"/"won" read as digits too), separators and other words are
dropped ("4111 1111", "41-11-11", "card: 4111"), and the digits of every argument string are joined, in
the order written and in the reverse order, so an entry split across arguments is found too. The entry
is looked for forwards and backwards in each of these. The price is an occasional refusal of arguments
that hold the entry's digits by chance; the model is told why and can ask the caller another way.

Entries shorter than MIN_GUARDED_DIGITS (a menu choice, "press 1") are not guarded: they are no secret,
and one digit would match almost any argument.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any

from voicegate.internal.conversation.slots import Slot, Slots
from voicegate.internal.conversation.spoken_digits import spoken_digits

FORM_DIGITS: Slot[list[str]] = Slot("digits.entered")  # the entries this call's digit forms took
# The latest entry of each form ("" for one the model described), for a tool in this process that needs
# the value itself: the model of a sensitive form only ever sees it masked (`masked`).
FORM_VALUES: Slot[dict[str, str]] = Slot("digits.values")
MIN_GUARDED_DIGITS = 3  # a card's security code
# A sensitive entry this long (a card, an account number) is shown by its last SHOWN_DIGITS ("ending
# 1111"), as receipts do; a shorter one (a PIN, a security code, a date) would be given away by them.
SHOWN_FROM_DIGITS = 10
SHOWN_DIGITS = 4
MASK = "\u2022"  # •
_NOT_DIGIT = re.compile(r"[^0-9]+")
# spoken_digits stops at a terminator ("hash", "pound", "#"): here one is only a separator.
_TERMINATOR_WORDS = re.compile(r"#|\b(?:hash|pound|hashtag|octothorpe)\b", re.IGNORECASE)


def remember_entry(slots: Slots, digits: str, form: str = "") -> None:
    slots.setdefault(FORM_VALUES, {})[form] = digits
    if len(digits) >= MIN_GUARDED_DIGITS:
        entries = slots.setdefault(FORM_DIGITS, [])
        if digits not in entries:
            entries.append(digits)


def form_entry(slots: Slots, form: str = "") -> str | None:
    """The digits the form named `form` last took on this call (for a built-in tool that checks them)."""
    return slots.get(FORM_VALUES, {}).get(form)


def masked(digits: str) -> str:
    """A sensitive entry as the model may see it: "••••••••••••1111" for a card, "••••" for a PIN."""
    shown = SHOWN_DIGITS if len(digits) >= SHOWN_FROM_DIGITS else 0
    return MASK * (len(digits) - shown) + digits[len(digits) - shown:]


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item)
    elif value is not None:
        yield str(value)


def digits_in(text: str, *, homophones: bool = False) -> str:
    """The digits `text` holds, read out: numerals of any script (full-width too) and digit words, in
    order, with everything else (separators, other words, "*") dropped."""
    text = _TERMINATOR_WORDS.sub(" ", unicodedata.normalize("NFKC", text))
    return _NOT_DIGIT.sub("", spoken_digits(text, homophones=homophones).digits)


def _readings(texts: list[str]) -> Iterator[str]:
    """Every digit run to look for an entry in: the arguments' digits joined in order and in reverse
    order of the strings, with and without homophones as digits."""
    for homophones in (False, True):
        digits = [digits_in(text, homophones=homophones) for text in texts]
        yield "".join(digits)
        yield "".join(reversed(digits))


def carries_entry(arguments: dict[str, Any], slots: Slots | None) -> bool:
    """Do these tool arguments carry a digit form's entry of this call (`slots`: the call's), forwards or
    backwards, however written?"""
    entries = slots.get(FORM_DIGITS) if slots is not None else None
    if not entries:
        return False
    readings = list(_readings(list(_texts(arguments))))
    return any(entry in reading or entry[::-1] in reading for entry in entries for reading in readings)
