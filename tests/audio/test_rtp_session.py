"""Two real RtpSessions on 127.0.0.1, and raw sockets playing a peer where a test needs control.

Nothing here asserts on wall-clock durations: tests wait for conditions, with generous limits, so a
loaded machine makes them slower, not flaky.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from tests.audio.pcap import SIPP_PCAPS, needs_sipp_pcaps, read_pcap_udp_payloads
from voicegate.internal.audio.dtmf import DtmfSender
from voicegate.internal.audio.g711 import PCMA, PCMU, alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from voicegate.internal.audio.rtp import RtpPacket, rtp_header
from voicegate.internal.audio.rtp_session import RtpPortAllocator, RtpPortsExhausted, RtpSession
from voicegate.internal.audio.scheduler import PacedScheduler

DTMF_PT = 101


@dataclass
class Peer:
    """What a session handed to its consumer."""

    received: list[bytes] = field(default_factory=list)
    digits: list[str] = field(default_factory=list)
    timeouts: int = 0
    outgoing: list[bytes] = field(default_factory=list)  # frames the source will hand out, in order

    def source(self) -> bytes | None:
        return self.outgoing.pop(0) if self.outgoing else None

    def sink(self, pcm: bytes) -> None:
        self.received.append(pcm)

    def on_dtmf(self, digit: str) -> None:
        self.digits.append(digit)

    def on_timeout(self) -> None:
        self.timeouts += 1


@pytest.fixture
def allocator() -> RtpPortAllocator:
    # A random slice of the port space: parallel test workers rarely meet, and bind-testing skips
    # any port that is taken anyway.
    base = random.randrange(30000, 60000, 2)
    return RtpPortAllocator(base, base + 59)


@pytest.fixture
async def scheduler() -> AsyncIterator[PacedScheduler]:
    paced = PacedScheduler()
    yield paced
    paced.close()


@pytest.fixture
def raw_peer() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    yield sock
    sock.close()


class Sessions:
    def __init__(self, allocator: RtpPortAllocator, scheduler: PacedScheduler) -> None:
        self.allocator, self.scheduler = allocator, scheduler
        self.opened: list[RtpSession] = []

    def open(self, peer: Peer, **overrides: object) -> RtpSession:
        options: dict[str, object] = dict(
            local_host="127.0.0.1", allocator=self.allocator, scheduler=self.scheduler, payload_type=PCMU,
            dtmf_payload_type=DTMF_PT, symmetric=True, timeout_s=30.0, jitter_ms=40, source=peer.source,
            sink=peer.sink, on_dtmf=peer.on_dtmf, on_timeout=peer.on_timeout,
        )
        options.update(overrides)
        session = RtpSession(**options)  # type: ignore[arg-type]
        self.opened.append(session)
        return session


@pytest.fixture
async def sessions(allocator: RtpPortAllocator, scheduler: PacedScheduler) -> AsyncIterator[Sessions]:
    made = Sessions(allocator, scheduler)
    yield made
    for session in made.opened:
        session.close()


async def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


def chirp_frames(seconds: float = 1.0) -> list[bytes]:
    """A sweep from 300 Hz to 3 kHz: unlike a pure tone it lines up with itself at one offset only."""
    t = np.arange(int(8000 * seconds)) / 8000
    signal = 8000 * np.sin(2 * np.pi * (300 * t + (2700 / (2 * seconds)) * t**2))
    pcm = signal.astype("<i2").tobytes()
    return [pcm[i : i + 320] for i in range(0, len(pcm), 320)]


def best_correlation(received: np.ndarray, chunk: np.ndarray) -> float:
    """Highest normalized cross-correlation of `chunk` anywhere in `received`."""
    dots = np.correlate(received, chunk, mode="valid")
    energy = np.convolve(received**2, np.ones(chunk.size), mode="valid")
    return float(np.max(dots / (np.sqrt(energy) * np.linalg.norm(chunk) + 1e-9)))


@pytest.mark.parametrize(
    ("payload_type", "encode", "decode"), [(PCMU, ulaw_encode, ulaw_decode), (PCMA, alaw_encode, alaw_decode)]
)
async def test_a_tone_sent_by_one_session_is_heard_by_the_other(
    sessions: Sessions, payload_type: int, encode: Callable[[bytes], bytes], decode: Callable[[bytes], bytes]
) -> None:
    talker, listener = Peer(outgoing=chirp_frames()), Peer()
    a = sessions.open(talker, payload_type=payload_type)
    b = sessions.open(listener, payload_type=payload_type, jitter_ms=100)
    a.start(("127.0.0.1", b.local_port))
    b.start(("127.0.0.1", a.local_port))
    await wait_for(lambda: not talker.outgoing and len(listener.received) >= 75)
    assert all(len(frame) == 320 for frame in listener.received)
    heard = np.frombuffer(b"".join(listener.received), dtype="<i2").astype(np.float64)
    sent = np.frombuffer(decode(encode(b"".join(chirp_frames()))), dtype="<i2").astype(np.float64)
    # Compare 100 ms pieces: a frame the jitter buffer drops to cut delay must not fail the test.
    scores = [best_correlation(heard, sent[i : i + 800]) for i in range(0, sent.size, 800)]
    assert sorted(scores)[len(scores) // 2] > 0.99
    assert sum(score > 0.9 for score in scores) >= len(scores) - 2
    stats = b.stats()
    assert stats.packets_received >= 50 and stats.malformed == 0 and stats.lost == 0
    assert a.stats().packets_sent >= 50 and a.stats().bytes_sent == 172 * a.stats().packets_sent


@needs_sipp_pcaps
async def test_sipps_30_ms_pcma_capture_is_heard_as_20_ms_frames(sessions: Sessions, raw_peer: socket.socket) -> None:
    # sipp's play_pcap_audio sends this file: PCMA in 30 ms packets, not the 20 ms we send.
    packets = [RtpPacket.parse(p) for p in read_pcap_udp_payloads(SIPP_PCAPS / "g711a.pcap")][:50]
    assert {len(p.payload) for p in packets} == {240}
    listener = Peer()
    # A deep buffer: this test checks framing and content, not how a busy test machine paces packets.
    session = sessions.open(listener, payload_type=PCMA, jitter_ms=200)
    session.start(raw_peer.getsockname())
    for packet in packets:
        raw_peer.sendto(packet.serialize(), ("127.0.0.1", session.local_port))
        await asyncio.sleep(0.03)
    await wait_for(lambda: len(listener.received) >= 70)
    assert {len(frame) for frame in listener.received} == {320}
    heard = np.frombuffer(b"".join(listener.received), dtype="<i2").astype(np.float64)
    sent = np.frombuffer(alaw_decode(b"".join(p.payload for p in packets)), dtype="<i2").astype(np.float64)
    starts = [i for i in range(0, sent.size - 400, 400) if np.abs(sent[i : i + 400]).max() > 500]
    scores = [best_correlation(heard, sent[i : i + 400]) for i in starts]  # 50 ms pieces of speech
    assert len(scores) >= 8 and sum(score > 0.99 for score in scores) >= 0.75 * len(scores)


async def test_dtmf_sent_by_one_session_reaches_the_other_as_digits(sessions: Sessions) -> None:
    caller, agent = Peer(), Peer()
    a, b = sessions.open(caller), sessions.open(agent)
    a.start(("127.0.0.1", b.local_port))
    b.start(("127.0.0.1", a.local_port))
    a.send_dtmf("1#")
    a.send_dtmf("9")
    await wait_for(lambda: len(agent.digits) >= 3)
    await asyncio.sleep(0.2)  # and nothing reported twice
    assert agent.digits == ["1", "#", "9"]
    with pytest.raises(ValueError, match="not a DTMF key"):
        a.send_dtmf("x")


async def test_dtmf_needs_a_negotiated_telephone_event_type(sessions: Sessions) -> None:
    session = sessions.open(Peer(), dtmf_payload_type=None)
    with pytest.raises(ValueError, match="telephone-event"):
        session.send_dtmf("1")


async def test_symmetric_rtp_learns_the_remote_address_from_the_first_packet(
    sessions: Sessions, raw_peer: socket.socket
) -> None:
    caller, agent = Peer(outgoing=chirp_frames(0.4)), Peer()
    a = sessions.open(caller)
    b = sessions.open(agent, symmetric=True)
    b.start(None)  # the SDP address is unknown (or wrong, behind NAT): answer where packets come from
    a.start(("127.0.0.1", b.local_port))
    await wait_for(lambda: len(caller.received) >= 5)  # b's comfort silence found its way back to a
    # Once latched, packets from anyone else are ignored.
    raw_peer.sendto(rtp_header(PCMU, 1, 160, 0x1234) + b"\x00" * 160, ("127.0.0.1", b.local_port))
    await wait_for(lambda: b.stats().ignored >= 1)
    assert b.stats().packets_received >= 1 and a.stats().packets_received >= 5


async def test_a_sprayer_on_another_host_is_never_latched_and_never_hears_the_agent(sessions: Sessions) -> None:
    """RTP bleed: during call set-up someone on another address sprays packets at our port before the
    caller's first one. Only a host the call named (the SDP's, the SIP peer's) is latched; the caller,
    behind a NAT that changed its port, gets the agent's audio, and the sprayer none of it."""
    sprayer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sprayer.bind(("127.0.0.2", 0))
    sprayer.setblocking(False)
    caller = Peer(outgoing=chirp_frames(0.6))
    natted = sessions.open(caller, symmetric=False)  # the caller's packets come from this port...
    agent = Peer(outgoing=chirp_frames(1.0))
    session = sessions.open(agent, symmetric=True, signalling_host="127.0.0.1")
    try:
        session.start(("127.0.0.1", 9))  # ... but its SDP named another one (port 9: discard)
        for seq in range(10):  # the sprayer gets in first
            sprayer.sendto(rtp_header(PCMU, seq, 160 * seq, 0xBAD) + b"\xff" * 160, ("127.0.0.1", session.local_port))
        await wait_for(lambda: session.stats().rejected_sources >= 10)
        natted.start(("127.0.0.1", session.local_port))
        await wait_for(lambda: len(caller.received) >= 10)  # the agent's audio reached the caller
        heard_by_sprayer = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                sprayer.recvfrom(2048)
                heard_by_sprayer += 1
        assert heard_by_sprayer == 0, "the agent's audio went to the sprayer"
        stats = session.stats()
        assert stats.rejected_sources >= 10 and stats.packets_received >= 1
    finally:
        sprayer.close()


