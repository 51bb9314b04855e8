"""An ordered, case-insensitive, multi-valued header list (RFC 3261 section 7.3).

Lines are kept as received (one entry per header line) so a proxy-style copy such as the Via stack in
a response keeps its exact order; `get_list` splits comma-separated values on demand, because only the
caller knows whether a header is a list (Via, Route, Contact) or merely contains commas
(WWW-Authenticate, Date).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from voicegate.internal.sip_grammar.syntax import split_list

# RFC 3261 7.3.3 and later RFCs: compact forms a peer may send instead of the full name.
COMPACT_FORMS: dict[str, str] = {
    "a": "Accept-Contact",  # RFC 3841
    "b": "Referred-By",  # RFC 3892
    "c": "Content-Type",
    "d": "Request-Disposition",  # RFC 3841
    "e": "Content-Encoding",
    "f": "From",
    "i": "Call-ID",
    "j": "Reject-Contact",  # RFC 3841
    "k": "Supported",
    "l": "Content-Length",
    "m": "Contact",
    "o": "Event",  # RFC 6665
    "r": "Refer-To",  # RFC 3515
    "s": "Subject",
    "t": "To",
    "u": "Allow-Events",  # RFC 6665
    "v": "Via",
    "x": "Session-Expires",  # RFC 4028
    "y": "Identity",  # RFC 8224
}

# Canonical spelling for names whose capitalisation is not simply Title-Case, plus the common ones,
# so what we send looks like what every other stack sends.
_CANONICAL = {
    name.lower(): name
    for name in (
        *COMPACT_FORMS.values(),
        "Accept", "Accept-Encoding", "Accept-Language", "Alert-Info", "Allow", "Authorization",
        "Authentication-Info", "Call-Info", "CSeq", "Content-Disposition", "Content-Language", "Date",
        "Error-Info", "Expires", "In-Reply-To", "Max-Forwards", "MIME-Version", "Min-Expires",
        "Organization", "P-Asserted-Identity", "P-Preferred-Identity", "Priority", "Privacy",
        "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Require", "RAck", "Reason", "Record-Route",
        "Reply-To", "Require", "Retry-After", "Route", "RSeq", "Server", "Timestamp", "Unsupported",
        "User-Agent", "WWW-Authenticate", "Warning",
    )
}


def canonical_name(name: str) -> str:
    """The full, conventionally spelled header name for `name` (compact forms expanded)."""
    stripped = name.strip()
    lower = stripped.lower()
    if len(lower) == 1 and lower in COMPACT_FORMS:
        return COMPACT_FORMS[lower]
    return _CANONICAL.get(lower, stripped)


class Headers:
    """Header lines in order; lookups ignore case and compact forms."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items: list[tuple[str, str]] = [(canonical_name(n), v) for n, v in items]

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first line's value, or `default`."""
        key = canonical_name(name).lower()
        for item_name, value in self._items:
            if item_name.lower() == key:
                return value
        return default

    def get_all(self, name: str) -> list[str]:
        """Every line's value, unsplit."""
        key = canonical_name(name).lower()
        return [value for item_name, value in self._items if item_name.lower() == key]

    def get_list(self, name: str) -> list[str]:
        """Every comma-separated element across all lines, respecting quotes and <...>.

        Raises `syntax.SyntaxProblem` for unbalanced quotes or brackets.
        """
        return [element for value in self.get_all(name) for element in split_list(value)]

    def add(self, name: str, value: str) -> None:
        self._items.append((canonical_name(name), value))

    def prepend(self, name: str, value: str) -> None:
        """Put a header first (a new top Via goes above the ones already there)."""
        self._items.insert(0, (canonical_name(name), value))

    def set(self, name: str, value: str) -> None:
        """Replace every line of `name` by one, kept at the first line's position."""
        key = canonical_name(name).lower()
        for index, (item_name, _) in enumerate(self._items):
            if item_name.lower() == key:
                self._items[index] = (canonical_name(name), value)
                self._items = [
                    item for i, item in enumerate(self._items) if i <= index or item[0].lower() != key
                ]
                return
        self.add(name, value)

    def replace_first(self, name: str, value: str) -> None:
        key = canonical_name(name).lower()
        for index, (item_name, _) in enumerate(self._items):
            if item_name.lower() == key:
                self._items[index] = (item_name, value)
                return
        self.add(name, value)

    def remove(self, name: str) -> None:
        key = canonical_name(name).lower()
        self._items = [item for item in self._items if item[0].lower() != key]

    def copy(self) -> Headers:
        copied = Headers()
        copied._items = list(self._items)
        return copied

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Headers):
            return NotImplemented
        return [(n.lower(), v) for n, v in self._items] == [(n.lower(), v) for n, v in other._items]

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"
