"""Phone numbers as identities: one canonical E.164 form, or nothing.

Memory is keyed on the number, so "+1 555 123 4567", "15551234567" and "5551234567" (from a US
trunk) must be one caller. Withheld numbers and anything phonenumbers cannot place are None, and the
caller is then anonymous: a guess would merge two people's memory.
"""

from __future__ import annotations

import re

import phonenumbers

# What networks put in the user part when the caller withheld the number (RFC 3323 and practice).
WITHHELD = frozenset({"anonymous", "unknown", "restricted", "withheld", "private", "unavailable", "none"})
_VISUAL_SEPARATORS = re.compile(r"[\s\-.()/]")


def normalise_e164(number: str, region: str) -> str | None:
    """`number` in E.164 ("+15551234567"), or None when invalid or withheld.

    `region` (ISO 3166 alpha-2, e.g. "US") reads national numbers. We accept any number of a
    possible length for its country rather than only allocated ranges, so fictional 555 numbers in
    tests and newly opened ranges still work.
    """
    text = number.strip()
    if not text or text.lower() in WITHHELD:
        return None
    text = _VISUAL_SEPARATORS.sub("", text)
    if text.startswith("00"):
        text = "+" + text[2:]
    if not re.fullmatch(r"\+?\d{3,17}", text):
        return None
    try:
        parsed = phonenumbers.parse(text, region.upper() if not text.startswith("+") else None)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_possible_number(parsed):
        return None
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)