async def test_the_address_the_sdp_gave_wins_back_a_latch(sessions: Sessions, raw_peer: socket.socket) -> None:
    """Latched to a NAT port on the signalled host, the session answers the SDP's own address once packets
    come from exactly there."""
    first, exact = Peer(outgoing=chirp_frames(0.4)), Peer(outgoing=chirp_frames(2.0))
    other = sessions.open(first, symmetric=False)
    signalled = sessions.open(exact, symmetric=False)
    session = sessions.open(Peer(outgoing=chirp_frames(2.0)), symmetric=True)
    session.start(("127.0.0.1", signalled.local_port))
    other.start(("127.0.0.1", session.local_port))
    await wait_for(lambda: len(first.received) >= 3)  # latched to the first one's port
    signalled.start(("127.0.0.1", session.local_port))
    await asyncio.sleep(0.2)  # what reached the SDP's port before the latch has been read by now
    before = signalled.stats().packets_received
    await wait_for(lambda: signalled.stats().packets_received >= before + 10)


async def test_no_rtp_for_the_timeout_calls_on_timeout_once(sessions: Sessions, raw_peer: socket.socket) -> None:
    peer = Peer()
    session = sessions.open(peer, timeout_s=0.2)
    session.start(raw_peer.getsockname())
    await wait_for(lambda: peer.timeouts >= 1)
    await asyncio.sleep(0.3)
    assert peer.timeouts == 1


