"""Grammar primitives shared by headers, URIs and SDP (RFC 3261 section 25).

Kept apart so `uri.py` and internal/sip's `via.py` and `message.py` split and quote text the same way; a quoting bug
fixed here is fixed for every header at once.
"""

from __future__ import annotations

import re

# RFC 3261 `token`: what a method name, a header name or a parameter name may contain.
TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.!%*_+`'~")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9\-.!%*_+`'~]+$")

Params = dict[str, str | None]


class SyntaxProblem(ValueError):
    """A piece of a header could not be read; callers turn it into their own error type."""


def is_token(text: str) -> bool:
    return bool(_TOKEN_RE.match(text))


def has_bare_nul(head: bytes) -> bool:
    """Whether a NUL byte appears anywhere but as a quoted-pair ("\\" NUL) inside a quoted string.

    RFC 3261 25.1 lets a quoted-pair escape any octet but CR and LF, NUL included (RFC 4475 3.1.1.2
    sends one in a display name); a NUL anywhere else is not SIP.
    """
    in_quotes = escaped = False
    for byte in head:
        if escaped:
            escaped = False
        elif byte == 0:
            return True
        elif byte in (0x0A, 0x0D):
            in_quotes = False  # a quoted string never spans lines (a fold is LWS, outside quotes)
        elif in_quotes and byte == 0x5C:
            escaped = True
        elif byte == 0x22:
            in_quotes = not in_quotes
    return False


def split_outside(text: str, separator: str) -> list[str]:
    """Split on `separator` except inside "quoted strings" (with \\ escapes) and <angle brackets>.

    Contact, Route and Via values may hold commas and semicolons inside a display name or a URI;
    a naive split would cut a name-addr in half.
    """
    parts: list[str] = []
    current: list[str] = []
    in_quotes = False
    depth = 0
    escaped = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
            continue
        if in_quotes:
            if char == "\\":
                escaped = True
            elif char == '"':
                in_quotes = False
            current.append(char)
            continue
        if char == '"':
            in_quotes = True
        elif char == "<":
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif char == separator and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    if in_quotes:
        raise SyntaxProblem("unterminated quoted string")
    if depth:
        raise SyntaxProblem("unbalanced angle brackets")
    parts.append("".join(current))
    return parts


def split_list(value: str) -> list[str]:
    """The elements of a comma-separated header value, trimmed, empty elements dropped."""
    return [part.strip() for part in split_outside(value, ",") if part.strip()]


def unquote(text: str) -> str:
    """The content of a quoted-string with its \\ escapes resolved; unquoted text is returned as is."""
    text = text.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        body = text[1:-1]
        out: list[str] = []
        escaped = False
        for char in body:
            if escaped:
                out.append(char)
                escaped = False
            elif char == "\\":
                escaped = True
            else:
                out.append(char)
        return "".join(out)
    return text


def quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_params(text: str) -> Params:
    """`;name=value;flag` (the text after the first `;`) as an ordered dict with lower-case names.

    Names are case-insensitive in SIP, so lower-casing them makes lookups simple; values keep their
    case (a tag or branch is compared byte for byte).
    """
    params: Params = {}
    if not text.strip():
        return params
    for part in split_outside(text, ";"):
        part = part.strip()
        if not part:
            raise SyntaxProblem("empty parameter")
        name, sep, value = part.partition("=")
        name = name.strip()
        if not is_token(name):
            raise SyntaxProblem(f"bad parameter name {name[:40]!r}")
        if sep:
            value = value.strip()
            if not value:
                raise SyntaxProblem(f"parameter {name[:40]!r} has an empty value")
            if value.startswith('"') and (len(value) < 2 or not value.endswith('"')):
                raise SyntaxProblem("unterminated quoted parameter")
            params[name.lower()] = value
        else:
            params[name.lower()] = None
    return params


def format_params(params: Params) -> str:
    return "".join(f";{name}" if value is None else f";{name}={value}" for name, value in params.items())
