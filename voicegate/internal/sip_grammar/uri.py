"""SIP, SIPS and tel URIs (RFC 3261 section 19.1, RFC 3966) and name-addr values (section 20.10).

`SipUri.parse(str(uri)) == uri` and `NameAddr.parse(str(addr)) == addr` hold for every value these
classes produce. The user part is kept escaped exactly as received, since the escaping is part of the
value a peer compares; `decoded_user` gives the text behind it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import unquote as percent_decode

from voicegate.internal.sip_grammar.syntax import (
    Params,
    SyntaxProblem,
    format_params,
    is_token,
    parse_params,
    quote,
    unquote,
)


class UriError(ValueError):
    """The text is not a URI we can read."""


_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+\-.]*$")
_USER_RE = re.compile(r"^(?:[A-Za-z0-9\-_.!~*'()&=+$,;?/]|%[0-9A-Fa-f]{2})+$")
_PASSWORD_RE = re.compile(r"^(?:[A-Za-z0-9\-_.!~*'()&=+$,]|%[0-9A-Fa-f]{2})*$")
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9\-_.]*[A-Za-z0-9_.])?$")
_TEL_RE = re.compile(r"^[0-9A-Fa-f*#+\-.()pPwW]+$")
_HEADER_PART_RE = re.compile(r"^(?:[A-Za-z0-9\-_.!~*'()\[\]/?:+$]|%[0-9A-Fa-f]{2})*$")
_OPAQUE_RE = re.compile(r"^[^\s<>\"]+$")
_PARAM_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9\-_.!~*'()\[\]/:&+$]|%[0-9A-Fa-f]{2})+$")


@dataclass(slots=True)
class SipUri:
    scheme: str = "sip"  # "sip", "sips", "tel", or another absolute-URI scheme (then only `opaque` is set)
    user: str = ""  # escaped as on the wire; for tel: the number
    password: str | None = None
    host: str = ""  # IPv6 without brackets
    port: int | None = None
    params: Params = field(default_factory=dict)
    headers: list[tuple[str, str]] = field(default_factory=list)
    opaque: str = ""  # everything after "scheme:" for schemes we do not interpret

    @property
    def is_sip(self) -> bool:
        return self.scheme in ("sip", "sips")

    @property
    def decoded_user(self) -> str:
        return percent_decode(self.user)

    @property
    def transport(self) -> str | None:
        value = self.params.get("transport")
        return value.lower() if value else None

    @property
    def host_for_wire(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def without_headers(self) -> SipUri:
        return SipUri(self.scheme, self.user, self.password, self.host, self.port, dict(self.params), [], self.opaque)

    @staticmethod
    def parse(text: str) -> SipUri:
        text = text.strip()
        scheme, sep, rest = text.partition(":")
        if not sep or not _SCHEME_RE.match(scheme) or not rest:
            raise UriError("not an absolute URI")
        scheme = scheme.lower()
        try:
            if scheme in ("sip", "sips"):
                return _parse_sip(scheme, rest)
            if scheme == "tel":
                return _parse_tel(rest)
        except SyntaxProblem as exc:
            raise UriError(str(exc)) from exc
        if not _OPAQUE_RE.match(rest):
            raise UriError("bad characters in URI")
        return SipUri(scheme=scheme, opaque=rest)

    def __str__(self) -> str:
        if self.scheme == "tel":
            return f"tel:{self.user}{format_params(self.params)}"
        if not self.is_sip:
            return f"{self.scheme}:{self.opaque}"
        userinfo = ""
        if self.user or self.password is not None:
            userinfo = self.user + (f":{self.password}" if self.password is not None else "") + "@"
        port = f":{self.port}" if self.port is not None else ""
        headers = ""
        if self.headers:
            headers = "?" + "&".join(f"{name}={value}" for name, value in self.headers)
        return f"{self.scheme}:{userinfo}{self.host_for_wire}{port}{format_params(self.params)}{headers}"


def sip_uri_with_host(text: str) -> SipUri:
    """`text` as a sip: or sips: URI naming a host (what we can send a request to); UriError otherwise."""
    uri = SipUri.parse(text)
    if not uri.is_sip or not uri.host:
        raise UriError("not a sip: or sips: URI with a host")
    return uri


def _parse_sip(scheme: str, rest: str) -> SipUri:
    # The host part cannot hold "@" (nor may parameters), so the last "@" ends the userinfo even
    # when the user part itself holds ";" or "?" (user-unreserved characters).
    userinfo, at, hostpart = rest.rpartition("@")
    user, password = "", None
    if at:
        user, colon, pw = userinfo.partition(":")
        if colon:
            password = pw
        if not user or not _USER_RE.match(user):
            raise UriError("bad user part")
        if password is not None and not _PASSWORD_RE.match(password):
            raise UriError("bad password")
    hostpart, qmark, header_text = hostpart.partition("?")
    hostport, semi, param_text = hostpart.partition(";")
    host, port = parse_hostport(hostport)
    params = parse_params(param_text) if semi else {}
    if semi and not params:
        raise UriError("empty parameter list")
    for value in params.values():
        if value is not None and not _PARAM_VALUE_RE.match(value):
            raise UriError("bad URI parameter value")
    headers: list[tuple[str, str]] = []
    if qmark:
        for item in header_text.split("&"):
            name, eq, value = item.partition("=")
            if not eq or not name or not _HEADER_PART_RE.match(name) or not _HEADER_PART_RE.match(value):
                raise UriError("bad URI header")
            headers.append((name, value))
    return SipUri(scheme, user, password, host, port, params, headers)


def parse_hostport(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        host, bracket, port_text = text[1:].partition("]")
        if not bracket:
            raise UriError("unterminated IPv6 reference")
        host = _ipv6_reference(host)
        if port_text and not port_text.startswith(":"):
            raise UriError("junk after IPv6 reference")
        port_text = port_text[1:] if port_text else ""
        has_port = bool(port_text) or text.endswith(":")
    else:
        host, colon, port_text = text.partition(":")
        has_port = bool(colon)
        if not host or not _HOSTNAME_RE.match(host):
            raise UriError("bad host")
    port: int | None = None
    if has_port:
        if not port_text.isdigit() or len(port_text) > 5 or not 0 < int(port_text) < 65536:
            raise UriError("bad port")
        port = int(port_text)
    return host, port


def _ipv6_reference(text: str) -> str:
    """The address inside [...]; the one extra colon of RFC 3261's IPv6reference ABNF bug is
    tolerated and dropped (RFC 5118 4.10: `[2001:db8:::192.0.2.1]` means `[2001:db8::192.0.2.1]`)."""
    for candidate in (text, text.replace(":::", "::", 1)):
        try:
            ipaddress.IPv6Address(candidate)
            return candidate
        except ValueError:
            continue
    raise UriError("bad IPv6 address")


def _parse_tel(rest: str) -> SipUri:
    number, semi, param_text = rest.partition(";")
    if not number or not _TEL_RE.match(number):
        raise UriError("bad telephone number")
    params = parse_params(param_text) if semi else {}
    return SipUri(scheme="tel", user=number, params=params)


@dataclass(slots=True)
class NameAddr:
    """A From/To/Contact/Route value: optional display name, a URI, and header parameters (tag, ...)."""

    uri: SipUri
    display_name: str | None = None  # unquoted text; None when absent
    params: Params = field(default_factory=dict)

    @property
    def tag(self) -> str | None:
        return self.params.get("tag")

    def with_tag(self, tag: str) -> NameAddr:
        params = dict(self.params)
        params["tag"] = tag
        return NameAddr(self.uri, self.display_name, params)

    @staticmethod
    def parse(text: str) -> NameAddr:
        text = text.strip()
        if not text:
            raise UriError("empty address")
        try:
            if "<" in text:
                return _parse_name_addr(text)
            # addr-spec: RFC 3261 20: without <>, everything after the first ";" is a header parameter.
            uri_text, semi, param_text = text.partition(";")
            params = parse_params(param_text) if semi else {}
        except SyntaxProblem as exc:
            raise UriError(str(exc)) from exc
        uri_text = uri_text.strip()
        if any(char.isspace() for char in uri_text):
            raise UriError("spaces in a bare URI")
        if "?" in uri_text:
            # RFC 3261 20: a URI with headers (or , or ;) must be in <>; RFC 4475 3.1.2.13.
            raise UriError("a URI with headers outside <>")
        return NameAddr(SipUri.parse(uri_text), None, params)

    def __str__(self) -> str:
        display = "" if self.display_name is None else quote(self.display_name) + " "
        return f"{display}<{self.uri}>{format_params(self.params)}"


def _parse_name_addr(text: str) -> NameAddr:
    # Find the "<" that opens the URI, skipping any inside a quoted display name.
    in_quotes = escaped = False
    start = -1
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif in_quotes and char == "\\":
            escaped = True
        elif char == '"':
            in_quotes = not in_quotes
        elif char == "<" and not in_quotes:
            start = index
            break
    if start < 0:
        raise UriError("no <uri> in address")
    end = text.find(">", start)
    if end < 0:
        raise UriError("unterminated <uri>")
    display_text = text[:start].strip()
    display: str | None = None
    if display_text.startswith('"'):
        if not _is_one_quoted_string(display_text):
            raise UriError("bad quoted display name")
        display = unquote(display_text)
    elif display_text:
        if not all(is_token(word) for word in display_text.split()):
            raise UriError("bad display name")
        display = " ".join(display_text.split())
    inner = text[start + 1 : end]
    if inner != inner.strip():
        raise UriError("spaces inside <uri>")  # LAQUOT/RAQUOT allow LWS outside only (RFC 4475 3.1.2.14)
    uri = SipUri.parse(inner)
    rest = text[end + 1 :].strip()
    params: Params = {}
    if rest:
        if not rest.startswith(";"):
            raise UriError("junk after <uri>")
        params = parse_params(rest[1:])
    return NameAddr(uri, display, params)


def _is_one_quoted_string(text: str) -> bool:
    escaped = False
    for index, char in enumerate(text[1:], start=1):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            return index == len(text) - 1
    return False