async def test_hanging_up_from_on_timeout_is_safe(sessions: Sessions, raw_peer: socket.socket) -> None:
    closed: list[RtpSession] = []

    def hang_up() -> None:
        session.close()
        closed.append(session)

    session = sessions.open(Peer(), timeout_s=0.1, on_timeout=hang_up)
    in_use = sessions.allocator.in_use
    session.start(raw_peer.getsockname())
    await wait_for(lambda: bool(closed))
    await asyncio.sleep(0.1)
    assert sessions.allocator.in_use == in_use - 1 and len(sessions.scheduler) == 0


@pytest.mark.parametrize("payload_type", [PCMU, 13])
async def test_incoming_rtp_keeps_the_call_alive(
    sessions: Sessions, raw_peer: socket.socket, payload_type: int
) -> None:
    # Comfort noise (13) is not decoded, but a phone sending only CN while its user is quiet is alive.
    peer = Peer()
    session = sessions.open(peer, timeout_s=0.5, symmetric=False)
    session.start(raw_peer.getsockname())
    for seq in range(40):  # 1.2 s of packets, well past the timeout
        packet = rtp_header(payload_type, seq, seq * 160, 77) + b"\xff" * 160
        raw_peer.sendto(packet, ("127.0.0.1", session.local_port))
        await asyncio.sleep(0.03)
    stats = session.stats()
    assert peer.timeouts == 0 and stats.packets_received + stats.ignored == 40


