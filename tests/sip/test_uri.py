"""SIP/tel URIs and name-addr values."""

from __future__ import annotations

import pytest

from voicegate.internal.sip import NameAddr, SipUri, UriError, Via


@pytest.mark.parametrize(
    "text",
    [
        "sip:alice@atlanta.example.com",
        "sip:alice:secretword@atlanta.example.com;transport=tcp",
        "sips:alice@atlanta.example.com?subject=project%20x&priority=urgent",
        "sip:+1-212-555-1212:1234@gateway.example.com;user=phone",
        "sip:alice@192.0.2.4:5070",
        "sip:[2001:db8::1]:5061;maddr=[2001:db8::2];lr",
        "sip:atlanta.example.com;method=REGISTER?to=alice%40atlanta.example.com",
        "sip:alice;day=tuesday@atlanta.example.com",
        "tel:+1-201-555-0123",
        "tel:7042;phone-context=example.com",
        "urn:service:sos",
    ],
)
def test_uris_round_trip(text: str) -> None:
    assert str(SipUri.parse(text)) == text


def test_sip_uri_parts() -> None:
    uri = SipUri.parse("SIP:bob:pw@[::1]:5070;Transport=TCP;lr?h=v")
    assert (uri.scheme, uri.user, uri.password, uri.host, uri.port) == ("sip", "bob", "pw", "::1", 5070)
    assert uri.params == {"transport": "TCP", "lr": None} and uri.transport == "tcp"
    assert uri.headers == [("h", "v")] and uri.host_for_wire == "[::1]"
    assert str(uri.without_headers()) == "sip:bob:pw@[::1]:5070;transport=TCP;lr"


def test_tel_uri_keeps_the_number_as_user() -> None:
    uri = SipUri.parse("tel:+15551234567;npdi")
    assert uri.scheme == "tel" and uri.user == "+15551234567" and uri.params == {"npdi": None}


@pytest.mark.parametrize(
    "text",
    ["", "alice@example.com", "sip:", "sip:@host", "sip:alice@", "sip:alice@host:0", "sip:alice@host:99999",
     "sip:alice@[::1", "sip:alice@[nothex]", "sip:alice@host;=x", "sip:al ice@host", "sip:alice@host?bad",
     "tel:not-a-number!", "sip:alice@ho st"],
)
def test_bad_uris_are_refused(text: str) -> None:
    with pytest.raises(UriError):
        SipUri.parse(text)


@pytest.mark.parametrize(
    ("text", "display", "uri", "tag"),
    [
        ('"Alice Smith" <sip:alice@example.com>;tag=88sja8x', "Alice Smith", "sip:alice@example.com", "88sja8x"),
        ("Bob <sip:bob@example.com;transport=tcp>", "Bob", "sip:bob@example.com;transport=tcp", None),
        ("<sip:carol@example.com>;tag=1", None, "sip:carol@example.com", "1"),
        ("sip:dave@example.com;tag=2", None, "sip:dave@example.com", "2"),
        ('"Quote \\" and <angle>" <sip:e@example.com>', 'Quote " and <angle>', "sip:e@example.com", None),
        ('"" <tel:+15551234567>', "", "tel:+15551234567", None),
        ("  Anonymous   Caller <sip:anonymous@anonymous.invalid>", "Anonymous Caller",
         "sip:anonymous@anonymous.invalid", None),
    ],
)
def test_name_addr_forms(text: str, display: str | None, uri: str, tag: str | None) -> None:
    address = NameAddr.parse(text)
    assert address.display_name == display
    assert str(address.uri) == uri
    assert address.tag == tag
    assert NameAddr.parse(str(address)) == address


def test_bare_uri_params_are_header_params() -> None:
    address = NameAddr.parse("sip:dave@example.com;transport=tcp;tag=2")
    assert address.uri.params == {} and address.params == {"transport": "tcp", "tag": "2"}


