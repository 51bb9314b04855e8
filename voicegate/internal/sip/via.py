"""The Via header value (RFC 3261 section 20.42, RFC 3581 rport).

The top Via is how a response finds its way back and how transactions are matched, so it gets a
typed value instead of string handling at each use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from voicegate.internal.sip_grammar.syntax import Params, SyntaxProblem, format_params, parse_params, split_outside
from voicegate.internal.sip_grammar.uri import UriError, parse_hostport

# RFC 3261 17.1.1.3: branches starting with this cookie are unique per transaction, so matching can
# rely on them; anything else came from an RFC 2543 peer.
MAGIC_COOKIE = "z9hG4bK"

_TOKEN = r"[A-Za-z0-9\-.!%*_+`'~]+"
_PROTOCOL_RE = re.compile(rf"^\s*({_TOKEN})\s*/\s*({_TOKEN})\s*/\s*({_TOKEN})\s+(\S.*?)\s*$", re.S)


class ViaError(ValueError):
    """A Via value we cannot read."""


@dataclass(slots=True)
class Via:
    transport: str  # upper case: "UDP", "TCP", ...
    host: str  # IPv6 without brackets
    port: int | None = None
    params: Params = field(default_factory=dict)
    protocol: str = "SIP/2.0"

    @property
    def branch(self) -> str | None:
        return self.params.get("branch")

    @property
    def received(self) -> str | None:
        value = self.params.get("received")
        # RFC 5118 4.5: "received=[2001:db8::9:255]" is wrong but common; the address is the same.
        return value[1:-1] if value and value.startswith("[") and value.endswith("]") else value

    @property
    def has_rport(self) -> bool:
        return "rport" in self.params

    @property
    def rport(self) -> int | None:
        value = self.params.get("rport")
        return int(value) if value and value.isdigit() else None

    @property
    def sent_by(self) -> str:
        """host:port as used for transaction matching (default port filled in, host lower-cased)."""
        default = 5061 if self.transport == "TLS" else 5060
        return f"{self.host.lower()}:{self.port or default}"

    @property
    def host_for_wire(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    @staticmethod
    def parse(text: str) -> Via:
        try:
            first, *rest = split_outside(text, ";")
        except SyntaxProblem as exc:
            raise ViaError(str(exc)) from exc
        match = _PROTOCOL_RE.match(first)
        if not match:
            raise ViaError("bad sent-protocol")
        name, version, transport, sent_by = match.groups()
        try:
            # SWS is allowed around the ":" of sent-by; hosts never contain spaces.
            host, port = parse_hostport("".join(sent_by.split()))
            params = parse_params(";".join(rest)) if rest else {}
        except (UriError, SyntaxProblem) as exc:
            raise ViaError(str(exc)) from exc
        if rest and not params:
            raise ViaError("empty Via parameter")
        for key in ("branch", "received", "ttl", "maddr"):
            if key in params and params[key] is None:
                raise ViaError(f"Via {key} without a value")
        rport = params.get("rport")
        if rport is not None and not (rport.isdigit() and 0 < int(rport) < 65536):
            raise ViaError("bad rport")
        return Via(transport.upper(), host, port, params, f"{name.upper()}/{version}")

    def __str__(self) -> str:
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.protocol}/{self.transport} {self.host_for_wire}{port}{format_params(self.params)}"
