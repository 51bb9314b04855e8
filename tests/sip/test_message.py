"""Parsing and serialising SIP messages, with our own versions of RFC 4475 torture cases."""

from __future__ import annotations

import pytest

from voicegate.internal.sip import (
    Headers,
    SipParseError,
    SipRequest,
    SipResponse,
    make_response,
    parse,
    salvage_request,
)
from voicegate.internal.sip.salvage import refusal


def msg(*lines: str, body: str = "") -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()


BASIC = (
    "INVITE sip:bob@biloxi.example.com SIP/2.0",
    "Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds",
    "Max-Forwards: 70",
    "To: Bob <sip:bob@biloxi.example.com>",
    "From: Alice <sip:alice@atlanta.example.com>;tag=1928301774",
    "Call-ID: a84b4c76e66710@pc33.atlanta.example.com",
    "CSeq: 314159 INVITE",
    "Contact: <sip:alice@pc33.atlanta.example.com>",
)


def test_basic_invite_exposes_core_headers() -> None:
    request = parse(msg(*BASIC, "Content-Length: 4", body="v=0\n"))
    assert isinstance(request, SipRequest)
    assert (request.method, request.uri, request.version) == ("INVITE", "sip:bob@biloxi.example.com", "SIP/2.0")
    assert request.call_id == "a84b4c76e66710@pc33.atlanta.example.com"
    assert request.cseq == (314159, "INVITE")
    assert request.from_tag == "1928301774" and request.to_tag is None
    via = request.top_via
    assert (via.transport, via.host, via.port) == ("UDP", "pc33.atlanta.example.com", None)
    assert via.branch == "z9hG4bK776asdhds"
    assert via.sent_by == "pc33.atlanta.example.com:5060"
    assert request.body == b"v=0\n"


def test_short_forms_unusual_spacing_and_folding_like_wsinv() -> None:
    # After RFC 4475 3.1.1.1: compact names, odd whitespace, folded lines, escaped display names.
    data = msg(
        "INVITE sip:vivekg@chair-dnrc.example.com;unknownparam SIP/2.0",
        "TO :",
        " sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n",
        'from   : "J Rosenberg \\\\\\""       <sip:jdrosen@example.com>',
        "  ;",
        "  tag = 98asjd8",
        "MaX-fOrWaRdS: 0068",
        "Call-ID: wsinv.ndaksdj@192.0.2.1",
        "Content-Length   : 150",
        "cseq: 0009",
        "  INVITE",
        "Via  : SIP  /   2.0",
        " /UDP",
        "    192.0.2.2;rport;branch=390skdjuw",
        "s :",
        "NewFangledHeader:   newfangled value",
        " continued newfangled value",
        "UnknownHeaderWithUnusualValue: ;;,,;;,;",
        "Content-Type: application/sdp",
        "Route:",
        " <sip:services.example.com;lr;unknownwith=value;unknown-no-value>",
        "v:  SIP  / 2.0  / TCP     spindle.example.com   ;",
        "  branch  =   z9hG4bK9ikj8  ,",
        " SIP  /    2.0   / UDP  192.168.255.111   ; branch=",
        " z9hG4bK30239",
        "m:\"Quoted string \\\"\\\"\" <sip:jdrosen@example.com> ; newparam =",
        "      newvalue ;",
        "  secondparam ; q = 0.33",
        body="v=0\r\no=mhandley 29739 7272939 IN IP4 192.0.2.3\r\ns=-\r\nc=IN IP4 192.0.2.4\r\nt=0 0\r\n"
        "m=audio 49217 RTP/AVP 0 12\r\nm=video 3227 RTP/AVP 31\r\na=rtpmap:31 LPC\r\n",
    )
    request = parse(data)
    assert request.to_tag == "1918181833n"
    assert request.from_addr.display_name == 'J Rosenberg \\"'
    assert request.from_tag == "98asjd8"
    assert request.cseq == (9, "INVITE")
    assert request.headers.get("Max-Forwards") == "0068"
    assert request.headers.get("Subject") == ""
    assert request.headers.get("NewFangledHeader") == "newfangled value continued newfangled value"
    vias = request.vias
    assert [v.transport for v in vias] == ["UDP", "TCP", "UDP"]
    assert vias[1].branch == "z9hG4bK9ikj8" and vias[2].host == "192.168.255.111"
    assert vias[0].has_rport and vias[0].rport is None
    contact = request.headers.get_list("Contact")
    assert len(contact) == 1 and contact[0].endswith("q = 0.33")
    assert len(request.body) == 150
    assert parse(request.serialise()) == request


