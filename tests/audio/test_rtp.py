"""RTP parsing is symmetric with serialising, and hostile bytes only ever raise RtpError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicegate.internal.audio.rtp import (
    RtpError,
    RtpHeaderExtension,
    RtpPacket,
    SequenceTracker,
    rtp_header,
    seq_diff,
    seq_newer,
    ts_diff,
    ts_newer,
)

u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
extensions = st.builds(
    RtpHeaderExtension, profile=u16, data=st.binary(max_size=32).map(lambda b: b + bytes(-len(b) % 4))
)
packets = st.builds(
    RtpPacket,
    payload_type=st.integers(0, 127),
    sequence=u16,
    timestamp=u32,
    ssrc=u32,
    payload=st.binary(max_size=200),
    marker=st.booleans(),
    csrc=st.lists(u32, max_size=15).map(tuple),
    extension=st.none() | extensions,
    padding=st.integers(0, 255),
)


@given(packets)
def test_parse_gives_back_every_serialized_packet(packet: RtpPacket) -> None:
    data = packet.serialize()
    assert RtpPacket.parse(data) == packet
    assert RtpPacket.parse(data).serialize() == data


def _parse_or_rtp_error(data: bytes) -> None:
    try:
        packet = RtpPacket.parse(data)
    except RtpError:
        return
    assert RtpPacket.parse(packet.serialize()) == packet


@given(st.binary(max_size=120))
def test_random_bytes_parse_or_raise_rtp_error(data: bytes) -> None:
    _parse_or_rtp_error(data)


@given(st.integers(0x80, 0xBF), st.binary(max_size=120))
def test_random_version_2_packets_parse_or_raise_rtp_error(first: int, rest: bytes) -> None:
    # Most random bytes fail the version check; these reach the CSRC, extension and padding rules.
    _parse_or_rtp_error(bytes([first]) + rest)


def test_parses_a_captured_g711_packet() -> None:
    # From /usr/share/sip-tester/g711a.pcap's shape: PCMA, no CSRC, 160-byte payload.
    data = bytes.fromhex("8008 1234 000000a0 deadbeef") + b"\xd5" * 160
    packet = RtpPacket.parse(data)
    assert (packet.payload_type, packet.sequence, packet.timestamp, packet.ssrc) == (8, 0x1234, 160, 0xDEADBEEF)
    assert packet.payload == b"\xd5" * 160 and not packet.marker
    assert rtp_header(8, 0x1234, 160, 0xDEADBEEF) + packet.payload == data


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x80\x00", "shorter than the 12-byte"),
        (bytes.fromhex("40000000000000000000000000"), "version is 1"),
        (bytes.fromhex("82000000000000000000000000000000"), "2 CSRCs"),
        (bytes.fromhex("90000000000000000000000000"), "extension header is missing"),
        (bytes.fromhex("900000000000000000000000 00000002 00000000"), "runs past the end"),
        (bytes.fromhex("a00000000000000000000000 00"), "padding count is 0"),
        (bytes.fromhex("a00000000000000000000000 0010"), "longer than the payload"),
    ],
)
def test_malformed_packets_say_what_is_wrong(data: bytes, reason: str) -> None:
    with pytest.raises(RtpError, match=reason):
        RtpPacket.parse(data)


def test_serialize_rejects_fields_that_do_not_fit() -> None:
    with pytest.raises(RtpError, match="payload type"):
        RtpPacket(payload_type=128, sequence=0, timestamp=0, ssrc=0).serialize()
    with pytest.raises(RtpError, match="CSRCs"):
        RtpPacket(payload_type=0, sequence=0, timestamp=0, ssrc=0, csrc=tuple(range(16))).serialize()
    with pytest.raises(RtpError, match="32-bit words"):
        RtpPacket(0, 0, 0, 0, extension=RtpHeaderExtension(1, b"abc")).serialize()


def test_sequence_comparison_wraps_at_65536() -> None:
    assert seq_newer(0, 65535) and not seq_newer(65535, 0)
    assert seq_diff(2, 65534) == 4 and seq_diff(65534, 2) == -4
    assert not seq_newer(7, 7)
    assert ts_newer(5, 0xFFFFFFF0) and ts_diff(5, 0xFFFFFFF0) == 21
    assert ts_diff(0xFFFFFFF0, 5) == -21


def test_tracker_extends_sequence_numbers_across_the_wrap() -> None:
    tracker = SequenceTracker()
    assert [tracker.update(s) for s in (65534, 65535, 0, 1)] == [65534, 65535, 65536, 65537]
    assert tracker.lost == 0 and tracker.expected == 4


def test_tracker_counts_loss_duplicates_and_reordering() -> None:
    tracker = SequenceTracker()
    for seq in (10, 11, 13, 12, 12, 16, 11):
        tracker.update(seq)
    assert tracker.highest == 16
    assert tracker.expected == 7 and tracker.received == 5 and tracker.lost == 2  # 14 and 15
    assert tracker.duplicates == 2 and tracker.reordered == 1


def test_tracker_ignores_one_stray_jump_but_follows_a_restarted_sender() -> None:
    tracker = SequenceTracker()
    for seq in range(100, 110):
        tracker.update(seq)
    assert tracker.update(40000) is None  # one stray packet: ignored
    assert tracker.update(110) == 110
    assert tracker.update(50000) is None
    restarted = tracker.update(50001)
    assert restarted is not None and restarted > 110 and restarted & 0xFFFF == 50001
    assert tracker.restarts == 1 and tracker.lost == 0
    assert tracker.update(50002) == restarted + 1
