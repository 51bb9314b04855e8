"""Enough of a malformed request to answer it (RFC 3261 8.2.6, RFC 4475 section 3.1.2).

`parse` refused the bytes; the peer still deserves an answer, or a UDP client retransmits until
it times out. So this reads the request the way a lenient eye would: a start line that names a
method and a SIP version, and whichever of Via, From, To, Call-ID and CSeq are there, copied back
unread. None of the checks that made `parse` refuse the message are run again, since re-running
them would refuse it a second time. Only a request with no Via at all is left unanswered: its
client could not match any response to its transaction.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from voicegate.internal.sip.headers import Headers, canonical_name
from voicegate.internal.sip.message import SipRequest, SipResponse, make_response
from voicegate.internal.sip_grammar.syntax import is_token

# Lenient on purpose: several SP, SP at the end, <> or LWS in the URI are all still a request line.
_START_RE = re.compile(r"^([^\s]+)[ \t]+(.*?)[ \t]+(SIP/[^\s]*)[ \t]*$", re.I)
# The headers a response copies; From, To, Call-ID and CSeq only once (RFC 4475 3.3.8 repeats them).
_COPIED = ("Via", "From", "To", "Call-ID", "CSeq")
_ONCE = ("From", "To", "Call-ID", "CSeq")
_TAG_RE = re.compile(r";\s*tag\s*=", re.I)


def salvage_request(data: bytes) -> SipRequest | None:
    """The start line and the copied headers of a request `parse` refused, or None (no Via, a
    response, or not SIP at all). The body is never read."""
    try:
        return _salvage(data)
    except Exception:  # this is the last resort for hostile bytes: nothing may escape it
        return None


def _salvage(data: bytes) -> SipRequest | None:
    data = data.lstrip(b"\r\n")
    ends = [i for i in (data.find(b"\r\n\r\n"), data.find(b"\n\n")) if i >= 0]
    head = data[: min(ends)] if ends else data  # no blank line: a datagram's end ends the headers
    text = head.decode("utf-8", errors="replace")
    lines = [line.rstrip("\r") for line in text.split("\n")]
    match = _START_RE.match(lines[0]) if lines else None
    if match is None or not is_token(match.group(1)):
        return None  # a response (never answered), or no request line we could name
    method, uri, version = match.groups()
    headers = Headers()
    for name, value in _copied_headers(lines[1:]):
        if name in _ONCE and name in headers:
            continue
        headers.add(name, value)
    if not any(value.strip() for value in headers.get_all("Via")):
        return None
    return SipRequest(method, uri.strip() or "*", headers, b"", version.upper())


def _copied_headers(lines: list[str]) -> list[tuple[str, str]]:
    """Unfolded (name, value) for the copied headers; lines that are not headers are skipped."""
    unfolded: list[tuple[str, str]] = []
    for line in lines:
        if line[:1] in (" ", "\t"):
            if unfolded:
                name, value = unfolded[-1]
                unfolded[-1] = (name, f"{value} {line.strip()}".strip())
            continue
        name, colon, value = line.partition(":")
        name = name.strip()
        if colon and is_token(name):
            unfolded.append((canonical_name(name), value.strip()))
        else:
            unfolded.append(("", ""))  # a broken line ends any fold before it
    return [(name, value) for name, value in unfolded if name in _COPIED]


def refusal(request: SipRequest, status: int, reason: str, headers: Iterable[tuple[str, str]] = ()) -> SipResponse:
    """The stateless error response to a salvaged request, with a To tag when it had none.

    RFC 3261 8.2.6.2 wants a To tag on every final response and 8.2.7 the same tag for the same
    request from a stateless UAS, so it is derived from the request instead of drawn at random.
    The To value may be malformed (it is why we refuse), so the tag is appended, not parsed in.
    """
    response = make_response(request, status, reason, list(headers))
    to = response.headers.get("To")
    if to is not None and not _TAG_RE.search(to):
        seed = "\n".join(request.headers.get(name) or "" for name in ("Call-ID", "From", "CSeq", "Via"))
        response.headers.replace_first("To", f"{to};tag={hashlib.sha256(seed.encode()).hexdigest()[:12]}")
    return response