def test_escaped_characters_in_uris_are_kept() -> None:
    data = msg(
        "INVITE sip:sips%3Auser%40example.com@example.net SIP/2.0",
        "To: sip:%61lice@example.com",
        "From: <sip:I%20have%20spaces@example.net>;tag=938",
        "Max-Forwards: 87",
        "i: esc01.239409asdfakjkn23onasd0-3234",
        "CSeq: 234234 INVITE",
        "Via: SIP/2.0/UDP host5.example.net;branch=z9hG4bKkdjuw",
        "l: 0",
    )
    request = parse(data)
    assert isinstance(request, SipRequest)
    assert request.request_uri.decoded_user == "sips:user@example.com"
    assert request.from_addr.uri.decoded_user == "I have spaces"
    assert request.to_addr.uri.user == "%61lice"


def test_ipv6_addresses_in_request_uri_and_via() -> None:
    data = msg(
        "OPTIONS sip:[2001:db8::10]:5070 SIP/2.0",
        "To: sip:user@example.com",
        "From: <sip:user@example.com>;tag=81x2",
        "Via: SIP/2.0/UDP [2001:db8::9:1];branch=z9hG4bKas3-111;received=[2001:db8::9:255]",
        "Call-ID: SSG9559905523997077@hlau_4100",
        "Max-Forwards: 70",
        "CSeq: 1 OPTIONS",
        "Content-Length: 0",
    )
    request = parse(data)
    assert isinstance(request, SipRequest)
    assert request.request_uri.host == "2001:db8::10" and request.request_uri.port == 5070
    assert request.top_via.host == "2001:db8::9:1"
    assert str(request.top_via).startswith("SIP/2.0/UDP [2001:db8::9:1];")


def test_multiple_via_lines_and_comma_lists_keep_their_order() -> None:
    data = msg(
        "SIP/2.0 180 Ringing",
        "Via: SIP/2.0/UDP a.example;branch=z9hG4bK1, SIP/2.0/TCP b.example:5070;branch=z9hG4bK2",
        "Via: SIP/2.0/UDP c.example;branch=z9hG4bK3",
        "Record-Route: <sip:p1.example;lr>, <sip:p2.example;lr>",
        "Record-Route: <sip:p3.example;lr>",
        "From: <sip:a@example>;tag=1",
        "To: <sip:b@example>;tag=2",
        "Call-ID: x",
        "CSeq: 1 INVITE",
    )
    response = parse(data)
    assert isinstance(response, SipResponse) and response.status == 180 and response.reason == "Ringing"
    assert [v.host for v in response.vias] == ["a.example", "b.example", "c.example"]
    routes = response.headers.get_list("Record-Route")
    assert routes == ["<sip:p1.example;lr>", "<sip:p2.example;lr>", "<sip:p3.example;lr>"]


def test_body_longer_than_content_length_is_truncated() -> None:
    request = parse(msg(*BASIC, "Content-Length: 3", body="abcdef"))
    assert request.body == b"abc"


def test_missing_content_length_over_a_datagram_takes_the_rest() -> None:
    request = parse(msg(*BASIC, body="v=0\r\n"))
    assert request.body == b"v=0\r\n" and request.headers.get("Content-Length") == "5"


def test_leading_crlfs_before_the_start_line_are_ignored() -> None:
    assert isinstance(parse(b"\r\n\r\n" + msg(*BASIC, "Content-Length: 0")), SipRequest)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (msg(*BASIC, "Content-Length: 9999", body="short"), "Content-Length larger than the body"),
        (msg(*BASIC, "Content-Length: -1"), "bad Content-Length"),
        (msg(*BASIC, "Content-Length: 1", "Content-Length: 1", body="x"), "more than one Content-Length"),
        (msg(*[line for line in BASIC if not line.startswith("Call-ID")]), "missing Call-ID"),
        (msg(*[line for line in BASIC if not line.startswith("Via")]), "missing Via"),
        (msg(*[line for line in BASIC if not line.startswith("From")]), "missing From"),
        (msg("INVITE sip:bob@example.com", *BASIC[1:]), "bad request line"),
        (msg("INVITE  sip:bob@example.com SIP/2.0", *BASIC[1:]), "bad request line"),
        (msg("INVITE bob@example.com SIP/2.0", *BASIC[1:]), "bad Request-URI"),
        (msg("\u00e9\u00e9 sip:a@b SIP/2.0", *BASIC[1:]), "bad request line"),
        (msg(*BASIC[:-1], "CSeq: 1 BYE"), "more than one CSeq"),
        (msg(*BASIC).replace(b"CSeq: 314159 INVITE", b"CSeq: 1 BYE"), "CSeq method does not match the request"),
        (msg(*BASIC).replace(b"CSeq: 314159 INVITE", b"CSeq: 99999999999 INVITE"), "bad CSeq"),
        (msg(*BASIC, "Max-Forwards: 70"), "more than one Max-Forwards"),
        (msg(*BASIC).replace(b"Max-Forwards: 70", b"Max-Forwards: lots"), "bad Max-Forwards"),
        (msg(*BASIC).replace(b"Call-ID: a84b", b"Call-ID: a\x00b"), "NUL byte in headers"),
        (msg(*BASIC).replace(b"To: Bob <sip:bob@biloxi.example.com>", b'To: "Bob <sip:bob@biloxi.example.com>'),
         "bad To: "),
        (msg(*BASIC).replace(b"Via: SIP/2.0/UDP", b"Via: SIP/2.0 UDP"), "bad Via: "),
        (msg(*BASIC, "Bad Header: x"), "bad header line"),
        (b"", "empty message"),
        (b"INVITE sip:a@b SIP/2.0\r\nVia: x", "no blank line after the headers"),
        (msg(*BASIC).replace(b"alice@atlanta", b"\xff\xfe"), "headers are not UTF-8"),
    ],
)
def test_malformed_messages_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(SipParseError) as raised:
        parse(data)
    assert raised.value.reason.startswith(reason)


