"""Digits a caller entered in a digit form never leave for a tool server.

`collect_digits` returns the entry to the model, which needs it (to read it back, or for a built-in or
bring-your-own-agent tool that checks it). A tool from an MCP server is somebody else's program: a PIN or
a card number must not reach it, whether the model means to send it or was talked into it. So every
entry a form took is kept with the call (the session's slots, never logged or stored), and a call of an MCP
tool whose arguments carry one, among whatever separators (spaces, dashes, dots), is refused before it
is sent (internal/tools/mcp.py).

Entries shorter than MIN_GUARDED_DIGITS (a menu choice, "press 1") are not guarded: they are no secret,
and one digit would match almost any argument.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from voicegate.internal.conversation.slots import Slot, Slots

FORM_DIGITS: Slot[list[str]] = Slot("digits.entered")  # the entries this call's digit forms took
MIN_GUARDED_DIGITS = 3  # a card's security code
_NOT_DIGIT = re.compile(r"\D+")


def remember_entry(slots: Slots, digits: str) -> None:
    if len(digits) >= MIN_GUARDED_DIGITS:
        entries = slots.setdefault(FORM_DIGITS, [])
        if digits not in entries:
            entries.append(digits)


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


def carries_entry(arguments: dict[str, Any], slots: Slots | None) -> bool:
    """Do these tool arguments carry a digit form's entry of this call (`slots`: the call's)?"""
    entries = slots.get(FORM_DIGITS) if slots is not None else None
    if not entries:
        return False
    digits = [_NOT_DIGIT.sub("", text) for text in _texts(arguments)]
    return any(entry in text for entry in entries for text in digits)
