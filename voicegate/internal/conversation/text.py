"""Text that arrives from outside (typed turns, API and tool edits, SIP headers, a model's reply) before
anything keeps it: control characters other than tab and newline never reach a transcript, a memory
document or the database (PostgreSQL refuses U+0000 in text, and one refused write must not stall
others), and neither do lone surrogates (no UTF-8 encoder accepts them). A carriage return is a line
break written the old way: it becomes a newline."""

from __future__ import annotations

import re

_UNWANTED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def control_characters(text: str) -> list[str]:
    """The characters `clean` would remove from `text`, as U+XXXX names (for an error message)."""
    return sorted({f"U+{ord(ch):04X}" for ch in _UNWANTED.findall(_newlines(text))})


def clean(text: str) -> str:
    """`text` with its line breaks as newlines and without any other control character."""
    text = _newlines(text)
    return _UNWANTED.sub("", text) if _UNWANTED.search(text) else text


def neutralise(text: str) -> str:
    """Text from outside as it may stand inside one of the fences a model is shown (the caller's memory, a
    tool's result): no angle brackets, so it can close none and open none (guillemets read the same)."""
    return text.replace("<", "\u2039").replace(">", "\u203a")
