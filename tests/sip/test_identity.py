"""Caller identity from SIP: only trusted peers or digest-authenticated clients name a caller."""

from __future__ import annotations

import pytest

from voicegate.internal.config.sections import SipConfig
from voicegate.internal.identity.caller import CallerIdentity
from voicegate.internal.phone_numbers import normalise_e164
from voicegate.internal.sip import SipRequest, parse
from voicegate.internal.sip.caller import resolve_sip_identity, shared_number_set
from voicegate.internal.sip.voice.call import callee_identity

TRUSTED = ["203.0.113.0/24", "2001:db8::/32"]


def invite(from_: str = '"Sam" <sip:+15551234567@trunk.example>', *extra: str) -> SipRequest:
    lines = [
        "INVITE sip:agent@192.0.2.1 SIP/2.0", "Via: SIP/2.0/UDP 203.0.113.7;branch=z9hG4bK-1",
        f"From: {from_};tag=1", "To: <sip:agent@192.0.2.1>", "Call-ID: id-1", "CSeq: 1 INVITE", *extra,
    ]
    parsed = parse(("\r\n".join(lines) + "\r\nContent-Length: 0\r\n\r\n").encode())
    assert isinstance(parsed, SipRequest)
    return parsed


def resolve(
    request: SipRequest, source: str = "203.0.113.7", user: str | None = None, region: str = "US",
    shared: frozenset[str] = frozenset(),
) -> CallerIdentity:
    return resolve_sip_identity(request, source, trusted_peers=TRUSTED, authenticated_user=user, region=region,
                                shared_numbers=shared)


def test_trusted_peer_from_number_becomes_the_resource_id() -> None:
    identity = resolve(invite())
    assert identity.resource_id == "sip:+15551234567"
    assert identity.reason == "trusted peer 203.0.113.7"


def test_national_numbers_are_normalised_with_the_default_region() -> None:
    assert resolve(invite("<sip:5551234567@trunk.example>")).value == "+15551234567"
    assert resolve(invite("<sip:02079460000@trunk.example>"), region="GB").value == "+442079460000"


def test_p_asserted_identity_is_preferred_over_from() -> None:
    identity = resolve(invite("<sip:+15550000000@trunk.example>",
                              'P-Asserted-Identity: "Sam" <sip:+15551234567@trunk.example>, <tel:+1-555-123-4567>'))
    assert identity.value == "+15551234567"


def test_untrusted_source_is_anonymous_whatever_it_claims() -> None:
    identity = resolve(invite(), source="198.51.100.9")
    assert identity.is_anonymous and identity.reason == "untrusted source"


def test_digest_authenticated_untrusted_source_is_trusted() -> None:
    identity = resolve(invite(), source="198.51.100.9", user="+15551234567")
    assert identity.resource_id == "sip:+15551234567"
    assert identity.reason == "digest authenticated"


def test_a_digest_account_is_the_identity_whatever_number_it_presents() -> None:
    spoofing = invite('"Sam" <sip:+15559990000@example.com>', "P-Asserted-Identity: <tel:+15559990000>")
    assert resolve(spoofing, source="198.51.100.9", user="alice").resource_id == "sip:alice"
    assert resolve(spoofing, source="198.51.100.9", user="5551234567").resource_id == "sip:+15551234567"


@pytest.mark.parametrize(
    ("from_", "extra", "reason"),
    [
        ('"Sam" <sip:+15551234567@trunk.example>', ("Privacy: id",), "privacy requested"),
        ('"Sam" <sip:+15551234567@trunk.example>', ("Privacy: header;critical",), "privacy requested"),
        ('"Anonymous" <sip:anonymous@anonymous.invalid>', (), "anonymous caller"),
        ("<sip:restricted@trunk.example>", (), "anonymous caller"),
        ('"Withheld" <sip:+15551234567@trunk.example>', (), "anonymous caller"),
        ("<sip:12@trunk.example>", (), "caller number not valid"),
        ("<sip:alice@trunk.example>", (), "caller number not valid"),
    ],
)
def test_withheld_or_invalid_numbers_are_anonymous(from_: str, extra: tuple[str, ...], reason: str) -> None:
    identity = resolve(invite(from_, *extra))
    assert identity.is_anonymous and identity.reason == reason


def test_privacy_none_keeps_the_number() -> None:
    assert resolve(invite('"Sam" <sip:+15551234567@x>', "Privacy: none")).value == "+15551234567"


def test_reasons_never_contain_the_number() -> None:
    for user in (None, "+15551234567"):
        identity = resolve(invite(), source="198.51.100.9" if user else "203.0.113.7", user=user)
        assert "5551234567" not in identity.reason


@pytest.mark.parametrize(
    ("number", "expected"),
    [("+1 (555) 123-4567", "+15551234567"), ("0044 20 7946 0000", "+442079460000"), ("anonymous", None),
     ("", None), ("12", None), ("+99912345", None), ("tel:+1555", None)],
)
def test_normalise_e164(number: str, expected: str | None) -> None:
    assert normalise_e164(number, "US") == expected


# ---- shared numbers and outbound calls -------------------------------------------------------------

MAIN_LINE = shared_number_set(["555 010 0000", "+1 (555) 010-0001"], "US")


def test_shared_numbers_are_compared_in_e164() -> None:
    assert MAIN_LINE == {"+15550100000", "+15550100001"}
    assert shared_number_set(["front desk", "02079460000"], "GB") == {"+442079460000"}


@pytest.mark.parametrize(("from_", "extra", "source", "user"), [
    ("<sip:+15550100000@pbx.example>", (), "203.0.113.7", None),  # trusted trunk, E.164 From
    ("<sip:5550100000@pbx.example>", (), "203.0.113.7", None),  # national From, normalised first
    ("<sip:+15559990000@pbx.example>", ("P-Asserted-Identity: <tel:+15550100001>",), "203.0.113.7", None),
    ("<sip:+15550100000@pbx.example>", (), "198.51.100.9", "5550100000"),  # a digest account named after it
])
def test_a_shared_number_never_identifies_a_caller(from_: str, extra: tuple[str, ...], source: str,
                                                   user: str | None) -> None:
    identity = resolve(invite(from_, *extra), source=source, user=user, shared=MAIN_LINE)
    assert identity.is_anonymous and identity.resource_id is None
    assert identity.reason == "shared number"


def test_numbers_beside_a_shared_one_keep_their_identity() -> None:
    assert resolve(invite(), shared=MAIN_LINE).resource_id == "sip:+15551234567"


def test_an_outbound_call_is_anonymous_unless_dialled_memory_is_configured() -> None:
    target = "sip:+15557654321@trunk.example"
    default = callee_identity(target, SipConfig())
    assert default.is_anonymous and default.reason == "outbound call"
    dialled = SipConfig(outbound_memory="dialled")
    assert callee_identity(target, dialled).resource_id == "sip:+15557654321"
    assert callee_identity("sip:5557654321@trunk.example", dialled).resource_id == "sip:+15557654321"
    assert callee_identity("sip:bob@trunk.example", dialled).reason == "not a number"
    shared = callee_identity("sip:+15550100000@pbx.example", dialled, MAIN_LINE)
    assert shared.is_anonymous and shared.reason == "shared number"