def test_salvage_finds_enough_to_answer_a_malformed_request() -> None:
    data = msg(*BASIC, "Content-Length: 9999", body="short")
    salvaged = salvage_request(data)
    assert salvaged is not None and salvaged.method == "INVITE" and salvaged.body == b""
    response = make_response(salvaged, 400, "Bad Request (bad Content-Length)")
    assert response.headers.get("Call-ID") == "a84b4c76e66710@pc33.atlanta.example.com"
    assert salvage_request(b"garbage\r\n\r\n") is None


def test_make_response_copies_the_rfc_3261_headers_and_adds_the_to_tag() -> None:
    request = parse(msg(*BASIC, "Timestamp: 54", "Content-Length: 0"))
    assert isinstance(request, SipRequest)
    response = make_response(request, 200, "OK", {"Contact": "<sip:us@example>"}, b"x", to_tag="abc",
                             content_type="text/plain")
    names = [name for name, _ in response.headers]
    assert names == ["Via", "To", "From", "Call-ID", "CSeq", "Contact", "Content-Type", "Content-Length"]
    assert response.to_tag == "abc" and response.from_tag == "1928301774"
    assert response.headers.get("Content-Length") == "1"
    trying = make_response(request, 100, "Trying")
    assert trying.headers.get("Timestamp") == "54" and trying.to_tag is None


def test_make_response_keeps_an_existing_to_tag() -> None:
    request = parse(msg(*BASIC).replace(b"Bob <sip:bob@biloxi.example.com>", b"<sip:bob@b.example>;tag=old"))
    assert isinstance(request, SipRequest)
    assert make_response(request, 200, "OK", to_tag="new").to_tag == "old"


def test_headers_are_case_insensitive_ordered_and_compact_forms_expand() -> None:
    headers = Headers([("v", "a"), ("X-One", "1"), ("VIA", "b")])
    assert headers.get_all("Via") == ["a", "b"]
    assert [name for name, _ in headers] == ["Via", "X-One", "Via"]
    headers.set("via", "c")
    assert list(headers) == [("Via", "c"), ("X-One", "1")]
    headers.prepend("Via", "top")
    assert headers.get("v") == "top"
    headers.remove("VIA")
    assert "Via" not in headers and len(headers) == 1


def test_get_list_splits_only_outside_quotes_and_brackets() -> None:
    headers = Headers([("Contact", '"Doe, John" <sip:j@x;a=1,2>;q=0.5, <sip:k@y>'), ("m", "sip:z@w")])
    assert headers.get_list("Contact") == ['"Doe, John" <sip:j@x;a=1,2>;q=0.5', "<sip:k@y>", "sip:z@w"]


def test_serialise_fixes_content_length_after_a_body_change() -> None:
    request = parse(msg(*BASIC, "Content-Length: 0"))
    request.set_body(b"hello", "text/plain")
    again = parse(request.serialise())
    assert again.body == b"hello" and again.headers.get("Content-Length") == "5"
    assert again.content_type == "text/plain"


def test_an_escaped_nul_inside_a_quoted_display_name_is_legal() -> None:
    # RFC 4475 3.1.1.2: quoted-pair may escape any octet but CR and LF, NUL included.
    data = msg(*BASIC[:3], 'To: "BEL:\\\x07 NUL:\\\x00 DEL:\\\x7f" <sip:bob@biloxi.example.com>', *BASIC[4:],
               "Content-Length: 0")
    request = parse(data)
    assert request.to_addr.display_name == "BEL:\x07 NUL:\x00 DEL:\x7f"


