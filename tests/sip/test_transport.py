"""The transport on real sockets: robustness against bad input, RFC 3581 responses, keep-alives."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.sip.conftest import RawPeer, RecordingHandler, UaFactory, sip_text
from voicegate.internal.sip import SipResponse, parse


@pytest.fixture
async def peer() -> AsyncIterator[RawPeer]:
    opened = await RawPeer.open()
    yield opened
    opened.close()


async def test_rport_response_goes_to_the_source_port_with_received(make_ua: UaFactory, peer: RawPeer) -> None:
    ua = await make_ua(RecordingHandler())
    port = ua.local_address().port
    # The Via claims port 9 (nobody listens there); rport asks for the real source port instead.
    text = sip_text("OPTIONS", 9, port).replace(b";branch=", b";rport;branch=")
    peer.send(text, port)
    response = await peer.response(200)
    via = response.top_via
    assert via.rport == peer.port and via.received == "127.0.0.1"


async def test_udp_garbage_is_dropped_and_the_ua_keeps_working(make_ua: UaFactory, peer: RawPeer) -> None:
    ua = await make_ua(RecordingHandler())
    port = ua.local_address().port
    junks = (
        b"\x00\xff" * 50, b"\r\n\r\n", b"HELLO\r\n\r\n", b"SIP/2.0 200 OK\r\n\r\n", b"OPTIONS sip:x SIP/2.0\r\n\r\n",
    )
    for junk in junks:
        peer.send(junk, port)
    peer.send(sip_text("OPTIONS", peer.port, port), port)
    response = await peer.receive()
    assert isinstance(response, SipResponse) and response.status == 200  # nothing answered the junk


async def test_malformed_but_addressable_request_gets_400_with_reason(make_ua: UaFactory, peer: RawPeer) -> None:
    ua = await make_ua(RecordingHandler())
    port = ua.local_address().port
    peer.send(sip_text("OPTIONS", peer.port, port).replace(b"Content-Length: 0", b"Content-Length: 50"), port)
    response = await peer.response(400)
    assert response.reason == "Bad Request (Content-Length larger than the body)"


async def tcp_exchange(port: int, data: bytes, read_until_close: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        if read_until_close:
            return await asyncio.wait_for(reader.read(), 20)
        return await asyncio.wait_for(reader.read(1000), 20)
    finally:
        writer.close()


async def test_tcp_double_crlf_keepalive_gets_single_crlf(make_ua: UaFactory) -> None:
    ua = await make_ua(RecordingHandler())
    assert await tcp_exchange(ua.local_address("tcp").port, b"\r\n\r\n", read_until_close=False) == b"\r\n"


async def test_tcp_messages_split_and_joined_are_framed(make_ua: UaFactory) -> None:
    ua = await make_ua(RecordingHandler())
    port = ua.local_address("tcp").port
    first = sip_text("OPTIONS", 5060, port, cseq=1).replace(b"UDP", b"TCP")
    second = sip_text("OPTIONS", 5060, port, cseq=2).replace(b"UDP", b"TCP")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(first[:10])
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(first[10:] + second)
    await writer.drain()
    received = b""
    while received.count(b"SIP/2.0 200 OK") < 2:
        received += await asyncio.wait_for(reader.read(4096), 20)
    writer.close()
    assert b"CSeq: 1 OPTIONS" in received and b"CSeq: 2 OPTIONS" in received


async def test_tcp_oversized_message_gets_513_and_the_connection_closes(make_ua: UaFactory) -> None:
    ua = await make_ua(RecordingHandler(), max_message_bytes=1024)
    port = ua.local_address("tcp").port
    big = sip_text("OPTIONS", 5060, port, body="x" * 5000, content_type="text/plain").replace(b"UDP", b"TCP")
    reply = await tcp_exchange(port, big)
    response = parse(reply)
    assert isinstance(response, SipResponse) and response.status == 513


async def test_tcp_bad_content_length_gets_400_and_the_connection_closes(make_ua: UaFactory) -> None:
    ua = await make_ua(RecordingHandler())
    port = ua.local_address("tcp").port
    bad = sip_text("OPTIONS", 5060, port).replace(b"UDP", b"TCP").replace(b"Content-Length: 0", b"Content-Length: x")
    response = parse(await tcp_exchange(port, bad))
    assert isinstance(response, SipResponse) and response.status == 400


async def test_tcp_headers_that_never_end_are_cut_off(make_ua: UaFactory) -> None:
    ua = await make_ua(RecordingHandler(), max_message_bytes=1024)
    assert await tcp_exchange(ua.local_address("tcp").port, b"OPTIONS sip:a SIP/2.0\r\nX: " + b"y" * 3000) == b""




async def test_a_connection_flood_is_capped_per_source_and_in_all_and_counted(make_ua: UaFactory) -> None:
    """Idle TCP connections cost a descriptor and a buffer each: past sip.max_connections_per_source from
    one address (and sip.max_connections in all) a new one is closed at once, and the ones already open,
    and other addresses, keep working."""
    ua = await make_ua(RecordingHandler(), max_connections=5, max_connections_per_source=3)
    port = ua.local_address("tcp").port
    transport = ua.stack.transport
    refused: list[str] = []
    transport.on_connection_refused = refused.append
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", port)
    assert await asyncio.wait_for(extra_reader.read(100), 10) == b""  # closed by the server at once
    extra_writer.close()
    assert refused == ["per_source"]
    others = [await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))  # 5 open: the cap
              for _ in range(2)]
    last_reader, last_writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.3", 0))
    assert await asyncio.wait_for(last_reader.read(100), 10) == b""
    last_writer.close()
    assert refused == ["per_source", "total"] and transport.refused_connections == 2
    reader, writer = held[0]
    options = sip_text("OPTIONS", 5060, port, cseq=1).replace(b"UDP", b"TCP")
    writer.write(options)
    await writer.drain()
    assert b"SIP/2.0 200 OK" in await asyncio.wait_for(reader.read(4096), 20)  # what was admitted works
    for _reader, each in [*held, *others]:
        each.close()
    # Closed connections free their places.
    async def admitted() -> bool:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(100), 10)
        writer.close()
        return answer == b"\r\n"

    for _ in range(50):
        if await admitted():
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("a closed connection's place was never freed")
