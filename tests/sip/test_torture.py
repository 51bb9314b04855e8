"""The RFC 4475 and RFC 5118 torture messages, byte for byte, against a running UserAgent.

Every message in `torture/` is sent over UDP and over TCP from a plain socket; the first final
response (or the silence, when the RFC says nothing can be answered) is what the RFC's discussion of
that message asks for. Afterwards the UA must still answer an OPTIONS: no message may break it.

Only one thing is rewritten, and only over UDP: the sent-by of the top Via becomes the test socket,
because RFC 3261 18.2.2 sends a UDP response to the Via's host and port (192.0.2.x in the RFCs),
which this test cannot listen on. Over TCP the response comes back on the connection, so the bytes
go out exactly as the RFC prints them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sip.conftest import RecordingHandler, UaFactory, sip_text
from voicegate.internal.sip import Dialog, IncomingCall, SessionDescription, TimerSettings, UserAgent, build_offer
from voicegate.internal.sip.framer import KeepAlive, StreamFramer

TORTURE = Path(__file__).parent / "torture"
FAST = TimerSettings(t1=0.05, t2=0.2, t4=0.2, timer_d=0.5)
ANSWER_WAIT_S = 10.0  # generous: the machine is shared
QUIET_S = 1.0  # how long "no answer" is watched for


@dataclass(frozen=True)
class Expected:
    rfc: str
    udp: int | None  # final status, or None: nothing may come back
    tcp: int | None
    why: str
    header: str = ""  # a header the answer must carry ("Allow", "Unsupported: ...")


def same(rfc: str, status: int | None, why: str, header: str = "") -> Expected:
    return Expected(rfc, status, status, why, header)


# RFC 4475 section 3 and RFC 5118 section 4, one entry per message, outcome as their discussion says
# for a UA (we are not a proxy or registrar: REGISTER and MESSAGE are known methods we do not allow).
EXPECTED: dict[str, Expected] = {
    # -- RFC 4475 3.1.1: valid messages, processed as any well-formed request would be
    "wsinv": same("4475 3.1.1.1", 481, "valid; its To tag names a dialog we do not have"),
    "intmeth": same("4475 3.1.1.2", 501, "valid; an extension method nobody implements", "Allow"),
    "esc01": same("4475 3.1.1.3", 200, "valid escapes in URIs; an INVITE we answer"),
    "escnull": same("4475 3.1.1.4", 405, "%00 in URIs is legal; REGISTER is not ours", "Allow"),
    "esc02": same("4475 3.1.1.5", 501, "RE%47IST%45R is a method name, not an escape", "Allow"),
    "lwsdisp": same("4475 3.1.1.6", 200, "no LWS between display name and < is legal"),
    "longreq": same("4475 3.1.1.7", 200, "long values are legal; an INVITE we answer"),
    "dblreq": same("4475 3.1.1.8", 405, "the REGISTER is answered, the octets after it ignored"),
    "semiuri": same("4475 3.1.1.9", 200, "; in the user part is legal"),
    "transports": same("4475 3.1.1.10", 200, "unknown transports in lower Vias are only copied"),
    "mpart01": same("4475 3.1.1.11", 405, "multipart body is legal; MESSAGE is not ours", "Allow"),
    "unreason": same("4475 3.1.1.12", None, "a response: it matches no transaction, dropped"),
    "noreason": same("4475 3.1.1.13", None, "a response: it matches no transaction, dropped"),
    # -- RFC 4475 3.1.2: invalid messages, answered with 400 (or the code the RFC names)
    "badinv01": same("4475 3.1.2.1", 400, "empty header list elements"),
    "clerr": Expected("4475 3.1.2.2", 400, None, "Content-Length past the datagram; a stream just waits"),
    "ncl": same("4475 3.1.2.3", 400, "negative Content-Length (the stream is closed after)"),
    "scalar02": same("4475 3.1.2.4", 400, "CSeq and Max-Forwards out of range"),
    "scalarlg": same("4475 3.1.2.5", None, "a response with overlarge values: discarded"),
    "quotbal": same("4475 3.1.2.6", 400, "unterminated quoted display name"),
    "ltgtruri": same("4475 3.1.2.7", 400, "<> around the Request-URI"),
    "lwsruri": same("4475 3.1.2.8", 400, "LWS inside the Request-URI"),
    "lwsstart": same("4475 3.1.2.9", 400, "several SP between Request-Line elements"),
    "trws": same("4475 3.1.2.10", 400, "SP after the SIP-Version"),
    "escruri": same("4475 3.1.2.11", 400, "escaped headers in the Request-URI"),
    "baddate": same("4475 3.1.2.12", 200, "a non-GMT Date; we never read Date, and the RFC says an element "
                    "should not refuse over it then"),
    "regbadct": same("4475 3.1.2.13", 400, "a URI with ? outside <>"),
    "badaspec": same("4475 3.1.2.14", 400, "spaces inside <addr-spec>"),
    "baddn": Expected("4475 3.1.2.15", 400, None, "non-token display name; the file has no blank line, "
                      "so on a stream the header section never ends"),
    "badvers": same("4475 3.1.2.16", 505, "SIP/7.0"),
    "mismatch01": same("4475 3.1.2.17", 400, "CSeq method differs from the request's"),
    "mismatch02": same("4475 3.1.2.18", 501, "unknown method (the RFC prefers 501 to 400)", "Allow"),
    "bigcode": same("4475 3.1.2.19", None, "a response with a 10-digit code: discarded"),
    # -- RFC 4475 3.2, 3.3, 3.4: transaction and application semantics
    "badbranch": same("4475 3.2.1", 200, "bare magic cookie: matched the RFC 2543 way and answered"),
    "insuf": same("4475 3.3.1", 400, "no Call-ID, From or To: answered with what is there"),
    "unkscm": same("4475 3.3.2", 416, "unknown Request-URI scheme"),
    "novelsc": same("4475 3.3.3", 416, "soap.beep: Request-URI"),
    "unksm2": same("4475 3.3.4", 405, "odd schemes in To/From/Contact parse; REGISTER is not ours"),
    "bext01": same("4475 3.3.5", 420, "Require we do not support",
                   "Unsupported: nothingSupportsThis, nothingSupportsThisEither"),
    "invut": same("4475 3.3.6", 415, "application/unknownformat body", "Accept: application/sdp"),
    "regaut01": same("4475 3.3.7", 405, "unknown auth scheme; REGISTER is not ours"),
    "multi01": same("4475 3.3.8", 400, "two Call-IDs, Froms, Tos and CSeqs"),
    "mcl01": same("4475 3.3.9", 400, "two different Content-Lengths"),
    "bcast": same("4475 3.3.10", None, "a response: never answered, nothing sent to the broadcast Via"),
    "zeromf": same("4475 3.3.11", 200, "Max-Forwards 0 only stops proxies"),
    "cparam01": same("4475 3.3.12", 405, "contact parameter parses; REGISTER is not ours"),
    "cparam02": same("4475 3.3.13", 405, "url-parameter parses; REGISTER is not ours"),
    "regescrt": same("4475 3.3.14", 405, "escaped header in <Contact> parses; REGISTER is not ours"),
    "sdp01": same("4475 3.3.15", 406, "Accept excludes the SDP our answer must carry"),
    "inv2543": same("4475 3.4.1", 200, "RFC 2543 INVITE (no From tag, no branch) is accepted"),
    # -- RFC 5118 section 4: IPv6
    "ipv6-good": same("5118 4.1", 405, "IPv6 references parse; REGISTER is not ours"),
    "ipv6-bad": same("5118 4.2", 400, "IPv6 Request-URI host without []"),
    "port-ambiguous": same("5118 4.3", 405, "[2001:db8::10:5070] is an address, no port"),
    "port-unambiguous": same("5118 4.4", 405, "[2001:db8::10]:5070 has a port"),
    "via-received-param-with-delim": same("5118 4.5", 481, "received=[v6] tolerated; BYE for no dialog"),
    "via-received-param-no-delim": same("5118 4.5", 200, "received=v6 without [] is the right form"),
    "ipv6-in-sdp": same("5118 4.6", 488, "IPv6 SDP parses; G.726 and H.263 are not our codecs"),
    "mult-ip-in-header": same("5118 4.7", 481, "mixed v4/v6 Vias parse; BYE for no dialog"),
    "mult-ip-in-sdp": same("5118 4.8", 200, "per-media c= lines; PCMU answered"),
    "ipv4-mapped-ipv6": same("5118 4.9", 488, "::ffff: addresses parse; G.726 is not our codec"),
    "ipv6-bug-abnf-3-colons": same("5118 4.10", 200, "the RFC 3261 ABNF bug's extra colon is tolerated"),
    "ipv6-correct-abnf-2-colons": same("5118 4.10", 200, "the correct form"),
}


class TortureHandler(RecordingHandler):
    """Answers an offerless INVITE (inv2543 over TCP carries no body) with our own offer."""

    async def answer(self, call: IncomingCall, dialog: Dialog) -> SessionDescription:
        if call.offer is None:
            self.answered.append(call)
            return build_offer("127.0.0.1", 40000)
        return await super().answer(call, dialog)


_VIA_NAME = re.compile(rb"^(?:via|v)[ \t]*:", re.I | re.M)
_SENT_BY = re.compile(rb"(SIP\s*/\s*[0-9.]+\s*/\s*[A-Za-z]+\s+)(\[[^\]]*\]|[^\s;,:]+)(\s*:\s*\d+)?", re.I)


def aim_top_via(data: bytes, port: int) -> bytes:
    """The message with its top Via's sent-by replaced by 127.0.0.1:port (nothing else changes)."""
    header_end = data.find(b"\r\n\r\n")
    via = _VIA_NAME.search(data, 0, header_end if header_end >= 0 else len(data))
    if via is None:
        return data
    sent_by = _SENT_BY.search(data, via.end())
    if sent_by is None:
        return data
    return data[: sent_by.start(2)] + f"127.0.0.1:{port}".encode() + data[sent_by.end() :]


