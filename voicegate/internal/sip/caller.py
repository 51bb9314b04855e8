"""Who is calling over SIP, as far as we can prove it (PRODUCT.md section 2).

A From header is whatever the caller typed; it names a person only when a peer we trust vouches for
it: an address in `sip.trusted_peers` (the deployer's trunk) or a client that passed digest auth.
The number then comes from P-Asserted-Identity (RFC 3325, what trunks assert) or else From, and the
caller's Privacy request (RFC 3323) is honoured. A number in `memory.shared_numbers` (a PBX main line:
many people behind one number) is never an identity either. Reasons are for logs and never contain
the number.
"""

from __future__ import annotations

from collections.abc import Iterable

from voicegate.internal.identity.caller import CallerIdentity
from voicegate.internal.identity.networks import address_in
from voicegate.internal.phone_numbers import WITHHELD, normalise_e164
from voicegate.internal.sip.message import SipRequest
from voicegate.internal.sip_grammar.uri import NameAddr, UriError

_PRIVACY_HIDING_IDENTITY = frozenset({"id", "header", "user"})


def is_trusted(source_host: str, trusted_peers: Iterable[str]) -> bool:
    return address_in(source_host, trusted_peers)


def _privacy_requested(request: SipRequest) -> bool:
    values: list[str] = []
    for line in request.headers.get_all("Privacy"):
        values += [v.strip().lower() for v in line.replace(",", ";").split(";")]
    return bool(_PRIVACY_HIDING_IDENTITY.intersection(values))


def _asserted_address(request: SipRequest) -> NameAddr | None:
    """The P-Asserted-Identity entry to use (a tel URI wins: it is the number itself), else From."""
    candidates: list[NameAddr] = []
    try:
        for value in request.headers.get_list("P-Asserted-Identity"):
            candidates.append(NameAddr.parse(value))
    except (UriError, ValueError):
        candidates = []
    tel = [c for c in candidates if c.uri.scheme == "tel"]
    sip = [c for c in candidates if c.uri.is_sip and c.uri.user]
    if tel or sip:
        return (tel or sip)[0]
    try:
        return request.from_addr
    except (UriError, ValueError):
        return None


def _looks_anonymous(address: NameAddr) -> bool:
    display = (address.display_name or "").strip().lower()
    user = address.uri.decoded_user.split(";", 1)[0].strip().lower()
    return display in WITHHELD or user in WITHHELD or address.uri.host.lower() == "anonymous.invalid"


def shared_number_set(numbers: Iterable[str], region: str) -> frozenset[str]:
    """`memory.shared_numbers` in E.164. load_config has normalised them already, but a config built
    in code has not, and an unnormalised entry would silently never match."""
    return frozenset(e164 for e164 in (normalise_e164(number, region) for number in numbers) if e164)


def unless_shared(identity: CallerIdentity, shared_numbers: frozenset[str]) -> CallerIdentity:
    """Anonymous when `identity` is a shared number: one record for everyone behind a switchboard would
    tell each caller what the previous ones said."""
    if identity.kind == "sip" and identity.value in shared_numbers:
        return CallerIdentity.anonymous("shared number")
    return identity


def resolve_sip_identity(
    request: SipRequest,
    source_host: str,
    *,
    trusted_peers: list[str],
    authenticated_user: str | None,
    region: str,
    shared_numbers: frozenset[str] = frozenset(),
) -> CallerIdentity:
    identity = _resolve(request, source_host, trusted_peers, authenticated_user, region)
    return unless_shared(identity, shared_numbers)


def _resolve(request: SipRequest, source_host: str, trusted_peers: list[str], authenticated_user: str | None,
             region: str) -> CallerIdentity:
    if authenticated_user is not None:
        # A digest account proves who the client is, not which number it may present: the identity is
        # the account (its number when the username is one), never a From or P-Asserted-Identity the
        # client chose. The reason names the mechanism, not the username (often the number itself).
        if _privacy_requested(request):
            return CallerIdentity.anonymous("privacy requested")
        number = normalise_e164(authenticated_user, region)
        return CallerIdentity("sip", number or authenticated_user, "digest authenticated")
    if not is_trusted(source_host, trusted_peers):
        return CallerIdentity.anonymous("untrusted source")
    if _privacy_requested(request):
        return CallerIdentity.anonymous("privacy requested")
    address = _asserted_address(request)
    if address is None:
        return CallerIdentity.anonymous("no caller address")
    if _looks_anonymous(address):
        return CallerIdentity.anonymous("anonymous caller")
    if not (address.uri.scheme == "tel" or address.uri.is_sip):
        return CallerIdentity.anonymous("caller address is not a phone number")
    user = address.uri.decoded_user.split(";", 1)[0]
    number = normalise_e164(user, region)
    if number is None:
        return CallerIdentity.anonymous("caller number not valid")
    return CallerIdentity("sip", number, f"trusted peer {source_host}")
