"""What we can answer: which methods (405 or 501 otherwise), and whether a request's Accept lets
our answer carry the body it must (406 otherwise).

RFC 3261 8.2.1 separates two refusals that look alike: 405 for a method the UAS understands but
does not allow here (a REGISTER sent to a UA that is no registrar), 501 for a method it does not
recognise at all (RFC 4475 3.1.1.2's `!interesting-Method...`). Both carry Allow so the client
learns what would work. "Understood" means the methods in the IANA SIP method registry.
"""

from __future__ import annotations

from collections.abc import Iterable

from voicegate.internal.sip.headers import Headers
from voicegate.internal.sip_grammar.syntax import split_list

# IANA "Session Initiation Protocol (SIP) Parameters: Methods and Response Codes".
KNOWN_METHODS = frozenset(
    (
        "ACK", "BYE", "CANCEL", "INFO", "INVITE", "MESSAGE", "NOTIFY", "OPTIONS", "PRACK",
        "PUBLISH", "REFER", "REGISTER", "SUBSCRIBE", "UPDATE",
    )
)


def method_refusal(method: str, allowed: Iterable[str]) -> tuple[int, str] | None:
    """(status, reason) when `method` may not be processed here, None when it may.

    Method names are case-sensitive (RFC 3261 7.1): `invite` is an unknown extension method.
    """
    if method in allowed:
        return None
    if method in KNOWN_METHODS:
        return 405, "Method Not Allowed"
    return 501, "Not Implemented"


def accepts(headers: Headers, media_type: str) -> bool:
    """Whether the request's Accept lets the response carry `media_type` (RFC 3261 20.1).

    No Accept means application/sdp (the default for INVITE and OPTIONS); an empty one means
    nothing is acceptable; `*/*`, `type/*` and parameters are honoured, and q=0 excludes.
    """
    values = headers.get_all("Accept")
    if not values:
        return True
    wanted_type, _, wanted_sub = media_type.lower().partition("/")
    for entry in (item for value in values for item in split_list(value)):
        kind, *params = (part.strip() for part in entry.split(";"))
        if any(p.replace(" ", "").lower() in ("q=0", "q=0.0", "q=0.00", "q=0.000") for p in params):
            continue
        main, _, sub = kind.lower().partition("/")
        if main in ("*", wanted_type) and sub in ("*", wanted_sub):
            return True
    return False
