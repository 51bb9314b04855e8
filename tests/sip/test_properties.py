"""Property tests: what we serialise we parse back, and no input makes the parser raise anything
but SipParseError."""

from __future__ import annotations

import ipaddress

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voicegate.internal.sip import (
    Headers,
    NameAddr,
    SipParseError,
    SipRequest,
    SipResponse,
    SipUri,
    StreamFramer,
    parse,
)
from voicegate.internal.sip.framer import FramingError, KeepAlive
from voicegate.internal.sip.salvage import refusal, salvage_request

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
tokens = st.text(ALNUM + "-.!%*_+`'~", min_size=1, max_size=12)
lower_tokens = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=10)
user_parts = st.text(ALNUM + "-_.!~*'()&=+$,", min_size=1, max_size=12)
labels = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
hostnames = st.lists(labels, min_size=1, max_size=3).map(".".join)
ipv4 = st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv4Address(n)))
ipv6 = st.integers(1, 2**128 - 1).map(lambda n: str(ipaddress.IPv6Address(n)))
hosts = st.one_of(hostnames, ipv4, ipv6)
ports = st.one_of(st.none(), st.integers(1, 65535))
param_values = st.one_of(st.none(), st.text(ALNUM + "-_.!~*'()", min_size=1, max_size=8))
params = st.dictionaries(lower_tokens, param_values, max_size=3)
# Header values: printable, no CR/LF, no edge whitespace (parsing trims LWS, by design).
values = st.text(
    st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="\x7f"), min_size=1, max_size=30
).map(str.strip).filter(bool)


@st.composite
def sip_uris(draw: st.DrawFn) -> SipUri:
    user = draw(st.one_of(st.just(""), user_parts))
    headers = draw(st.lists(st.tuples(labels, labels), max_size=2))
    return SipUri(draw(st.sampled_from(["sip", "sips"])), user, None, draw(hosts), draw(ports), draw(params), headers)


@st.composite
def name_addrs(draw: st.DrawFn) -> NameAddr:
    display = draw(st.one_of(st.none(), st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=15)))
    return NameAddr(draw(sip_uris()), display, draw(params))


@st.composite
def messages(draw: st.DrawFn) -> SipRequest | SipResponse:
    method = draw(st.sampled_from(["INVITE", "ACK", "BYE", "OPTIONS", "INFO", "REGISTER", "X-CUSTOM"]))
    headers = Headers()
    for _ in range(draw(st.integers(1, 3))):
        headers.add("Via", f"SIP/2.0/UDP {draw(hostnames)}:{draw(st.integers(1, 65535))};branch=z9hG4bK{draw(labels)}")
    headers.add("From", str(draw(name_addrs()).with_tag(draw(labels))))
    headers.add("To", str(draw(name_addrs())))
    headers.add("Call-ID", draw(st.text(ALNUM + "-.@", min_size=1, max_size=20)))
    headers.add("CSeq", f"{draw(st.integers(0, 2**31 - 1))} {method}")
    for name, value in draw(st.lists(st.tuples(tokens, values), max_size=4)):
        headers.add(f"X-{name}", value)
    body = draw(st.binary(max_size=60))
    if draw(st.booleans()):
        return SipRequest(method, str(draw(sip_uris()).without_headers()), headers, body)
    reason = draw(st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=20).map(str.strip))
    return SipResponse(draw(st.integers(100, 699)), reason, headers, body)


@given(sip_uris())
def test_sip_uri_round_trips(uri: SipUri) -> None:
    assert SipUri.parse(str(uri)) == uri


@given(name_addrs())
def test_name_addr_round_trips(address: NameAddr) -> None:
    assert NameAddr.parse(str(address)) == address


@given(messages())
def test_parse_of_serialise_is_identity(message: SipRequest | SipResponse) -> None:
    assert parse(message.serialise()) == message


@given(messages())
def test_serialise_of_parse_reproduces_well_formed_text(message: SipRequest | SipResponse) -> None:
    text = message.serialise()
    assert parse(text).serialise() == text


@given(st.binary(max_size=400))
def test_random_bytes_raise_only_sip_parse_error(data: bytes) -> None:
    try:
        parse(data)
    except SipParseError:
        pass
    salvage_request(data)  # must not raise either


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3), st.binary(max_size=4)), max_size=6))
def test_mutated_messages_raise_only_sip_parse_error(
    message: SipRequest | SipResponse, edits: list[tuple[int, int, bytes]]
) -> None:
    data = bytearray(message.serialise())
    for position, delete, insert in edits:
        at = position % (len(data) + 1)
        data[at : at + delete] = insert
    try:
        parse(bytes(data))
    except SipParseError:
        pass
    salvage_request(bytes(data))


@given(st.lists(messages(), min_size=1, max_size=4), st.lists(st.integers(1, 200), max_size=20), st.booleans())
def test_framer_splits_any_chunking_back_into_the_same_messages(
    batch: list[SipRequest | SipResponse], cuts: list[int], keepalive: bool
) -> None:
    stream = b"".join((b"\r\n\r\n" if keepalive else b"") + m.serialise() for m in batch)
    framer = StreamFramer(1_000_000)
    out: list[bytes | KeepAlive] = []
    position = 0
    for cut in cuts:
        out += framer.feed(stream[position : position + cut])
        position += cut
    out += framer.feed(stream[position:])
    assert [parse(item) for item in out if isinstance(item, bytes)] == batch
    assert sum(isinstance(item, KeepAlive) for item in out) == (len(batch) if keepalive else 0)


@given(st.binary(max_size=300))
def test_framer_raises_only_framing_error(data: bytes) -> None:
    framer = StreamFramer(200)
    try:
        framer.feed(data)
    except FramingError:
        pass


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3), st.binary(max_size=4)), max_size=6))
def test_a_salvaged_request_always_gets_a_refusal_that_serialises(
    message: SipRequest | SipResponse, edits: list[tuple[int, int, bytes]]
) -> None:
    data = bytearray(message.serialise())
    for position, delete, insert in edits:
        at = position % (len(data) + 1)
        data[at : at + delete] = insert
    salvaged = salvage_request(bytes(data))
    if salvaged is not None:
        answer = refusal(salvaged, 400, "Bad Request (x)").serialise()
        assert answer.startswith(b"SIP/2.0 400 ") and b"\r\nVia: " in answer