def drain(sock: socket.socket) -> list[RtpPacket]:
    packets = []
    while True:
        try:
            packets.append(RtpPacket.parse(sock.recv(2048)))
        except BlockingIOError:
            return packets


async def collect(sock: socket.socket, count: int) -> list[RtpPacket]:
    packets: list[RtpPacket] = []

    def enough() -> bool:
        packets.extend(drain(sock))
        return len(packets) >= count

    await wait_for(enough)
    return packets


async def test_outgoing_packets_follow_rtp_rules(sessions: Sessions, raw_peer: socket.socket) -> None:
    peer = Peer()
    session = sessions.open(peer)
    session.start(raw_peer.getsockname())
    silent = await collect(raw_peer, 5)
    peer.outgoing = chirp_frames(0.1)
    talking = await collect(raw_peer, 10)
    packets = silent + talking
    assert len({p.ssrc for p in packets}) == 1
    assert all(p.sequence == (packets[0].sequence + i) & 0xFFFF for i, p in enumerate(packets))
    assert all(p.timestamp == (packets[0].timestamp + 160 * i) & 0xFFFFFFFF for i, p in enumerate(packets))
    assert packets[0].marker and packets[0].payload == b"\xff" * 160  # comfort silence, first packet marked
    speech = next(i for i, p in enumerate(packets) if p.payload != b"\xff" * 160)
    assert packets[speech].marker  # first packet of the talkspurt after the silence
    assert not any(p.marker for p in packets[1:speech] + packets[speech + 1 : speech + 5])


