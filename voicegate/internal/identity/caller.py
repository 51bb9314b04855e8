"""Who is on the call, and how sure we are.

A `CallerIdentity` is made only by code that verified it: a JWT signature, a SIP INVITE from a trusted
peer or with digest auth, or a header from an allow-listed server. Everything else is anonymous, and
anonymous callers get no persistent memory. The `resource_id` is what BYO agents and memory key on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

IdentityKind = Literal["jwt", "sip", "trusted_header", "anonymous"]


@dataclass(frozen=True, slots=True)
class CallerIdentity:
    kind: IdentityKind
    value: str = ""  # JWT sub, E.164 number, or the trusted header's value; "" when anonymous
    # Why the decision was made (e.g. "trusted peer 203.0.113.7", "privacy requested"); for logs.
    reason: str = ""

    @staticmethod
    def anonymous(reason: str = "") -> CallerIdentity:
        return CallerIdentity("anonymous", "", reason)

    @property
    def is_anonymous(self) -> bool:
        return self.kind == "anonymous" or not self.value

    @property
    def resource_id(self) -> str | None:
        """`kind:value` (e.g. `sip:+15551234567`, `jwt:alice`), or None for an anonymous caller."""
        return None if self.is_anonymous else f"{self.kind}:{self.value}"

    @staticmethod
    def parse(resource_id: str) -> CallerIdentity:
        """The inverse of `resource_id`, for operators (`--caller sip:+1555...`)."""
        kind, sep, value = resource_id.partition(":")
        if not sep or kind not in ("jwt", "sip", "trusted_header") or not value:
            raise ValueError(
                f"not a caller id of the form jwt:NAME, sip:+E164 or trusted_header:VALUE: {resource_id!r}")
        return CallerIdentity(kind, value)  # type: ignore[arg-type]
