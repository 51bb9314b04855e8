"""RTCP SR/RR round trips and the receiver statistics an RR carries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicegate.internal.audio.rtcp import (
    Goodbye,
    ReceiverReport,
    ReceiverStats,
    ReportBlock,
    RtcpError,
    SenderReport,
    SourceDescription,
    ntp_middle,
    ntp_timestamp,
    parse_rtcp,
    serialize_compound,
)
from voicegate.internal.audio.rtp import RtpPacket

u32 = st.integers(0, 0xFFFFFFFF)
blocks = st.builds(
    ReportBlock, ssrc=u32, fraction_lost=st.integers(0, 255), cumulative_lost=st.integers(-0x800000, 0x7FFFFF),
    highest_sequence=u32, jitter=u32, lsr=u32, dlsr=u32,
)
block_lists = st.lists(blocks, max_size=31).map(tuple)


@given(st.builds(SenderReport, ssrc=u32, ntp_timestamp=st.integers(0, 2**64 - 1), rtp_timestamp=u32,
                 packet_count=u32, octet_count=u32, reports=block_lists))
def test_sender_report_round_trip(report: SenderReport) -> None:
    assert parse_rtcp(report.serialize()) == [report]


@given(st.builds(ReceiverReport, ssrc=u32, reports=block_lists))
def test_receiver_report_round_trip(report: ReceiverReport) -> None:
    assert parse_rtcp(report.serialize()) == [report]


@given(st.builds(SourceDescription, ssrc=u32, cname=st.text(st.characters(codec="ascii"), max_size=60)))
def test_sdes_cname_round_trip(sdes: SourceDescription) -> None:
    data = sdes.serialize()
    assert len(data) % 4 == 0
    assert parse_rtcp(data) == [sdes]


def test_compound_packet_with_an_unknown_type_in_the_middle() -> None:
    rr = ReceiverReport(1, (ReportBlock(2, 25, 10, 70000, 33, 0x12345678, 65536),))
    app = bytes.fromhex("80cc0002 00000001 41424344")  # APP: skipped, not an error
    bye = bytes.fromhex("81cb0001 00000001")
    sdes = SourceDescription(1, "voicegate@example")
    data = rr.serialize() + app + sdes.serialize() + bye
    assert parse_rtcp(data) == [rr, sdes, Goodbye((1,))]
    assert serialize_compound([rr, sdes]) == rr.serialize() + sdes.serialize()


def test_cumulative_loss_is_24_bit_signed_and_clamped() -> None:
    negative = ReportBlock(1, 0, -5, 0, 0)
    assert parse_rtcp(ReceiverReport(9, (negative,)).serialize())[0] == ReceiverReport(9, (negative,))
    huge = ReportBlock(1, 0, 10**9, 0, 0)
    parsed = parse_rtcp(ReceiverReport(9, (huge,)).serialize())[0]
    assert isinstance(parsed, ReceiverReport) and parsed.reports[0].cumulative_lost == 0x7FFFFF


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x80\xc9", "shorter than its 4-byte header"),
        (bytes.fromhex("40c90001 00000001"), "version is 1"),
        (bytes.fromhex("80c90005 00000001"), "claims 20 bytes"),
        (bytes.fromhex("81c90001 00000001"), "too short for 1 report blocks"),
        (bytes.fromhex("80c90001 00000001 0000"), "stray bytes"),
    ],
)
def test_malformed_rtcp_says_what_is_wrong(data: bytes, reason: str) -> None:
    with pytest.raises(RtcpError, match=reason):
        parse_rtcp(data)


@given(st.binary(max_size=100))
def test_random_bytes_parse_or_raise_rtcp_error(data: bytes) -> None:
    try:
        parse_rtcp(data)
    except RtcpError:
        pass


@given(st.integers(0x80, 0xBF), st.sampled_from([200, 201, 202, 203, 204]), st.binary(max_size=100))
def test_random_rtcp_bodies_parse_or_raise_rtcp_error(first: int, packet_type: int, rest: bytes) -> None:
    words = len(rest) // 4
    try:
        parse_rtcp(bytes([first, packet_type]) + words.to_bytes(2, "big") + rest[: 4 * words])
    except RtcpError:
        pass


def test_ntp_timestamp_layout() -> None:
    ntp = ntp_timestamp(1.5)
    assert ntp >> 32 == 2208988801 and ntp & 0xFFFFFFFF == 0x80000000
    assert ntp_middle(ntp) == (2208988801 & 0xFFFF) << 16 | 0x8000


def audio(seq: int, ts: int, ssrc: int = 5) -> RtpPacket:
    return RtpPacket(payload_type=0, sequence=seq & 0xFFFF, timestamp=ts & 0xFFFFFFFF, ssrc=ssrc, payload=b"\xff" * 160)


def test_report_block_counts_loss_since_the_previous_report() -> None:
    stats = ReceiverStats()
    for i in range(100):
        if i % 10 != 3:  # lose one in ten
            stats.on_rtp(audio(i, i * 160), arrival_s=i * 0.02)
    first = stats.report_block(now_s=2.0)
    assert first is not None
    assert first.cumulative_lost == 10 and first.fraction_lost == (10 << 8) // 99 + 0
    for i in range(100, 200):
        stats.on_rtp(audio(i, i * 160), arrival_s=i * 0.02)
    second = stats.report_block(now_s=4.0)
    assert second is not None and second.fraction_lost == 0 and second.cumulative_lost == 10


def test_extended_highest_sequence_counts_wraps() -> None:
    stats = ReceiverStats()
    for i, seq in enumerate(range(65530, 65540)):
        stats.on_rtp(audio(seq, i * 160), arrival_s=i * 0.02)
    block = stats.report_block(now_s=1.0)
    assert block is not None and block.highest_sequence == (1 << 16) | 3 and block.cumulative_lost == 0


def test_jitter_is_zero_for_constant_delay_and_grows_with_variation() -> None:
    stats = ReceiverStats()
    base = 0xFFFFFF00  # the RTP timestamp wraps during the stream
    for i in range(50):
        stats.on_rtp(audio(i, base + i * 160), arrival_s=3.0 + i * 0.02)
    assert stats.jitter == pytest.approx(0, abs=1e-6)
    for i in range(50, 400):
        late = 0.010 if i % 2 else 0.0  # every other packet 10 ms (80 timestamp units) late
        stats.on_rtp(audio(i, base + i * 160), arrival_s=3.0 + i * 0.02 + late)
    assert stats.jitter == pytest.approx(80, rel=0.05)
    block = stats.report_block(now_s=20.0)
    assert block is not None and block.jitter in range(75, 81)


def test_telephone_events_do_not_disturb_the_jitter_estimate() -> None:
    stats = ReceiverStats()
    for i in range(20):
        stats.on_rtp(audio(i, 1000), arrival_s=i * 0.02, timed=False)
    assert stats.jitter == 0 and stats.sequence.received == 20


def test_lsr_and_dlsr_echo_the_last_sender_report() -> None:
    stats = ReceiverStats()
    stats.on_rtp(audio(1, 0), arrival_s=10.0)
    sr_ntp = ntp_timestamp(1_700_000_000.25)
    stats.on_sender_report(SenderReport(5, sr_ntp, 0, 1, 160), arrival_s=10.0)
    block = stats.report_block(now_s=10.5)
    assert block is not None and block.lsr == ntp_middle(sr_ntp) and block.dlsr == 32768
    # The sender, receiving the RR 0.6 s after its SR, computes a 100 ms round trip.
    rtt = block.round_trip_s(ntp_timestamp(1_700_000_000.25 + 0.6))
    assert rtt == pytest.approx(0.1, abs=1e-3)


def test_a_new_ssrc_starts_the_statistics_over() -> None:
    stats = ReceiverStats()
    for i in range(10):
        stats.on_rtp(audio(i * 2, i * 320), arrival_s=i * 0.04)  # half lost
    stats.on_rtp(audio(500, 0, ssrc=6), arrival_s=1.0)
    block = stats.report_block(now_s=1.0)
    assert block is not None and block.ssrc == 6 and block.cumulative_lost == 0
