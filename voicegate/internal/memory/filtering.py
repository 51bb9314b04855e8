"""Sensitive-data filtering: what must never be stored as memory, nor sent to the reconciliation model.

Card numbers (13-19 digits passing the Luhn check), IBANs (passing the ISO 13616 mod-97 check),
national identity numbers (US SSN, UK NI number), credentials (passwords, API keys, tokens, private
keys, JWTs) and any configured pattern. A write whose *resulting document* holds one it did not hold
before is refused with the reason, so a number assembled over several edits is caught as surely as one
written at once; text bound for the model has them replaced by a placeholder.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_CARD = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b", re.IGNORECASE)
_BUILTIN: list[tuple[str, re.Pattern[str]]] = [
    ("a national identity number", re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b")),
    ("a national insurance number", re.compile(r"\b[A-CEGHJ-PR-TW-Z]{2} ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b", re.I)),
    ("a password", re.compile(r"\b(?:password|passcode|passwd|pin(?: code)?)\s*(?:is|:|=)\s*\S+", re.I)),
    ("an API key or token", re.compile(r"\b(?:sk|pk|rk|ghp|gho|xox[abp])[-_][A-Za-z0-9_-]{10,}\b")),
    ("an API key or token", re.compile(r"\b(?:api[ _-]?key|secret|token)\s*(?:is|:|=)\s*\S{6,}", re.I)),
    ("an access token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
]
PLACEHOLDER = "[removed]"


def iban_valid(candidate: str) -> bool:
    """ISO 13616: move the first four characters to the end, letters to numbers, mod 97 == 1."""
    compact = re.sub(r"\s", "", candidate).upper()
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    digits = "".join(str(int(char, 36)) for char in rearranged)
    return int(digits) % 97 == 1


def luhn_valid(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    start: int
    end: int


class SensitiveFilter:
    def __init__(self, extra_patterns: Iterable[str] = ()) -> None:
        self._patterns = list(_BUILTIN) + [("a configured sensitive pattern", re.compile(p)) for p in extra_patterns]

    def findings(self, text: str) -> list[Finding]:
        found = []
        for match in _CARD.finditer(text):
            digits = re.sub(r"\D", "", match.group())
            if 13 <= len(digits) <= 19 and luhn_valid(digits):
                found.append(Finding("a payment card number", match.start(), match.end()))
        for match in _IBAN.finditer(text):
            if iban_valid(match.group()):
                found.append(Finding("a bank account number (IBAN)", match.start(), match.end()))
        for kind, pattern in self._patterns:
            found.extend(Finding(kind, m.start(), m.end()) for m in pattern.finditer(text))
        return sorted(found, key=lambda f: f.start)

    def reason(self, text: str) -> str | None:
        """Why `text` must not be stored (None when it is fine)."""
        found = self.findings(text)
        if not found:
            return None
        kinds = sorted({f.kind for f in found})
        return "it contains " + " and ".join(kinds) + "; that is never stored"

    def reason_for_edit(self, before: str, after: str) -> str | None:
        """Why the document `after` must not replace `before`: it holds sensitive data `before` did not
        (compared by the matched text, so a pre-existing finding does not block removing it)."""
        known = {before[f.start : f.end] for f in self.findings(before)}
        new = [f for f in self.findings(after) if after[f.start : f.end] not in known]
        if not new:
            return None
        kinds = sorted({f.kind for f in new})
        return "it contains " + " and ".join(kinds) + "; that is never stored"

    def redact(self, text: str) -> str:
        out, last = [], 0
        for finding in self.findings(text):
            if finding.start < last:
                continue
            out.append(text[last : finding.start])
            out.append(PLACEHOLDER)
            last = finding.end
        out.append(text[last:])
        return "".join(out)
