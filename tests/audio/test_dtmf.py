"""RFC 4733 telephone events: one digit per key press, whatever packets are lost or repeated."""

from __future__ import annotations

import pytest

from tests.audio.pcap import SIPP_PCAPS, needs_sipp_pcaps, read_pcap_udp_payloads
from voicegate.internal.audio.dtmf import DtmfError, DtmfReceiver, DtmfSender, TelephoneEvent, digit_event
from voicegate.internal.audio.rtp import RtpPacket


def event_packets(digit: str, timestamp: int, *, ssrc: int = 7, first_seq: int = 0) -> list[RtpPacket]:
    sender = DtmfSender()
    return [
        RtpPacket(payload_type=101, sequence=first_seq + i, timestamp=timestamp, ssrc=ssrc,
                  payload=event.serialize(), marker=i == 0)
        for i, event in enumerate(sender.events(digit))
    ]


def feed_all(receiver: DtmfReceiver, packets: list[RtpPacket]) -> list[str]:
    return [digit for packet in packets for digit in receiver.feed(packet)]


@needs_sipp_pcaps
def test_decodes_the_digit_in_sipps_dtmf_capture() -> None:
    packets = [RtpPacket.parse(p) for p in read_pcap_udp_payloads(SIPP_PCAPS / "dtmf_2833_1.pcap")]
    assert len(packets) == 10 and packets[0].marker and {p.payload_type for p in packets} == {101}
    events = [TelephoneEvent.parse(p.payload) for p in packets]
    assert [e.duration for e in events[:3]] == [0, 320, 640]
    assert [e.end for e in events].count(True) == 3 and events[-1].volume == 10
    assert feed_all(DtmfReceiver(), packets) == ["1"]


@needs_sipp_pcaps
@pytest.mark.parametrize(("name", "digit"), [*((str(d), str(d)) for d in range(10)), ("pound", "#"), ("star", "*")])
def test_decodes_every_sipp_dtmf_capture(name: str, digit: str) -> None:
    packets = [RtpPacket.parse(p) for p in read_pcap_udp_payloads(SIPP_PCAPS / f"dtmf_2833_{name}.pcap")]
    assert feed_all(DtmfReceiver(), packets) == [digit]


def test_payload_round_trip_and_field_layout() -> None:
    event = TelephoneEvent(event=11, end=True, volume=63, duration=65535)
    assert event.serialize() == bytes([11, 0x80 | 63, 0xFF, 0xFF])
    assert TelephoneEvent.parse(event.serialize()) == event and event.digit == "#"
    assert TelephoneEvent(event=16).digit is None  # flash is an event but not a key
    with pytest.raises(DtmfError, match="shorter than 4"):
        TelephoneEvent.parse(b"\x01\x0a")


def test_sender_produces_growing_durations_and_three_end_packets() -> None:
    events = DtmfSender(duration_ms=100).events("5")
    assert [e.duration for e in events] == [160, 320, 480, 640, 800, 800, 800]
    assert [e.end for e in events] == [False] * 4 + [True] * 3
    assert {e.event for e in events} == {5}
    assert [digit_event(d) for d in "0123456789*#ABCD"] == list(range(16))
    assert digit_event("a") == 12
    with pytest.raises(DtmfError, match="not a DTMF key"):
        DtmfSender().queue("12x")


def test_sender_ticks_mark_event_starts_and_leave_gaps_between_digits() -> None:
    sender = DtmfSender(duration_ms=60, gap_ms=40)
    sender.queue("12")
    ticks = []
    while sender.busy:
        ticks.append(sender.next_tick())
    shape = ["gap" if t is None else ("start" if t.start else "end" if t.end else "update") for t in ticks]
    assert shape == ["start", "update", "end", "end", "end", "gap", "gap"] * 2
    assert sender.next_tick() is None


def test_each_event_is_reported_once_despite_repeated_end_packets() -> None:
    receiver = DtmfReceiver()
    packets = event_packets("7", 1000) + event_packets("8", 3000, first_seq=7)
    assert feed_all(receiver, packets + packets[-3:]) == ["7", "8"]


def test_losing_the_first_packet_still_reports_the_digit() -> None:
    assert feed_all(DtmfReceiver(), event_packets("3", 1000)[1:]) == ["3"]


def test_losing_all_end_packets_reports_the_digit_when_the_next_event_starts() -> None:
    receiver = DtmfReceiver()
    first = event_packets("4", 1000)[:-3]
    assert feed_all(receiver, first) == []
    assert feed_all(receiver, event_packets("4", 2600, first_seq=10)) == ["4", "4"]


def test_losing_all_end_packets_of_the_last_event_reports_it_after_a_pause() -> None:
    receiver = DtmfReceiver()
    for i, packet in enumerate(event_packets("9", 1000)[:-3]):
        assert receiver.feed(packet, now=i * 0.02) == []
    assert receiver.expire(now=0.2) == []
    assert receiver.expire(now=1.0) == ["9"]
    assert receiver.expire(now=2.0) == []


def test_late_packets_of_an_earlier_event_are_ignored() -> None:
    receiver = DtmfReceiver()
    one, two = event_packets("1", 1000), event_packets("2", 3000, first_seq=7)
    assert feed_all(receiver, one[:2] + two[:2] + one[2:] + two[2:]) == ["1", "2"]


def test_an_event_too_long_for_one_segment_is_reported_once() -> None:
    receiver = DtmfReceiver()
    segment = [RtpPacket(101, 0, 1000, 7, TelephoneEvent(0, duration=0xFFFF).serialize())]
    rest = [RtpPacket(101, 1, 1000 + 0xFFFF, 7, TelephoneEvent(0, end=True, duration=800).serialize())]
    assert feed_all(receiver, segment + rest * 3) == ["0"]


def test_a_new_ssrc_starts_a_new_event_even_with_an_older_timestamp() -> None:
    receiver = DtmfReceiver()
    assert feed_all(receiver, event_packets("1", 50000)) == ["1"]
    assert feed_all(receiver, event_packets("2", 100, ssrc=8)) == ["2"]