async def test_hold_stops_our_audio_but_keeps_receiving(sessions: Sessions, raw_peer: socket.socket) -> None:
    # `direction` is ours, as in our SDP answer: "recvonly" and "inactive" are the two holds.
    peer = Peer()
    session = sessions.open(peer, timeout_s=0.3)
    remote = raw_peer.getsockname()
    target = ("127.0.0.1", session.local_port)
    session.start(remote)
    await collect(raw_peer, 3)

    session.update(remote, PCMU, DTMF_PT, "inactive")
    await asyncio.sleep(0.05)
    drain(raw_peer)
    sent = session.stats().packets_sent
    await asyncio.sleep(0.5)
    assert drain(raw_peer) == [] and session.stats().packets_sent == sent
    assert peer.timeouts == 0  # the peer said it sends nothing: silence is no reason to hang up

    session.update(remote, PCMU, DTMF_PT, "recvonly")  # the peer holds us and plays music
    await asyncio.sleep(0.05)
    drain(raw_peer)
    for seq in range(30):
        raw_peer.sendto(rtp_header(PCMU, seq, seq * 160, 5) + b"\x00" * 160, target)
        await asyncio.sleep(0.02)
    assert drain(raw_peer) == [] and session.stats().packets_sent == sent
    assert len(peer.received) >= 5 and peer.timeouts == 0

    session.update(remote, PCMU, DTMF_PT, "sendrecv")
    resumed = await collect(raw_peer, 3)
    assert resumed[0].marker  # the first packet after the gap


async def test_directions_are_ours_as_in_our_sdp_answer(sessions: Sessions, raw_peer: socket.socket) -> None:
    # "sendonly" from our side: we talk, the peer (which holds nothing against us) sends no media.
    peer = Peer()
    session = sessions.open(peer, timeout_s=0.2)
    session.start(raw_peer.getsockname())
    session.update(raw_peer.getsockname(), PCMU, DTMF_PT, "sendonly")
    await collect(raw_peer, 20)
    assert peer.timeouts == 0
    # The old hold convention, c=0.0.0.0: nothing is sent (it would reach this very host).
    session.update(("0.0.0.0", 4000), PCMU, DTMF_PT, "inactive")
    await asyncio.sleep(0.05)
    sent = session.stats().packets_sent
    await asyncio.sleep(0.2)
    assert session.stats().packets_sent == sent


async def test_reinvite_switches_the_codec(sessions: Sessions, raw_peer: socket.socket) -> None:
    session = sessions.open(Peer())
    session.start(raw_peer.getsockname())
    await collect(raw_peer, 2)
    session.update(raw_peer.getsockname(), PCMA, None, "sendrecv")
    await asyncio.sleep(0.05)
    drain(raw_peer)
    after = await collect(raw_peer, 3)
    assert {p.payload_type for p in after} == {PCMA} and after[-1].payload == b"\xd5" * 160


async def test_malformed_and_unknown_packets_are_counted_not_raised(
    sessions: Sessions, raw_peer: socket.socket
) -> None:
    peer = Peer()
    session = sessions.open(peer, symmetric=False)
    session.start(raw_peer.getsockname())
    target = ("127.0.0.1", session.local_port)
    raw_peer.sendto(b"\x00", target)
    raw_peer.sendto(b"\x40" + bytes(20), target)  # RTP version 1
    raw_peer.sendto(bytes.fromhex("8f00") + bytes(12), target)  # 15 CSRCs announced, none there
    raw_peer.sendto(rtp_header(13, 1, 160, 9) + b"\x40", target)  # comfort noise: not negotiated
    raw_peer.sendto(rtp_header(DTMF_PT, 2, 160, 9) + b"\x01", target)  # telephone event too short
    raw_peer.sendto(rtp_header(PCMU, 3, 320, 9) + b"\xff" * 160, target)
    await wait_for(lambda: session.stats().packets_received >= 2)
    stats = session.stats()
    assert stats.malformed == 4 and stats.ignored == 1
    await wait_for(lambda: len(peer.received) >= 3)
    assert all(len(frame) == 320 for frame in peer.received)