def status_of(response: bytes) -> int:
    # Read by hand: a 400 copies the malformed headers it answers, which our own parser would refuse.
    return int(response.split(b"\r\n", 1)[0].split(b" ")[1])


def header_value(message: bytes, name: str) -> str:
    """The first `name` header's value, unfolded and with runs of whitespace made one space."""
    head = message.split(b"\r\n\r\n", 1)[0].decode("utf-8", errors="replace")
    found = re.search(rf"^{re.escape(name)}[ \t]*:([^\r\n]*(?:\r\n[ \t][^\r\n]*)*)", head, re.I | re.M)
    return " ".join(found.group(1).split()) if found else ""


def final_status(responses: list[bytes]) -> int | None:
    finals = [r for r in responses if status_of(r) >= 200]
    return status_of(finals[0]) if finals else None


class _Collector(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.arrived = asyncio.Event()

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self.received.append(data)
        self.arrived.set()


async def _wait_for_final(received: list[bytes], arrived: asyncio.Event, expect_answer: bool) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (ANSWER_WAIT_S if expect_answer else QUIET_S)
    while final_status(received) is None and loop.time() < deadline:
        arrived.clear()
        try:
            await asyncio.wait_for(arrived.wait(), deadline - loop.time())
        except TimeoutError:
            break


async def exchange_udp(data: bytes, ua_port: int, expect_answer: bool) -> list[bytes]:
    loop = asyncio.get_running_loop()
    transport, collector = await loop.create_datagram_endpoint(_Collector, local_addr=("127.0.0.1", 0))
    try:
        own_port = transport.get_extra_info("sockname")[1]
        transport.sendto(aim_top_via(data, own_port), ("127.0.0.1", ua_port))
        await _wait_for_final(collector.received, collector.arrived, expect_answer)
        return collector.received
    finally:
        transport.close()


async def exchange_tcp(data: bytes, ua_port: int, expect_answer: bool) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", ua_port)
    framer = StreamFramer(1 << 20)
    received: list[bytes] = []
    arrived = asyncio.Event()

    async def read() -> None:
        while chunk := await reader.read(65536):
            received.extend(m for m in framer.feed(chunk) if not isinstance(m, KeepAlive))
            arrived.set()

    reading = asyncio.create_task(read())
    try:
        writer.write(data)
        await writer.drain()
        await _wait_for_final(received, arrived, expect_answer)
        return received
    finally:
        reading.cancel()
        writer.close()


async def still_answers_options(ua: UserAgent) -> bool:
    port = ua.local_address().port
    loop = asyncio.get_running_loop()
    transport, collector = await loop.create_datagram_endpoint(_Collector, local_addr=("127.0.0.1", 0))
    try:
        own = transport.get_extra_info("sockname")[1]
        transport.sendto(sip_text("OPTIONS", own, port, call_id="alive-after-torture"), ("127.0.0.1", port))
        await _wait_for_final(collector.received, collector.arrived, True)
        return final_status(collector.received) == 200
    finally:
        transport.close()


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def sip_errors() -> Iterator[list[str]]:
    """What the SIP stack logs at ERROR: the transport survives any exception, so a crash only shows here."""
    handler = _ErrorLog()
    logger = logging.getLogger("voicegate.internal.sip")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def test_every_message_file_has_an_expected_outcome() -> None:
    files = {path.stem for path in TORTURE.glob("*.dat")}
    assert files == set(EXPECTED)
    assert sum(e.rfc.startswith("4475") for e in EXPECTED.values()) == 49
    assert sum(e.rfc.startswith("5118") for e in EXPECTED.values()) == 12


@pytest.mark.parametrize("transport", ["udp", "tcp"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_torture_message_gets_the_answer_its_rfc_asks_for(
    make_ua: UaFactory, name: str, transport: str, sip_errors: list[str]
) -> None:
    expected = EXPECTED[name]
    status = expected.udp if transport == "udp" else expected.tcp
    ua = await make_ua(TortureHandler(), timers=FAST)
    data = (TORTURE / f"{name}.dat").read_bytes()
    port = ua.local_address(transport).port
    exchange = exchange_udp if transport == "udp" else exchange_tcp
    responses = await exchange(data, port, status is not None)
    got = final_status(responses)
    assert got == status, f"{name} ({expected.rfc}, {expected.why}) over {transport}: got {got}, {responses[:1]!r}"
    if status is not None and expected.header:
        final = next(r for r in responses if status_of(r) >= 200)
        name_part, _, value_part = expected.header.partition(":")
        line = re.search(rb"^" + re.escape(name_part.encode()) + rb"[ \t]*:[ \t]*(.*)\r$", final, re.I | re.M)
        assert line is not None, f"{name}: no {name_part} in {final!r}"
        assert value_part.strip().encode() in line.group(1)
    if status is not None:
        final = next(r for r in responses if status_of(r) >= 200)
        assert header_value(final, "CSeq") == header_value(data, "CSeq"), f"{name}: answer for another request"
    assert await still_answers_options(ua), f"the UA stopped answering after {name} over {transport}"
    assert sip_errors == []


def test_aim_top_via_rewrites_only_the_first_sent_by() -> None:
    data = (TORTURE / "wsinv.dat").read_bytes()
    aimed = aim_top_via(data, 5999)
    assert b"127.0.0.1:5999;branch=390skdjuw" in aimed
    assert b"spindle.example.com" in aimed and b"192.0.2.2" not in aimed
    assert len(aimed) - len(data) == len(b"127.0.0.1:5999") - len(b"192.0.2.2")


def test_status_is_read_from_the_start_line_even_when_the_headers_would_not_parse() -> None:
    assert status_of(b"SIP/2.0 400 Bad Request (x)\r\nVia: ;;,;,,\r\n\r\n") == 400
    assert final_status([b"SIP/2.0 100 Trying\r\n\r\n", b"SIP/2.0 486 Busy Here\r\n\r\n"]) == 486