@pytest.mark.parametrize(
    "to",
    ["To: Bob\x00 <sip:bob@biloxi.example.com>", 'To: "Bob\x00" <sip:bob@biloxi.example.com>'],
)
def test_a_nul_that_is_not_escaped_inside_quotes_is_refused(to: str) -> None:
    with pytest.raises(SipParseError, match="NUL byte in headers"):
        parse(msg(*BASIC[:3], to, *BASIC[4:], "Content-Length: 0"))


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("sip:user@example.com?Route=%3Csip:example.com%3E", "headers in the Request-URI"),  # 4475 3.1.2.11
        ("sip:2001:db8::10", "bad Request-URI: bad port"),  # RFC 5118 4.2
        ("<sip:user@example.com>", "bad Request-URI"),  # RFC 4475 3.1.2.7
    ],
)
def test_a_sip_request_uri_is_read_by_the_parser(uri: str, reason: str) -> None:
    with pytest.raises(SipParseError) as raised:
        parse(msg(f"INVITE {uri} SIP/2.0", *BASIC[1:], "Content-Length: 0"))
    assert raised.value.reason == reason


def test_other_request_uri_schemes_are_left_to_the_ua() -> None:
    request = parse(msg("INVITE nobodyKnowsThisScheme:totallyopaquecontent SIP/2.0", *BASIC[1:], "Content-Length: 0"))
    assert isinstance(request, SipRequest) and request.uri.startswith("nobodyKnowsThisScheme:")


def test_a_date_outside_gmt_is_kept_as_text() -> None:
    # RFC 4475 3.1.2.12: invalid, but an element that never uses Date should not refuse over it.
    request = parse(msg(*BASIC, "Date: Fri, 01 Jan 2010 16:00:00 EST", "Content-Length: 0"))
    assert request.headers.get("Date") == "Fri, 01 Jan 2010 16:00:00 EST"


def test_salvage_answers_a_request_missing_from_to_and_call_id() -> None:
    # RFC 4475 3.3.1: the Via and CSeq are enough to address a 400.
    data = msg("INVITE sip:user@example.com SIP/2.0", "CSeq: 193942 INVITE", BASIC[1], "l: 0")
    salvaged = salvage_request(data)
    assert salvaged is not None
    response = make_response(salvaged, 400, "Bad Request (missing From)")
    assert [name for name, _ in response.headers] == ["CSeq", "Via", "Content-Length"]


def test_salvage_copies_each_single_valued_header_once() -> None:
    # RFC 4475 3.3.8 repeats Call-ID, From, To and CSeq; a response with two of each would be unreadable.
    data = msg(*BASIC, "Call-ID: second@x", "From: <sip:x@y>;tag=2", "CSeq: 59 INVITE", "Content-Length: 0")
    salvaged = salvage_request(data)
    assert salvaged is not None
    assert salvaged.headers.get_all("Call-ID") == ["a84b4c76e66710@pc33.atlanta.example.com"]
    assert salvaged.headers.get_all("CSeq") == ["314159 INVITE"]


@pytest.mark.parametrize(
    "start",
    ["INVITE  sip:user@example.com  SIP/2.0", "OPTIONS sip:user@example.com SIP/2.0  ",
     "INVITE sip:user@example.com; lr SIP/2.0", "INVITE <sip:user@example.com> SIP/2.0"],
)
def test_salvage_reads_request_lines_the_parser_refuses(start: str) -> None:
    # RFC 4475 3.1.2.7 to 3.1.2.10: still requests, still answered.
    data = msg(start, *BASIC[1:], "Content-Length: 0")
    with pytest.raises(SipParseError):
        parse(data)
    salvaged = salvage_request(data)
    assert salvaged is not None and salvaged.method in ("INVITE", "OPTIONS")


@pytest.mark.parametrize(
    "data",
    [msg(*[line for line in BASIC if not line.startswith("Via")], "Content-Length: 0"),
     msg("SIP/2.0 200 OK", *BASIC[1:]), b"\x00\x01garbage\r\n\r\n"],
)
def test_salvage_gives_up_only_when_nothing_could_be_addressed(data: bytes) -> None:
    assert salvage_request(data) is None


def test_a_stateless_refusal_tags_to_the_same_way_for_the_same_request() -> None:
    data = msg(*BASIC, "Content-Length: 9999", body="short")
    salvaged = salvage_request(data)
    assert salvaged is not None
    first = refusal(salvaged, 400, "Bad Request (x)")
    again = refusal(salvage_request(data) or salvaged, 400, "Bad Request (x)")
    assert first.to_tag and first.to_tag == again.to_tag  # RFC 3261 8.2.7: retransmissions match
    tagged = salvage_request(data.replace(b"biloxi.example.com>", b"biloxi.example.com>;tag=abc", 1))
    assert tagged is not None and refusal(tagged, 400, "x").headers.get_all("To")[0].endswith(";tag=abc")