async def test_a_stale_backlog_is_shed_but_key_presses_in_it_are_kept(
    sessions: Sessions, raw_peer: socket.socket
) -> None:
    peer = Peer()
    session = sessions.open(peer, jitter_ms=40, symmetric=False)  # the buffer holds at most 8 packets
    session.start(raw_peer.getsockname())
    target = ("127.0.0.1", session.local_port)
    # 40 packets land before the session reads any: what a stalled event loop finds afterwards.
    event = event_payloads("5")
    for seq in range(40):
        if 3 <= seq < 3 + len(event):
            packet = rtp_header(DTMF_PT, seq, 3 * 160, 9, seq == 3) + event[seq - 3]
        else:
            packet = rtp_header(PCMU, seq, seq * 160, 9) + b"\xff" * 160
        raw_peer.sendto(packet, target)
    await wait_for(lambda: session.stats().packets_received + session.stats().shed >= 40)
    stats = session.stats()
    assert stats.shed == 30 - len(event) and stats.packets_received == 10 + len(event)
    await wait_for(lambda: peer.digits == ["5"])


def event_payloads(digit: str) -> list[bytes]:
    return [event.serialize() for event in DtmfSender().events(digit)]


async def test_rtcp_reports_give_a_round_trip_time(sessions: Sessions) -> None:
    a_peer, b_peer = Peer(), Peer()
    a = sessions.open(a_peer, rtcp_interval_s=0.2)
    b = sessions.open(b_peer, rtcp_interval_s=0.2)
    a.start(("127.0.0.1", b.local_port))
    b.start(("127.0.0.1", a.local_port))
    await wait_for(lambda: a.stats().round_trip_ms is not None and b.stats().round_trip_ms is not None)
    rtt = a.stats().round_trip_ms
    assert rtt is not None and 0 <= rtt < 5000


async def test_a_failing_consumer_does_not_stop_the_media(sessions: Sessions, raw_peer: socket.socket) -> None:
    def broken_source() -> bytes | None:
        raise RuntimeError("agent crashed")

    session = sessions.open(Peer(), source=broken_source)
    session.start(raw_peer.getsockname())
    packets = await collect(raw_peer, 5)
    assert all(p.payload == b"\xff" * 160 for p in packets)  # silence instead of the missing audio


def test_port_allocator_hands_out_even_ports_with_rtcp_next_to_them() -> None:
    base = random.randrange(30001, 60000, 2)  # odd: the first pair starts one above
    allocator = RtpPortAllocator(base, base + 4)
    first = allocator.allocate("127.0.0.1")
    second = allocator.allocate("127.0.0.1")
    try:
        for pair in (first, second):
            assert pair.port % 2 == 0 and base <= pair.port < pair.port + 1 <= base + 4
            assert pair.rtp.getsockname()[1] == pair.port and pair.rtcp.getsockname()[1] == pair.port + 1
        with pytest.raises(RtpPortsExhausted, match=rf"{base}-{base + 4}.*rtp_port_min/rtp_port_max"):
            allocator.allocate("127.0.0.1")
        allocator.release(first)
        again = allocator.allocate("127.0.0.1")
        assert again.port == first.port and allocator.in_use == 2
        allocator.release(again)
    finally:
        allocator.release(second)


def test_port_allocator_skips_ports_other_programs_hold() -> None:
    squatter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(50):
        base = random.randrange(30000, 60000, 2)
        try:
            squatter.bind(("127.0.0.1", base + 1))  # the RTCP half of the first pair
            break
        except OSError:
            continue  # busy already: try another
    try:
        allocator = RtpPortAllocator(base, base + 3)
        pair = allocator.allocate("127.0.0.1")
        assert pair.port == base + 2
        with pytest.raises(RtpPortsExhausted):
            allocator.allocate("127.0.0.1")
        allocator.release(pair)
    finally:
        squatter.close()


async def test_closing_twice_releases_the_ports_once(sessions: Sessions) -> None:
    session = sessions.open(Peer())
    session.start(None)
    in_use = sessions.allocator.in_use
    session.close()
    session.close()
    assert sessions.allocator.in_use == in_use - 1