@pytest.mark.parametrize("text", ['"unterminated <sip:a@b>', "<sip:a@b", "Name <sip:a@b> junk", "a@b <", "sip:a @b"])
def test_bad_name_addrs_are_refused(text: str) -> None:
    with pytest.raises(UriError):
        NameAddr.parse(text)


def test_with_tag_does_not_change_the_original() -> None:
    address = NameAddr.parse("<sip:a@b>")
    tagged = address.with_tag("t")
    assert address.tag is None and tagged.tag == "t"


def test_via_parse_and_serialise() -> None:
    via = Via.parse("SIP / 2.0 / udp  10.0.0.1 : 5062 ;branch=z9hG4bKx;rport;received=1.2.3.4")
    assert (via.transport, via.host, via.port) == ("UDP", "10.0.0.1", 5062)
    assert (via.branch, via.received) == ("z9hG4bKx", "1.2.3.4")
    assert via.has_rport and via.rport is None
    assert str(via) == "SIP/2.0/UDP 10.0.0.1:5062;branch=z9hG4bKx;rport;received=1.2.3.4"
    assert Via.parse(str(via)) == via


def test_the_extra_colon_of_the_rfc_3261_ipv6_abnf_bug_is_tolerated() -> None:
    # RFC 5118 4.10: "[2001:db8:::192.0.2.1]" is read as the two-colon address it was meant to be.
    uri = SipUri.parse("sip:user@[2001:db8:::192.0.2.1]:5070")
    assert (uri.host, uri.port) == ("2001:db8::192.0.2.1", 5070)
    assert str(uri) == "sip:user@[2001:db8::192.0.2.1]:5070"
    with pytest.raises(UriError):
        SipUri.parse("sip:user@[2001::db8:::1]")  # still two "::" once the extra colon is gone


def test_an_ipv6_reference_without_brackets_is_not_a_host() -> None:
    with pytest.raises(UriError):
        SipUri.parse("sip:2001:db8::10")  # RFC 5118 4.2


def test_an_ipv6_reference_with_its_last_group_looking_like_a_port_has_no_port() -> None:
    uri = SipUri.parse("sip:[2001:db8::10:5070]")  # RFC 5118 4.3
    assert (uri.host, uri.port) == ("2001:db8::10:5070", None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('"Watson, Thomas" < sip:t.watson@example.org >', "spaces inside <uri>"),  # RFC 4475 3.1.2.14
        ("sip:user@example.com?Route=%3Csip:sip.example.com%3E", "a URI with headers outside <>"),  # 3.1.2.13
        ("Watson, Thomas <sip:t.watson@example.org>", "bad display name"),  # 3.1.2.15
    ],
)
def test_name_addr_forms_rfc_4475_calls_invalid_are_refused(text: str, problem: str) -> None:
    with pytest.raises(UriError, match=problem):
        NameAddr.parse(text)


def test_escaped_headers_inside_angle_brackets_are_legal() -> None:
    address = NameAddr.parse("<sip:user@example.com?Route=%3Csip:sip.example.com%3E>")  # RFC 4475 3.3.14
    assert address.uri.headers == [("Route", "%3Csip:sip.example.com%3E")]


def test_escaped_nul_in_a_user_part_is_kept_as_received() -> None:
    uri = SipUri.parse("sip:null-%00-null@example.com")  # RFC 4475 3.1.1.4
    assert uri.user == "null-%00-null" and uri.decoded_user == "null-\x00-null"


def test_via_received_with_brackets_is_read_as_the_address() -> None:
    via = Via.parse("SIP/2.0/UDP [2001:db8::9:1];received=[2001:db8::9:255];branch=z9hG4bKas3-111")
    assert via.received == "2001:db8::9:255"  # RFC 5118 4.5 asks robust parsers to take it
    assert Via.parse("SIP/2.0/UDP [2001:db8::9:1];received=2001:db8::9:255").received == "2001:db8::9:255"
