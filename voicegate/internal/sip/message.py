"""SIP requests and responses: parse from bytes, serialise to bytes (RFC 3261 sections 7 and 8.2.6).

`parse` is the only door from the network into the stack, so it raises `SipParseError` and nothing
else for any input, and it validates everything later code relies on (the headers every transaction
and dialog reads, Content-Length against the body). A parsed or constructed message always carries
exactly one Content-Length equal to its body length, which keeps `parse(m.serialise()) == m`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from voicegate.internal.sip.headers import Headers, canonical_name
from voicegate.internal.sip.via import Via, ViaError
from voicegate.internal.sip_grammar.syntax import SyntaxProblem, has_bare_nul, is_token, split_list
from voicegate.internal.sip_grammar.uri import NameAddr, SipUri, UriError


class SipParseError(ValueError):
    """The bytes are not a SIP message we accept; `reason` is safe to put in a 400 reason phrase."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_REQUEST_LINE_RE = re.compile(r"^([A-Za-z0-9\-.!%*_+`'~]+) (\S+) (SIP/\d+\.\d+)$")
_STATUS_LINE_RE = re.compile(r"^(SIP/\d+\.\d+) ([1-6]\d\d)(?: (.*))?$")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+\-.]*:\S+$")
_CSEQ_RE = re.compile(r"^(\d{1,10})\s+(\S+)$")
_MANDATORY = ("Via", "From", "To", "Call-ID", "CSeq")
_SINGLE = ("From", "To", "Call-ID", "CSeq", "Max-Forwards", "Content-Length", "Content-Type")
_ADDRESS_LISTS = ("Contact", "Route", "Record-Route")
MAX_CSEQ = 2**31 - 1  # RFC 3261 8.1.1.5


class SipMessage:
    """What requests and responses share: headers, body, and typed views of the core headers."""

    headers: Headers
    body: bytes
    version: str

    def _sync_content_length(self) -> None:
        if self.headers.get("Content-Length") != str(len(self.body)):
            self.headers.set("Content-Length", str(len(self.body)))

    @property
    def first_line(self) -> str:
        raise NotImplementedError

    @property
    def call_id(self) -> str:
        return self.headers.get("Call-ID") or ""

    @property
    def cseq(self) -> tuple[int, str]:
        match = _CSEQ_RE.match((self.headers.get("CSeq") or "").strip())
        if not match:
            raise SipParseError("bad CSeq")
        return int(match.group(1)), match.group(2).upper()

    @property
    def from_addr(self) -> NameAddr:
        return NameAddr.parse(self.headers.get("From") or "")

    @property
    def to_addr(self) -> NameAddr:
        return NameAddr.parse(self.headers.get("To") or "")

    @property
    def from_tag(self) -> str | None:
        return self.from_addr.tag

    @property
    def to_tag(self) -> str | None:
        return self.to_addr.tag

    @property
    def vias(self) -> list[Via]:
        return [Via.parse(value) for value in self.headers.get_list("Via")]

    @property
    def top_via(self) -> Via:
        values = self.headers.get_list("Via")
        if not values:
            raise SipParseError("no Via")
        return Via.parse(values[0])

    def set_top_via(self, via: Via) -> None:
        """Rewrite only the first Via element (received/rport), leaving the rest of its line alone."""
        first_line = self.headers.get("Via") or ""
        rest = split_list(first_line)[1:]
        self.headers.replace_first("Via", ", ".join([str(via), *rest]))

    @property
    def content_type(self) -> str | None:
        value = self.headers.get("Content-Type")
        return value.split(";", 1)[0].strip().lower() if value else None

    def set_body(self, body: bytes, content_type: str | None) -> None:
        self.body = body
        if content_type:
            self.headers.set("Content-Type", content_type)
        else:
            self.headers.remove("Content-Type")
        self._sync_content_length()

    def serialise(self) -> bytes:
        self._sync_content_length()
        lines = [self.first_line, *(f"{name}: {value}" for name, value in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + self.body

    def __bytes__(self) -> bytes:
        return self.serialise()


@dataclass(eq=True)
class SipRequest(SipMessage):
    method: str
    uri: str  # kept as text: an unsupported scheme is the UA's 416, not a parse error
    headers: Headers = field(default_factory=Headers)
    body: bytes = b""
    version: str = "SIP/2.0"

    def __post_init__(self) -> None:
        self._sync_content_length()

    @property
    def first_line(self) -> str:
        return f"{self.method} {self.uri} {self.version}"

    @property
    def request_uri(self) -> SipUri:
        return SipUri.parse(self.uri)


@dataclass(eq=True)
class SipResponse(SipMessage):
    status: int
    reason: str
    headers: Headers = field(default_factory=Headers)
    body: bytes = b""
    version: str = "SIP/2.0"

    def __post_init__(self) -> None:
        self._sync_content_length()

    @property
    def first_line(self) -> str:
        return f"{self.version} {self.status} {self.reason}"


def parse(data: bytes) -> SipMessage:
    """A request or response from one datagram or one framed stream message."""
    try:
        return _parse(data)
    except SipParseError:
        raise
    except (UriError, ViaError, SyntaxProblem) as exc:
        raise SipParseError(str(exc)) from exc
    except Exception as exc:  # the network must never crash us: any slip in a check is still a 400
        raise SipParseError(f"unreadable message ({type(exc).__name__})") from exc


def _split_head(data: bytes) -> tuple[bytes, bytes]:
    candidates = [(i, n) for i, n in ((data.find(b"\r\n\r\n"), 4), (data.find(b"\n\n"), 2)) if i >= 0]
    if not candidates:
        raise SipParseError("no blank line after the headers")
    index, length = min(candidates)
    return data[:index], data[index + length :]


def _header_lines(head: bytes) -> list[str]:
    if b"\x00" in head and has_bare_nul(head):
        raise SipParseError("NUL byte in headers")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SipParseError("headers are not UTF-8") from exc
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    while lines and not lines[0]:
        lines.pop(0)  # RFC 3261 7.5: ignore CRLFs before the start line
    if not lines:
        raise SipParseError("empty message")
    if any("\r" in line for line in lines):
        raise SipParseError("bare CR in headers")
    return lines


def _unfold(lines: list[str]) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    for line in lines:
        if line[:1] in (" ", "\t"):
            if not headers:
                raise SipParseError("continuation line before any header")
            name, value = headers[-1]
            # RFC 3261 7.3.1: a fold (CRLF + whitespace) is equivalent to a single space.
            headers[-1] = (name, f"{value} {line.strip()}".strip())
            continue
        name, colon, value = line.partition(":")
        name = name.rstrip(" \t")
        if not colon or not is_token(name):
            raise SipParseError("bad header line")
        headers.append((canonical_name(name), value.strip()))
    return headers


def _parse(data: bytes) -> SipMessage:
    data = data.lstrip(b"\r\n")  # RFC 3261 7.5: ignore CRLFs before the start line
    if not data:
        raise SipParseError("empty message")
    head, rest = _split_head(data)
    lines = _header_lines(head)
    start, headers = lines[0], Headers(_unfold(lines[1:]))
    # Read the body before building the message: construction rewrites Content-Length.
    body = _body(headers, rest)
    message: SipMessage
    if start.startswith("SIP/"):
        status_match = _STATUS_LINE_RE.match(start)
        if not status_match:
            raise SipParseError("bad status line")
        version, status, reason = status_match.groups()
        message = SipResponse(int(status), reason or "", headers, body, version)
    else:
        request_match = _REQUEST_LINE_RE.match(start)
        if not request_match:
            raise SipParseError("bad request line")
        method, uri, version = request_match.groups()
        _check_request_uri(uri)
        message = SipRequest(method, uri, headers, body, version)
    _check_core_headers(message)
    _check_other_headers(message)
    return message


def _check_request_uri(uri: str) -> None:
    """SIP URIs are read here; other schemes are kept as text for the UA's 416 (RFC 4475 3.3.2)."""
    if not _SCHEME_RE.match(uri):
        raise SipParseError("bad Request-URI")
    if uri.split(":", 1)[0].lower() in ("sip", "sips"):
        try:
            parsed = SipUri.parse(uri)
        except UriError as exc:
            raise SipParseError(f"bad Request-URI: {exc}") from exc
        if parsed.headers:
            # RFC 3261 19.1.5 / RFC 4475 3.1.2.11: headers belong in a URI we send to, not in ours.
            raise SipParseError("headers in the Request-URI")


def _check_core_headers(message: SipMessage) -> None:
    headers = message.headers
    for name in _MANDATORY:
        if not headers.get(name):
            raise SipParseError(f"missing {name}")
    for name in _SINGLE:
        if len(headers.get_all(name)) > 1:
            raise SipParseError(f"more than one {name}")
    try:
        vias = message.vias
    except (ViaError, SyntaxProblem) as exc:
        raise SipParseError(f"bad Via: {exc}") from exc
    if not vias:
        raise SipParseError("empty Via")
    for name in ("From", "To"):
        try:
            NameAddr.parse(headers.get(name) or "")
        except (UriError, SyntaxProblem) as exc:
            raise SipParseError(f"bad {name}: {exc}") from exc
    if any(char.isspace() for char in message.call_id):
        raise SipParseError("bad Call-ID")
    number, method = message.cseq
    if number > MAX_CSEQ or not is_token(method):
        raise SipParseError("bad CSeq")
    if isinstance(message, SipRequest) and method != message.method.upper():
        raise SipParseError("CSeq method does not match the request")


def _check_other_headers(message: SipMessage) -> None:
    headers = message.headers
    max_forwards = headers.get("Max-Forwards")
    if max_forwards is not None and not (max_forwards.isdigit() and int(max_forwards) <= 255):
        raise SipParseError("bad Max-Forwards")
    for name in _ADDRESS_LISTS:
        try:
            for value in headers.get_list(name):
                if not (name == "Contact" and value == "*"):
                    NameAddr.parse(value)
        except (UriError, SyntaxProblem) as exc:
            raise SipParseError(f"bad {name}: {exc}") from exc


def _body(headers: Headers, rest: bytes) -> bytes:
    length_text = headers.get("Content-Length")
    if length_text is None:
        return rest  # allowed over UDP (RFC 3261 18.3): the datagram ends the body
    if not length_text.isdigit() or len(length_text) > 10:
        raise SipParseError("bad Content-Length")
    length = int(length_text)
    if length > len(rest):
        raise SipParseError("Content-Length larger than the body")
    return rest[:length]  # RFC 3261 18.3: bytes past Content-Length are discarded


def make_response(
    request: SipRequest,
    status: int,
    reason: str,
    headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    body: bytes = b"",
    *,
    to_tag: str | None = None,
    content_type: str | None = None,
) -> SipResponse:
    """A response to `request` per RFC 3261 8.2.6: Via, From, To, Call-ID and CSeq copied.

    `to_tag` is added to To unless the request already carries one (an in-dialog request).
    """
    copied = Headers()
    for name, value in request.headers:
        if name in ("Via", "From", "Call-ID", "CSeq"):
            copied.add(name, value)
        elif name == "To":
            if to_tag and request.to_tag is None:
                value = f"{value};tag={to_tag}"
            copied.add(name, value)
        elif name == "Timestamp" and status == 100:
            copied.add(name, value)  # 8.2.6.1: lets the client measure round-trip time
    extra = headers.items() if isinstance(headers, Mapping) else (headers or [])
    for name, value in extra:
        copied.add(name, value)
    if body and content_type:
        copied.set("Content-Type", content_type)
    return SipResponse(status, _clean_reason(reason), copied, body)


def _clean_reason(reason: str) -> str:
    return " ".join(reason.replace("\r", " ").replace("\n", " ").split())
